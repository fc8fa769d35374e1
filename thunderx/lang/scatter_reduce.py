"""torch.scatter_reduce and torch.index_reduce (sum, mean, prod, amax, amin; include_self):
sum and mean are scatter_adds, the others the scatter_reduce primitive; index_reduce is a
scatter_reduce with the 1-d index spread along its dim."""

from __future__ import annotations

import torch

from thunderx.lang._base import aval, canon_dim, dtype, is_float, ndim, register, shape
from thunderx.lang.gather import _on_1d
from thunderx.lang.shape_ops import _wrap_index
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import indexing as I
from thunderx.primitives import shape as S
from thunderx.primitives import slicing as L
from thunderx.primitives import unary as U
from thunderx.primitives.scatter_reduce import scatter_reduce as _prim

_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _reduce(x, d, index, src, reduce, include_self, what):
    if reduce not in _REDUCES:
        raise RuntimeError(f"{what}: reduce argument must be one of {_REDUCES}, got {reduce!r}")
    if dtype(src) != dtype(x):
        raise RuntimeError(f"{what}: expected source and self to have the same dtype")
    if shape(src) != shape(index):
        src = L.slice_(src, (0,) * ndim(src), shape(index))
    index = _wrap_index(index, shape(x)[d])
    if reduce in ("amax", "amin", "prod"):
        return _prim(x, index, src, d, reduce, include_self)
    a = aval(x)
    zeros = C.full(a.shape, 0, a.dtype, a.device)
    total = I.scatter_add(zeros, index, src, d)
    ones = C.full(shape(index), 1, a.dtype, a.device)
    count = I.scatter_add(zeros, index, ones, d)
    touched = B.gt(count, 0)
    base = x if include_self else U.select(touched, zeros, x)
    total = B.add(base, total)
    if reduce == "sum":
        return total
    if include_self:
        count = B.add(count, C.full(a.shape, 1, a.dtype, a.device))
    safe = U.select(touched, count, C.full(a.shape, 1, a.dtype, a.device))
    mean = B.div(total, safe) if is_float(a.dtype) else _floor_div(total, safe)
    return U.select(touched, mean, x)


def _floor_div(a, b):
    return torch.div(a, b, rounding_mode="floor")


@register(torch.scatter_reduce, methods=("scatter_reduce",))
def _scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    if ndim(x) == 0:
        return _on_1d(_scatter_reduce, x, dim, index, src, reduce=reduce, include_self=include_self)
    d = canon_dim(dim, ndim(x))
    return _reduce(x, d, index, src, reduce, include_self, "scatter_reduce")


@register(torch.index_reduce, methods=("index_reduce",))
def _index_reduce(x, dim, index, source, reduce, *, include_self=True):
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(
            f"index_reduce: reduce argument must be one of prod, mean, amax, amin, got {reduce!r}"
        )
    if ndim(x) == 0:
        return _on_1d(
            _index_reduce, x, dim, index, source, reduce=reduce, include_self=include_self
        )
    d = canon_dim(dim, ndim(x))
    if ndim(index) != 1 or shape(index)[0] != shape(source)[d]:
        raise RuntimeError(
            "index_reduce: index must be a vector as long as source's dim "
            f"{d}: got index {tuple(shape(index))} and source {tuple(shape(source))}"
        )
    spread = [1] * ndim(source)
    spread[d] = shape(index)[0]
    full = S.broadcast_to(S.reshape(index, tuple(spread)), shape(source))
    return _reduce(x, d, full, source, reduce, include_self, "index_reduce")
