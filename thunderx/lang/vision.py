"""F.interpolate in every mode torch has (nearest, nearest-exact, linear, bilinear, bicubic,
trilinear, area; antialias for bilinear and bicubic), decomposed onto gathers.

Every mode is separable: along each resized dimension, output position `o` is a weighted sum of
a few input positions, computed at trace time with ATen's own formulas and arithmetic
(primitives/vision_taps.py). The modes ATen has a kernel for bind the `upsample` composite
(primitives/composite_vision.py): torch's upsample kernel forward, its upsample_*_backward kernel
in reverse mode, the vmapped dim folded into N; its decomposition (a gather along each dim and a
weighted sum of the taps) is what area mode binds directly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.errors import unsupported
from thunderx.lang._base import dtype, ndim, register, shape
from thunderx.primitives import composite_vision as KV

_MODE_RANK = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


def upsample(x, mode: str, output_size, scales, align_corners: bool = False):
    """Resize the trailing len(output_size) dims of `x` (N, C, *spatial) as ATen does. `mode` is
    one of nearest, nearest-exact, linear, cubic, linear_aa, cubic_aa, area; `scales` holds the
    per-dim scale factors ATen receives (or None). Modes with an ATen kernel bind the `upsample`
    composite (torch's kernel forward, its backward kernel in reverse mode); area (adaptive
    average pooling) binds the decomposition's primitives."""
    dt = dtype(x)
    if not dt.is_floating_point:
        raise unsupported(f"interpolate on {dt} input", "convert the input to a float dtype")
    spatial = shape(x)[2:]
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
    if mode in ("linear_aa", "cubic_aa") and tuple(output_size) == tuple(spatial):
        return x  # ATen's antialias kernels copy the input then
    params = dict(
        kind=mode,
        output_size=tuple(int(s) for s in output_size),
        scales=None if scales is None else tuple(None if s is None else float(s) for s in scales),
        align_corners=bool(align_corners),
    )
    if (mode, len(spatial)) in KV.KERNELS:
        return KV.upsample_p.bind(x, **params)
    return KV.resample(x, **params)


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
