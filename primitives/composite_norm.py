"""layer_norm (without its affine part) as a composite operation: torch's native_layer_norm
forward, and native_layer_norm_backward as both its jvp and its transpose (the Jacobian
rstd * (I - 1 1^T / n - y y^T / n) of a normalization is symmetric). The backward kernel's
derivative in x comes from its decomposition, so hessians work."""

from __future__ import annotations

import math

import torch

from thunderx.ad_util import Zero, is_undefined
from thunderx.avals import is_float
from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives.composite import declare_composite


def layer_norm(x, normalized_ndim: int, eps: float):
    """F.layer_norm(x, x.shape[-normalized_ndim:]) without weight and bias."""
    return layer_norm_p.bind(x, normalized_ndim=int(normalized_ndim), eps=float(eps))


def layer_norm_backward(g, x, normalized_ndim: int, eps: float):
    """The cotangent (and tangent) of layer_norm at x, as torch's native_layer_norm_backward."""
    return layer_norm_backward_p.bind(g, x, normalized_ndim=normalized_ndim, eps=eps)


def _check(name, x, normalized_ndim):
    if not is_float(x.dtype):
        raise TypeError(f"{name} needs a floating operand, got {x.str_short()}")
    if not 1 <= normalized_ndim <= x.ndim:
        raise TypeError(f"{name}: cannot normalize {normalized_ndim} dims of {x.str_short()}")


def _abstract_eval(x, *, normalized_ndim, eps):
    _check("layer_norm", x, normalized_ndim)
    return x.strip_weak()


def _backward_abstract_eval(g, x, *, normalized_ndim, eps):
    _check("layer_norm_backward", x, normalized_ndim)
    if g.shape != x.shape or g.dtype != x.dtype:
        raise TypeError(f"layer_norm_backward: gradient {g.str_short()} vs input {x.str_short()}")
    return x.strip_weak()


def _stats(x, normalized_ndim, eps):
    """(x - mean) and rstd over the trailing dims, both shaped like x, in primitives."""
    shp = S._shape(x)
    dims = tuple(range(len(shp) - normalized_ndim, len(shp)))
    n = float(math.prod(shp[d] for d in dims))
    mean = B.div(R.reduce_sum(x, dims, keepdims=True), n)
    xc = B.sub(x, S.broadcast_to(mean, shp))
    var = B.div(R.reduce_sum(B.mul(xc, xc), dims, keepdims=True), n)
    return xc, S.broadcast_to(U.rsqrt(B.add(var, eps)), shp), dims, n


def _decomposition(x, *, normalized_ndim, eps):
    xc, rstd, _, _ = _stats(x, normalized_ndim, eps)
    return B.mul(xc, rstd)


def _backward_decomposition(g, x, *, normalized_ndim, eps):
    xc, rstd, dims, n = _stats(x, normalized_ndim, eps)
    shp = S._shape(x)
    y = B.mul(xc, rstd)

    def mean(v):
        return S.broadcast_to(B.div(R.reduce_sum(v, dims, keepdims=True), n), shp)

    return B.mul(rstd, B.sub(B.sub(g, mean(g)), B.mul(y, mean(B.mul(g, y)))))


def _impl(x, *, normalized_ndim, eps):
    return torch.native_layer_norm(x, x.shape[x.dim() - normalized_ndim :], None, None, eps)[0]


def _backward_impl(g, x, *, normalized_ndim, eps):
    shape = x.shape[x.dim() - normalized_ndim :]
    # the statistics as torch's forward computes them (so the numbers are torch's)
    _, mean, rstd = torch.native_layer_norm(x, shape, None, None, eps)
    return torch.ops.aten.native_layer_norm_backward(
        g, x, shape, mean, rstd, None, None, [True, False, False]
    )[0]


def _backward_codegen(args, avals, *, normalized_ndim, eps):
    g, x = args
    shape = tuple(avals[1].shape[len(avals[1].shape) - normalized_ndim :])
    # the statistics once, named by an assignment expression (generated names never start
    # with an underscore)
    stats = f"(_ln_stats := torch.native_layer_norm({x}, {shape}, None, None, {eps!r}))"
    return (
        f"torch.ops.aten.native_layer_norm_backward({g}, {x}, {shape}, {stats}[1], "
        "_ln_stats[2], None, None, [True, False, False])[0]"
    )


def _jvp(primals, tangents, *, normalized_ndim, eps):
    (x,), (t,) = primals, tangents
    y = layer_norm(x, normalized_ndim, eps)
    if type(t) is Zero:
        return y, Zero(get_aval(y))
    return y, layer_norm_backward(t, x, normalized_ndim, eps)


def _backward_transpose(ct, g, x, *, normalized_ndim, eps):
    if is_undefined(x):
        raise TypeError("layer_norm_backward is linear in its gradient only")
    return [layer_norm_backward(ct, x, normalized_ndim, eps), None]


def _batch(get_prim):
    # the kernel normalizes trailing dims: any leading batch dim is the kernel's own
    def batch(args, dims, **params):
        return get_prim().bind(*S.batch_to_front(args, dims), **params), 0

    return batch


layer_norm_p = declare_composite(
    "layer_norm",
    decomposition=_decomposition,
    impl=_impl,
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    batch=_batch(lambda: layer_norm_p),
    torch_codegen=lambda args, avals, *, normalized_ndim, eps: (
        f"torch.native_layer_norm({args[0]}, "
        f"{tuple(avals[0].shape[len(avals[0].shape) - normalized_ndim :])}, None, None, "
        f"{eps!r})[0]"
    ),
)
layer_norm_backward_p = declare_composite(
    "layer_norm_backward",
    decomposition=_backward_decomposition,
    impl=_backward_impl,
    abstract_eval=_backward_abstract_eval,
    linear=True,
    nonlinear=(1,),
    differentiate_decomposition=True,
    transpose=_backward_transpose,
    batch=_batch(lambda: layer_norm_backward_p),
    torch_codegen=_backward_codegen,
)
