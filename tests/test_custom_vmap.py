"""thunderx.custom_vmap (jax.custom_batching.custom_vmap): the rule runs under vmap, also staged
by jit on either side, with the batched flags of its arguments; derivatives go through the
function (or through the rule's own operations under grad of vmap); against a loop and
torch.func."""

import pytest
import torch
import torch.func as tf

import thunderx as tx

F64 = torch.float64


def make():
    calls = []

    @tx.custom_vmap
    def f(x, w):
        return (x * w).sum().sin()

    @f.def_vmap
    def rule(axis_size, in_batched, x, w):
        calls.append((axis_size, tuple(in_batched)))
        xb, wb = in_batched
        x = x if xb else x.expand(axis_size, *x.shape)
        w = w if wb else w.expand(axis_size, *w.shape)
        return torch.einsum("bi,bi->b", x, w).sin(), True

    return f, calls


def ref(x, w):
    return (x * w).sum().sin()


@pytest.mark.parametrize("axes", [(0, None), (None, 0), (0, 0), (1, 0)])
def test_the_rule_runs_under_vmap_with_the_batched_flags(axes):
    f, calls = make()
    x, w = torch.randn(3, 4, dtype=F64), torch.randn(3, 4, dtype=F64)
    args = (
        x.T.contiguous() if axes[0] == 1 else x if axes[0] == 0 else x[0],
        w if axes[1] == 0 else w[0],
    )
    want = tf.vmap(ref, in_dims=axes)(*args)
    torch.testing.assert_close(tx.vmap(f, in_axes=axes)(*args), want)
    assert calls == [(3, (axes[0] is not None, axes[1] is not None))]
    torch.testing.assert_close(tx.jit(tx.vmap(f, in_axes=axes))(*args), want)
    torch.testing.assert_close(tx.vmap(tx.jit(f), in_axes=axes)(*args), want)
    assert len(calls) == 3  # each staging traced the rule once
    # outside vmap the function itself
    torch.testing.assert_close(f(x[0], w[0]), ref(x[0], w[0]))
    torch.testing.assert_close(tx.jit(f)(x[0], w[0]), ref(x[0], w[0]))
    assert len(calls) == 3


def test_derivatives():
    f, calls = make()
    x, w = torch.randn(3, 4, dtype=F64), torch.randn(4, dtype=F64)
    # grad of vmap: through the rule's own operations
    loss = lambda f: lambda x, w: tx.vmap(f, in_axes=(0, None))(x, w).square().sum()  # noqa: E731
    tloss = lambda x, w: tf.vmap(ref, in_dims=(0, None))(x, w).square().sum()  # noqa: E731
    torch.testing.assert_close(
        tx.grad(loss(f), argnums=(0, 1))(x, w), tf.grad(tloss, argnums=(0, 1))(x, w)
    )
    assert calls
    # vmap of grad: the function itself is differentiated, then batched
    torch.testing.assert_close(
        tx.vmap(tx.grad(f), in_axes=(0, None))(x, w),
        tf.vmap(tf.grad(ref), in_dims=(0, None))(x, w),
    )
    torch.testing.assert_close(tx.jacfwd(f)(x[0], w), tf.jacfwd(ref)(x[0], w))


def test_bad_rules_are_clear_errors():
    @tx.custom_vmap
    def f(x):
        return x.sum()

    with pytest.raises(AttributeError, match="no vmap rule"):
        f(torch.ones(2))
    f.def_vmap(lambda n, b, x: x.sum(1))
    with pytest.raises(TypeError, match=r"must return \(out, out_batched\)"):
        tx.vmap(f)(torch.ones(3, 2))
    f.def_vmap(lambda n, b, x: (x.sum(1), "yes"))
    with pytest.raises(TypeError, match="out_batched must be a bool"):
        tx.vmap(f)(torch.ones(3, 2))
    f.def_vmap(lambda n, b, x: (x.sum(), True))
    with pytest.raises(TypeError, match="marked batched but has shape"):
        tx.vmap(f)(torch.ones(3, 2))
    with pytest.raises(TypeError, match="arguments must be tensors"):
        f("x")
