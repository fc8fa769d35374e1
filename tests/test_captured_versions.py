"""Reverse mode keeps concrete tensors (captured ones, ones the function made, residuals) for the
backward pass: one modified in place after the differentiated computation read it would make the
derivative read its new value, a silent wrong answer. torch refuses it (torch.func: an in-place
op on a captured tensor; torch.autograd: the version counter check on saved tensors), and so does
thunderx, with the tensor's version counter. Writes before the read, forward mode (which uses
values as it goes) and jit (which keeps earlier reads itself) give the derivative at read time."""

import pytest
import torch
import torch.func as tf
from torch.autograd import forward_ad as fwad

import thunderx as tx
from thunderx.core import is_top_level
from thunderx.errors import ModifiedInPlaceError

X = torch.tensor([1.0, 2.0, 3.0])


def _late_write(buf):
    """Reads `buf` in the differentiated computation, then modifies it in place."""

    def f(x):
        y = (x * buf).sin().sum()
        with torch.no_grad():
            buf.add_(1)
        return y

    return f


def _no_write(buf):
    return lambda x: (x * buf).sin().sum()


def _early_write(buf):
    def f(x):
        with torch.no_grad():
            buf.add_(1)
        return (x * buf).sin().sum()

    return f


def _grad(api, f, x):
    if api == "vjp":
        _, fn = api_of["vjp"](f, x)
        return fn(torch.tensor(1.0))[0]
    if api == "value_and_grad":
        return api_of["value_and_grad"](f)(x)[1]
    return api_of[api](f)(x)


api_of = {"grad": tx.grad, "vjp": tx.vjp, "value_and_grad": tx.value_and_grad}
api_of.update(jacrev=tx.jacrev, hessian=tx.hessian)
torch_api_of = {"grad": tf.grad, "vjp": tf.vjp, "value_and_grad": tf.grad_and_value}
torch_api_of.update(jacrev=tf.jacrev, hessian=tf.hessian)
APIS = list(api_of)


def _torch_grad(api, f, x):
    if api == "vjp":
        _, fn = tf.vjp(f, x)
        return fn(torch.tensor(1.0))[0]
    if api == "value_and_grad":
        return tf.grad_and_value(f)(x)[0]
    return torch_api_of[api](f)(x)


@pytest.mark.parametrize("api", APIS)
def test_write_after_read_raises_like_torch_func(api):
    buf = torch.full((3,), 0.5)
    with pytest.raises(RuntimeError, match="captured Tensor"):
        _torch_grad(api, _late_write(buf), X)
    buf.fill_(0.5)
    with pytest.raises(RuntimeError, match="modified by an in-place operation") as info:
        _grad(api, _late_write(buf), X)
    assert isinstance(info.value, ModifiedInPlaceError)
    assert "(3,)" in str(info.value) and "test_captured_versions.py" in str(info.value)
    assert is_top_level()
    # the transform still works afterwards
    buf.fill_(0.5)
    torch.testing.assert_close(_grad(api, _no_write(buf), X), _torch_grad(api, _no_write(buf), X))


@pytest.mark.parametrize("api", APIS)
def test_without_the_write_matches_torch_func(api):
    buf = torch.tensor([0.5, -1.0, 2.0])
    torch.testing.assert_close(_grad(api, _no_write(buf), X), _torch_grad(api, _no_write(buf), X))


def _eager_grad(f, x):
    x = x.clone().requires_grad_()
    return torch.autograd.grad(f(x), x)[0]


@pytest.mark.parametrize("api", ["grad", "vjp", "value_and_grad", "jacrev"])
def test_write_before_read_matches_eager(api):
    # torch.func refuses any in-place op on a captured tensor (before the read too); eager
    # autograd reads the new value, and so does thunderx: nothing stale is kept
    buf = torch.full((3,), 0.5)
    expected = _eager_grad(_early_write(buf), X)
    torch.testing.assert_close(buf, torch.full((3,), 1.5))
    buf.fill_(0.5)
    torch.testing.assert_close(_grad(api, _early_write(buf), X), expected)
    torch.testing.assert_close(buf, torch.full((3,), 1.5))


def test_tensor_made_inside_the_function_raises_like_autograd():
    def f(x):
        c = torch.full((3,), 0.5)
        y = (x * c).sin().sum()
        c.mul_(3)
        return y

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _eager_grad(f, X)
    with pytest.raises(ModifiedInPlaceError):
        tx.grad(f)(X)
    assert is_top_level()


def test_write_between_vjp_and_its_call_raises_like_autograd():
    buf = torch.full((3,), 0.5)
    x = X.clone().requires_grad_()
    y = (x * buf).sin().sum()
    buf.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(y, x)
    buf.fill_(0.5)
    out, fn = tx.vjp(_no_write(buf), X)
    expected = fn(torch.tensor(1.0))[0]  # a call before the write is fine
    torch.testing.assert_close(expected, _eager_grad(_no_write(buf), X))
    buf.add_(1)
    with pytest.raises(ModifiedInPlaceError, match="after the function returned"):
        fn(torch.tensor(1.0))
    assert is_top_level()


def test_linearize_keeps_its_residuals_or_raises():
    buf = torch.full((3,), 0.5)
    f = _no_write(buf)
    t = torch.tensor([1.0, -1.0, 0.5])
    _, f_jvp = tx.linearize(f, X)
    torch.testing.assert_close(f_jvp(t), tf.jvp(f, (X,), (t,))[1])
    buf.add_(1)
    with pytest.raises(ModifiedInPlaceError):
        f_jvp(t)
    with pytest.raises(ModifiedInPlaceError):
        tx.linearize(_late_write(buf), X)
    assert is_top_level()


def test_jvp_uses_values_as_it_goes():
    # forward mode computes tangents at the read: the late write cannot reach them (eager forward
    # AD agrees; torch.func.jvp refuses the captured write)
    buf = torch.full((3,), 0.5)
    t = torch.tensor([1.0, -1.0, 0.5])
    with fwad.dual_level():
        out = _late_write(buf)(fwad.make_dual(X, t))
        expected = fwad.unpack_dual(out).tangent
    buf.fill_(0.5)
    _, tangent = tx.jvp(_late_write(buf), (X,), (t,))
    torch.testing.assert_close(tangent, expected)


def test_jacfwd_linearizes_and_raises_like_torch_func():
    # jacfwd linearizes once and applies the linear map to a batch of basis tangents later
    buf = torch.full((3,), 0.5)
    with pytest.raises(RuntimeError, match="captured Tensor"):
        tf.jacfwd(_late_write(buf))(X)
    buf.fill_(0.5)
    with pytest.raises(ModifiedInPlaceError):
        tx.jacfwd(_late_write(buf))(X)
    buf.fill_(0.5)
    torch.testing.assert_close(tx.jacfwd(_no_write(buf))(X), tf.jacfwd(_no_write(buf))(X))


def test_vmap_of_grad_raises_like_torch_func():
    xs = torch.randn(4, 3)
    buf = torch.full((3,), 0.5)
    with pytest.raises(RuntimeError):
        tf.vmap(tf.grad(_late_write(buf)))(xs)
    buf.fill_(0.5)
    with pytest.raises(ModifiedInPlaceError):
        tx.vmap(tx.grad(_late_write(buf)))(xs)
    assert is_top_level()
    buf.fill_(0.5)
    torch.testing.assert_close(
        tx.vmap(tx.grad(_no_write(buf)))(xs), tf.vmap(tf.grad(_no_write(buf)))(xs)
    )
    torch.testing.assert_close(
        tx.grad(lambda x: tx.vmap(_no_write(buf))(x).sum())(xs),
        tf.grad(lambda x: tf.vmap(_no_write(buf))(x).sum())(xs),
    )


def test_custom_vjp_residual_modified_later_raises():
    buf = torch.full((3,), 0.5)

    @tx.custom_vjp
    def scale(x):
        return x * buf

    scale.defvjp(lambda x: (x * buf, buf), lambda res, ct: (ct * res,))

    def f(x):
        y = scale(x).sum()
        with torch.no_grad():
            buf.add_(1)
        return y

    with pytest.raises(ModifiedInPlaceError):
        tx.grad(f)(X)
    buf.fill_(0.5)
    torch.testing.assert_close(tx.grad(lambda x: scale(x).sum())(X), buf)


def test_jit_keeps_the_value_it_read():
    # under jit the staged program keeps reads before writes (lang/captured.py); the gradient
    # is the derivative at the read, d/dx sum(sin(x * buf)) = buf * cos(x * buf)
    buf = torch.full((3,), 0.5)
    expected = 0.5 * torch.cos(X * 0.5)
    torch.testing.assert_close(tx.grad(tx.jit(_late_write(buf)))(X), expected)
    torch.testing.assert_close(buf, torch.full((3,), 1.5))
    buf.fill_(0.5)
    torch.testing.assert_close(tx.jit(tx.grad(_late_write(buf)))(X), expected)


def test_views_share_the_version_counter():
    # a view read by the derivative changes when its base is written
    base = torch.full((2, 3), 0.5)

    def f(x):
        y = (x * base[0]).sin().sum()
        with torch.no_grad():
            base.add_(1)
        return y

    with pytest.raises(ModifiedInPlaceError):
        tx.grad(f)(X)


def test_inference_tensors_have_no_version_and_work():
    with torch.inference_mode():
        buf = torch.full((3,), 0.5)
    torch.testing.assert_close(tx.grad(_no_write(buf))(X), 0.5 * torch.cos(X * 0.5))


def test_linear_transpose_keeps_its_constants_or_raises():
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    f_t = tx.linear_transpose(lambda x: w @ x, torch.zeros(2))
    ct = torch.tensor([1.0, -1.0, 0.5])
    torch.testing.assert_close(f_t(ct)[0], w.T @ ct)
    w.mul_(2)
    with pytest.raises(ModifiedInPlaceError, match=r"\(3, 2\)"):
        f_t(ct)


def test_autograd_function_saved_tensor_modified_later_raises_like_torch():
    buf = torch.full((3,), 0.5)

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(x, w):
            return x * w

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[1])

        @staticmethod
        def backward(ctx, g):
            (w,) = ctx.saved_tensors
            return g * w, None

    def f(x):
        y = Scale.apply(x, buf).sum()
        with torch.no_grad():
            buf.add_(1)
        return y

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _eager_grad(f, X)
    buf.fill_(0.5)
    with pytest.raises(RuntimeError, match="captured Tensor"):
        tf.grad(f)(X)
    buf.fill_(0.5)
    with pytest.raises(ModifiedInPlaceError, match="custom"):
        tx.grad(f)(X)
    buf.fill_(0.5)
    torch.testing.assert_close(tx.grad(lambda x: Scale.apply(x, buf).sum())(X), buf)
