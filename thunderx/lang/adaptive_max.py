"""Adaptive max pooling (1-d, 2-d, 3-d, with indices) with torch's choice of element: windows
[floor(i * in / out), ceil((i + 1) * in / out)) scanned in row-major order, the first strictly
larger value kept (a nan replaces the running maximum, so the last nan wins), the index flat
over the input's spatial dims. One spatial dim at a time, last dim first: the first maximum in
row-major order is the first row holding the maximum, then its first column. The value is the
selected element (a select per tap), so its gradient goes to that element, as torch's does."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunderx.lang._base import aval, ndim, register, shape


def _windows(n_in: int, n_out: int):
    return [((i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)) for i in range(n_out)]


def _along(v, d, like):
    s = [1] * ndim(like)
    s[d] = -1
    return v.reshape(s).expand(shape(like))


def adaptive_max(x, sizes):
    k, nd = len(sizes), ndim(x)
    dev = aval(x).device
    vals, carried = x, {}
    for j in reversed(range(k)):
        d = nd - k + j
        n_in = shape(vals)[d]
        n_out = shape(vals)[d] if sizes[j] is None else int(sizes[j])
        wins = _windows(n_in, n_out)
        best = None
        for t in range(max(hi - lo for lo, hi in wins)):
            it = torch.tensor([min(lo + t, hi - 1) for lo, hi in wins], device=dev)
            v = torch.index_select(vals, d, it)
            pos = _along(it, d, v)
            carry = {dd: torch.index_select(c, d, it) for dd, c in carried.items()}
            if best is None:
                best = (v, pos, carry)
                continue
            upd = (v > best[0]) | torch.isnan(v)
            valid = [lo + t < hi for lo, hi in wins]
            if not all(valid):
                upd = upd & _along(torch.tensor(valid, device=dev), d, v)
            best = (
                torch.where(upd, v, best[0]),
                torch.where(upd, pos, best[1]),
                {dd: torch.where(upd, c, best[2][dd]) for dd, c in carry.items()},
            )
        vals, carried = best[0], {**best[2], d: best[1]}
    index = None
    for d in range(nd - k, nd):  # flat over the input's spatial dims, row-major
        index = carried[d] if index is None else index * shape(x)[d] + carried[d]
    return vals, index


def _adaptive_max_pool(k):
    def impl(x, output_size, return_indices=False):
        sizes = [output_size] * k if isinstance(output_size, int) else list(output_size)
        if len(sizes) != k:
            raise ValueError(f"adaptive_max_pool{k}d: output_size must have {k} elements")
        if ndim(x) not in (k + 1, k + 2):
            raise RuntimeError(f"adaptive_max_pool{k}d: expected {k + 1}-D or {k + 2}-D input")
        vals, index = adaptive_max(x, sizes)
        return (vals, index) if return_indices else vals

    impl.__name__ = f"adaptive_max_pool{k}d"
    return impl


for _k in (1, 2, 3):
    _impl = _adaptive_max_pool(_k)
    register(getattr(F, f"adaptive_max_pool{_k}d"))(_impl)
    register(getattr(F, f"adaptive_max_pool{_k}d_with_indices"))(
        lambda x, output_size, return_indices=False, _impl=_impl: _impl(x, output_size, True)
    )
register(torch.adaptive_max_pool1d)(
    lambda x, output_size: _adaptive_max_pool(1)(x, output_size, True)
)
