"""F.conv_transpose1d/2d/3d: the input-cotangent of a convolution, expressed as a forward conv
primitive with the input dilated by the stride (lhs_dilation), the kernel's in/out channels
swapped per group and flipped, and padding d*(k-1)-p before and d*(k-1)-p+output_padding after.
The conv primitive's own rules then give every derivative and vmap."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunderx.lang._base import dtype, ndim, register, shape
from thunderx.primitives import binary as B
from thunderx.primitives import conv as CV
from thunderx.primitives import shape as S


def _tuple(v, n: int, what: str) -> tuple:
    if isinstance(v, (tuple, list)):
        v = tuple(v) * n if len(v) == 1 else tuple(v)
    else:
        v = (v,) * n
    if len(v) != n or not all(isinstance(i, int) for i in v):
        raise ValueError(f"conv_transpose{n}d: {what} must be an int or {n} ints, got {v}")
    return v


def _conv_transpose(
    nsp, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    if ndim(weight) != nsp + 2:
        raise ValueError(f"conv_transpose{nsp}d: weight must have {nsp + 2} dims")
    unbatched = ndim(x) == nsp + 1
    if unbatched:
        x = S.expand_dims(x, (0,))
    if ndim(x) != nsp + 2:
        raise ValueError(f"conv_transpose{nsp}d: input must have {nsp + 1} or {nsp + 2} dims")
    if dtype(x) != dtype(weight):
        raise TypeError(
            f"conv_transpose{nsp}d: input dtype {dtype(x)} and weight dtype {dtype(weight)} differ"
        )
    stride = _tuple(stride, nsp, "stride")
    padding = _tuple(padding, nsp, "padding")
    output_padding = _tuple(output_padding, nsp, "output_padding")
    dilation = _tuple(dilation, nsp, "dilation")
    cin = shape(weight)[0]
    if shape(x)[1] != cin or cin % groups:
        raise ValueError(
            f"conv_transpose{nsp}d: input has {shape(x)[1]} channels, weight {shape(weight)} "
            f"expects {cin} (groups={groups})"
        )
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= max(s, d):
            raise ValueError(
                f"conv_transpose{nsp}d: output_padding {op} must be smaller than stride or dilation"
            )
    ksize = shape(weight)[2:]
    pads = [
        (d * (k - 1) - p, d * (k - 1) - p + op)
        for k, p, op, d in zip(ksize, padding, output_padding, dilation)
    ]
    w = CV._swap_kernel_io(weight, groups)  # (Cin, Cout/g, *k) -> (Cout, Cin/g, *k), flipped
    out = CV.conv(x, w, (1,) * nsp, pads, stride, dilation, groups)
    if bias is not None:
        out = B.add(out, S.broadcast_in_dim(bias, shape(out), (1,)))
    return S.squeeze(out, (0,)) if unbatched else out


register(F.conv_transpose1d, torch.conv_transpose1d)(lambda *a, **k: _conv_transpose(1, *a, **k))
register(F.conv_transpose2d, torch.conv_transpose2d)(lambda *a, **k: _conv_transpose(2, *a, **k))
register(F.conv_transpose3d, torch.conv_transpose3d)(lambda *a, **k: _conv_transpose(3, *a, **k))
