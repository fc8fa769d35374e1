"""Convolutions and pooling: F.conv1d/2d/3d on the conv primitive; max/avg pooling as a max/sum
over strided slices of the (padded) input, so their derivatives need no new primitive."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.errors import unsupported  # noqa: F401
from thunderx.lang._base import dtype, ndim, promote, register, shape
from thunderx.primitives import binary as B
from thunderx.primitives import conv as CV
from thunderx.primitives import pooling as PL
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S


def _tuple(v, n):
    if isinstance(v, (tuple, list)):
        return tuple(v) * n if len(v) == 1 else tuple(v)
    return (v,) * n


def _conv(nsp, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    unbatched = ndim(x) == nsp + 1
    if unbatched:
        x = S.expand_dims(x, (0,))
    (x, weight), _ = promote(x, weight) if shape(x) == shape(weight) else ((x, weight), None)
    stride, dilation = _tuple(stride, nsp), _tuple(dilation, nsp)
    ksize = shape(weight)[2:]
    if padding == "valid":
        pads = [(0, 0)] * nsp
    elif padding == "same":
        pads = []
        for k, d in zip(ksize, dilation):
            total = d * (k - 1)
            pads.append((total // 2, total - total // 2))
    else:
        pads = [(p, p) for p in _tuple(padding, nsp)]
    if shape(x)[1] == 0:
        # torch returns (N, 0, *out) for an input with no channels, whatever the kernel's output
        # channels and the bias: the same empty result, with no derivative to carry
        from thunderx.lang._base import aval
        from thunderx.primitives import creation as C

        full = CV._out_shape(shape(x), shape(weight), stride, pads, (1,) * nsp, dilation)
        out = C.full((full[0], 0) + full[2:], 0.0, dtype(x), aval(x).device)
        return S.squeeze(out, (0,)) if unbatched else out
    out = CV.conv(x, weight, stride, pads, None, dilation, groups)
    if bias is not None:
        out = B.add(out, S.broadcast_in_dim(bias, shape(out), (1,)))
    return S.squeeze(out, (0,)) if unbatched else out


register(F.conv1d, torch.conv1d)(lambda *a, **k: _conv(1, *a, **k))
register(F.conv2d, torch.conv2d)(lambda *a, **k: _conv(2, *a, **k))
register(F.conv3d, torch.conv3d)(lambda *a, **k: _conv(3, *a, **k))


def _windows(x, nsp, kernel, stride, dilation):
    """All k1*k2*... strided views of x's last nsp dims, one per window offset."""
    sp = shape(x)[-nsp:]
    outs = [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(sp, kernel, stride, dilation)]
    lead = ndim(x) - nsp
    views = []
    for offset in _product([range(k) for k in kernel]):
        starts = [0] * lead + [o * d for o, d in zip(offset, dilation)]
        limits = list(shape(x)[:lead]) + [
            o * d + (m - 1) * s + 1 for o, d, m, s in zip(offset, dilation, outs, stride)
        ]
        views.append(S.slice_(x, starts, limits, [1] * lead + list(stride)))
    return views


def _product(ranges):
    out = [()]
    for r in ranges:
        out = [p + (i,) for p in out for i in r]
    return out


def _pool_pads(x, nsp, kernel, stride, padding, dilation, ceil_mode):
    sp = shape(x)[-nsp:]
    pads = []
    for n, k, s, p, d in zip(sp, kernel, stride, padding, dilation):
        hi = p
        if ceil_mode:
            out = math.ceil((n + 2 * p - d * (k - 1) - 1) / s) + 1
            if (out - 1) * s >= n + p:
                out -= 1
            hi = max(p, (out - 1) * s + d * (k - 1) + 1 - n - p)
        pads.append((p, hi))
    return pads


def _max_pool(
    nsp, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    kernel = _tuple(kernel_size, nsp)
    stride = _tuple(stride if stride is not None and len(_tuple(stride, 1)) else kernel_size, nsp)
    padding, dilation = _tuple(padding, nsp), _tuple(dilation, nsp)
    if (
        dtype(x).is_floating_point
        and ndim(x) > nsp
        and all(2 * p <= k for p, k in zip(padding, kernel))
    ):
        # torch's pooling kernel, and derivatives that route to its index (first on ties)
        return PL.max_pool(x, kernel, stride, padding, dilation, ceil_mode, return_indices)
    pads = _pool_pads(x, nsp, kernel, stride, padding, dilation, ceil_mode)
    lead = ndim(x) - nsp
    if not return_indices and _tiles(kernel, stride, dilation, pads):
        return _tiled(x, nsp, kernel, R.reduce_max)
    xp = S.pad(x, -math.inf, [(0, 0, 0)] * lead + [(lo, hi, 0) for lo, hi in pads])
    views = _windows(xp, nsp, kernel, stride, dilation)
    out = views[0]
    for v in views[1:]:
        out = B.maximum(out, v)
    if not return_indices:
        return out
    return out, _max_pool_indices(x, views, nsp, kernel, stride, dilation, pads)


def _tiles(kernel, stride, dilation, pads) -> bool:
    """Non-overlapping windows without padding: pooling is a reshape and one reduction."""
    return (
        tuple(kernel) == tuple(stride)
        and all(d == 1 for d in dilation)
        and all(lo == 0 and hi == 0 for lo, hi in pads)
    )


def _tiled(x, nsp, kernel, reduce):
    lead = ndim(x) - nsp
    sp = shape(x)[lead:]
    outs = [n // k for n, k in zip(sp, kernel)]
    if any(o * k != n for o, k, n in zip(outs, kernel, sp)):  # drop the ragged edge
        x = S.slice_(
            x, (0,) * ndim(x), shape(x)[:lead] + tuple(o * k for o, k in zip(outs, kernel))
        )
    split = shape(x)[:lead]
    for o, k in zip(outs, kernel):
        split += (o, k)
    r = S.reshape(x, split)
    return reduce(r, tuple(lead + 2 * i + 1 for i in range(nsp)))


def _max_pool_indices(x, views, nsp, kernel, stride, dilation, pads):
    """Flat index (over the spatial dims of x) of each window's first maximum, as torch gives."""
    from thunderx.primitives import creation as C
    from thunderx.primitives import unary as U

    stacked = S.concatenate([S.expand_dims(v, (0,)) for v in views], 0)
    which = R.argmax(stacked, 0)  # which window offset holds the max (first on ties)
    out_shape = shape(views[0])
    sp = shape(x)[-nsp:]
    lead = len(out_shape) - nsp
    flat = C.full(out_shape, 0, torch.int64)
    rem = which
    for i in reversed(range(nsp)):
        k = kernel[i]
        off = B.rem_p.bind(rem, k) if i > 0 else rem
        rem = B.div(rem, k) if i > 0 else rem
        pos = B.add(
            B.mul(C.iota(torch.int64, out_shape, lead + i), stride[i]),
            B.sub(B.mul(off, dilation[i]), pads[i][0]),
        )
        mult = math.prod(sp[i + 1 :])
        flat = B.add(flat, B.mul(pos, mult))
    return U.convert(flat, torch.int64)


def _avg_pool(
    nsp,
    x,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    kernel = _tuple(kernel_size, nsp)
    stride = _tuple(stride if stride is not None and len(_tuple(stride, 1)) else kernel_size, nsp)
    padding = _tuple(padding, nsp)
    if (
        dtype(x).is_floating_point
        and ndim(x) > nsp
        and all(2 * p <= k for p, k in zip(padding, kernel))
        and divisor_override != 0
    ):
        # torch's pooling kernel, and its backward kernel as the transpose
        from thunderx.primitives.avg_pool import avg_pool

        return avg_pool(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    pads = _pool_pads(x, nsp, kernel, stride, padding, (1,) * nsp, ceil_mode)
    lead = ndim(x) - nsp
    if _tiles(kernel, stride, (1,) * nsp, pads):
        total = _tiled(x, nsp, kernel, R.reduce_sum)
        return B.div(total, float(divisor_override or math.prod(kernel)))
    xp = S.pad(x, 0.0, [(0, 0, 0)] * lead + [(lo, hi, 0) for lo, hi in pads])
    views = _windows(xp, nsp, kernel, stride, (1,) * nsp)
    total = views[0]
    for v in views[1:]:
        total = B.add(total, v)
    if divisor_override:
        return B.div(total, float(divisor_override))
    # The divisor counts each window's positions inside the input (plus the declared padding
    # with count_include_pad); windows added by ceil_mode are clipped. One factor per dim.
    divisor = None
    for i in range(nsp):
        n, p = shape(x)[lead + i], padding[i]
        lo_bound, hi_bound = (-p, n + p) if count_include_pad else (0, n)
        counts = []
        for o in range(shape(total)[lead + i]):
            start = o * stride[i] - pads[i][0]
            counts.append(max(0, min(start + kernel[i], hi_bound) - max(start, lo_bound)))
        vec = torch.tensor(counts, dtype=dtype(x))
        factor = S.broadcast_in_dim(vec, shape(total), (lead + i,))
        divisor = factor if divisor is None else B.mul(divisor, factor)
    return B.div(total, divisor)


register(F.max_pool1d, torch.max_pool1d)(lambda x, *a, **k: _max_pool(1, x, *a, **k))
register(F.max_pool2d, torch.max_pool2d)(lambda x, *a, **k: _max_pool(2, x, *a, **k))
register(F.max_pool1d_with_indices)(
    lambda x, *a, **k: _max_pool(1, x, *a, **{**k, "return_indices": True})
)
register(F.max_pool2d_with_indices)(
    lambda x, *a, **k: _max_pool(2, x, *a, **{**k, "return_indices": True})
)
register(F.max_pool3d, torch.max_pool3d)(lambda x, *a, **k: _max_pool(3, x, *a, **k))
register(F.avg_pool1d, torch.avg_pool1d)(lambda x, *a, **k: _avg_pool(1, x, *a, **k))
register(F.avg_pool2d)(lambda x, *a, **k: _avg_pool(2, x, *a, **k))
register(F.avg_pool3d)(lambda x, *a, **k: _avg_pool(3, x, *a, **k))
