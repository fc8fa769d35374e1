"""torch.segment_reduce (aten._segment_reduce): reductions over consecutive segments of axis 0,
given by `lengths` or `offsets` (1-D; concrete or traced, the number of segments being their
length). Each element's segment is found with searchsorted, so nothing depends on the values of
lengths/offsets at trace time; elements outside every segment are dropped.

Semantics and derivatives are torch's: `initial` takes part in every segment's reduction (mean:
(initial + sum) / count); empty segments give `initial`, else sum 0, prod 1, mean nan, max -inf,
min inf; max/min spread the derivative evenly over the data elements equal to the result (not
`initial`), as torch's _segment_reduce_backward does."""

from __future__ import annotations

import math

import torch

from thunderx.lang._base import aval, ndim, register, shape

_EMPTY = {"sum": 0.0, "prod": 1.0, "mean": math.nan, "max": -math.inf, "min": math.inf}


class _Segments:
    """Where each element of data's segmented axis goes. The leading (batch) dims of data are
    flattened with the axis into rows, and each batch entry gets S + 1 buckets of its own (the
    last: outside every segment), so one index_add reduces every segment of every batch entry."""

    def __init__(self, data, lengths, offsets, axis):
        bounds = lengths if lengths is not None else offsets
        k = ndim(bounds) - 1
        if axis % max(ndim(data), 1) != k:
            raise RuntimeError(
                f"segment_reduce: axis {axis} must be the last dim of lengths/offsets ({k})"
            )
        self.batch, self.n = tuple(shape(data)[:k]), shape(data)[k]
        self.rest = tuple(shape(data)[k + 1 :])
        self.num = shape(bounds)[-1] - (0 if lengths is not None else 1)
        rows = math.prod(self.batch)
        positions = torch.arange(self.n, device=aval(data).device).expand(self.batch + (self.n,))
        if lengths is not None:
            ids = torch.searchsorted(torch.cumsum(lengths, -1), positions.contiguous(), right=True)
        else:
            ids = torch.searchsorted(offsets, positions.contiguous(), right=True) - 1
            ids = torch.where(ids < 0, self.num, ids)
        ids = torch.clamp(ids, max=self.num).reshape(rows, self.n)
        base = torch.arange(rows, device=aval(data).device).reshape(rows, 1) * (self.num + 1)
        self.ids = (ids + base).reshape(-1)
        self.buckets = rows * (self.num + 1)

    def rows(self, x):
        """x (data-shaped) as one row per element of the segmented axis."""
        return x.reshape((-1,) + self.rest)

    def result(self, buckets):
        """(buckets, *rest) -> (*batch, S, *rest), the outside bucket dropped."""
        b = buckets.reshape((-1, self.num + 1) + self.rest)[:, : self.num]
        return b.reshape(self.batch + (self.num,) + self.rest)

    def total(self, x):
        out = torch.zeros((self.buckets,) + self.rest, dtype=x.dtype, device=x.device)
        return self.result(out.index_add(0, self.ids, self.rows(x)))

    def reduce(self, x, how, fill):
        index = self.ids.reshape((-1,) + (1,) * len(self.rest)).expand(
            (self.ids.shape[0],) + self.rest
        )
        start = torch.full((self.buckets,) + self.rest, fill, dtype=x.dtype, device=x.device)
        return start.scatter_reduce(0, index, self.rows(x), how, include_self=False)

    def spread(self, buckets):
        """Each element's value of its segment's bucket, data-shaped."""
        return buckets.index_select(0, self.ids).reshape(self.batch + (self.n,) + self.rest)


@register(torch.segment_reduce)
def _segment_reduce(
    data,
    reduce,
    *,
    lengths=None,
    indices=None,
    offsets=None,
    axis=0,
    unsafe=False,
    initial=None,
):
    if reduce not in _EMPTY:
        raise RuntimeError(
            f"segment_reduce: reduce must be one of {sorted(_EMPTY)}, got {reduce!r}"
        )
    if indices is not None:
        raise NotImplementedError("segment_reduce: indices= is not supported (torch neither)")
    if (lengths is None) == (offsets is None):
        raise RuntimeError("segment_reduce: give exactly one of lengths and offsets")
    seg = _Segments(data, lengths, offsets, axis)
    count = seg.total(torch.ones_like(data))
    empty = count == 0
    if reduce in ("sum", "mean"):
        total = seg.total(data)
        if initial is not None:
            total = total + initial
        out = total if reduce == "sum" else total / torch.where(empty, 1.0, count)
    elif reduce == "prod":
        out = seg.result(seg.reduce(data, "prod", 1.0))
        if initial is not None:
            out = out * initial
    else:
        out = _extremum(seg, data, reduce, initial)
    fill = _EMPTY[reduce] if initial is None else float(initial)
    return torch.where(empty, torch.full_like(out, fill), out)


def _extremum(seg, data, reduce, initial):
    """max/min: the value, with the derivative spread evenly over the data elements equal to it
    (written as zeros d - stop_gradient(d) summed per segment, so the value stays exact)."""
    how = "amax" if reduce == "max" else "amin"
    buckets = seg.reduce(data.detach(), how, math.nan)  # untouched buckets: nan, equal to nothing
    if initial is not None:
        pick = torch.maximum if reduce == "max" else torch.minimum
        buckets = torch.where(
            buckets.isnan(), buckets, pick(buckets, torch.full_like(buckets, initial))
        )
    hits = (data == seg.spread(buckets)).to(data.dtype)
    ties = seg.total(hits)
    share = seg.total(hits * (data - data.detach()))
    return seg.result(buckets) + share / torch.where(ties == 0, 1.0, ties)
