"""thunderx.pure_callback (jax.pure_callback's contract): numpy inside jit and vmap against eager
numpy and a loop, a derivative given with custom_jvp against torch.func, and bad input."""

import numpy as np
import pytest
import torch
import torch.func as tf

import thunderx as tx

S = tx.ShapeDtypeStruct
F64 = torch.float64


def np_sin(x, **kw):
    return tx.pure_callback(
        lambda v: torch.from_numpy(np.sin(v.numpy())), S(x.shape, x.dtype), x, **kw
    )


def test_numpy_inside_jit_runs_on_every_call():
    calls = []

    def cb(v, scale):
        calls.append(scale)
        return torch.from_numpy(np.cumsum(v.numpy()) * scale)

    f = tx.jit(lambda x: tx.pure_callback(cb, S(x.shape, x.dtype), x * 2, scale=3.0) + 1)
    for x in (torch.arange(4.0), torch.tensor([1.0, -2.0, 5.0, 0.5])):
        torch.testing.assert_close(f(x), torch.from_numpy(np.cumsum(x.numpy() * 2) * 3.0) + 1)
    assert calls == [3.0, 3.0]
    # a pytree of results, one of them integer
    g = tx.jit(
        lambda x: tx.pure_callback(
            lambda v: {"max": v.max(), "arg": torch.tensor(int(np.argmax(v.numpy())))},
            {"max": S((), x.dtype), "arg": S((), torch.int64)},
            x,
        )
    )
    out = g(torch.tensor([1.0, 7.0, 3.0]))
    assert out["max"] == 7.0 and out["arg"] == 1


@pytest.mark.parametrize("method", ["sequential", "expand_dims", "broadcast_all"])
def test_vmap_methods_match_a_loop(method):
    xs = torch.randn(4, 3, dtype=F64)
    w = torch.randn(3, dtype=F64)
    shapes = []

    def cb(x, w):
        shapes.append((tuple(x.shape), tuple(w.shape)))
        return torch.from_numpy(np.sin(x.numpy()) * w.numpy())

    def f(x, w):
        return tx.pure_callback(cb, S(x.shape, x.dtype), x, w, vmap_method=method)

    loop = torch.stack([torch.sin(x) * w for x in xs])
    torch.testing.assert_close(tx.vmap(f, in_axes=(0, None))(xs, w), loop)
    torch.testing.assert_close(tx.jit(tx.vmap(f, in_axes=(0, None)))(xs, w), loop)
    first = shapes[0]
    want = {
        "sequential": ((3,), (3,)),
        "expand_dims": ((4, 3), (1, 3)),
        "broadcast_all": ((4, 3), (4, 3)),
    }[method]
    assert first == want


def test_a_derivative_given_with_custom_jvp():
    @tx.custom_jvp
    def sin(x):
        return np_sin(x, vmap_method="sequential")

    @sin.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        cos = tx.pure_callback(
            lambda v: torch.from_numpy(np.cos(v.numpy())),
            S(x.shape, x.dtype),
            x,
            vmap_method="expand_dims",
        )
        return sin(x), cos * t

    x = torch.randn(5, dtype=F64)
    loss = lambda f: lambda x: (f(x) ** 2).sum()  # noqa: E731
    torch.testing.assert_close(tx.grad(loss(sin))(x), tf.grad(loss(torch.sin))(x))
    torch.testing.assert_close(tx.jit(tx.grad(loss(sin)))(x), tf.grad(loss(torch.sin))(x))
    xs = torch.randn(3, 5, dtype=F64)
    torch.testing.assert_close(
        tx.vmap(tx.grad(loss(sin)))(xs), tf.vmap(tf.grad(loss(torch.sin)))(xs)
    )


def test_zero_tangents_pass_and_a_nonzero_one_is_refused():
    x = torch.randn(3, dtype=F64)
    # the callback's operand is stopped: the gradient is that of the rest
    f = lambda x: (np_sin(tx.stop_gradient(x)) * x).sum()  # noqa: E731
    torch.testing.assert_close(tx.grad(f)(x), torch.sin(x))
    with pytest.raises(TypeError, match="not differentiable.*test_pure_callback.py"):
        tx.grad(lambda x: np_sin(x).sum())(x)


def test_an_unused_pure_call_may_be_dropped_under_jit():
    calls = []

    def cb(v):
        calls.append(1)
        return v * 2

    f = tx.jit(lambda x: (tx.pure_callback(cb, S(x.shape, x.dtype), x), x + 1)[1])
    torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 2.0))
    assert calls == []


def test_bad_input_is_a_clear_error():
    x = torch.ones(2)
    with pytest.raises(
        TypeError, match=r"result 0 is torch.float32\[3\] where .* declares f32\[2\]"
    ):
        tx.jit(lambda x: tx.pure_callback(lambda v: torch.ones(3), S((2,), x.dtype), x))(x)
    with pytest.raises(TypeError, match="returned the structure"):
        tx.pure_callback(lambda v: (v, v), S((2,), x.dtype), x)
    with pytest.raises(TypeError, match="callback must be callable"):
        tx.pure_callback(3, S((2,), x.dtype), x)
    with pytest.raises(ValueError, match="vmap_method must be one of"):
        tx.pure_callback(lambda v: v, S((2,), x.dtype), x, vmap_method="loop")
    with pytest.raises(TypeError, match="result_shape_dtypes must be a pytree"):
        tx.pure_callback(lambda v: v, (2,), x)
    with pytest.raises(NotImplementedError, match="needs vmap_method"):
        tx.vmap(np_sin)(torch.ones(2, 2))
