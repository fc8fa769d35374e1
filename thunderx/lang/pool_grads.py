"""Max pooling with indices in 3-d, and torch's max-pool backward ops
(aten.max_pool2d_with_indices_backward / max_pool3d_with_indices_backward) as a scatter-add of
the gradient at the saved flat indices: linear in the gradient, so its own derivatives and
batching come from the scatter-add primitive."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.lang._base import aval, dtype, register, shape
from thunderx.lang.conv import _max_pool
from thunderx.primitives import creation as C
from thunderx.primitives import indexing as I
from thunderx.primitives import shape as S

register(F.max_pool3d_with_indices)(
    lambda x, *a, **k: _max_pool(3, x, *a, **{**k, "return_indices": True})
)


def _with_indices_backward(nsp, g, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    name = f"max_pool{nsp}d_with_indices_backward"
    gs, xs = shape(g), shape(x)
    if shape(indices) != gs or len(xs) != len(gs) or len(xs) < nsp + 1:
        raise ValueError(
            f"{name}: grad_output {gs}, input {xs} and indices {shape(indices)} do not agree"
        )
    if xs[:-nsp] != gs[:-nsp]:
        raise ValueError(f"{name}: grad_output {gs} and input {xs} differ in the leading dims")
    lead = xs[:-nsp]
    flat_g = S.reshape(g, lead + (math.prod(gs[-nsp:]),))
    flat_i = S.reshape(indices, lead + (math.prod(gs[-nsp:]),))
    zeros = C.full(lead + (math.prod(xs[-nsp:]),), 0.0, dtype(g), aval(g).device)
    # each window's gradient lands on its maximum (windows may share one: they add up)
    return S.reshape(I.scatter_add(zeros, flat_i, flat_g, len(lead)), xs)


register(
    torch.ops.aten.max_pool2d_with_indices_backward,
    torch.ops.aten.max_pool2d_with_indices_backward.default,
)(lambda g, x, *a: _with_indices_backward(2, g, x, *a))
register(
    torch.ops.aten.max_pool3d_with_indices_backward,
    torch.ops.aten.max_pool3d_with_indices_backward.default,
)(lambda g, x, *a: _with_indices_backward(3, g, x, *a))
