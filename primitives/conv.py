"""Convolution: conv (N, C, *spatial) x (O, C/groups, *window), with strides, (lo, hi) padding,
lhs (input) dilation and rhs (kernel) dilation. Its transposes are convolutions again, so
derivatives of any order and vmap stay inside the primitive set."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.ad_util import UndefinedPrimal, Zero, add_tangents, is_undefined
from thunderx.avals import ShapedArray
from thunderx.core import declare, get_aval
from thunderx.primitives import shape as S


def _dilate(n, d):
    return 0 if n == 0 else (n - 1) * d + 1


def _out_shape(x_shape, w_shape, window_strides, padding, lhs_dilation, rhs_dilation):
    sp = []
    for i, (n, k) in enumerate(zip(x_shape[2:], w_shape[2:])):
        lo, hi = padding[i]
        size = _dilate(n, lhs_dilation[i]) + lo + hi - _dilate(k, rhs_dilation[i])
        sp.append(size // window_strides[i] + 1 if size >= 0 else 0)
    return (x_shape[0], w_shape[0]) + tuple(sp)


def _conv_abstract_eval(x, w, *, window_strides, padding, lhs_dilation, rhs_dilation, groups):
    if x.ndim != w.ndim or x.ndim < 3:
        raise TypeError(f"conv: operand {x.str_short()} and kernel {w.str_short()} ranks differ")
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise TypeError(
            f"conv: {x.shape[1]} input channels do not match kernel {w.str_short()} with "
            f"groups={groups}"
        )
    if x.dtype != w.dtype:
        raise TypeError(f"conv: dtypes differ: {x.str_short()} vs {w.str_short()}")
    shape = _out_shape(x.shape, w.shape, window_strides, padding, lhs_dilation, rhs_dilation)
    return ShapedArray(shape, x.dtype, x.device)


_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _conv_impl(x, w, *, window_strides, padding, lhs_dilation, rhs_dilation, groups, bias=None):
    """`bias` (a vector over output channels, added by torch's kernel): only the torch
    executor's conv-plus-bias pattern passes it; the primitive has no bias."""
    nsp = x.dim() - 2
    if x.numel() == 0 or w.numel() == 0:
        # every output entry sums products with no terms (no input channel, no kernel tap) or
        # there is no entry: zeros, where torch's kernels refuse a kernel with 0 output channels
        shape = _out_shape(x.shape, w.shape, window_strides, padding, lhs_dilation, rhs_dilation)
        out = x.new_zeros(shape)
        return out if bias is None else out + bias.reshape((-1,) + (1,) * nsp)
    if any(d != 1 for d in lhs_dilation):
        # insert (d - 1) zeros between input elements
        shape = list(x.shape[:2]) + [_dilate(n, d) for n, d in zip(x.shape[2:], lhs_dilation)]
        z = x.new_zeros(shape)
        z[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in lhs_dilation)] = x
        x = z
    sym = all(lo == hi and lo >= 0 for lo, hi in padding)
    if not sym:
        flat = []
        for lo, hi in reversed(padding):
            flat += [lo, hi]
        x = F.pad(x, flat)
        pad_arg = 0
    else:
        pad_arg = tuple(lo for lo, _ in padding)
    return _CONV[nsp](x, w, bias, tuple(window_strides), pad_arg, tuple(rhs_dilation), groups)


def conv(x, w, window_strides, padding, lhs_dilation=None, rhs_dilation=None, groups=1):
    n = len(get_aval(x).shape) - 2
    return conv_p.bind(
        x,
        w,
        window_strides=tuple(window_strides),
        padding=tuple(tuple(p) for p in padding),
        lhs_dilation=tuple(lhs_dilation or (1,) * n),
        rhs_dilation=tuple(rhs_dilation or (1,) * n),
        groups=groups,
    )


def bilinear_jvp(prim, primals, tangents, params):
    """The jvp of a primitive bilinear in its two operands: prim(ta, b) + prim(a, tb)."""
    a, b = primals
    ta, tb = tangents
    out = prim.bind(a, b, **params)
    t = Zero(get_aval(out))
    if type(ta) is not Zero:
        t = add_tangents(t, prim.bind(ta, b, **params))
    if type(tb) is not Zero:
        t = add_tangents(t, prim.bind(a, tb, **params))
    return out, t


def _conv_jvp(primals, tangents, **params):
    return bilinear_jvp(conv_p, primals, tangents, params)


def _swap_kernel_io(w, groups):
    """(O, C/g, *k) -> (C, O/g, *k), spatially flipped: the kernel of the input transpose."""
    shp = S._shape(w)
    o, cg, k = shp[0], shp[1], shp[2:]
    n = len(k)
    w = S.reshape(w, (groups, o // groups, cg) + k)
    w = S.transpose(w, (0, 2, 1) + tuple(range(3, 3 + n)))
    w = S.reshape(w, (groups * cg, o // groups) + k)
    return S.rev(w, tuple(range(2, 2 + n)))


def _conv_transpose(ct, x, w, *, window_strides, padding, lhs_dilation, rhs_dilation, groups):
    if is_undefined(x) and is_undefined(w):
        raise TypeError("conv is not linear in both operands at once")
    if is_undefined(x):
        x_shape, w_shape = x.aval.shape, S._shape(w)
        if _kernel_grad_applies(padding, lhs_dilation):
            # torch's convolution_backward (primitives/conv_input_grad.py)
            from thunderx.primitives.conv_input_grad import conv_input_grad

            args = (window_strides, padding, rhs_dilation, groups)
            return [conv_input_grad(ct, w, x_shape, *args), None]
        ct_shape = S._shape(ct)
        pads = []
        for i in range(len(x_shape) - 2):
            k = _dilate(w_shape[2 + i], rhs_dilation[i])
            lhs_d = _dilate(x_shape[2 + i], lhs_dilation[i])
            out_d = _dilate(ct_shape[2 + i], window_strides[i])
            before = k - padding[i][0] - 1
            after = lhs_d + k - 1 - out_d - before
            pads.append((before, after))
        ct_x = conv(
            ct, _swap_kernel_io(w, groups), lhs_dilation, pads, window_strides, rhs_dilation, groups
        )
        return [ct_x, None]
    x_shape, w_shape = S._shape(x), w.aval.shape
    ct_shape = S._shape(ct)
    n = len(x_shape) - 2
    if _kernel_grad_applies(padding, lhs_dilation):
        ct_w = conv_kernel_grad_p.bind(
            ct,
            x,
            kernel_shape=tuple(w_shape),
            window_strides=window_strides,
            padding=padding,
            rhs_dilation=rhs_dilation,
            groups=groups,
        )
        return [None, ct_w]
    if groups == 1 and all(d == 1 for d in lhs_dilation):
        return [None, _kernel_grad_im2col(ct, x, w_shape, window_strides, padding, rhs_dilation)]
    pads = []
    for i in range(n):
        lhs_d = _dilate(x_shape[2 + i], lhs_dilation[i])
        k = _dilate(w_shape[2 + i], rhs_dilation[i])
        out_d = _dilate(ct_shape[2 + i], window_strides[i])
        lo = padding[i][0]
        pads.append((lo, (out_d - lhs_d) + (k - lo - 1)))
    c_per, o_per = x_shape[1] // groups, w_shape[0] // groups
    parts = []
    perm = (1, 0) + tuple(range(2, 2 + n))
    for g in range(groups):
        xg = S.slice_in_dim(x, g * c_per, (g + 1) * c_per, 1, 1) if groups > 1 else x
        cg = S.slice_in_dim(ct, g * o_per, (g + 1) * o_per, 1, 1) if groups > 1 else ct
        # channels of x act as the batch, the batch as features; ct is the kernel
        r = conv(
            S.transpose(xg, perm),
            S.transpose(cg, perm),
            rhs_dilation,
            pads,
            lhs_dilation,
            window_strides,
            1,
        )
        parts.append(S.transpose(r, perm))  # (C/g, O/g, k) -> (O/g, C/g, k)
    ct_w = S.concatenate(parts, 0)
    if S._shape(ct_w)[2:] != tuple(w_shape[2:]):
        ct_w = S.slice_(ct_w, (0,) * len(w_shape), tuple(w_shape))
    return [None, ct_w]


def _kernel_grad_im2col(ct, x, w_shape, window_strides, padding, rhs_dilation):
    """The kernel's cotangent as patches-times-cotangent: gather the k1*k2*... strided windows
    of the padded input (im2col by slicing) and contract them with ct over batch and positions.
    Under vmap this is one batched matmul, where a convolution would need batch-sized groups."""
    from thunderx.primitives import linalg as L

    x_shape, ct_shape = S._shape(x), S._shape(ct)
    n = len(x_shape) - 2
    window = w_shape[2:]
    cfg = [(0, 0, 0), (0, 0, 0)]
    for i in range(n):
        lo = padding[i][0]
        needed = (window[i] - 1) * rhs_dilation[i] + (ct_shape[2 + i] - 1) * window_strides[i] + 1
        cfg.append((lo, needed - x_shape[2 + i] - lo, 0))  # negative: crop the unused edge
    xp = S.pad(x, 0.0, cfg)
    patches = []
    for offset in _offsets(window):
        starts = [0, 0] + [o * d for o, d in zip(offset, rhs_dilation)]
        limits = list(x_shape[:2]) + [
            o * d + (m - 1) * s + 1
            for o, d, m, s in zip(offset, rhs_dilation, ct_shape[2:], window_strides)
        ]
        view = S.slice_(xp, starts, limits, [1, 1] + list(window_strides))
        # (N, C, *out) -> (N, *out, C, 1): positions before channels, so the contraction below
        # reads the patches in place (batch and positions contiguous) under vmap too
        view = S.transpose(view, (0,) + tuple(range(2, 2 + n)) + (1,))
        patches.append(S.expand_dims(view, (n + 2,)))
    p = S.concatenate(patches, n + 2)  # (N, *out, C, K)
    sp = tuple(range(2, 2 + n))
    # ct (N, O, *out) . p (N, *out, C, K) over N and *out -> (O, C, K)
    g = L.dot_general(ct, p, (((0,) + sp, tuple(range(0, n + 1))), ((), ())))
    return S.reshape(g, (ct_shape[1], x_shape[1]) + tuple(window))


def _offsets(window):
    out = [()]
    for k in window:
        out = [o + (i,) for o in out for i in range(k)]
    return out


def _conv_batch(args, dims, **params):
    (x, w), (dx, dw) = args, dims
    groups = params["groups"]
    if dw is None:
        x = S.moveaxis(x, dx, 0)
        b, n = S._shape(x)[:2]
        out = conv_p.bind(S.reshape(x, (b * n,) + S._shape(x)[2:]), w, **params)
        return S.reshape(out, (b, n) + S._shape(out)[1:]), 0
    w = S.moveaxis(w, dw, 0)
    b, o = S._shape(w)[:2]
    wk = S.reshape(w, (b * o,) + S._shape(w)[2:])
    if dx is None:
        xs = S._shape(x)
        if groups == 1:
            out = conv_p.bind(x, wk, **params)  # (N, B*O, ...)
        else:
            xr = S.reshape(
                S.broadcast_batch(S.reshape(x, (xs[0], groups, xs[1] // groups) + xs[2:]), b, 1),
                (xs[0], b * xs[1]) + xs[2:],
            )
            out = conv_p.bind(xr, wk, **{**params, "groups": b * groups})
    else:
        x = S.moveaxis(x, dx, 1)  # (N, B, C, ...)
        xs = S._shape(x)
        xr = S.reshape(x, (xs[0], xs[1] * xs[2]) + xs[3:])
        out = conv_p.bind(xr, wk, **{**params, "groups": b * groups})
    os_ = S._shape(out)
    return S.reshape(out, (os_[0], b, o) + os_[2:]), 1


def _conv_flops(in_avals, out_avals, **params):
    """Multiply-adds, counted as 2 flops each: the kernel is (out, in / groups, *window)."""
    return 2 * math.prod(out_avals[0].shape) * math.prod(in_avals[1].shape[1:])


conv_p = declare(
    "conv",
    impl=_conv_impl,
    abstract_eval=_conv_abstract_eval,
    jvp=_conv_jvp,
    linear=True,
    transpose=_conv_transpose,
    batch=_conv_batch,
    flops=_conv_flops,
)


# ------------------------------------------------------------------ the kernel's cotangent


# The kernel cotangent as one primitive, so it runs as torch's own convolution_backward kernel
# (what torch.autograd and torch.func call) instead of a composition of convolutions or patches.
# It is bilinear in (ct, x); its transposes are the forward convolution and the input transpose.
def _kernel_grad_applies(padding, lhs_dilation) -> bool:
    """convolution_backward takes symmetric padding and no input dilation."""
    return all(lo == hi and lo >= 0 for lo, hi in padding) and all(d == 1 for d in lhs_dilation)


def _kg_abstract_eval(ct, x, *, kernel_shape, window_strides, padding, rhs_dilation, groups):
    if ct.dtype != x.dtype or ct.ndim != x.ndim or ct.shape[0] != x.shape[0]:
        raise TypeError(f"conv_kernel_grad: cotangent {ct.str_short()} vs input {x.str_short()}")
    if kernel_shape[0] != ct.shape[1] or kernel_shape[1] * groups != x.shape[1]:
        raise TypeError(f"conv_kernel_grad: kernel {kernel_shape} does not fit {x.str_short()}")
    return ShapedArray(tuple(kernel_shape), x.dtype, x.device)


def _kg_impl(ct, x, *, kernel_shape, window_strides, padding, rhs_dilation, groups):
    # only the weight's shape is read when just the kernel gradient is asked for; it must be
    # contiguous all the same (an expanded one sends oneDNN to a 5x slower path)
    if ct.numel() == 0 or x.numel() == 0 or math.prod(kernel_shape) == 0:
        return x.new_zeros(kernel_shape)  # sums with no terms, as in _conv_impl
    w = x.new_empty(kernel_shape)
    return convolution_backward(
        ct, x, w, window_strides, padding, rhs_dilation, groups, (False, True, False)
    )[1]


def convolution_backward(ct, x, w, window_strides, padding, rhs_dilation, groups, mask):
    """torch's convolution_backward for conv_p's parameters (symmetric padding, no input
    dilation); `mask` picks which of the input, weight and bias cotangents it computes."""
    n = x.ndim - 2
    return torch.ops.aten.convolution_backward(
        ct,
        x,
        w,
        None,
        list(window_strides),
        [lo for lo, _ in padding],
        list(rhs_dilation),
        False,
        [0] * n,
        groups,
        list(mask),
    )


def conv_params(window_strides, padding, rhs_dilation, groups, n):
    """conv_p's parameters for a convolution without input dilation."""
    return dict(
        window_strides=window_strides,
        padding=padding,
        lhs_dilation=(1,) * n,
        rhs_dilation=rhs_dilation,
        groups=groups,
    )


def _kg_jvp(primals, tangents, **params):
    return bilinear_jvp(conv_kernel_grad_p, primals, tangents, params)


def _kg_transpose(ct_w, ct, x, *, kernel_shape, window_strides, padding, rhs_dilation, groups):
    n = len(kernel_shape) - 2
    cp = conv_params(window_strides, padding, rhs_dilation, groups, n)
    if type(ct_w) is Zero:
        return [None, None]
    if is_undefined(ct) and is_undefined(x):
        raise TypeError("conv_kernel_grad is not linear in both operands at once")
    if is_undefined(ct):
        # <conv_kernel_grad(ct, x), W> = <ct, conv(x, W)>
        return [conv_p.bind(x, ct_w, **cp), None]
    # linear in x: the transpose of x -> conv(x, W), applied to ct
    (ct_x, _) = _conv_transpose(ct, UndefinedPrimal(x.aval), ct_w, **cp)
    return [None, ct_x]


def _kg_batch(args, dims, *, kernel_shape, window_strides, padding, rhs_dilation, groups):
    """Per-example kernel gradients: the batch folds into the groups, so B examples are one
    grouped convolution_backward (measured 2x faster than patches-times-cotangent on the
    tutorial CNN, and what torch.func does)."""
    (ct, x), (dc, dx) = args, dims
    size = S._shape(ct)[dc] if dc is not None else S._shape(x)[dx]
    ct = S.moveaxis(ct, dc, 1) if dc is not None else S.broadcast_batch(ct, size, 1)
    x = S.moveaxis(x, dx, 1) if dx is not None else S.broadcast_batch(x, size, 1)
    cs, xs = S._shape(ct), S._shape(x)  # (N, B, O, ...), (N, B, C, ...)
    ct = S.reshape(ct, (cs[0], cs[1] * cs[2]) + cs[3:])
    x = S.reshape(x, (xs[0], xs[1] * xs[2]) + xs[3:])
    o = kernel_shape[0]
    out = conv_kernel_grad_p.bind(
        ct,
        x,
        kernel_shape=(size * o,) + tuple(kernel_shape[1:]),
        window_strides=window_strides,
        padding=padding,
        rhs_dilation=rhs_dilation,
        groups=size * groups,
    )
    return S.reshape(out, (size,) + tuple(kernel_shape)), 0


def _kg_flops(in_avals, out_avals, *, kernel_shape, groups, **params):
    """Multiply-adds of the kernel cotangent, counted as 2 flops each (as for the convolution)."""
    return 2 * math.prod(in_avals[0].shape) * math.prod(kernel_shape[1:])


conv_kernel_grad_p = declare(
    "conv_kernel_grad",
    impl=_kg_impl,
    abstract_eval=_kg_abstract_eval,
    jvp=_kg_jvp,
    linear=True,
    transpose=_kg_transpose,
    batch=_kg_batch,
    flops=_kg_flops,
)
