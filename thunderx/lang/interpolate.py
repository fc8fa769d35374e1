"""Resampling: F.interpolate (nearest, nearest-exact, linear, bilinear, trilinear, bicubic, area)
and the adaptive average pools, as gathers along one spatial dim at a time with torch's source
indices and weights (ATen's UpSample.h: `area_pixel_compute_scale`, the cubic convolution with
A = -0.75, indices clamped at the borders). Every output is a weighted sum of a few gathered
inputs, so all transforms apply, and weights never multiply elements they do not select."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.errors import unsupported
from thunderx.lang._base import aval, dtype, ndim, register, shape
from thunderx.primitives import binary as B
from thunderx.primitives import indexing as I
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U

_CUBIC_A = -0.75


def _scale(n_in: int, n_out: int, align_corners: bool, scale: float | None) -> float:
    """ATen's area_pixel_compute_scale."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else n_in / n_out


def _source(s: float, i: int, align_corners: bool, cubic: bool) -> float:
    """ATen's area_pixel_compute_source_index (computed in float64 here, torch in acc type)."""
    if align_corners:
        return s * i
    src = s * (i + 0.5) - 0.5
    return src if cubic or src >= 0 else 0.0


def _weighted(x, d, taps):
    """sum over taps of take(x, idx, d) * w, w broadcast along d (each tap a list per output)."""
    a = aval(x)
    out = None
    for idx, w in taps:
        g = I.take(x, torch.tensor(idx, dtype=torch.int64, device=a.device), d)
        if w is not None:
            wt = torch.tensor(w, dtype=a.dtype, device=a.device)
            g = B.mul(g, S.broadcast_in_dim(wt, shape(g), (d,)))
        out = g if out is None else B.add(out, g)
    return out


def _nearest(x, d, n_out, scale, exact):
    n_in = shape(x)[d]
    s = 1.0 / scale if scale is not None and scale > 0 else n_in / n_out
    off = 0.5 if exact else 0.0
    idx = [min(int(math.floor((i + off) * s)), n_in - 1) for i in range(n_out)]
    return I.take(x, torch.tensor(idx, dtype=torch.int64, device=aval(x).device), d)


def _linear(x, d, n_out, align_corners, scale):
    n_in = shape(x)[d]
    s = _scale(n_in, n_out, align_corners, scale)
    i0, i1, w0, w1 = [], [], [], []
    for i in range(n_out):
        src = _source(s, i, align_corners, False)
        lo = min(int(math.floor(src)), n_in - 1)
        hi = lo + (1 if lo < n_in - 1 else 0)
        lam = src - lo
        i0.append(lo)
        i1.append(hi)
        w0.append(1.0 - lam)
        w1.append(lam)
    return _weighted(x, d, [(i0, w0), (i1, w1)])


def _cubic_weights(t: float) -> list[float]:
    a = _CUBIC_A

    def near(v):  # |v| <= 1
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v):  # 1 < |v| < 2
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


def _cubic(x, d, n_out, align_corners, scale):
    n_in = shape(x)[d]
    s = _scale(n_in, n_out, align_corners, scale)
    taps = [([], []) for _ in range(4)]
    for i in range(n_out):
        src = _source(s, i, align_corners, True)
        base = int(math.floor(src))
        for k, w in enumerate(_cubic_weights(src - base)):
            taps[k][0].append(min(max(base - 1 + k, 0), n_in - 1))
            taps[k][1].append(w)
    return _weighted(x, d, taps)


def _windows(n_in: int, n_out: int):
    """Adaptive pooling windows [floor(i * in / out), ceil((i + 1) * in / out))."""
    return [((i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)) for i in range(n_out)]


def _area(x, d, n_out):
    """Adaptive average over dim d: each output the mean of its window (a select keeps the
    padding taps of shorter windows out of the sum); equal windows are a reshape and a sum."""
    n_in = shape(x)[d]
    if n_in % n_out == 0:
        shp = shape(x)
        r = S.reshape(x, shp[:d] + (n_out, n_in // n_out) + shp[d + 1 :])
        return B.div(R.reduce_sum(r, (d + 1,)), float(n_in // n_out))
    wins = _windows(n_in, n_out)
    k = max(hi - lo for lo, hi in wins)
    a = aval(x)
    out = None
    for j in range(k):
        idx = [min(lo + j, hi - 1) for lo, hi in wins]
        g = I.take(x, torch.tensor(idx, dtype=torch.int64, device=a.device), d)
        valid = [lo + j < hi for lo, hi in wins]
        if not all(valid):
            mask = torch.tensor(valid, device=a.device)
            g = U.select(S.broadcast_in_dim(mask, shape(g), (d,)), g, B.mul(g, 0.0))
        out = g if out is None else B.add(out, g)
    inv = torch.tensor([1.0 / (hi - lo) for lo, hi in wins], dtype=a.dtype, device=a.device)
    return B.mul(out, S.broadcast_in_dim(inv, shape(out), (d,)))


def _out_sizes(x, size, scale_factor, recompute):
    k = ndim(x) - 2
    spatial = shape(x)[2:]
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        sizes = [size] * k if isinstance(size, int) else list(size)
        if len(sizes) != k:
            raise ValueError(
                f"Input and output must have the same number of spatial dimensions, but got "
                f"input with spatial dimensions of {list(spatial)} and output size of {sizes}."
            )
        return [int(s) for s in sizes], [None] * k
    if scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    scales = [scale_factor] * k if isinstance(scale_factor, (int, float)) else list(scale_factor)
    if len(scales) != k:
        raise ValueError(
            f"Input and scale_factor must have the same number of spatial dimensions, but got "
            f"input with spatial dimensions of {list(spatial)} and scale_factor of {scales}."
        )
    sizes = [int(math.floor(float(n) * float(s))) for n, s in zip(spatial, scales)]
    return sizes, ([None] * k if recompute else [float(s) for s in scales])


_LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3, "bicubic": 2}


@register(F.interpolate)
def interpolate(
    x,
    size=None,
    scale_factor=None,
    mode="nearest",
    align_corners=None,
    recompute_scale_factor=None,
    antialias=False,
):
    k = ndim(x) - 2
    if k < 1 or k > 3:
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {ndim(x)}D) for the "
            f"modes: nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact "
            f"(got {mode})"
        )
    if mode in ("nearest", "area", "nearest-exact") and align_corners is not None:
        raise ValueError(
            "align_corners option can only be set with the interpolating modes: "
            "linear | bilinear | bicubic | trilinear"
        )
    if mode in _LINEAR_MODES and _LINEAR_MODES[mode] != k:
        raise NotImplementedError(
            f"Got {ndim(x)}D input, but {mode} mode needs {2 + _LINEAR_MODES[mode]}D"
        )
    if antialias:
        raise unsupported("F.interpolate(antialias=True)", "use antialias=False")
    if not dtype(x).is_floating_point and mode != "nearest" and mode != "nearest-exact":
        raise RuntimeError(f"interpolate: {mode} mode needs a floating-point input")
    sizes, scales = _out_sizes(x, size, scale_factor, recompute_scale_factor)
    if mode == "area":
        scales = [None] * k
    align = bool(align_corners)
    out = x
    # innermost dim first: torch's kernels nest the last dim's interpolation innermost
    for j in reversed(range(k)):
        d = 2 + j
        if mode in ("nearest", "nearest-exact"):
            out = _nearest(out, d, sizes[j], scales[j], mode == "nearest-exact")
        elif mode == "area":
            out = _area(out, d, sizes[j])
        elif mode == "bicubic":
            out = _cubic(out, d, sizes[j], align, scales[j])
        elif mode in _LINEAR_MODES:
            out = _linear(out, d, sizes[j], align, scales[j])
        else:
            raise NotImplementedError(f"interpolate: unknown mode {mode!r}")
    return out


@register(F.upsample)
def _upsample(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return interpolate(x, size, scale_factor, mode, align_corners)


@register(F.upsample_nearest)
def _upsample_nearest(x, size=None, scale_factor=None):
    return interpolate(x, size, scale_factor, "nearest")


@register(F.upsample_bilinear)
def _upsample_bilinear(x, size=None, scale_factor=None):
    return interpolate(x, size, scale_factor, "bilinear", align_corners=True)


def _adaptive_avg(k):
    def impl(x, output_size):
        sizes = [output_size] * k if isinstance(output_size, int) else list(output_size)
        if len(sizes) != k:
            raise ValueError(f"adaptive_avg_pool{k}d: output_size must have {k} elements")
        out = x
        for j in reversed(range(k)):
            d = ndim(x) - k + j
            n = sizes[j] if sizes[j] is not None else shape(x)[d]
            out = _area(out, d, n)
        return out

    impl.__name__ = f"adaptive_avg_pool{k}d"
    return impl


register(F.adaptive_avg_pool1d, torch.adaptive_avg_pool1d)(_adaptive_avg(1))
register(F.adaptive_avg_pool2d)(_adaptive_avg(2))
register(F.adaptive_avg_pool3d)(_adaptive_avg(3))
