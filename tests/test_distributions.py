"""torch.distributions under jit, grad and vmap against torch eager, torch.func.grad and a Python
loop (float64): log_prob, entropy, kl_divergence, rsample; argument validation that runs on the
values under grad (as in eager) and is skipped where the values are unknown (jit, vmap)."""

import pytest
import torch
import torch.func as tf
from torch import distributions as D

import thunderx as tx
from thunderx.errors import ConcretizationError, RandomnessError

F64 = torch.float64
GEN = torch.Generator().manual_seed(0)


def rand(*shape):
    return torch.randn(*shape, dtype=F64, generator=GEN)


X = rand(5)
S = torch.rand(5, dtype=F64, generator=GEN) + 0.5
EYE = torch.eye(5, dtype=F64)
P = torch.full((5,), 0.2, dtype=F64)
HALF = torch.full((5,), 0.3, dtype=F64)


def tril(m):
    return 2 * EYE + torch.diag(m.abs()) + torch.tril(torch.outer(X, X) * 0.1, -1)


# f(m) -> scalar, m a float64 vector of 5
CASES = {
    "normal.log_prob": lambda m: D.Normal(m, S).log_prob(X).sum(),
    "normal.entropy": lambda m: D.Normal(m, S + m.abs()).entropy().sum(),
    "categorical_logits.log_prob": lambda m: D.Categorical(logits=m).log_prob(torch.tensor(2)),
    "categorical_probs.log_prob": lambda m: (
        D.Categorical(probs=m.softmax(-1)).log_prob(torch.tensor([1, 3])).sum()
    ),
    "categorical.entropy": lambda m: D.Categorical(logits=m).entropy(),
    "bernoulli_logits.log_prob": lambda m: D.Bernoulli(logits=m).log_prob((X > 0).to(F64)).sum(),
    "bernoulli_probs.log_prob": lambda m: (
        D.Bernoulli(probs=m.sigmoid()).log_prob((X > 0).to(F64)).sum()
    ),
    "bernoulli.entropy": lambda m: D.Bernoulli(logits=m).entropy().sum(),
    "uniform.log_prob": lambda m: D.Uniform(m - 5, m + 5).log_prob(X).sum(),
    "uniform.entropy": lambda m: D.Uniform(m - 3, m + 3 + m.abs()).entropy().sum(),
    "mvn_cov.log_prob": lambda m: D.MultivariateNormal(m, 2 * EYE).log_prob(X),
    "mvn_tril.log_prob": lambda m: D.MultivariateNormal(m, scale_tril=tril(m)).log_prob(X),
    "mvn_tril.entropy": lambda m: D.MultivariateNormal(m, scale_tril=tril(m)).entropy(),
    "beta.log_prob": lambda m: D.Beta(m.abs() + 1, 2.0).log_prob(HALF).sum(),
    "beta.entropy": lambda m: D.Beta(m.abs() + 1, S).entropy().sum(),
    "gamma.log_prob": lambda m: D.Gamma(m.abs() + 1, 2.0).log_prob(HALF).sum(),
    "gamma.entropy": lambda m: D.Gamma(m.abs() + 1, S).entropy().sum(),
    "dirichlet.log_prob": lambda m: D.Dirichlet(m.abs() + 1).log_prob(P),
    "dirichlet.entropy": lambda m: D.Dirichlet(m.abs() + 1).entropy(),
    "kl.normal_normal": lambda m: D.kl_divergence(D.Normal(m, S), D.Normal(X, 1.5)).sum(),
    "kl.categorical": lambda m: D.kl_divergence(D.Categorical(logits=m), D.Categorical(logits=X)),
    "kl.bernoulli": lambda m: D.kl_divergence(D.Bernoulli(logits=m), D.Bernoulli(logits=X)).sum(),
    "kl.uniform": lambda m: D.kl_divergence(D.Uniform(m - 1, m + 1), D.Uniform(m - 3, m + 3)).sum(),
    "kl.mvn": lambda m: D.kl_divergence(
        D.MultivariateNormal(m, scale_tril=tril(m)), D.MultivariateNormal(X, 2 * EYE)
    ),
    "kl.beta": lambda m: D.kl_divergence(D.Beta(m.abs() + 1, S), D.Beta(S, S + 1)).sum(),
    "kl.gamma": lambda m: D.kl_divergence(D.Gamma(m.abs() + 1, S), D.Gamma(S, S + 1)).sum(),
    "kl.dirichlet": lambda m: D.kl_divergence(D.Dirichlet(m.abs() + 1), D.Dirichlet(S)),
    "kl.uniform_normal": lambda m: D.kl_divergence(D.Uniform(m - 1, m + 1), D.Normal(X, S)).sum(),
    "kl.categorical_zero_probs_inf": lambda m: D.kl_divergence(  # inf: written with x[mask] = inf
        D.Categorical(logits=m), D.Categorical(probs=torch.tensor([0.5, 0.5, 0, 0, 0], dtype=F64))
    ),
}
MU = rand(5)
BATCH = torch.stack([MU, 0.5 * MU, MU + 0.3])


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_jit_matches_eager(name):
    f = CASES[name]
    close(tx.jit(f)(MU), f(MU))


@pytest.mark.parametrize("name", [n for n in sorted(CASES) if not n.endswith("_inf")])
def test_grad_matches_torch_func(name):
    f = CASES[name]
    close(tx.grad(f)(MU), tf.grad(f)(MU))


@pytest.mark.parametrize("name", sorted(CASES))
def test_vmap_matches_loop(name):
    f = CASES[name]
    close(tx.vmap(f)(BATCH), torch.stack([f(m) for m in BATCH]))


def test_validation_runs_on_values_under_grad():
    # validate_args spelled out: torch.compile (run by other tests) turns torch's default off
    with pytest.raises(ValueError, match="scale"):
        torch.func.grad(lambda s: D.Normal(0.0, s, validate_args=True).log_prob(X).sum())(-S)
    with pytest.raises(ValueError, match="scale"):
        tx.grad(lambda s: D.Normal(0.0, s, validate_args=True).log_prob(X).sum())(-S)
    with pytest.raises(ValueError, match="support"):
        tx.grad(lambda m: D.Uniform(m, m + 0.1, validate_args=True).log_prob(X).sum())(MU)


def test_validation_is_skipped_where_values_are_unknown():
    # torch.func's transforms with validate_args off give log(-s) = nan here, as does thunderx
    f = lambda s: D.Normal(0.0, s, validate_args=False).log_prob(X).sum()  # noqa: E731
    close(tx.jit(lambda s: D.Normal(0.0, s).log_prob(X).sum())(-S), f(-S))
    got = tx.vmap(lambda s: D.Normal(0.0, s).log_prob(X).sum())(-BATCH.abs())
    close(got, tf.vmap(f)(-BATCH.abs()))
    assert got.isnan().all()


def test_python_number_parameters_take_the_traced_dtype():
    f = lambda m: D.Gamma(m, 2.0).log_prob(HALF) + D.Normal(m, 0.1).scale  # noqa: E731
    close(tx.jit(f)(MU.abs() + 1), f(MU.abs() + 1))
    assert tx.jit(lambda m: D.Normal(m, 0.1).scale)(MU).dtype is F64
    with pytest.raises(ValueError, match="Number"):
        tx.jit(lambda m: D.Normal(m, "a"))(MU)


def test_is_all_true_values_stay_right_when_traced():
    f = lambda x: torch._is_all_true(x > 0).to(F64) + torch._is_any_true(x > 1).to(F64)  # noqa: E731
    for x in (S, -S, S - 0.6, S + 0.6):
        close(tx.jit(f)(x), f(x))
    close(tx.vmap(f)(torch.stack([S, -S, S + 0.6])), torch.stack([f(S), f(-S), f(S + 0.6)]))


def test_truth_of_other_traced_values_still_raises():
    with pytest.raises(ConcretizationError):
        tx.jit(lambda x: x if bool((x > 0).all()) else -x)(S)


def test_rsample_reparameterized_grad_matches_torch_autograd():
    def sample_sum(loc, scale):
        return D.Normal(loc, scale).rsample((3,)).pow(2).sum()

    torch.manual_seed(7)
    got = tx.grad(sample_sum, argnums=(0, 1))(MU, S)
    torch.manual_seed(7)
    want = tf.grad(sample_sum, argnums=(0, 1))(MU, S)
    close(got[0], want[0])
    close(got[1], want[1])


def test_rsample_under_vmap_follows_randomness():
    f = lambda m: D.Normal(m, S).rsample()  # noqa: E731
    with pytest.raises(RandomnessError):
        tx.vmap(f)(BATCH)
    out = tx.vmap(f, randomness="same")(BATCH)
    eps = (out - BATCH) / S
    close(eps, eps[:1].expand_as(eps))  # one draw shared by the batch, as torch.func's 'same'
    u = tx.vmap(lambda m: D.Uniform(m, m + 1).rsample(), randomness="different")(BATCH)
    assert ((u >= BATCH) & (u < BATCH + 1)).all()
    assert not torch.allclose(u[0] - BATCH[0], u[1] - BATCH[1])


def test_masked_setitem_with_traced_mask():
    def f(x):
        t = x * 2
        t[x > 0] = -1.0
        return t

    close(tx.jit(f)(X), f(X))
    close(tx.vmap(f)(BATCH), torch.stack([f(m) for m in BATCH]))
    close(tx.grad(lambda x: f(x).pow(2).sum())(X), tf.grad(lambda x: f(x).pow(2).sum())(X))

    def rows(x):
        t = x.reshape(5, 1) * torch.ones(5, 3, dtype=F64)
        t[x > 0] = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
        return t

    close(tx.vmap(rows)(BATCH), torch.stack([rows(m) for m in BATCH]))

    def per_element(x):
        t = x.clone()
        t[x > 0] = torch.arange(5, dtype=F64)[: int(0)]  # one value per selected element
        return t

    with pytest.raises(ConcretizationError, match="x\\[mask\\] = v"):
        tx.jit(per_element)(X)


def test_min_max_with_dim_of_bool():
    x = rand(3, 4, 4) > 0
    for fn in (lambda a: a.min(-1), lambda a: a.max(1)):
        got = tx.vmap(fn)(x)
        for k in (0, 1):
            assert torch.equal(got[k], torch.stack([fn(a)[k] for a in x]))


def test_normal_rsample_under_jit_and_vmap_different():
    # the noise is drawn out of place (torch's own torch.jit workaround), so jit draws anew per
    # call and vmap(randomness="different") draws per example
    f = tx.jit(lambda m: D.Normal(m, S).rsample((4000,)))
    a, b = f(MU), f(MU)
    assert not torch.equal(a, b)
    close_stats = lambda x: torch.testing.assert_close(  # noqa: E731
        x.mean(0), MU, rtol=0, atol=0.12
    )
    close_stats(a)
    torch.testing.assert_close(((a - MU) / S).std(0), torch.ones(5, dtype=F64), rtol=0, atol=0.06)
    out = tx.vmap(lambda m: D.Normal(m, S).rsample(), randomness="different")(BATCH)
    eps = (out - BATCH) / S
    assert not torch.allclose(eps[0], eps[1])
    g = tx.jit(tx.grad(lambda m: D.Normal(m, S).rsample((3,)).sum()))(MU)
    close(g, torch.full((5,), 3.0, dtype=F64))
    mvn = tx.jit(lambda m: D.MultivariateNormal(m, scale_tril=tril(m)).rsample((2,)))
    assert mvn(MU).shape == (2, 5) and not torch.equal(mvn(MU), mvn(MU))
    with pytest.raises(RandomnessError):
        tx.vmap(lambda m: D.MultivariateNormal(m, 2 * EYE).rsample())(BATCH)
