"""Sorting and order statistics on the sort primitives: sort, argsort, msort, topk, kthvalue,
median/nanmedian (torch's lower median, with indices), quantile/nanquantile, cummax/cummin, logcumsumexp,
searchsorted and bucketize."""

from __future__ import annotations

import math

import torch

from thunderx.avals import is_float
from thunderx.lang._base import (
    SCALARS,
    canon_dim,
    convert,
    dtype,
    float_operand,
    ndim,
    register,
    shape,
)
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import indexing as I
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import slicing as SL
from thunderx.primitives import sort as SO
from thunderx.primitives import unary as U

RT = torch.return_types


def _sort_with_indices(x, d, descending=False, stable=True):
    return SO.sort([x, SO.iota_along(x, d)], d, is_stable=stable, descending=descending)


@register(torch.sort, methods=("sort",))
def sort(x, dim=-1, descending=False, stable=False, *, out=None):
    if ndim(x) == 0:
        return RT.sort((x, C.full((), 0, torch.int64)))
    d = canon_dim(dim, ndim(x))
    values, idx = _sort_with_indices(x, d, descending, bool(stable))
    return RT.sort((values, idx))


@register(torch.argsort, methods=("argsort",))
def argsort(x, dim=-1, descending=False, stable=False):
    return sort(x, dim, descending, stable).indices


@register(torch.msort, methods=("msort",))
def msort(x, *, out=None):
    return sort(x, 0).values


@register(torch.topk, methods=("topk",))
def topk(x, k, dim=-1, largest=True, sorted=True, *, out=None):  # noqa: A002
    if ndim(x) == 0:
        if k not in (0, 1):
            raise IndexError(f"topk: k ({k}) is out of range for a 0-d tensor")
        return RT.topk((x, C.full((), 0, torch.int64)))
    d = canon_dim(dim, ndim(x))
    if not 0 <= k <= shape(x)[d]:
        raise RuntimeError(f"topk: selected index k ({k}) out of range (dim size {shape(x)[d]})")
    values, idx = SO.top_k(x, k, d, largest=largest, sorted=sorted)
    return RT.topk((values, idx))


def _pick(values, idx, d, pos, keepdim):
    """Element `pos` (an int, or an int64 tensor of the reduced shape) along d of both."""
    if isinstance(pos, int):
        out = [SL.slice_in_dim(v, pos, pos + 1, 1, d) for v in (values, idx)]
    else:
        where = S.expand_dims(pos, (d,))
        out = [I.gather(v, where, d) for v in (values, idx)]
    return [v if keepdim else S.squeeze(v, (d,)) for v in out]


@register(torch.kthvalue, methods=("kthvalue",))
def kthvalue(x, k, dim=-1, keepdim=False, *, out=None):
    if ndim(x) == 0:
        if k != 1:
            raise IndexError(f"kthvalue: k ({k}) is out of range for a 0-d tensor")
        return RT.kthvalue((x, C.full((), 0, torch.int64)))
    d = canon_dim(dim, ndim(x))
    n = shape(x)[d]
    if not 1 <= k <= n:
        raise IndexError(f"kthvalue: selected number k ({k}) is out of range (dim size {n})")
    values, idx = _sort_with_indices(x, d)
    return RT.kthvalue(tuple(_pick(values, idx, d, k - 1, keepdim)))


def _median_along(x, d, keepdim, ignore_nan):
    """torch's lower median: sorted position (n - 1) // 2 (NaNs sort last). With NaNs, median
    returns the first NaN; nanmedian takes the lower median of the rest."""
    n = shape(x)[d]
    values, idx = _sort_with_indices(x, d)
    if not is_float(dtype(x)):
        return _pick(values, idx, d, (n - 1) // 2, keepdim)
    nans = R.reduce_sum(U.convert(B.ne(x, x), torch.int64), (d,))
    if ignore_nan:
        count = B.sub(n, nans)
        half = B.mul(U.convert(B.sub(B.maximum(count, 1), 1), torch.float64), 0.5)
        pos = U.convert(U.floor(half), torch.int64)
    else:
        pos = U.select(B.gt(nans, 0), B.sub(n, nans), (n - 1) // 2)
    return _pick(values, idx, d, pos, keepdim)


def _evenly_distributed(flat, value):
    """`value` with torch's derivative for a full reduction picking one element: the gradient is
    shared evenly among the elements equal to it (the NaNs when it is NaN). The value is exactly
    `value`: the added term is (x - stop_gradient(x)) weighted, which is zero."""
    from thunderx.primitives.higher_order import stop_gradient

    if not is_float(dtype(flat)):
        return value
    v = stop_gradient(value)
    vb = S.broadcast_in_dim(v, shape(flat), ())
    is_nan = B.ne(flat, flat)
    mask = U.select(S.broadcast_in_dim(B.ne(v, v), shape(flat), ()), is_nan, B.eq(flat, vb))
    mask = U.convert(mask, dtype(flat))
    count = R.reduce_sum(mask, (0,))
    delta = B.mul(B.sub(flat, stop_gradient(flat)), mask)
    share = R.reduce_sum(U.select(B.ne(mask, 0.0), delta, 0.0), (0,))
    return B.add(v, B.div(share, count))


def _median(x, dim, keepdim, ignore_nan, name):
    if dim is None:
        flat = S.reshape(x, (math.prod(shape(x)),))
        if shape(flat)[0] == 0:
            raise IndexError(f"{name}() input tensor cannot be empty")
        return _evenly_distributed(flat, _median_along(flat, 0, False, ignore_nan)[0])
    if ndim(x) == 0:
        return RT.median((x, C.full((), 0, torch.int64)))
    d = canon_dim(dim, ndim(x))
    if shape(x)[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    return RT.median(tuple(_median_along(x, d, keepdim, ignore_nan)))


@register(torch.median, methods=("median",))
def median(x, dim=None, keepdim=False, *, out=None):
    return _median(x, dim, keepdim, False, "median")


@register(torch.nanmedian, methods=("nanmedian",))
def nanmedian(x, dim=None, keepdim=False, *, out=None):
    return _median(x, dim, keepdim, True, "nanmedian")


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


@register(torch.quantile, methods=("quantile",))
def quantile(x, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    """torch.quantile: sorted values at rank q * (n - 1), interpolated; NaN in a slice gives NaN.
    A tensor q of rank 1 puts its dim first in the result."""
    return _quantile(x, q, dim, keepdim, interpolation, False, "quantile")


@register(torch.nanquantile, methods=("nanquantile",))
def nanquantile(x, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    """torch.nanquantile: quantile of the non-NaN values of each slice (NaN for an all-NaN one)."""
    return _quantile(x, q, dim, keepdim, interpolation, True, "nanquantile")


def _quantile(x, q, dim, keepdim, interpolation, ignore_nan, name):
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"{name}() interpolation must be one of {_INTERPOLATIONS}")
    if not is_float(dtype(x)):
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
    if type(q) in SCALARS:
        q = C.full((), float(q), dtype(x))
    elif ndim(q) > 1:
        raise RuntimeError(f"{name}() q must be a scalar or 1D tensor")
    q = convert(q, dtype(x))
    in_rank = ndim(x)
    if dim is None:
        x = S.reshape(x, (math.prod(shape(x)),))
        d, out_keep = 0, None
    else:
        d = canon_dim(dim, ndim(x))
        out_keep = d
    if ndim(x) == 0:
        x = S.reshape(x, (1,))
    n = shape(x)[d]
    if n == 0:
        raise IndexError(f"{name}() input tensor must be non-empty")
    xs = S.moveaxis(SO.sort([x], d)[0], d, ndim(x) - 1)  # (*rest, n), NaNs last
    rest = shape(xs)[:-1]
    nq = 1 if ndim(q) == 0 else shape(q)[0]
    idx_shape = rest + (nq,)
    lead = tuple(range(len(rest)))
    nans = R.reduce_sum(U.convert(B.ne(xs, xs), torch.int64), (len(rest),))
    if ignore_nan:
        last = U.convert(B.maximum(B.sub(n - 1, nans), 0), dtype(x))  # rank of the last non-NaN
        last = S.broadcast_in_dim(last, idx_shape, lead)
        invalid = B.eq(nans, n)
    else:
        last = float(n - 1)
        invalid = B.gt(nans, 0)
    rank = B.mul(S.broadcast_in_dim(S.reshape(q, (nq,)), idx_shape, (len(rest),)), last)
    lo = U.floor(rank)
    hi = U.ceil(rank)
    if interpolation == "nearest":
        lo = hi = U.round(rank)

    def at(r):
        return I.gather(xs, U.convert(r, torch.int64), len(rest))

    below, above = at(lo), at(hi)
    if interpolation in ("lower", "nearest"):
        out = below
    elif interpolation == "higher":
        out = above
    elif interpolation == "midpoint":
        out = B.mul(B.add(below, above), 0.5)
    else:
        out = B.add(below, B.mul(B.sub(rank, lo), B.sub(above, below)))
    out = U.select(S.broadcast_in_dim(invalid, idx_shape, lead), math.nan, out)
    out = S.moveaxis(out, len(rest), 0)  # (nq, *rest)
    if keepdim and in_rank > 0:
        if out_keep is None:
            out = S.reshape(out, (nq,) + (1,) * in_rank)
        else:
            out = S.expand_dims(out, (out_keep + 1,))
    return S.squeeze(out, (0,)) if ndim(q) == 0 else out


@register(torch.cummax, methods=("cummax",))
def cummax(x, dim):
    if ndim(x) == 0:
        return RT.cummax((x, C.full((), 0, torch.int64)))
    return RT.cummax(tuple(SO.cummax(x, canon_dim(dim, ndim(x)))))


@register(torch.cummin, methods=("cummin",))
def cummin(x, dim):
    if ndim(x) == 0:
        return RT.cummin((x, C.full((), 0, torch.int64)))
    return RT.cummin(tuple(SO.cummin(x, canon_dim(dim, ndim(x)))))


@register(torch.logcumsumexp, methods=("logcumsumexp",))
def logcumsumexp(x, dim):
    x = float_operand(x)
    if ndim(x) == 0:
        return x
    return SO.logcumsumexp(x, canon_dim(dim, ndim(x)))


@register(torch.searchsorted)
def searchsorted(
    sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None, out=None
):
    if side is not None:
        if side not in ("left", "right"):
            raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
        if right and side == "left":
            raise ValueError("searchsorted: side='left' and right=True contradict each other")
        right = side == "right"
    if sorter is not None:
        sorted_sequence = I.gather(sorted_sequence, sorter, ndim(sorted_sequence) - 1)
    scalar = type(values) in SCALARS
    if scalar:
        values = C.full((1,), values, dtype(sorted_sequence))
    index_dtype = torch.int32 if out_int32 else torch.int64
    if dtype(values) != dtype(sorted_sequence):
        from thunderx.avals import ShapedArray, result_dtype

        common = result_dtype(
            ShapedArray(shape(values), dtype(values)),
            ShapedArray(shape(sorted_sequence), dtype(sorted_sequence)),
        )
        values, sorted_sequence = convert(values, common), convert(sorted_sequence, common)
    zero_d = ndim(values) == 0
    if zero_d:
        values = S.reshape(values, (1,))
    out = SO.searchsorted(sorted_sequence, values, right, index_dtype)
    return S.reshape(out, ()) if scalar or zero_d else out


@register(torch.bucketize)
def bucketize(x, boundaries, *, out_int32=False, right=False, out=None):
    if ndim(boundaries) != 1:
        raise RuntimeError(f"bucketize: boundaries must be 1-D, got {shape(boundaries)}")
    return searchsorted(boundaries, x, out_int32=out_int32, right=right)
