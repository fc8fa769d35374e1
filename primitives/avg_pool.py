"""Average pooling as torch's kernels: `avg_pool` runs avg_pool1d/2d/3d over the trailing
`len(kernel)` dims, and its transpose `avg_pool_backward` is torch's avg_pool2d/3d_backward
kernel (what torch.autograd calls). Both are linear, each the other's transpose, so derivatives
of any order and vmap stay with torch's kernels instead of one strided slice and one padded add
per window offset."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.ad_util import Zero, is_undefined
from thunderx.avals import ShapedArray, is_float
from thunderx.core import declare
from thunderx.primitives import shape as S
from thunderx.primitives.pooling import pool_out_size


def avg_pool(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
    """F.avg_pool{n}d over the trailing len(kernel) dims of x (any leading dims)."""
    return avg_pool_p.bind(x, **_params(kernel, stride, padding, ceil_mode, count_include_pad,
                                        divisor_override))  # fmt: skip


def _params(kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return dict(
        kernel=tuple(kernel),
        stride=tuple(stride),
        padding=tuple(padding),
        ceil_mode=bool(ceil_mode),
        count_include_pad=bool(count_include_pad),
        divisor_override=None if divisor_override is None else int(divisor_override),
    )


def _out_shape(shape, kernel, stride, padding, ceil_mode):
    nsp = len(kernel)
    sp = tuple(
        pool_out_size(n, k, s, p, 1, ceil_mode)
        for n, k, s, p in zip(shape[-nsp:], kernel, stride, padding)
    )
    return tuple(shape[:-nsp]) + sp


def _check(name, x, kernel, stride, padding):
    nsp = len(kernel)
    if nsp not in (1, 2, 3) or x.ndim < nsp + 1 or not is_float(x.dtype):
        raise TypeError(f"{name}: {nsp}-d pooling needs a floating operand with a leading dim")
    if len(stride) != nsp or len(padding) != nsp or any(2 * p > k for p, k in zip(padding, kernel)):
        raise TypeError(f"{name}: stride and padding (at most half the window) per pooled dim")


def _abstract_eval(x, *, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    _check("avg_pool", x, kernel, stride, padding)
    return ShapedArray(_out_shape(x.shape, kernel, stride, padding, ceil_mode), x.dtype, x.device)


def _as_2d(nsp, kernel, stride, padding):
    """torch pools 1-d as 2-d with a unit dim (avg_pool1d does so itself)."""
    if nsp == 1:
        return (1,) + tuple(kernel), (1,) + tuple(stride), (0,) + tuple(padding)
    return tuple(kernel), tuple(stride), tuple(padding)


def _kernel_view(v, nsp):
    """(prod(lead), 1, *spatial): one batch dim (possibly 0) and one channel for torch."""
    unit = (1,) if nsp == 1 else ()
    return v.reshape((math.prod(v.shape[:-nsp]), 1) + unit + tuple(v.shape[-nsp:]))


def _impl(x, *, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    nsp = len(kernel)
    k, s, p = _as_2d(nsp, kernel, stride, padding)
    pool = F.avg_pool3d if nsp == 3 else F.avg_pool2d
    out = pool(_kernel_view(x, nsp), k, s, p, ceil_mode, count_include_pad, divisor_override)
    return out.reshape(_out_shape(x.shape, kernel, stride, padding, ceil_mode))


def _transpose(ct, x, **params):
    if not is_undefined(x):
        raise TypeError("avg_pool is linear in its operand")
    if type(ct) is Zero:
        return [None]
    return [avg_pool_backward_p.bind(ct, input_shape=tuple(x.aval.shape), **params)]


def _batch(args, dims, **params):
    # leading dims are the kernel's channels: the batch dim goes first
    return avg_pool_p.bind(S.moveaxis(args[0], dims[0], 0), **params), 0


# ------------------------------------------------------------------------ the transpose


def _backward_abstract_eval(g, *, input_shape, kernel, stride, padding, ceil_mode, **params):
    x = ShapedArray(tuple(input_shape), g.dtype, g.device)
    _check("avg_pool_backward", x, kernel, stride, padding)
    if tuple(g.shape) != _out_shape(input_shape, kernel, stride, padding, ceil_mode):
        raise TypeError(f"avg_pool_backward: gradient {g.str_short()} is not pooled {input_shape}")
    return x


def _backward_impl(g, *, input_shape, kernel, stride, padding, ceil_mode, count_include_pad,
                   divisor_override):  # fmt: skip
    nsp = len(kernel)
    k, s, p = _as_2d(nsp, kernel, stride, padding)
    # the kernel reads only the input's shape (and layout: a contiguous one)
    unit = (1,) if nsp == 1 else ()
    like = g.new_empty((math.prod(input_shape[:-nsp]), 1) + unit + tuple(input_shape[-nsp:]))
    op = torch.ops.aten.avg_pool3d_backward if nsp == 3 else torch.ops.aten.avg_pool2d_backward
    out = op(_kernel_view(g, nsp), like, k, s, p, ceil_mode, count_include_pad, divisor_override)
    return out.reshape(input_shape)


def _backward_transpose(ct, g, *, input_shape, **params):
    if not is_undefined(g):
        raise TypeError("avg_pool_backward is linear in its operand")
    if type(ct) is Zero:
        return [None]
    return [avg_pool_p.bind(ct, **params)]


def _backward_batch(args, dims, *, input_shape, **params):
    g = S.moveaxis(args[0], dims[0], 0)
    shape = (S._shape(g)[0],) + tuple(input_shape)
    return avg_pool_backward_p.bind(g, input_shape=shape, **params), 0


def _flops(in_avals, out_avals, *, kernel, **params):
    """One add per window element of each pooled output (and one divide)."""
    return math.prod(out_avals[0].shape) * math.prod(kernel)


avg_pool_p = declare(
    "avg_pool",
    impl=_impl,
    abstract_eval=_abstract_eval,
    linear=True,
    transpose=_transpose,
    batch=_batch,
    flops=_flops,
)
avg_pool_backward_p = declare(
    "avg_pool_backward",
    impl=_backward_impl,
    abstract_eval=_backward_abstract_eval,
    linear=True,
    transpose=_backward_transpose,
    batch=_backward_batch,
    flops=lambda in_avals, out_avals, *, kernel, **p: (
        math.prod(in_avals[0].shape) * math.prod(kernel)
    ),
)
