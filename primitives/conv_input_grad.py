"""The convolution input's cotangent as one primitive, `conv_input_grad`, so it runs as torch's
own convolution_backward kernel (what torch.autograd and torch.func call) instead of a
convolution with the kernel swapped, flipped and, for strides above 1, the cotangent dilated
with zeros. It is bilinear in (ct, w); its transposes are the forward convolution (in ct) and
the kernel cotangent (in w), so derivatives of any order stay with torch's kernels."""

from __future__ import annotations

import math

from thunderx.ad_util import Zero, is_undefined
from thunderx.avals import ShapedArray
from thunderx.core import declare
from thunderx.primitives import shape as S
from thunderx.primitives.conv import (
    _out_shape,
    bilinear_jvp,
    conv_kernel_grad_p,
    conv_p,
    conv_params,
    convolution_backward,
)


def conv_input_grad(ct, w, input_shape, window_strides, padding, rhs_dilation, groups):
    """The cotangent of conv(x, w)'s input x (of `input_shape`) for the output cotangent ct;
    symmetric padding and no input dilation, as convolution_backward takes them."""
    return conv_input_grad_p.bind(
        ct,
        w,
        input_shape=tuple(input_shape),
        window_strides=tuple(window_strides),
        padding=tuple(tuple(p) for p in padding),
        rhs_dilation=tuple(rhs_dilation),
        groups=groups,
    )


def _abstract_eval(ct, w, *, input_shape, window_strides, padding, rhs_dilation, groups):
    if ct.dtype != w.dtype or ct.ndim != w.ndim or len(input_shape) != ct.ndim:
        raise TypeError(f"conv_input_grad: cotangent {ct.str_short()} vs kernel {w.str_short()}")
    if w.shape[0] != ct.shape[1] or w.shape[1] * groups != input_shape[1]:
        raise TypeError(f"conv_input_grad: kernel {w.str_short()} does not fit {input_shape}")
    n = len(input_shape) - 2
    out = _out_shape(input_shape, w.shape, window_strides, padding, (1,) * n, rhs_dilation)
    if tuple(out) != tuple(ct.shape) or ct.shape[0] != input_shape[0]:
        raise TypeError(
            f"conv_input_grad: cotangent {ct.str_short()} is not the output of {input_shape}"
        )
    return ShapedArray(tuple(input_shape), ct.dtype, ct.device)


def _impl(ct, w, *, input_shape, window_strides, padding, rhs_dilation, groups):
    if ct.numel() == 0 or w.numel() == 0 or math.prod(input_shape) == 0:
        return ct.new_zeros(input_shape)  # sums with no terms, as in conv's own impl
    # only the input's shape is read when just its cotangent is asked for
    like = ct.new_empty(input_shape)
    return convolution_backward(
        ct, like, w, window_strides, padding, rhs_dilation, groups, (True, False, False)
    )[0]


def _jvp(primals, tangents, **params):
    return bilinear_jvp(conv_input_grad_p, primals, tangents, params)


def _transpose(ct_x, ct, w, *, input_shape, window_strides, padding, rhs_dilation, groups):
    if type(ct_x) is Zero:
        return [None, None]
    if is_undefined(ct) and is_undefined(w):
        raise TypeError("conv_input_grad is not linear in both operands at once")
    n = len(input_shape) - 2
    cp = conv_params(window_strides, padding, rhs_dilation, groups, n)
    if is_undefined(ct):
        # <conv_input_grad(ct, w), X> = <ct, conv(X, w)>
        return [conv_p.bind(ct_x, w, **cp), None]
    # <conv_input_grad(ct, W), X> = <W, conv_kernel_grad(ct, X)>
    ct_w = conv_kernel_grad_p.bind(
        ct,
        ct_x,
        kernel_shape=tuple(w.aval.shape),
        window_strides=window_strides,
        padding=padding,
        rhs_dilation=rhs_dilation,
        groups=groups,
    )
    return [None, ct_w]


def _batch(args, dims, *, input_shape, window_strides, padding, rhs_dilation, groups):
    """An unbatched kernel: the batch joins N. A batched kernel: the batch folds into the
    groups, so B examples are one grouped convolution_backward (as conv's own batching)."""
    (ct, w), (dc, dw) = args, dims
    params = dict(window_strides=window_strides, padding=padding, rhs_dilation=rhs_dilation)
    if dw is None:
        ct = S.moveaxis(ct, dc, 0)
        b, n = S._shape(ct)[:2]
        flat = S.reshape(ct, (b * n,) + S._shape(ct)[2:])
        shape = (b * n,) + tuple(input_shape[1:])
        out = conv_input_grad_p.bind(flat, w, input_shape=shape, groups=groups, **params)
        return S.reshape(out, (b, n) + tuple(input_shape[1:])), 0
    w = S.moveaxis(w, dw, 0)
    b, o = S._shape(w)[:2]
    wk = S.reshape(w, (b * o,) + S._shape(w)[2:])
    ct = S.moveaxis(ct, dc, 1) if dc is not None else S.broadcast_batch(ct, b, 1)
    cs = S._shape(ct)  # (N, B, O, ...)
    ct = S.reshape(ct, (cs[0], cs[1] * cs[2]) + cs[3:])
    n, c = input_shape[:2]
    shape = (n, b * c) + tuple(input_shape[2:])
    out = conv_input_grad_p.bind(ct, wk, input_shape=shape, groups=b * groups, **params)
    return S.reshape(out, (n, b, c) + tuple(input_shape[2:])), 1


def _flops(in_avals, out_avals, **params):
    """Multiply-adds, counted as 2 flops each (as for the convolution it transposes)."""
    return 2 * math.prod(in_avals[0].shape) * math.prod(in_avals[1].shape[1:])


conv_input_grad_p = declare(
    "conv_input_grad",
    impl=_impl,
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    linear=True,
    transpose=_transpose,
    batch=_batch,
    flops=_flops,
)
