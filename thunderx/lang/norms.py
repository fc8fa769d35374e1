"""Batch and instance normalization, and torch's native normalization ops (native_batch_norm,
_native_batch_norm_legit, _batch_norm_with_update, native_group_norm, native_layer_norm), as
decompositions onto primitives.

Running statistics in training mode are torch's in-place update of the caller's buffers:
`running = (1 - momentum) * running + momentum * batch_stat` (the variance unbiased). Where the
transform knows the batch statistics' values (eager grad, vjp, jvp) the buffers are updated then,
as torch.func does; where it does not (jit, vmap of batched statistics) the update cannot be
expressed and a clear error says so, instead of silently leaving the buffers stale."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.core import Tracer
from thunderx.errors import user_frame
from thunderx.lang._base import aval, convert, dtype, ndim, register, shape
from thunderx.lang.inplace import MutationError
from thunderx.lang.nn import group_norm, layer_norm
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U


def _update_running(buf, stat, momentum, what):
    """buf <- (1 - momentum) * buf + momentum * stat, in place, with no derivative."""
    if buf is None:
        return
    if isinstance(buf, Tracer):
        raise MutationError(
            f"{what} updates running statistics that are traced values at {user_frame()}: pass "
            "the buffers as concrete tensors (module buffers), or use eval mode / "
            "track_running_stats=False under the transform"
        )
    value = stat.to_concrete() if isinstance(stat, Tracer) else stat
    if value is None:
        raise MutationError(
            f"{what} in training mode updates its running statistics in place at {user_frame()}, "
            "and this transform (jit or vmap) does not know the batch statistics' values: use "
            "eval mode or track_running_stats=False inside it, or update the statistics outside"
        )
    with torch.no_grad():
        buf.mul_(1.0 - momentum).add_(value.detach().to(buf.dtype), alpha=momentum)


def _stats(x, dims):
    n = float(math.prod(shape(x)[d] for d in dims))
    mean = B.div(R.reduce_sum(x, dims, keepdims=True), n)
    xc = B.sub(x, S.broadcast_to(mean, shape(x)))
    var = B.div(R.reduce_sum(B.mul(xc, xc), dims, keepdims=True), n)
    return mean, var, xc, n


def _channel(v, shp):
    return S.broadcast_in_dim(v, shp, (1,))


def _batch_norm_core(x, weight, bias, running_mean, running_var, training, momentum, eps, what):
    """(out, batch mean, 1/sqrt(var + eps)) with the stats of shape (C,) (training), or
    (out, None, None) in eval mode."""
    shp = shape(x)
    if len(shp) < 2:
        raise ValueError(f"{what}: expected an input of at least 2 dims, got {tuple(shp)}")
    dims = tuple(d for d in range(len(shp)) if d != 1)
    if training:
        mean, var, xc, n = _stats(x, dims)
        mean, var = S.reshape(mean, (shp[1],)), S.reshape(var, (shp[1],))
        invstd = U.rsqrt(B.add(var, eps))
        if running_mean is not None or running_var is not None:
            unbiased = B.mul(var, n / max(n - 1.0, 1.0))
            _update_running(running_mean, mean, momentum, what)
            _update_running(running_var, unbiased, momentum, what)
        out = B.mul(xc, _channel(invstd, shp))
        saved = (mean, invstd)
    else:
        if running_mean is None or running_var is None:
            raise ValueError(f"{what} in eval mode needs running statistics")
        rm, rv = convert(running_mean, dtype(x)), convert(running_var, dtype(x))
        out = B.mul(B.sub(x, _channel(rm, shp)), _channel(U.rsqrt(B.add(rv, eps)), shp))
        saved = (None, None)
    if weight is not None:
        out = B.mul(out, _channel(weight, shp))
    if bias is not None:
        out = B.add(out, _channel(bias, shp))
    return out, *saved


def _empty(x):
    a = aval(x)
    return C.full((0,), 0.0, a.dtype, a.device)


@register(F.batch_norm)
def _batch_norm(
    x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5
):
    if 0 in shape(x):
        return B.mul(x, 1.0)
    return _batch_norm_core(
        x, weight, bias, running_mean, running_var, training, momentum, eps, "batch_norm"
    )[0]


@register(torch.native_batch_norm)
def _native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    out, mean, invstd = _batch_norm_core(
        x, weight, bias, running_mean, running_var, training, momentum, eps, "native_batch_norm"
    )
    if mean is None:
        return out, _empty(x), _empty(x)
    return out, mean, invstd


@register(torch._native_batch_norm_legit)
def _native_batch_norm_legit(x, weight, bias, *args):
    if len(args) == 5:  # (running_mean, running_var, training, momentum, eps)
        return _native_batch_norm(x, weight, bias, *args)
    training, momentum, eps = args  # the overload without running statistics
    return _native_batch_norm(x, weight, bias, None, None, training, momentum, eps)


@register(torch.ops.aten._batch_norm_with_update.default, torch.ops.aten._batch_norm_with_update)
def _batch_norm_with_update(x, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, invstd = _native_batch_norm(
        x, weight, bias, running_mean, running_var, True, momentum, eps
    )
    reserve = C.full((0,), 0, torch.uint8, aval(x).device)
    return out, mean, invstd, reserve


@register(torch.native_group_norm)
def _native_group_norm(x, weight, bias, n, c, hxw, group, eps):
    g = S.reshape(x, (n, group, (c // group) * hxw))
    mean, var, _, _ = _stats(g, (2,))
    out = group_norm(x, group, weight, bias, eps)
    return out, S.reshape(mean, (n, group)), S.reshape(U.rsqrt(B.add(var, eps)), (n, group))


@register(torch.native_layer_norm)
def _native_layer_norm(x, normalized_shape, weight, bias, eps):
    k = len(tuple(normalized_shape))
    dims = tuple(range(ndim(x) - k, ndim(x)))
    mean, var, _, _ = _stats(x, dims)
    return layer_norm(x, normalized_shape, weight, bias, eps), mean, U.rsqrt(B.add(var, eps))


@register(F.instance_norm)
def _instance_norm(
    x,
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats=True,
    momentum=0.1,
    eps=1e-5,
):
    shp = shape(x)
    if not use_input_stats:
        return _batch_norm_core(
            x, weight, bias, running_mean, running_var, False, momentum, eps, "instance_norm"
        )[0]
    dims = tuple(range(2, len(shp)))
    mean, var, xc, n = _stats(x, dims)
    if running_mean is not None or running_var is not None:
        # torch averages the per-instance statistics over the batch
        flat = (shp[0], shp[1])
        m = B.div(R.reduce_sum(S.reshape(mean, flat), (0,)), float(shp[0]))
        v = B.mul(S.reshape(var, flat), n / max(n - 1.0, 1.0))
        v = B.div(R.reduce_sum(v, (0,)), float(shp[0]))
        _update_running(running_mean, m, momentum, "instance_norm")
        _update_running(running_var, v, momentum, "instance_norm")
    out = B.mul(xc, S.broadcast_to(U.rsqrt(B.add(var, eps)), shp))
    if weight is not None:
        out = B.mul(out, _channel(weight, shp))
    if bias is not None:
        out = B.add(out, _channel(bias, shp))
    return out
