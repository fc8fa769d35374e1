"""F.interpolate in every mode torch has (nearest, nearest-exact, linear, bilinear, bicubic,
trilinear, area; antialias for bilinear and bicubic), decomposed onto gathers.

Every mode is separable: along each resized dimension, output position `o` is a weighted sum of a
few input positions. Those positions and weights depend only on the shapes, the scales and
align_corners, so they are computed here, at trace time, with ATen's own formulas and in ATen's
arithmetic (its `opmath` type: float32 for float32/half/bfloat16, float64 for float64; `floorf`
rounds to float32 first), from UpSample.h and UpSampleKernel.cpp:

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

The resampling itself is an `index_select` along the dimension and a weighted sum over the taps, so
jit, grad (the transpose of a gather is a scatter-add: torch's backward kernels compute the same
sums) and vmap all follow from the existing primitives.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F

from thunderx.errors import unsupported
from thunderx.lang._base import aval, dtype, ndim, register, shape

_MODE_RANK = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


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
def _taps(mode, n_in, n_out, align_corners, scale, dt, legacy_float_path):
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


def _resample_dim(x, dim: int, taps, compute_dtype):
    """out[.., o, ..] = sum_k weight[o, k] * x[.., index[o, k], ..] along `dim` (a gather and a
    weighted sum); masked taps contribute exactly 0, as taps ATen never reads."""
    index, weight, mask, counts = taps
    dev = aval(x).device
    n_out, k = len(index), len(index[0])
    flat = torch.index_select(
        x, dim, torch.tensor(index, dtype=torch.int64, device=dev).reshape(-1)
    )
    if k == 1 and weight is None:
        return flat
    rest = [1] * (ndim(x) - dim - 1)
    taken = flat.reshape(list(shape(x)[:dim]) + [n_out, k] + list(shape(x)[dim + 1 :]))
    if mask is not None and not all(all(row) for row in mask):
        m = torch.tensor(mask, dtype=torch.bool, device=dev).reshape([n_out, k] + rest)
        taken = torch.where(m, taken, torch.zeros((), dtype=compute_dtype, device=dev))
    if weight is not None:
        w = torch.tensor(np.asarray(weight, dtype=np.float64), dtype=compute_dtype, device=dev)
        taken = taken * w.reshape([n_out, k] + rest)
    if k <= 4:  # ATen's kernels add the few linear/cubic taps left to right
        out = taken.select(dim + 1, 0)
        for j in range(1, k):
            out = out + taken.select(dim + 1, j)
    else:
        out = taken.sum(dim + 1)
    if counts is not None:
        c = torch.tensor(counts, dtype=compute_dtype, device=dev).reshape([n_out] + rest)
        out = out / c
    return out


def upsample(x, mode: str, output_size, scales, align_corners: bool = False):
    """Resize the trailing len(output_size) dims of `x` (N, C, *spatial) with ATen's kernel
    formulas. `mode` is one of nearest, nearest-exact, linear, cubic, linear_aa, cubic_aa, area;
    `scales` holds the per-dim scale factor ATen receives (or None)."""
    dt = dtype(x)
    if not dt.is_floating_point:
        raise unsupported(f"interpolate on {dt} input", "convert the input to a float dtype")
    spatial = shape(x)[2:]
    nd = len(spatial)
    if mode == "area":  # adaptive average pooling allows an empty output
        if any(s <= 0 for s in spatial) or any(o < 0 for o in output_size):
            raise RuntimeError(
                f"adaptive_avg_pool: bad input {tuple(spatial)} or output size {tuple(output_size)}"
            )
    elif any(s <= 0 for s in spatial) or any(o <= 0 for o in output_size):
        raise RuntimeError(
            f"Input and output sizes should be greater than 0, but got input {tuple(spatial)} "
            f"and output {tuple(output_size)}"
        )
    if 0 in shape(x)[:2] or 0 in output_size:
        return x.new_zeros(tuple(shape(x)[:2]) + tuple(output_size))
    compute = dt if dt in (torch.float32, torch.float64) else torch.float32
    y = x if compute == dt else x.to(compute)
    legacy = nd == 2 and mode in ("nearest", "nearest-exact") and sum(output_size) <= 128
    if mode in ("linear_aa", "cubic_aa") and tuple(output_size) == tuple(spatial):
        return x
    # Innermost dim first, as ATen's kernels sum (and its separable antialias pass runs).
    for i in reversed(range(nd)):
        n_in, n_out = spatial[i], output_size[i]
        if mode in ("linear_aa", "cubic_aa") and n_in == n_out:
            continue
        scale = None if scales is None else scales[i]
        taps = _taps(mode, n_in, n_out, bool(align_corners), scale, compute, legacy)
        y = _resample_dim(y, 2 + i, taps, compute)
    return y if compute == dt else y.to(dt)


def _output_size(x, nd: int, output_size, scale_factors):
    """ATen's compute_output_size for the *.vec overloads."""
    if output_size is not None:
        if scale_factors is not None:
            raise RuntimeError("Must specify exactly one of output_size and scale_factors")
        output_size = [int(s) for s in output_size]
        if len(output_size) != nd:
            raise RuntimeError(
                f"It is expected output_size equals to {nd}, but got size {len(output_size)}"
            )
        return output_size, None
    if scale_factors is None:
        raise RuntimeError("Must specify exactly one of output_size and scale_factors")
    if len(scale_factors) != nd:
        raise RuntimeError(
            f"It is expected scale_factors equals to {nd}, but got size {len(scale_factors)}"
        )
    sizes = [int(s * f) for s, f in zip(shape(x)[2:], scale_factors)]
    return sizes, [float(f) for f in scale_factors]


_ALIGN_MODES = ("linear", "bilinear", "bicubic", "trilinear")


@register(F.interpolate)
def _interpolate(
    input,
    size=None,
    scale_factor=None,
    mode="nearest",
    align_corners=None,
    recompute_scale_factor=None,
    antialias=False,
):
    """torch.nn.functional.interpolate's argument handling, then `upsample`."""
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError(
                "align_corners option can only be set with the interpolating modes: "
                "linear | bilinear | bicubic | trilinear"
            )
    elif align_corners is None:
        align_corners = False
    nd = ndim(input) - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (list, tuple, torch.Size)):
            if len(size) != nd:
                raise ValueError(
                    "Input and output must have the same number of spatial dimensions, but got "
                    f"input with spatial dimensions of {list(shape(input)[2:])} and output size "
                    f"of {size}."
                )
            output_size = [int(s) for s in size]
        else:
            output_size = [int(size)] * nd
        scale_factors = None
    elif scale_factor is not None:
        output_size = None
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != nd:
                raise ValueError(
                    "Input and scale_factor must have the same number of spatial dimensions, but "
                    f"got input with spatial dimensions of {list(shape(input)[2:])} and "
                    f"scale_factor of shape {scale_factor}."
                )
            scale_factors = [float(f) for f in scale_factor]
        else:
            scale_factors = [float(scale_factor)] * nd
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if mode == "area" and output_size is None:
        recompute_scale_factor = True
    if recompute_scale_factor:
        output_size = [math.floor(s * f) for s, f in zip(shape(input)[2:], scale_factors)]
        scale_factors = None
    if antialias and not (mode in ("bilinear", "bicubic") and ndim(input) == 4):
        raise ValueError(
            "Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and "
            "requires a 4-D tensor as input"
        )
    if mode == "lanczos":
        raise unsupported("F.interpolate(mode='lanczos')")
    if mode in _MODE_RANK and _MODE_RANK[mode] != nd:
        want = {1: "3D", 2: "4D", 3: "5D"}[_MODE_RANK[mode]]
        raise NotImplementedError(f"Got {nd + 2}D input, but {mode} mode needs {want} input")
    if nd not in (1, 2, 3) or mode not in ("nearest", "nearest-exact", "area") + _ALIGN_MODES:
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {nd + 2}D) for the "
            f"modes: nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact "
            f"(got {mode})"
        )
    if output_size is None:
        output_size, scales = _output_size(input, nd, None, scale_factors)
    else:
        scales = None
    kind = {"bilinear": "linear", "trilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if antialias:
        kind += "_aa"
    return upsample(input, kind, output_size, scales, bool(align_corners))


def _aten_args(x, args, kwargs, nd: int, with_align: bool):
    """(output_size, scales, align_corners) from torch._C._nn.upsample_*'s two overloads:
    `(input, output_size, [align_corners,] scale_factors)` (the size may come from the factors)
    and `(input, output_size, [align_corners,] scales_d=None, scales_h=None, scales_w=None)`."""
    names = ["output_size"] + (["align_corners"] if with_align else [])
    vals = dict(zip(names, args))
    vals.update({k: v for k, v in kwargs.items() if k in names})
    size, align = vals.get("output_size"), bool(vals.get("align_corners", False))
    rest = list(args[len(names) :])
    if "scale_factors" in kwargs or (
        len(rest) == 1 and (isinstance(rest[0], (list, tuple)) or size is None)
    ):
        factors = kwargs.get("scale_factors", rest[0] if rest else None)
        return (*_output_size(x, nd, size, factors), align)
    keys = ("scales",) if nd == 1 else ("scales_d", "scales_h", "scales_w")[3 - nd :]
    per_dim = [kwargs.get(k) for k in keys]
    per_dim[: len(rest)] = rest
    if size is None:
        raise RuntimeError("Must specify exactly one of output_size and scale_factors")
    scales = None if all(s is None for s in per_dim) else per_dim
    return [int(s) for s in size], scales, align


def _aten_upsample(kind: str, nd: int, with_align: bool):
    def impl(input, *args, **kwargs):
        if ndim(input) != nd + 2:
            raise RuntimeError(
                f"Expected {nd + 2}D input (N, C, spatial...), got a tensor of rank {ndim(input)}"
            )
        size, scales, align = _aten_args(input, args, kwargs, nd, with_align)
        return upsample(input, kind, size, scales, align)

    return impl


_ATEN_UPSAMPLES = [
    ("upsample_nearest1d", "nearest", 1, False),
    ("upsample_nearest2d", "nearest", 2, False),
    ("upsample_nearest3d", "nearest", 3, False),
    ("_upsample_nearest_exact1d", "nearest-exact", 1, False),
    ("_upsample_nearest_exact2d", "nearest-exact", 2, False),
    ("_upsample_nearest_exact3d", "nearest-exact", 3, False),
    ("upsample_linear1d", "linear", 1, True),
    ("upsample_bilinear2d", "linear", 2, True),
    ("upsample_trilinear3d", "linear", 3, True),
    ("upsample_bicubic2d", "cubic", 2, True),
    ("_upsample_bilinear2d_aa", "linear_aa", 2, True),
    ("_upsample_bicubic2d_aa", "cubic_aa", 2, True),
]

for _name, _kind, _nd, _align in _ATEN_UPSAMPLES:
    _impl = _aten_upsample(_kind, _nd, _align)
    _packet = getattr(torch.ops.aten, _name)
    register(
        getattr(torch._C._nn, _name), _packet, *[getattr(_packet, o) for o in _packet.overloads()]
    )(_impl)
