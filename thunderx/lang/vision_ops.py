"""grid_sample (bilinear/nearest/bicubic; zeros/border/reflection padding), unfold/fold (im2col,
col2im) and pixel_(un)shuffle, decomposed onto gathers, scatter-adds and reshapes.

grid_sample follows ATen's GridSampler.h: `grid_sampler_unnormalize` maps [-1, 1] to pixel
coordinates (`(g + 1) / 2 * (size - 1)` with align_corners, else `((g + 1) * size - 1) / 2`);
border padding clips to [0, size - 1], reflection reflects about the corner pixels' centres (edges
without align_corners) and then clips; the taps are gathered from the flattened image. The traced
coordinate carries the derivative with respect to the grid exactly as ATen's backward kernel sets
it: clipping passes 1 strictly inside and 0 at and beyond the borders (`clip_coordinates_set_grad`),
reflection flips its sign (`reflect_coordinates_set_grad`), and the integer taps carry none.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from thunderx.errors import unsupported
from thunderx.lang._base import aval, dtype, ndim, register, shape

_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}


def _unnormalize(coord, size: int, align_corners: bool):
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _clip(coord, size: int):
    hi = size - 1
    return torch.where(coord <= 0, 0.0, torch.where(coord >= hi, float(hi), coord))


def _reflect(coord, twice_low: int, twice_high: int):
    if twice_low == twice_high:
        return torch.zeros_like(coord)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    coord = coord - low
    coord = torch.where(coord < 0, -coord, coord)
    extra = torch.fmod(coord, span)
    flips = torch.floor(coord / span)
    even = torch.fmod(flips, 2) == 0
    return torch.where(even, extra + low, span - extra + low)


def _padded(coord, size: int, padding: int, align_corners: bool):
    """ATen's compute_coordinates."""
    if padding == 1:
        return _clip(coord, size)
    if padding == 2:
        if align_corners:
            coord = _reflect(coord, 0, 2 * (size - 1))
        else:
            coord = _reflect(coord, -1, 2 * size - 1)
        return _clip(coord, size)
    return coord


def _gather_taps(flat, positions, sizes, out_shape):
    """Values of the (N, C, prod(sizes)) image at integer float `positions` (one (N, *out) tensor
    per spatial dim, outermost first); positions outside the image read 0."""
    inside = None
    linear = None
    for pos, size in zip(positions, sizes):
        ok = (pos >= 0) & (pos <= size - 1)
        inside = ok if inside is None else inside & ok
        idx = torch.clamp(pos, 0, size - 1).to(torch.int64)
        linear = idx if linear is None else linear * size + idx
    n, c = shape(flat)[:2]
    points = 1
    for s in out_shape:
        points *= s
    index = linear.reshape(n, 1, points).expand(n, c, points)
    vals = torch.gather(flat, 2, index).reshape((n, c) + tuple(out_shape))
    zero = torch.zeros((), dtype=dtype(flat), device=aval(flat).device)
    return torch.where(inside.unsqueeze(1), vals, zero)


def _cubic(t, a: float = -0.75):
    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def grid_sampler(input, grid, interpolation_mode: int, padding_mode: int, align_corners: bool):
    """torch.grid_sampler (2-d and 3-d) with ATen's formulas; modes as ATen numbers them."""
    nd = ndim(input) - 2
    if nd not in (2, 3) or ndim(grid) != nd + 2:
        raise RuntimeError(
            "grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, "
            f"but got input with sizes {list(shape(input))} and grid with sizes {list(shape(grid))}"
        )
    if dtype(input) != dtype(grid):
        raise RuntimeError(
            "grid_sampler(): expected input and grid to have same dtype, but input has "
            f"{dtype(input)} and grid has {dtype(grid)}"
        )
    if shape(grid)[0] != shape(input)[0]:
        raise RuntimeError(
            "grid_sampler(): expected grid and input to have same batch size, but got input with "
            f"sizes {list(shape(input))} and grid with sizes {list(shape(grid))}"
        )
    if shape(grid)[-1] != nd:
        raise RuntimeError(
            f"grid_sampler(): expected grid to have size {nd} in last dimension, but got grid "
            f"with sizes {list(shape(grid))}"
        )
    if any(s <= 0 for s in shape(input)[2:]):
        raise RuntimeError(
            f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
            f"sizes {list(shape(input))}"
        )
    if interpolation_mode == 2 and nd != 2:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if interpolation_mode not in (0, 1, 2) or padding_mode not in (0, 1, 2):
        raise RuntimeError(
            f"grid_sampler(): bad interpolation_mode {interpolation_mode} or padding_mode "
            f"{padding_mode}"
        )
    if not dtype(input).is_floating_point:
        raise unsupported(f"grid_sample on {dtype(input)} input")
    n, c = shape(input)[:2]
    sizes = shape(input)[2:]  # outermost first: (D,) H, W
    out_shape = shape(grid)[1:-1]
    flat = input.reshape(n, c, -1)
    # grid's last dim lists x (width) first: coordinate k belongs to spatial dim nd - 1 - k.
    coords = [grid[..., nd - 1 - d] for d in range(nd)]
    coords = [_unnormalize(g, s, align_corners) for g, s in zip(coords, sizes)]
    if interpolation_mode == 2:
        return _bicubic(flat, coords, sizes, out_shape, padding_mode, align_corners)
    coords = [_padded(g, s, padding_mode, align_corners) for g, s in zip(coords, sizes)]
    if interpolation_mode == 1:
        return _gather_taps(flat, [torch.round(g) for g in coords], sizes, out_shape)
    lows = [torch.floor(g) for g in coords]
    out = None
    # Corners in ATen's order (nw, ne, sw, se; then the back plane), weights multiplied x, y, z.
    for corner in itertools.product((0, 1), repeat=nd):
        weight = None
        for d in reversed(range(nd)):
            w = coords[d] - lows[d] if corner[d] else (lows[d] + 1) - coords[d]
            weight = w if weight is None else weight * w
        pos = [lo + 1 if up else lo for lo, up in zip(lows, corner)]
        term = _gather_taps(flat, pos, sizes, out_shape) * weight.unsqueeze(1)
        out = term if out is None else out + term
    return out


def _bicubic(flat, coords, sizes, out_shape, padding_mode, align_corners):
    """ATen's bicubic grid sampling: a 4x4 neighbourhood of the unpadded coordinate, each tap's
    integer position padded on its own (get_value_bounded), Keys' coefficients with A = -0.75."""
    gy, gx = coords
    y0, x0 = torch.floor(gy), torch.floor(gx)
    wy, wx = _cubic(gy - y0), _cubic(gx - x0)
    h, w = sizes
    out = None
    for i in range(4):
        row = None
        ty = _padded(y0 - 1 + i, h, padding_mode, align_corners)
        for j in range(4):
            tx = _padded(x0 - 1 + j, w, padding_mode, align_corners)
            # ATen truncates the padded tap position to an integer before reading it.
            val = _gather_taps(flat, [torch.trunc(ty), torch.trunc(tx)], sizes, out_shape)
            term = val * wx[j].unsqueeze(1)
            row = term if row is None else row + term
        term = row * wy[i].unsqueeze(1)
        out = term if out is None else out + term
    return out


@register(torch.grid_sampler, torch.grid_sampler_2d, torch.grid_sampler_3d)
def _grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    return grid_sampler(input, grid, interpolation_mode, padding_mode, bool(align_corners))


@register(F.grid_sample)
def _grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    if mode not in _MODES:
        raise ValueError(
            "nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or "
            f"'bicubic', but got: '{mode}'"
        )
    if padding_mode not in _PADDINGS:
        raise ValueError(
            "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
            f"'reflection', but got: '{padding_mode}'"
        )
    return grid_sampler(input, grid, _MODES[mode], _PADDINGS[padding_mode], bool(align_corners))


def _pair(v, name: str):
    t = tuple(v) if isinstance(v, (list, tuple)) else (v, v)
    if len(t) != 2 or not all(isinstance(i, int) for i in t):
        raise RuntimeError(f"{name} must be an int or a pair of ints, got {v!r}")
    return t


def _block_index(padded_hw, kernel, dilation, stride, blocks):
    """Flat positions in the padded (H, W) image of every (ki, kj, bi, bj): im2col's layout."""
    (kh, kw), (dh, dw), (sh, sw), (bh, bw) = kernel, dilation, stride, blocks
    rows = torch.arange(kh).reshape(kh, 1, 1, 1) * dh + torch.arange(bh).reshape(1, 1, bh, 1) * sh
    cols = torch.arange(kw).reshape(1, kw, 1, 1) * dw + torch.arange(bw).reshape(1, 1, 1, bw) * sw
    return (rows * padded_hw[1] + cols).reshape(-1)


def _check_sliding(kernel, dilation, padding, stride):
    if min(kernel) <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got {kernel}")
    if min(dilation) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got {dilation}")
    if min(padding) < 0:
        raise RuntimeError(f"padding should be non-negative, but got {padding}")
    if min(stride) <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got {stride}")


def _blocks(hw, kernel, dilation, padding, stride):
    return tuple(
        (hw[i] + 2 * padding[i] - (dilation[i] * (kernel[i] - 1) + 1)) // stride[i] + 1
        for i in range(2)
    )


@register(F.unfold, torch._C._nn.im2col)
def _unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: (N, C, H, W) -> (N, C * kh * kw, L), a gather from the zero-padded image."""
    kernel, dilation = _pair(kernel_size, "kernel_size"), _pair(dilation, "dilation")
    padding, stride = _pair(padding, "padding"), _pair(stride, "stride")
    _check_sliding(kernel, dilation, padding, stride)
    if ndim(input) not in (3, 4) or any(s == 0 for s in shape(input)[-3:]):
        raise RuntimeError(
            "Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero "
            f"dimensions for input, but got: {list(shape(input))}"
        )
    batched = ndim(input) == 4
    x = input if batched else input.unsqueeze(0)
    n, c, h, w = shape(x)
    blocks = _blocks((h, w), kernel, dilation, padding, stride)
    if min(blocks) < 1:
        raise RuntimeError(
            f"Given input with spatial size ({h}, {w}), kernel_size={kernel}, dilation={dilation}, "
            f"padding={padding}, calculated shape of the array of sliding blocks as {blocks}, but "
            "its components must be at least one."
        )
    ph, pw = padding
    xp = F.pad(x, (pw, pw, ph, ph)) if ph or pw else x
    hw = (h + 2 * ph, w + 2 * pw)
    index = _block_index(hw, kernel, dilation, stride, blocks).to(aval(x).device)
    cols = torch.index_select(xp.reshape(n, c, hw[0] * hw[1]), 2, index)
    out = cols.reshape(n, c * kernel[0] * kernel[1], blocks[0] * blocks[1])
    return out if batched else out.squeeze(0)


@register(F.fold, torch._C._nn.col2im)
def _fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """col2im: (N, C * kh * kw, L) -> (N, C, H, W), the transpose of unfold (a scatter-add)."""
    size, kernel = _pair(output_size, "output_size"), _pair(kernel_size, "kernel_size")
    dilation, padding, stride = (
        _pair(dilation, "dilation"),
        _pair(padding, "padding"),
        _pair(stride, "stride"),
    )
    _check_sliding(kernel, dilation, padding, stride)
    if min(size) <= 0:
        raise RuntimeError(f"output_size should be greater than zero, but got {size}")
    if ndim(input) not in (2, 3) or any(s == 0 for s in shape(input)[-2:]):
        raise RuntimeError(
            "Expected 2D or 3D (batch mode) tensor with possibly 0 batch size and non-zero "
            f"dimensions for input, but got: {list(shape(input))}"
        )
    batched = ndim(input) == 3
    cols = input if batched else input.unsqueeze(0)
    n, ck, length = shape(cols)
    kk = kernel[0] * kernel[1]
    if ck % kk:
        raise RuntimeError(
            "Expected size of input's dimension 1 to be divisible by the product of kernel_size, "
            f"but got input.size(1)={ck} and kernel_size={kernel}"
        )
    blocks = _blocks(size, kernel, dilation, padding, stride)
    if min(blocks) < 1 or blocks[0] * blocks[1] != length:
        raise RuntimeError(
            f"Given output_size={size}, kernel_size={kernel}, dilation={dilation}, "
            f"padding={padding}, stride={stride}, expected size of input's dimension 2 to match "
            f"the calculated number of sliding blocks {blocks[0]} * {blocks[1]} = "
            f"{blocks[0] * blocks[1]}, but got input.size(2)={length}."
        )
    c = ck // kk
    ph, pw = padding
    hw = (size[0] + 2 * ph, size[1] + 2 * pw)
    index = _block_index(hw, kernel, dilation, stride, blocks).to(aval(cols).device)
    image = cols.new_zeros((n, c, hw[0] * hw[1]))
    image = torch.index_add(image, 2, index, cols.reshape(n, c, kk * length))
    image = image.reshape(n, c, hw[0], hw[1])[:, :, ph : ph + size[0], pw : pw + size[1]]
    return image if batched else image.squeeze(0)


@register(torch.pixel_shuffle)
def _pixel_shuffle(input, upscale_factor):
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    r = int(upscale_factor)
    if ndim(input) < 3:
        raise RuntimeError(
            f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
            f"{ndim(input)} dimension(s)"
        )
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *lead, c, h, w = shape(input)
    if c % (r * r):
        raise RuntimeError(
            "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
            f"of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}"
        )
    k = len(lead)
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    x = x.permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


@register(torch.pixel_unshuffle)
def _pixel_unshuffle(input, downscale_factor):
    """(*, C, H r, W r) -> (*, C r^2, H, W)."""
    r = int(downscale_factor)
    if ndim(input) < 3:
        raise RuntimeError(
            f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
            f"{ndim(input)} dimension(s)"
        )
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *lead, c, h, w = shape(input)
    if h % r or w % r:
        raise RuntimeError(
            "pixel_unshuffle expects height and width to be divisible by downscale_factor, but "
            f"input.size(-2)={h} and input.size(-1)={w} are not divisible by {r}"
        )
    k = len(lead)
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    x = x.permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)
