"""ATen's index and weight formulas for resampling one dimension (F.interpolate's modes),
evaluated at trace time in ATen's arithmetic: its `opmath` type (float32 for float32, half and
bfloat16; float64 for float64), with `floorf` rounding to float32 first. From UpSample.h and
UpSampleKernel.cpp:

- `area_pixel_compute_scale`: `(in - 1) / (out - 1)` with align_corners (0 when out == 1), else
  `1 / scale_factor` when one is given and > 0, else `in / out`;
- `area_pixel_compute_source_index`: `scale * o` with align_corners, else `scale * (o + 0.5) - 0.5`,
  clamped at 0 except for cubic;
- nearest: `min(floorf(scale * o), in - 1)`; nearest-exact: `min(floorf(src + 0.5), in - 1)`;
- linear: `i0 = min(floorf(src), in - 1)`, `i1 = i0 + (i0 < in - 1)`, `l1 = clamp(src - i0, 0, 1)`;
- cubic: four taps `clamp(i0 - 1 + j, 0, in - 1)` with Keys' coefficients, A = -0.75;
- antialias: PIL's filters (triangle; Keys with A = -0.5) stretched by the scale when downsampling,
  normalized over the taps inside the input;
- area: adaptive average pooling, windows `[floor(o * in / out), ceil((o + 1) * in / out))`.

`taps(...)` gives, per output position, the input positions, their weights, which of them are
real (a mask: ATen never reads the padding taps) and, for area, the window sizes.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch


def _opmath(dt: torch.dtype):
    return np.float64 if dt == torch.float64 else np.float32


def _floorf(v) -> int:
    return math.floor(np.float32(v))


def _scales_value(scale, n_in: int, n_out: int, T):
    """ATen's compute_scales_value."""
    if scale is not None and scale > 0:
        return T(1.0 / scale)
    return T(n_in) / T(n_out)


def _pixel_scale(n_in: int, n_out: int, align_corners: bool, scale, T):
    """ATen's area_pixel_compute_scale."""
    if align_corners:
        return T(n_in - 1) / T(n_out - 1) if n_out > 1 else T(0)
    return _scales_value(scale, n_in, n_out, T)


def _source_index(scale, o: int, align_corners: bool, cubic: bool, T):
    """ATen's area_pixel_compute_source_index."""
    if align_corners:
        return scale * T(o)
    src = scale * (T(o) + T(0.5)) - T(0.5)
    return T(0) if (not cubic and src < 0) else src


def _guard(src, n_in: int, T):
    """ATen's guard_index_and_lambda: the lower tap and the fraction past it."""
    i0 = min(_floorf(src), n_in - 1)
    return i0, min(max(src - T(i0), T(0)), T(1))


def _cubic_coefficients(t, T, a: float = -0.75):
    A = T(a)

    def near(x):  # cubic_convolution1, |x| <= 1
        return ((A + T(2)) * x - (A + T(3))) * x * x + T(1)

    def far(x):  # cubic_convolution2, 1 < |x| < 2
        return ((A * x - T(5) * A) * x + T(8) * A) * x - T(4) * A

    return [far(t + T(1)), near(t), near(T(1) - t), far(T(1) - t + T(1))]


def _nearest_taps(n_in, n_out, scale, exact, T, legacy_float_path):
    if legacy_float_path:
        # 2-d outputs with oh + ow <= 128 take ATen's vectorized kernel, which indexes with
        # nearest_idx / nearest_exact_idx in float32.
        s = _scales_value(scale, n_in, n_out, np.float32)
        if exact:
            return [
                min(_floorf(np.float64(o + 0.5) * np.float64(s)), n_in - 1) for o in range(n_out)
            ]
        if n_out == n_in:
            return list(range(n_out))
        if n_out == 2 * n_in:
            return [o >> 1 for o in range(n_out)]
        return [min(_floorf(np.float32(o) * s), n_in - 1) for o in range(n_out)]
    s = _pixel_scale(n_in, n_out, False, scale, T)
    if exact:
        src = [_source_index(s, o, False, False, T) for o in range(n_out)]
        return [min(_floorf(v + T(0.5)), n_in - 1) for v in src]
    return [min(_floorf(_source_index(s, o, True, False, T)), n_in - 1) for o in range(n_out)]


def _linear_taps(n_in, n_out, align_corners, scale, T):
    if n_out == n_in:
        return [[o, o] for o in range(n_out)], [[T(1), T(0)] for _ in range(n_out)]
    s = _pixel_scale(n_in, n_out, align_corners, scale, T)
    index, weight = [], []
    for o in range(n_out):
        i0, l1 = _guard(_source_index(s, o, align_corners, False, T), n_in, T)
        index.append([i0, i0 + (1 if i0 < n_in - 1 else 0)])
        weight.append([T(1) - l1, l1])
    return index, weight


def _cubic_taps(n_in, n_out, align_corners, scale, T):
    s = _pixel_scale(n_in, n_out, align_corners, scale, T)
    index, weight = [], []
    for o in range(n_out):
        i0, t = _guard(_source_index(s, o, align_corners, True, T), n_in, T)
        index.append([min(max(i0 - 1 + j, 0), n_in - 1) for j in range(4)])
        weight.append(_cubic_coefficients(t, T))
    return index, weight


def _triangle(x, T):
    x = abs(x)
    return T(1) - x if x < 1 else T(0)


def _keys_half(x, T):
    x = abs(x)
    if x < 1:
        return _cubic_coefficients(x, T, -0.5)[1]
    if x < 2:
        return _cubic_coefficients(x - T(1), T, -0.5)[0]
    return T(0)


def _antialias_taps(n_in, n_out, align_corners, scale, cubic, T):
    """ATen's _compute_indices_min_size_weights_aa; taps past the window get mask False."""
    s = _pixel_scale(n_in, n_out, align_corners, scale, T)
    interp_size = 4 if cubic else 2
    support = T(interp_size * 0.5) * s if s >= 1 else T(interp_size * 0.5)
    width = int(math.ceil(support)) * 2 + 1
    invscale = T(1.0) / s if s >= 1 else T(1)
    flt = _keys_half if cubic else _triangle
    index, weight, mask = [], [], []
    for o in range(n_out):
        center = T(np.float64(s) * (o + 0.5))
        xmin = max(int(np.float64(center - support) + 0.5), 0)
        xsize = min(int(np.float64(center + support) + 0.5), n_in) - xmin
        xsize = min(max(xsize, 0), width)
        w = [
            flt(T((np.float64(T(j + xmin) - center) + 0.5) * np.float64(invscale)), T)
            for j in range(xsize)
        ]
        total = T(0)
        for v in w:
            total = total + v
        if total != 0:
            w = [v / total for v in w]
        index.append([min(xmin + j, n_in - 1) for j in range(width)])
        weight.append(w + [T(0)] * (width - xsize))
        mask.append([j < xsize for j in range(width)])
    return index, weight, mask


def _area_taps(n_in, n_out):
    """adaptive_avg_pool's windows: start = floor(o * in / out), end = ceil((o + 1) * in / out)."""
    starts = [(o * n_in) // n_out for o in range(n_out)]
    ends = [-((-(o + 1) * n_in) // n_out) for o in range(n_out)]
    width = max(e - s for s, e in zip(starts, ends))
    index = [[min(s + j, n_in - 1) for j in range(width)] for s in starts]
    mask = [[s + j < e for j in range(width)] for s, e in zip(starts, ends)]
    counts = [e - s for s, e in zip(starts, ends)]
    return index, mask, counts


@functools.lru_cache(maxsize=512)
def taps(mode, n_in, n_out, align_corners, scale, dt, legacy_float_path):
    """(index, weight, mask, counts) for one resized dimension, as Python lists."""
    T = _opmath(dt)
    if mode in ("nearest", "nearest-exact"):
        idx = _nearest_taps(n_in, n_out, scale, mode == "nearest-exact", T, legacy_float_path)
        return [[i] for i in idx], None, None, None
    if mode == "linear":
        return (*_linear_taps(n_in, n_out, align_corners, scale, T), None, None)
    if mode == "cubic":
        return (*_cubic_taps(n_in, n_out, align_corners, scale, T), None, None)
    if mode in ("linear_aa", "cubic_aa"):
        return (*_antialias_taps(n_in, n_out, align_corners, scale, mode == "cubic_aa", T), None)
    index, mask, counts = _area_taps(n_in, n_out)
    return index, None, mask, counts
