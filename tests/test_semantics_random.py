"""Random functions under transforms: vmap's randomness modes (row differences and loose
statistical bounds), fresh draws under jit, and explicit generators giving eager numbers."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

F64 = torch.float64


def close(a, b, tol=1e-6):
    for x, y in zip(tx.tree.leaves(a), tx.tree.leaves(b), strict=True):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol, equal_nan=True)


# -------------------------------------------------------------------------------- randomness

B = 2000  # rows per statistical check: bounds below are about 5 standard deviations wide

RANDOM_FNS = {
    "randperm": lambda x: torch.randperm(4),
    "randint": lambda x: torch.randint(0, 10, (8,)),
    "normal": lambda x: torch.normal(2.0, 3.0, (8,)),
    "multinomial": lambda x: torch.multinomial(torch.tensor([1.0, 2.0, 3.0, 4.0]), 2),
    "multinomial_replacement": lambda x: torch.multinomial(x, 4, replacement=True),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.5, True),
    "feature_alpha_dropout": lambda x: F.feature_alpha_dropout(x.reshape(2, 2, 2), 0.5, True),
    "dropout2d": lambda x: F.dropout2d(x.reshape(2, 2, 2, 1), 0.5, True),
}


@pytest.mark.parametrize("name", sorted(RANDOM_FNS))
def test_vmap_randomness_modes(name):
    fn = RANDOM_FNS[name]
    x = torch.ones(6, 8) if "multinomial" not in name else torch.ones(6, 4)
    for wrap in (lambda f: f, tx.jit):
        diff = wrap(tx.vmap(fn, randomness="different"))(x)
        assert any(not torch.equal(diff[0], diff[i]) for i in range(1, 6)), "rows should differ"
        same = wrap(tx.vmap(fn, randomness="same"))(x)
        assert all(torch.equal(same[0], same[i]) for i in range(1, 6)), "rows should be equal"
        with pytest.raises(ValueError, match="randomness"):
            wrap(tx.vmap(fn, randomness="error"))(x)


def _rows(fn, n_in=8):
    return tx.vmap(fn, randomness="different")(torch.ones(B, n_in))


def test_randperm_rows_are_uniform_permutations():
    out = _rows(RANDOM_FNS["randperm"])
    assert torch.equal(out.sort(-1).values, torch.arange(4).expand(B, 4))
    counts = torch.bincount(out[:, 0], minlength=4)
    assert ((counts - B / 4).abs() < 100).all(), counts
    one = tx.jit(lambda x: torch.randperm(6) + x)  # a draw per call, not a traced constant
    draws = {tuple(one(torch.zeros(6)).tolist()) for _ in range(8)}
    assert len(draws) > 1


def test_randint_and_normal_distributions():
    r = _rows(RANDOM_FNS["randint"])
    assert r.dtype == torch.int64 and r.min() >= 0 and r.max() <= 9
    assert torch.bincount(r.flatten(), minlength=10).min() > 0
    assert abs(r.double().mean().item() - 4.5) < 0.15
    z = _rows(RANDOM_FNS["normal"])
    assert abs(z.mean().item() - 2.0) < 0.15 and abs(z.std().item() - 3.0) < 0.15
    zt = tx.vmap(lambda m: torch.normal(m, 0.5), randomness="different")(torch.full((B, 8), -1.0))
    assert abs(zt.mean().item() + 1.0) < 0.03 and abs(zt.std().item() - 0.5) < 0.03


def test_multinomial_frequencies():
    w = torch.tensor([1.0, 2.0, 3.0, 4.0])
    out = _rows(RANDOM_FNS["multinomial"], 4)
    assert (out[:, 0] != out[:, 1]).all(), "without replacement: distinct categories"
    first = torch.bincount(out[:, 0], minlength=4)
    assert ((first - B * w / w.sum()).abs() < 100).all(), first
    rep = tx.vmap(lambda p: torch.multinomial(p, 4, replacement=True), randomness="different")(
        w.expand(B, 4)
    )
    freq = torch.bincount(rep.flatten(), minlength=4)
    assert ((freq - 4 * B * w / w.sum()).abs() < 200).all(), freq


def test_alpha_dropout_keeps_mean_and_variance():
    torch.manual_seed(0)
    x = torch.randn(B, 8)
    out = tx.vmap(lambda r: F.alpha_dropout(r, 0.3, True), randomness="different")(x)
    assert abs(out.mean().item()) < 0.05 and abs(out.std().item() - 1.0) < 0.05
    dropped_value = out.flatten().mode().values
    assert abs((out == dropped_value).double().mean().item() - 0.3) < 0.02
    fa = tx.vmap(RANDOM_FNS["feature_alpha_dropout"], randomness="different")(torch.randn(B, 8))
    flat = fa.reshape(B, 2, 2, 2)
    # a dropped channel is constant; a kept one is an affine map of the input
    assert abs((flat[..., 0] == flat[..., 1]).double().mean().item() - 0.5) < 0.05


def test_dropout2d_drops_whole_channels():
    out = _rows(RANDOM_FNS["dropout2d"]).reshape(B, 2, 2, 2)
    zero = (out == 0).all(-1)
    kept = (out == 2.0).all(-1)
    assert (zero | kept).all()
    assert abs(zero.double().mean().item() - 0.5) < 0.05


def test_jit_draws_are_not_merged():
    f = tx.jit(lambda x: (torch.rand(3) + x, torch.rand(3) + x))
    a, b = f(torch.zeros(3))
    assert not torch.equal(a, b)


def test_explicit_generator_gives_eager_numbers():
    f = lambda: torch.randn(3, generator=torch.Generator().manual_seed(0))  # noqa: E731
    jf = tx.jit(f)
    for _ in range(3):
        close(jf(), f())
    # a generator from outside advances as in eager code, call after call
    g_eager, g_jit = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    h = lambda x, g: x + torch.rand(2, generator=g) + torch.randint(0, 9, (2,), generator=g)  # noqa: E731
    jh = tx.jit(lambda x: h(x, g_jit))
    for _ in range(3):
        close(jh(torch.zeros(2)), h(torch.zeros(2), g_eager))
    gg_eager, gg = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    k = lambda x, g: (x * torch.randn(2, generator=g)).sum()  # noqa: E731
    close(
        tx.grad(lambda x: k(x, gg))(torch.ones(2)), tf.grad(lambda x: k(x, gg_eager))(torch.ones(2))
    )
    close(
        tx.grad(lambda x: k(x, gg))(torch.ones(2)), tf.grad(lambda x: k(x, gg_eager))(torch.ones(2))
    )


def test_normal_has_torchs_zero_derivative_in_mean_and_std():
    # torch.normal(mean, std) is not reparameterized in torch: its derivative is zero
    mean, std = torch.randn(4, dtype=torch.float64), torch.rand(4, dtype=torch.float64) + 0.5

    def f(m, s):
        return (
            (torch.normal(m, s) * m).sum() + torch.normal(m, 2.0).sum() + torch.normal(0.5, s).sum()
        )

    torch.manual_seed(3)
    got = tx.grad(f, (0, 1))(mean, std)
    torch.manual_seed(3)
    mr, sr = mean.clone().requires_grad_(), std.clone().requires_grad_()
    want = torch.autograd.grad(f(mr, sr), (mr, sr))
    torch.testing.assert_close(got, want)
