"""Resampling (F.interpolate's kernels) as a composite operation: `upsample` runs torch's
upsample_* kernel, `upsample_backward` its upsample_*_backward kernel; each is linear, and each is
the other's transpose, so reverse mode calls exactly torch's backward kernel. Their decomposition
gathers the taps of primitives/vision_taps.py along each resized dim and sums them with their
weights (the backward one scatter-adds them), so the fuser and the rule checks see primitives.

Area mode (adaptive average pooling) has no upsample kernel: `resample` gives it (and any mode)
as the decomposition alone."""

from __future__ import annotations

import torch

from thunderx.ad_util import is_undefined
from thunderx.avals import ShapedArray, is_float
from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import indexing as I
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives.composite import declare_composite
from thunderx.primitives.vision_taps import taps

# (kind, spatial rank) -> ATen's kernel; its backward is the same name + "_backward"
KERNELS = {
    ("nearest", 1): "upsample_nearest1d",
    ("nearest", 2): "upsample_nearest2d",
    ("nearest", 3): "upsample_nearest3d",
    ("nearest-exact", 1): "_upsample_nearest_exact1d",
    ("nearest-exact", 2): "_upsample_nearest_exact2d",
    ("nearest-exact", 3): "_upsample_nearest_exact3d",
    ("linear", 1): "upsample_linear1d",
    ("linear", 2): "upsample_bilinear2d",
    ("linear", 3): "upsample_trilinear3d",
    ("cubic", 2): "upsample_bicubic2d",
    ("linear_aa", 2): "_upsample_bilinear2d_aa",
    ("cubic_aa", 2): "_upsample_bicubic2d_aa",
}


def _dim_taps(kind, n_in, n_out, align_corners, scales, i, dt, output_size):
    # 2-d nearest outputs with oh + ow <= 128 take ATen's vectorized kernel (float32 indices)
    legacy = len(output_size) == 2 and kind in ("nearest", "nearest-exact")
    legacy = legacy and sum(output_size) <= 128
    scale = None if scales is None else scales[i]
    return taps(kind, n_in, n_out, bool(align_corners), scale, dt, legacy)


def _resized_dims(kind, in_spatial, output_size):
    """Innermost dim first, as ATen's kernels sum (and its separable antialias pass runs); the
    antialias kernels skip dims whose size does not change."""
    dims = list(reversed(range(len(output_size))))
    if kind.endswith("_aa"):
        dims = [i for i in dims if in_spatial[i] != output_size[i]]
    return dims


def _const(values, dt, device, shape):
    return torch.tensor(values, dtype=dt, device=device).reshape(shape)


def _resample_dim(x, dim, tap, dt):
    index, weight, mask, counts = tap
    a = get_aval(x)
    shp = tuple(a.shape)
    n_out, k = len(index), len(index[0])
    flat = I.take(x, _const(index, torch.int64, a.device, (n_out * k,)), dim)
    if k == 1 and weight is None:
        return flat
    spread = shp[:dim] + (n_out, k) + shp[dim + 1 :]
    taken = S.reshape(flat, spread)
    tail = (1,) * (len(shp) - dim - 1)
    if mask is not None and not all(all(row) for row in mask):
        m = _const(mask, torch.bool, a.device, (n_out, k) + tail).expand(spread).contiguous()
        taken = U.select(m, taken, C.full(spread, 0.0, dt, a.device))
    if weight is not None:
        w = _const([[float(v) for v in row] for row in weight], dt, a.device, (n_out, k) + tail)
        taken = B.mul(taken, w.expand(spread).contiguous())
    out = R.reduce_sum(taken, (dim + 1,))
    if counts is not None:
        c = _const([float(v) for v in counts], dt, a.device, (n_out,) + tail)
        out = B.div(out, c.expand(shp[:dim] + (n_out,) + shp[dim + 1 :]).contiguous())
    return out


def _unsample_dim(g, dim, tap, n_in, dt):
    """The transpose of _resample_dim: weights applied, then a scatter-add of the taps."""
    index, weight, mask, counts = tap
    a = get_aval(g)
    shp = tuple(a.shape)
    n_out, k = len(index), len(index[0])
    tail = (1,) * (len(shp) - dim - 1)
    spread = shp[:dim] + (n_out, k) + shp[dim + 1 :]
    if counts is not None:
        c = _const([float(v) for v in counts], dt, a.device, (n_out,) + tail)
        g = B.div(g, c.expand(shp).contiguous())
    spread_g = S.broadcast_to(S.reshape(g, shp[:dim] + (n_out, 1) + shp[dim + 1 :]), spread)
    if weight is not None:
        w = _const([[float(v) for v in row] for row in weight], dt, a.device, (n_out, k) + tail)
        spread_g = B.mul(spread_g, w.expand(spread).contiguous())
    if mask is not None and not all(all(row) for row in mask):
        m = _const(mask, torch.bool, a.device, (n_out, k) + tail).expand(spread).contiguous()
        spread_g = U.select(m, spread_g, C.full(spread, 0.0, dt, a.device))
    src = S.reshape(spread_g, shp[:dim] + (n_out * k,) + shp[dim + 1 :])
    zeros = C.full(shp[:dim] + (n_in,) + shp[dim + 1 :], 0.0, dt, a.device)
    return I.index_add(zeros, _const(index, torch.int64, a.device, (n_out * k,)), src, dim)


def _compute_dtype(dt):
    return dt if dt in (torch.float32, torch.float64) else torch.float32


def resample(x, *, kind, output_size, scales, align_corners):
    """The resampling in primitives (every kind, area included)."""
    dt = get_aval(x).dtype
    cdt = _compute_dtype(dt)
    y = x if cdt == dt else U.convert(x, cdt)
    spatial = tuple(get_aval(x).shape[2:])
    for i in _resized_dims(kind, spatial, output_size):
        tap = _dim_taps(
            kind, spatial[i], output_size[i], align_corners, scales, i, cdt, output_size
        )
        y = _resample_dim(y, 2 + i, tap, cdt)
    return y if cdt == dt else U.convert(y, dt)


def _resample_transpose(g, *, kind, output_size, input_size, scales, align_corners):
    dt = get_aval(g).dtype
    cdt = _compute_dtype(dt)
    y = g if cdt == dt else U.convert(g, cdt)
    spatial = tuple(input_size[2:])
    for i in reversed(_resized_dims(kind, spatial, output_size)):
        tap = _dim_taps(
            kind, spatial[i], output_size[i], align_corners, scales, i, cdt, output_size
        )
        y = _unsample_dim(y, 2 + i, tap, spatial[i], cdt)
    return y if cdt == dt else U.convert(y, dt)


def upsample(x, kind: str, output_size, scales, align_corners: bool):
    """torch's upsample kernel for `kind` (KERNELS), N and C leading, on a non-empty input."""
    return upsample_p.bind(
        x,
        kind=kind,
        output_size=tuple(int(s) for s in output_size),
        scales=None if scales is None else tuple(None if s is None else float(s) for s in scales),
        align_corners=bool(align_corners),
    )


def _kernel_args(kind, output_size, scales, align_corners):
    scale_args = [None] * len(output_size) if scales is None else list(scales)
    align = [] if kind.startswith("nearest") else [align_corners]
    return align + scale_args


def _impl(x, *, kind, output_size, scales, align_corners):
    fn = getattr(torch.ops.aten, KERNELS[(kind, len(output_size))]).default
    return fn(x, list(output_size), *_kernel_args(kind, output_size, scales, align_corners))


def _backward_impl(g, *, kind, output_size, input_size, scales, align_corners):
    fn = getattr(torch.ops.aten, KERNELS[(kind, len(output_size))] + "_backward").default
    rest = _kernel_args(kind, output_size, scales, align_corners)
    return fn(g, list(output_size), list(input_size), *rest)


def _check(name, x, kind, output_size):
    if (kind, len(output_size)) not in KERNELS:
        raise TypeError(f"{name}: no kernel for {kind!r} over {len(output_size)} spatial dims")
    if not is_float(x.dtype) or len(x.shape) != len(output_size) + 2:
        raise TypeError(f"{name}: needs a float (N, C, *spatial) operand, got {x.str_short()}")


def _abstract_eval(x, *, kind, output_size, scales, align_corners):
    _check("upsample", x, kind, output_size)
    return ShapedArray(tuple(x.shape[:2]) + tuple(output_size), x.dtype, x.device)


def _backward_abstract_eval(g, *, kind, output_size, input_size, scales, align_corners):
    _check("upsample_backward", g, kind, output_size)
    if tuple(g.shape) != tuple(input_size[:2]) + tuple(output_size):
        raise TypeError(f"upsample_backward: gradient {g.str_short()} vs output {output_size}")
    return ShapedArray(tuple(input_size), g.dtype, g.device)


def _codegen(name):
    def codegen(args, avals, *, kind, output_size, scales, align_corners, input_size=None):
        sizes = [list(output_size)] + ([] if input_size is None else [list(input_size)])
        rest = sizes + _kernel_args(kind, output_size, scales, align_corners)
        kernel = KERNELS[(kind, len(output_size))] + name
        return f"torch.ops.aten.{kernel}.default({args[0]}, {', '.join(map(repr, rest))})"

    return codegen


def _batch(get_prim, resize_input_size):
    # N and C are the kernel's own batch dims: the vmapped dim joins N
    def batch(args, dims, **params):
        (x,), (d,) = args, dims
        x = S.moveaxis(x, d, 0)
        shp = tuple(get_aval(x).shape)
        folded = S.reshape(x, (shp[0] * shp[1],) + shp[2:])
        if resize_input_size:
            size = params["input_size"]
            params = dict(params, input_size=(shp[0] * size[0],) + tuple(size[1:]))
        out = get_prim().bind(folded, **params)
        oshp = tuple(get_aval(out).shape)
        return S.reshape(out, (shp[0], shp[1]) + oshp[1:]), 0

    return batch


def _transpose(ct, x, *, kind, output_size, scales, align_corners):
    size = tuple(x.aval.shape) if is_undefined(x) else tuple(get_aval(x).shape)
    g = upsample_backward_p.bind(
        ct,
        kind=kind,
        output_size=output_size,
        input_size=size,
        scales=scales,
        align_corners=align_corners,
    )
    return [g]


def _backward_transpose(ct, g, *, kind, output_size, input_size, scales, align_corners):
    return [
        upsample_p.bind(
            ct, kind=kind, output_size=output_size, scales=scales, align_corners=align_corners
        )
    ]


upsample_p = declare_composite(
    "upsample",
    decomposition=resample,
    impl=_impl,
    abstract_eval=_abstract_eval,
    linear=True,
    transpose=_transpose,
    batch=_batch(lambda: upsample_p, False),
    torch_codegen=_codegen(""),
)
upsample_backward_p = declare_composite(
    "upsample_backward",
    decomposition=_resample_transpose,
    impl=_backward_impl,
    abstract_eval=_backward_abstract_eval,
    linear=True,
    transpose=_backward_transpose,
    batch=_batch(lambda: upsample_backward_p, True),
    torch_codegen=_codegen("_backward"),
)


# ---------------------------------------------------------------- im2col / col2im (unfold / fold)
# Both linear, each the other's transpose; (N, C, H, W) <-> (N, C * kh * kw, L), N the kernels'
# batch dim. The decomposition gathers (scatter-adds) the block positions of the padded image.


def sliding_blocks(hw, kernel, dilation, padding, stride):
    """The number of (rows, cols) of sliding blocks im2col takes from an (H, W) image."""
    return tuple(
        (hw[i] + 2 * padding[i] - (dilation[i] * (kernel[i] - 1) + 1)) // stride[i] + 1
        for i in range(2)
    )


def block_index(padded_hw, kernel, dilation, stride, blocks, device=None):
    """Flat positions in the padded (H, W) image of every (ki, kj, bi, bj): im2col's layout."""
    (kh, kw), (dh, dw), (sh, sw), (bh, bw) = kernel, dilation, stride, blocks
    rows = torch.arange(kh).reshape(kh, 1, 1, 1) * dh + torch.arange(bh).reshape(1, 1, bh, 1) * sh
    cols = torch.arange(kw).reshape(1, kw, 1, 1) * dw + torch.arange(bw).reshape(1, 1, 1, bw) * sw
    return (rows * padded_hw[1] + cols).reshape(-1).to(device)


def _im2col_decomposition(x, *, kernel, dilation, padding, stride):
    a = get_aval(x)
    n, c, h, w = a.shape
    ph, pw = padding
    xp = S.pad(x, 0.0, ((0, 0, 0), (0, 0, 0), (ph, ph, 0), (pw, pw, 0)))
    hw = (h + 2 * ph, w + 2 * pw)
    blocks = sliding_blocks((h, w), kernel, dilation, padding, stride)
    index = block_index(hw, kernel, dilation, stride, blocks, a.device)
    cols = I.take(S.reshape(xp, (n, c, hw[0] * hw[1])), index, 2)
    return S.reshape(cols, (n, c * kernel[0] * kernel[1], blocks[0] * blocks[1]))


def _col2im_decomposition(cols, *, output_size, kernel, dilation, padding, stride):
    a = get_aval(cols)
    n, ck, length = a.shape
    kk = kernel[0] * kernel[1]
    c = ck // kk
    ph, pw = padding
    hw = (output_size[0] + 2 * ph, output_size[1] + 2 * pw)
    blocks = sliding_blocks(output_size, kernel, dilation, padding, stride)
    index = block_index(hw, kernel, dilation, stride, blocks, a.device)
    image = C.full((n, c, hw[0] * hw[1]), 0.0, a.dtype, a.device)
    image = I.index_add(image, index, S.reshape(cols, (n, c, kk * length)), 2)
    image = S.reshape(image, (n, c) + hw)
    return S.slice_(image, (0, 0, ph, pw), (n, c, ph + output_size[0], pw + output_size[1]))


def im2col(x, kernel, dilation, padding, stride):
    """torch's im2col (F.unfold) of a 4-d (N, C, H, W) input."""
    return im2col_p.bind(x, kernel=kernel, dilation=dilation, padding=padding, stride=stride)


def col2im(cols, output_size, kernel, dilation, padding, stride):
    """torch's col2im (F.fold) of a 3-d (N, C * kh * kw, L) input."""
    return col2im_p.bind(
        cols,
        output_size=output_size,
        kernel=kernel,
        dilation=dilation,
        padding=padding,
        stride=stride,
    )


def _im2col_abstract_eval(x, *, kernel, dilation, padding, stride):
    if len(x.shape) != 4 or not is_float(x.dtype):
        raise TypeError(f"im2col needs a float (N, C, H, W) operand, got {x.str_short()}")
    n, c, h, w = x.shape
    blocks = sliding_blocks((h, w), kernel, dilation, padding, stride)
    if min(blocks) < 1:
        raise TypeError(f"im2col: no sliding block fits {x.str_short()} with kernel {kernel}")
    return ShapedArray((n, c * kernel[0] * kernel[1], blocks[0] * blocks[1]), x.dtype, x.device)


def _col2im_abstract_eval(cols, *, output_size, kernel, dilation, padding, stride):
    kk = kernel[0] * kernel[1]
    blocks = sliding_blocks(output_size, kernel, dilation, padding, stride)
    if len(cols.shape) != 3 or cols.shape[1] % kk or cols.shape[2] != blocks[0] * blocks[1]:
        raise TypeError(f"col2im: {cols.str_short()} does not hold {blocks} blocks of {kernel}")
    n, ck, _ = cols.shape
    return ShapedArray((n, ck // kk) + tuple(output_size), cols.dtype, cols.device)


def _im2col_transpose(ct, x, *, kernel, dilation, padding, stride):
    hw = tuple(x.aval.shape[2:]) if is_undefined(x) else tuple(get_aval(x).shape[2:])
    return [col2im(ct, hw, kernel, dilation, padding, stride)]


def _col2im_transpose(ct, cols, *, output_size, kernel, dilation, padding, stride):
    return [im2col(ct, kernel, dilation, padding, stride)]


def _fold_batch(get_prim):
    def batch(args, dims, **params):
        (x,), (d,) = args, dims
        x = S.moveaxis(x, d, 0)
        shp = tuple(get_aval(x).shape)
        out = get_prim().bind(S.reshape(x, (shp[0] * shp[1],) + shp[2:]), **params)
        return S.reshape(out, shp[:2] + tuple(get_aval(out).shape[1:])), 0

    return batch


def _window_args(p):
    return ", ".join(repr(list(p[k])) for k in ("kernel", "dilation", "padding", "stride"))


im2col_p = declare_composite(
    "im2col",
    decomposition=_im2col_decomposition,
    impl=lambda x, **p: torch.ops.aten.im2col.default(
        x, p["kernel"], p["dilation"], p["padding"], p["stride"]
    ),
    abstract_eval=_im2col_abstract_eval,
    linear=True,
    transpose=_im2col_transpose,
    batch=_fold_batch(lambda: im2col_p),
    torch_codegen=lambda args, avals, **p: (
        f"torch.ops.aten.im2col.default({args[0]}, {_window_args(p)})"
    ),
)
col2im_p = declare_composite(
    "col2im",
    decomposition=_col2im_decomposition,
    impl=lambda cols, **p: torch.ops.aten.col2im.default(
        cols, p["output_size"], p["kernel"], p["dilation"], p["padding"], p["stride"]
    ),
    abstract_eval=_col2im_abstract_eval,
    linear=True,
    transpose=_col2im_transpose,
    batch=_fold_batch(lambda: col2im_p),
    torch_codegen=lambda args, avals, **p: (
        f"torch.ops.aten.col2im.default({args[0]}, {list(p['output_size'])!r}, {_window_args(p)})"
    ),
)
