"""F.embedding_bag as a lookup (F.embedding, which carries max_norm and scale_grad_by_freq) and a
segment reduction over bags: each position's bag id comes from the offsets by comparison, so
offsets may be traced values; sums and means are index_adds, max picks each bag's first maximum
(as ATen's kernel does) and gathers it, so its derivative reaches that row only."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunderx.lang._base import aval, dtype, ndim, register, shape


@register(F.embedding_bag)
def embedding_bag(
    input,  # noqa: A002
    weight,
    offsets=None,
    max_norm=None,
    norm_type=2,
    scale_grad_by_freq=False,
    mode="mean",
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=None,
):
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(
            f"embedding_bag: per_sample_weights is only supported for mode='sum' (got {mode!r})"
        )
    if scale_grad_by_freq and mode == "max":
        raise ValueError(
            "embedding_bag: max mode does not support scaling the gradient by frequency"
        )
    if ndim(weight) != 2:
        raise ValueError(f"embedding_bag: weight must be 2-D, got shape {shape(weight)}")
    n, width = shape(weight)
    dev = aval(weight).device
    if per_sample_weights is not None and tuple(shape(per_sample_weights)) != tuple(shape(input)):
        raise ValueError(
            f"embedding_bag: per_sample_weights shape {shape(per_sample_weights)} must match "
            f"input shape {shape(input)}"
        )
    if ndim(input) == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets must be None when input is 2-D")
        nbags, length = shape(input)
        flat = input.reshape(-1)
        bag = torch.arange(nbags * length, device=dev) // max(length, 1)
        valid = torch.ones(nbags * length, dtype=torch.bool, device=dev)
    elif ndim(input) == 1:
        if offsets is None or ndim(offsets) != 1:
            raise ValueError("embedding_bag: offsets must be a 1-D tensor when input is 1-D")
        nbags = shape(offsets)[0] - (1 if include_last_offset else 0)
        flat = input
        pos = torch.arange(shape(input)[0], device=dev)
        starts = offsets[:nbags]
        bag = (starts.unsqueeze(0) <= pos.unsqueeze(1)).sum(1) - 1
        valid = bag >= 0
        if include_last_offset:
            valid = valid & (pos < offsets[nbags])
        bag = bag.clamp(min=0)
    else:
        raise ValueError(f"embedding_bag: input must be 1-D or 2-D, got shape {shape(input)}")
    if padding_idx is not None:
        if not -n <= padding_idx < n:
            raise ValueError(f"embedding_bag: padding_idx {padding_idx} out of range for {n} rows")
        valid = valid & (flat != padding_idx % n)
    rows = F.embedding(flat, weight, max_norm=max_norm, norm_type=norm_type)
    if scale_grad_by_freq:
        rows = _scale_grad_as_torch(rows, flat, n, dev)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1).unsqueeze(1)
    mask = valid.unsqueeze(1).expand(shape(rows))
    rows = torch.where(mask, rows, torch.zeros_like(rows))
    zeros = torch.zeros(nbags, width, dtype=dtype(weight), device=dev)
    if mode != "max":
        out = zeros.index_add(0, bag, rows)
        if mode == "mean":
            count = torch.zeros(nbags, dtype=dtype(weight), device=dev).index_add(
                0, bag, valid.to(dtype(weight))
            )
            out = out / count.clamp(min=1).unsqueeze(1)
        return out
    total = shape(rows)[0]
    bags = bag.unsqueeze(1).expand(shape(rows))
    plain = rows.detach()
    vals = torch.where(mask, plain, torch.full_like(plain, -torch.inf))
    best = torch.full((nbags, width), -torch.inf, dtype=dtype(weight), device=dev)
    best = best.scatter_reduce(0, bags, vals, "amax", include_self=True)
    hit = mask & (plain == torch.gather(best, 0, bags))
    where_pos = torch.arange(total, device=dev).unsqueeze(1).expand(shape(rows))
    cand = torch.where(hit, where_pos, torch.full_like(where_pos, total))
    first = torch.full((nbags, width), total, dtype=torch.int64, device=dev)
    first = first.scatter_reduce(0, bags, cand, "amin", include_self=True)
    empty = first == total
    picked = torch.gather(rows, 0, first.clamp(max=max(total - 1, 0)))
    return torch.where(empty, torch.zeros_like(picked), picked)


def _scale_grad_as_torch(rows, flat, n: int, dev):
    """The derivative torch 2.13's CPU kernel gives with scale_grad_by_freq: the gradient of row r
    is divided by the count of sorted(indices)[k], where r is the k-th distinct index (for
    indices [4, 1, 4, 0, 2, 4, 3, 1] row 2 is divided by 2 and row 4 by 1, not by their own
    counts; checked against torch.autograd on random bags, padding_idx and per-sample weights).
    The value is unchanged: rows + 0 * (rows - rows)."""
    ones = torch.ones(shape(flat), dtype=rows.dtype, device=dev)
    count = torch.zeros(n, dtype=rows.dtype, device=dev).index_add(0, flat, ones)
    rank = (torch.cumsum((count > 0).to(torch.int64), 0) - 1).clamp(min=0)
    ordered = torch.sort(flat).values
    divisor = torch.gather(count, 0, torch.gather(ordered, 0, torch.gather(rank, 0, flat)))
    plain = rows.detach()
    return plain + (rows - plain) / divisor.unsqueeze(1)
