"""torch.autograd.Function under thunderx transforms: backward is the custom VJP (torch.func and
torch.autograd are the oracles); a Function's forward is never differentiated silently."""

import pytest
import torch
import torch.func as tf

import thunderx as tx

F64 = torch.float64


class ScaledSin(torch.autograd.Function):
    """setup_context style (what torch.func supports); backward deliberately not sin's
    derivative, so a gradient traced through forward would be caught."""

    @staticmethod
    def forward(x, y, scale=100.0):
        return x.sin() * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, y, scale = inputs
        ctx.save_for_backward(x, y)
        ctx.scale = scale

    @staticmethod
    def backward(ctx, gy):
        x, y = ctx.saved_tensors
        return gy * ctx.scale * y * x.cos(), gy * x.sin(), None

    @staticmethod
    def vmap(info, in_dims, x, y, scale):  # torch.func needs it; thunderx batches forward itself
        x = x.movedim(in_dims[0], 0) if in_dims[0] is not None else x
        y = y.movedim(in_dims[1], 0) if in_dims[1] is not None else y
        return x.sin() * y, 0


class CtxStyle(torch.autograd.Function):
    """Old style: forward(ctx, ...); torch.func refuses it, torch.autograd is the oracle."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.power = 3
        return x**2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ctx.power * x


def _xy():
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, generator=g, dtype=F64), torch.randn(4, generator=g, dtype=F64)


def _loss(x, y):
    return (ScaledSin.apply(x, y) ** 2).sum()


def test_grad_uses_the_functions_backward_like_torch_func():
    x, y = _xy()
    want = tf.grad(_loss, argnums=(0, 1))(x, y)
    torch.testing.assert_close(tx.grad(_loss, argnums=(0, 1))(x, y), want)
    torch.testing.assert_close(tx.jit(tx.grad(_loss, argnums=(0, 1)))(x, y), want)


def test_per_example_grads_and_vmap_match_torch_func():
    x, y = _xy()
    xs, ys = torch.stack([x, 2 * x]), torch.stack([y, -y])
    g = lambda x, y: tx.grad(_loss)(x, y)  # noqa: E731
    want = tf.vmap(tf.grad(_loss))(xs, ys)
    torch.testing.assert_close(tx.vmap(g)(xs, ys), want)
    torch.testing.assert_close(tx.jit(tx.vmap(g))(xs, ys), want)
    torch.testing.assert_close(
        tx.vmap(lambda x: ScaledSin.apply(x, y))(xs), tf.vmap(lambda x: ScaledSin.apply(x, y))(xs)
    )


def test_second_derivative_differentiates_backward_like_torch_func():
    x, y = _xy()
    want = tf.jacrev(tf.grad(_loss))(x, y)
    torch.testing.assert_close(tx.jacrev(tx.grad(_loss))(x, y), want)


def test_ctx_style_function_matches_torch_autograd():
    x, _ = _xy()
    xr = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(CtxStyle.apply(xr).sum(), xr)
    torch.testing.assert_close(tx.grad(lambda x: CtxStyle.apply(x).sum())(x), want)
    torch.testing.assert_close(tx.jit(lambda x: CtxStyle.apply(x))(x), x**2)


def test_plain_tensors_still_go_through_torch_autograd():
    x, y = _xy()
    xr = x.clone().requires_grad_()
    _loss(xr, y).backward()
    torch.testing.assert_close(xr.grad, tf.grad(_loss)(x, y))


def test_forward_mode_is_refused_with_a_clear_error():
    x, y = _xy()
    with pytest.raises(TypeError, match="forward-mode"):
        tx.jvp(lambda x: ScaledSin.apply(x, y), (x,), (x,))
    # nothing left behind: the next call works
    torch.testing.assert_close(tx.grad(_loss)(x, y), tf.grad(_loss)(x, y))


def test_function_apply_is_torchs_own_outside_transforms_even_after_an_error():
    from thunderx.lang.autograd_function import _TORCH_APPLY

    seen = []

    def f(x):
        seen.append(torch.autograd.Function.apply.__func__ is _TORCH_APPLY)
        raise ValueError("boom")

    assert torch.autograd.Function.apply.__func__ is _TORCH_APPLY
    with pytest.raises(ValueError, match="boom"):
        tx.grad(f)(torch.tensor(1.0))
    assert seen == [False]  # thunderx's apply while the transform ran
    assert torch.autograd.Function.apply.__func__ is _TORCH_APPLY


class _InnerSin(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos()


class _OuterTwice(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return _InnerSin.apply(x) * 2  # a Function inside a Function: a call inside a call

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x.cos()


def test_nested_functions_called_several_times_under_jit():
    # jit inlines each call's equations; the variables made for a nested call's outputs were
    # freed while their ids still keyed substitutions, so a later call read an earlier call's
    # value (each row after the first got sin of the previous row's result: a silent wrong answer)
    def f(a):
        return torch.stack([_OuterTwice.apply(a[i]) for i in range(a.shape[0])])

    a = torch.randn(6, 5, dtype=torch.float64)
    torch.testing.assert_close(tx.jit(f)(a), 2 * a.sin())
    got = tx.jit(tx.grad(lambda a: (f(a) * a).sum()))(a)
    torch.testing.assert_close(got, tf.grad(lambda a: (2 * a.sin() * a).sum())(a))
