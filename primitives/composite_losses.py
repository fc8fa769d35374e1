"""nll_loss as a composite operation: torch's nll_loss kernel forward and its fused
nll_loss_backward kernel as the transpose (nll_loss is linear in the log-probabilities, so every
higher derivative is these two again). Class weights and inputs of rank above 2 stay with the
language layer's decomposition."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.ad_util import is_undefined
from thunderx.avals import ShapedArray, is_float
from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import indexing as I
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives.composite import declare_composite

_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def nll_loss(x, target, reduction: str, ignore_index: int):
    """F.nll_loss(x, target) for x of shape (C,) or (N, C), without class weights."""
    return nll_loss_p.bind(x, target, reduction=reduction, ignore_index=int(ignore_index))


def _nll_abstract_eval(x, target, *, reduction, ignore_index):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"nll_loss: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    if not is_float(x.dtype) or x.ndim not in (1, 2):
        raise TypeError(f"nll_loss: input must be a floating (C,) or (N, C), got {x.str_short()}")
    if target.dtype is not torch.int64 or target.shape != x.shape[:-1]:
        raise TypeError(
            f"nll_loss: target must be int64 of shape {x.shape[:-1]}, got {target.str_short()}"
        )
    return ShapedArray(target.shape if reduction == "none" else (), x.dtype, x.device)


def _nll_decomposition(x, target, *, reduction, ignore_index):
    valid = B.ne(target, ignore_index)
    safe = U.select(valid, target, 0)
    last = len(S._shape(x)) - 1
    picked = S.squeeze(I.gather(x, S.expand_dims(safe, (last,)), last), (last,))
    w = U.convert(valid, get_aval(x).dtype)
    loss = U.neg(B.mul(picked, w))
    axes = tuple(range(len(S._shape(loss))))
    if reduction == "none":
        return loss
    if reduction == "sum":
        return R.reduce_sum(loss, axes)
    return B.div(R.reduce_sum(loss, axes), R.reduce_sum(w, axes))


def _nll_transpose(ct, x, target, *, reduction, ignore_index):
    if is_undefined(target) or not is_undefined(x):
        raise TypeError("nll_loss is linear in its input only")
    shape = x.aval.shape
    return [nll_loss_backward(ct, target, shape, reduction, ignore_index), None]


def _nll_batch(args, dims, *, reduction, ignore_index):
    # the kernel's own batch dim is N: the vmapped dim joins it, reduction 'none', then each
    # example's reduction
    x, t = args
    dx, dt = dims
    size = get_aval(x).shape[dx] if dx is not None else get_aval(t).shape[dt]
    x = S.broadcast_batch(x, size, 0) if dx is None else S.moveaxis(x, dx, 0)
    t = S.broadcast_batch(t, size, 0) if dt is None else S.moveaxis(t, dt, 0)
    xs, ts = S._shape(x), S._shape(t)
    n = math.prod(ts)
    flat = nll_loss(S.reshape(x, (n, xs[-1])), S.reshape(t, (n,)), "none", ignore_index)
    loss = S.reshape(flat, ts)
    if reduction == "none":
        return loss, 0
    axes = tuple(range(1, len(ts)))
    total = R.reduce_sum(loss, axes)
    if reduction == "sum":
        return total, 0
    count = R.reduce_sum(U.convert(B.ne(t, ignore_index), get_aval(x).dtype), axes)
    return B.div(total, count), 0


nll_loss_p = declare_composite(
    "nll_loss",
    decomposition=_nll_decomposition,
    impl=lambda x, t, *, reduction, ignore_index: F.nll_loss(
        x, t, reduction=reduction, ignore_index=ignore_index
    ),
    abstract_eval=_nll_abstract_eval,
    linear=True,
    nonlinear=(1,),
    transpose=_nll_transpose,
    batch=_nll_batch,
    torch_codegen=lambda args, avals, *, reduction, ignore_index: (
        f"torch.nn.functional.nll_loss({args[0]}, {args[1]}, reduction={reduction!r}, "
        f"ignore_index={ignore_index})"
    ),
)


def nll_loss_backward(g, target, shape: tuple, reduction: str, ignore_index: int):
    """The cotangent of nll_loss's input (of `shape`) as torch's nll_loss_backward kernel."""
    return nll_loss_backward_p.bind(
        g, target, shape=tuple(shape), reduction=reduction, ignore_index=int(ignore_index)
    )


def _nll_backward_impl(g, t, *, shape, reduction, ignore_index):
    # the kernel reads only the input's shape: an expanded scalar stands for it
    like = g.expand(shape) if g.dim() == 0 else g.new_empty(()).expand(shape)
    if reduction == "mean":
        # the forward kernel's total weight: the count of targets not ignored, as a float
        total = torch.ops.aten.nll_loss_forward(like, t, None, 1, ignore_index)[1]
    else:
        total = g.new_ones(())
    return torch.ops.aten.nll_loss_backward(
        g, like, t, None, _REDUCTIONS[reduction], ignore_index, total
    )


def _nll_backward_codegen(args, avals, *, shape, reduction, ignore_index):
    g, t = args
    # one call each: the input's stand-in (g itself, expanded, when it is a scalar) and the
    # total weight from the forward kernel, which counts the targets not ignored
    like = f"{g}.expand({shape})" if avals[0].ndim == 0 else f"{g}.new_empty(()).expand({shape})"
    if reduction == "mean":
        like = f"(_nll_like := {like})"
        total = f"torch.ops.aten.nll_loss_forward(_nll_like, {t}, None, 1, {ignore_index})[1]"
    else:
        total = f"{g}.new_ones(())"
    return (
        f"torch.ops.aten.nll_loss_backward({g}, {like}, {t}, None, "
        f"{_REDUCTIONS[reduction]}, {ignore_index}, {total})"
    )


def _nll_backward_abstract_eval(g, target, *, shape, reduction, ignore_index):
    want = _nll_abstract_eval(
        ShapedArray(shape, g.dtype, g.device),
        target,
        reduction=reduction,
        ignore_index=ignore_index,
    )
    if g.shape != want.shape or g.dtype != want.dtype:
        raise TypeError(f"nll_loss_backward: gradient {g.str_short()}, expected {want.str_short()}")
    return ShapedArray(shape, g.dtype, g.device)


def _nll_backward_decomposition(g, target, *, shape, reduction, ignore_index):
    from thunderx.primitives import creation as C

    valid = B.ne(target, ignore_index)
    w = U.convert(valid, get_aval(g).dtype)
    if reduction == "mean":
        axes = tuple(range(len(S._shape(target))))
        g = S.broadcast_to(B.div(g, R.reduce_sum(w, axes)), S._shape(target))
    elif reduction == "sum":
        g = S.broadcast_to(g, S._shape(target))
    vals = S.expand_dims(U.neg(B.mul(g, w)), (len(shape) - 1,))
    idx = S.expand_dims(U.select(valid, target, 0), (len(shape) - 1,))
    zeros = C.full(shape, 0.0, get_aval(g).dtype, get_aval(g).device)
    return I.scatter_add(zeros, idx, vals, len(shape) - 1)


def _nll_backward_transpose(ct, g, target, *, shape, reduction, ignore_index):
    if is_undefined(target) or not is_undefined(g):
        raise TypeError("nll_loss_backward is linear in its gradient only")
    return [nll_loss(ct, target, reduction, ignore_index), None]


def _nll_backward_batch(args, dims, *, shape, reduction, ignore_index):
    # as the forward: the vmapped dim joins the kernel's N, each example's reduction becomes a
    # per-row gradient, and one 'none' kernel runs over all rows
    g, t = args
    dg, dt = dims
    size = get_aval(g).shape[dg] if dg is not None else get_aval(t).shape[dt]
    g = S.broadcast_batch(g, size, 0) if dg is None else S.moveaxis(g, dg, 0)
    t = S.broadcast_batch(t, size, 0) if dt is None else S.moveaxis(t, dt, 0)
    ts = S._shape(t)
    if reduction != "none":
        kept = (0,)
        if reduction == "mean":
            axes = tuple(range(1, len(ts)))
            count = R.reduce_sum(U.convert(B.ne(t, ignore_index), get_aval(g).dtype), axes)
            g = B.div(g, count)
        g = S.broadcast_in_dim(g, ts, kept)
    n = math.prod(ts)
    flat = nll_loss_backward(
        S.reshape(g, (n,)), S.reshape(t, (n,)), (n, shape[-1]), "none", ignore_index
    )
    return S.reshape(flat, ts + (shape[-1],)), 0


nll_loss_backward_p = declare_composite(
    "nll_loss_backward",
    decomposition=_nll_backward_decomposition,
    impl=_nll_backward_impl,
    abstract_eval=_nll_backward_abstract_eval,
    linear=True,
    nonlinear=(1,),
    transpose=_nll_backward_transpose,
    batch=_nll_backward_batch,
    torch_codegen=_nll_backward_codegen,
)
