"""vmap: axis semantics, composition with autodiff and jit, randomness, errors."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

from .research_fns import data, mlp_loss, mlp_params

F64 = torch.float64


def close(a, b, tol=1e-6):
    la, lb = tx.tree.leaves(a), tx.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol)


def test_nested_dot_is_one_contraction():
    f = tx.vmap(tx.vmap(torch.dot, (0, None)), (None, 1), out_axes=1)
    a, b = torch.randn(4, 3), torch.randn(3, 6)
    closed = tx.make_jaxpr(f)(a, b)
    assert [e.prim.name for e in closed.eqns] == ["dot_general"], str(closed)
    close(f(a, b), a @ b, 1e-5)


def test_in_axes_ints_negative_none_and_pytree_prefix():
    x = torch.randn(3, 5)
    w = torch.randn(5)
    close(tx.vmap(lambda a, b: a * b, in_axes=(-1, None))(x.T, w), x * w)
    d = {"a": torch.randn(4, 2), "b": torch.randn(2, 4)}
    out = tx.vmap(lambda t: t["a"] + t["b"], in_axes=({"a": 0, "b": 1},))(d)
    close(out, d["a"] + d["b"].T)
    out = tx.vmap(lambda t: t[0] * t[1], in_axes=[(0, None)])((torch.randn(3, 2), torch.ones(2)))
    assert out.shape == (3, 2)


def test_out_axes_and_unbatched_outputs():
    x = torch.randn(4, 3)
    a, b = tx.vmap(lambda v: (v * 2, torch.ones(2)), out_axes=(1, None))(x)
    close(a, (x * 2).T)
    close(b, torch.ones(2))
    c = tx.vmap(lambda v: torch.ones(2))(x)  # does not depend on the input: broadcast
    assert c.shape == (4, 2)
    d = tx.vmap(lambda: torch.zeros(3), axis_size=5)()
    assert d.shape == (5, 3)


def test_nested_vmaps_of_different_sizes():
    x, y = torch.randn(3, 4), torch.randn(5, 4)
    got = tx.vmap(lambda a: tx.vmap(lambda b: (a * b).sum())(y))(x)
    close(got, x @ y.T, 1e-5)


def test_per_example_gradients_match_torch_func():
    params = mlp_params()
    x, y = data(n=7)
    ours = tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0))(params, x[:, None], y[:, None])
    theirs = tf.vmap(tf.grad(mlp_loss), in_dims=(None, 0, 0))(params, x[:, None], y[:, None])
    close(ours, theirs, 1e-8)
    jitted = tx.jit(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0)))
    close(jitted(params, x[:, None], y[:, None]), theirs, 1e-8)


def test_model_ensembling_matches_loop():
    models = [mlp_params(seed=s) for s in range(4)]
    stacked = tuple(torch.stack(ps) for ps in zip(*models))
    x, _ = data(n=5)

    def predict(p, x):
        w1, b1, w2, b2 = p
        return torch.tanh(x @ w1 + b1) @ w2 + b2

    got = tx.vmap(predict, in_axes=(0, None))(stacked, x)
    want = torch.stack([predict(p, x) for p in models])
    close(got, want)


def test_compositions_in_every_order():
    f = lambda x: (torch.sin(x) * x).sum()  # noqa: E731
    xs = torch.randn(4, 3, dtype=F64)
    close(tx.vmap(tx.grad(f))(xs), tf.vmap(tf.grad(f))(xs))
    close(tx.grad(lambda p: tx.vmap(f)(p).sum())(xs), tf.grad(lambda p: tf.vmap(f)(p).sum())(xs))
    close(tx.vmap(tx.hessian(f))(xs), tf.vmap(tf.hessian(f))(xs))
    close(tx.vmap(tx.jacfwd(torch.sin))(xs), tf.vmap(tf.jacfwd(torch.sin))(xs))
    close(tx.jit(tx.vmap(tx.jacrev(torch.sin)))(xs), tf.vmap(tf.jacrev(torch.sin))(xs))
    close(tx.vmap(tx.jit(f))(xs), tf.vmap(f)(xs))
    _, t = tx.vmap(lambda x: tx.jvp(f, (x,), (torch.ones_like(x),)))(xs)
    close(t, tf.vmap(lambda x: tf.jvp(f, (x,), (torch.ones_like(x),))[1])(xs))


def test_randomness_modes():
    x = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="randomness"):
        tx.vmap(lambda v: v + torch.rand(3))(x)
    same = tx.vmap(lambda v: v + torch.rand(3), randomness="same")(x)
    assert torch.equal(same[0], same[1])
    diff = tx.vmap(lambda v: v + torch.rand(3), randomness="different")(x)
    assert not torch.equal(diff[0], diff[1])
    drop = tx.vmap(lambda v: F.dropout(v + 1, 0.5), randomness="different")(torch.zeros(64, 50))
    kept = (drop != 0).float().mean()
    assert 0.35 < kept < 0.65
    assert set(drop.unique().tolist()) <= {0.0, 2.0}


def test_vmap_errors():
    with pytest.raises(ValueError, match=r"inconsistent batch sizes.*3.*4"):
        tx.vmap(torch.add)(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="out of range"):
        tx.vmap(torch.sin, in_axes=2)(torch.ones(3, 2))
    with pytest.raises(ValueError, match="in_axes"):
        tx.vmap(torch.add, in_axes=(0, 0, 0))(torch.ones(3), torch.ones(3))
    with pytest.raises(ValueError, match="axis_size"):
        tx.vmap(lambda a: a, in_axes=None)(torch.ones(3))
    with pytest.raises(ValueError, match="does not match"):
        tx.vmap(lambda d: d["a"], in_axes=({"b": 0},))({"a": torch.ones(3)})
    close(tx.vmap(torch.sin)(torch.zeros(2)), torch.zeros(2))


class SmallCNN(torch.nn.Module):
    """The per-sample-gradient tutorial's network."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, 1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, 1)
        self.fc1 = torch.nn.Linear(16 * 2 * 2, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def test_small_cnn_per_sample_gradients_match_torch_func():
    torch.manual_seed(0)
    model = SmallCNN().double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = torch.randn(6, 1, 1, 14, 14, dtype=F64)
    y = torch.randint(0, 10, (6, 1))

    def loss(p, xb, yb):
        return F.nll_loss(tx.functional_call(model, p, (xb,)), yb)

    def loss_ref(p, xb, yb):
        return F.nll_loss(torch.func.functional_call(model, p, (xb,)), yb)

    ours = tx.jit(tx.vmap(tx.grad(loss), in_axes=(None, 0, 0)))(params, x, y)
    theirs = tf.vmap(tf.grad(loss_ref), in_dims=(None, 0, 0))(params, x, y)
    assert set(ours) == set(theirs)
    for k in ours:
        torch.testing.assert_close(ours[k], theirs[k], rtol=1e-8, atol=1e-8)


def test_keyword_arguments_are_batched_along_axis_0():
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    close(tx.vmap(lambda a, *, b: (a * b).sum())(x, b=y), (x * y).sum(1))
