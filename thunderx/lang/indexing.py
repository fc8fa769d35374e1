"""`x[idx]` and `x[idx] = v` on traced tensors: ints, slices (with steps), None, Ellipsis,
integer tensors (advanced indexing, torch's placement rules) and boolean masks whose value is
known while tracing. In-place updates are functionalized."""

from __future__ import annotations

import math

import torch

from thunderx.core import Tracer
from thunderx.errors import concretization, unsupported
from thunderx.lang._base import aval, broadcast_shapes, dtype, ndim, register, shape
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import indexing as I
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U


def _is_index_tensor(i) -> bool:
    return isinstance(i, (Tracer, torch.Tensor)) or (
        isinstance(i, (list, tuple)) and i and all(isinstance(v, (int, bool)) for v in i)
    )


def _expand_index(x, idx):
    """Normalize to a tuple with Ellipsis expanded and bool masks turned into integer tensors."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    out = []
    for i in idx:
        if isinstance(i, (list,)) and all(isinstance(v, bool) for v in i) and i:
            i = torch.tensor(i)
        elif isinstance(i, list):
            i = torch.tensor(i, dtype=torch.int64)
        if isinstance(i, Tracer) and dtype(i) is torch.bool and i.to_concrete() is not None:
            i = i.to_concrete()  # a mask known while tracing (under grad): its positions are too
        if isinstance(i, Tracer) and dtype(i) is torch.bool:
            raise concretization(
                "boolean-mask indexing (the result's shape depends on the mask)",
                aval(i),
                "compute the mask from concrete tensors, or use torch.where(mask, x, 0)",
            )
        if isinstance(i, torch.Tensor) and i.dtype is torch.bool:
            out.extend(torch.nonzero(i, as_tuple=True) if i.ndim else [])
            if i.ndim == 0:
                raise unsupported("indexing with a 0-dim bool tensor")
            continue
        out.append(i)
    consumed = sum(1 for i in out if i is not None and i is not Ellipsis)
    n = ndim(x)
    if consumed > n:
        raise IndexError(f"too many indices for a tensor of dimension {n}")
    # identity tests: `in` / `index` would compare traced indices with == (elementwise)
    ellipsis = [k for k, i in enumerate(out) if i is Ellipsis]
    if ellipsis:
        k = ellipsis[0]
        out = out[:k] + [slice(None)] * (n - consumed) + out[k + 1 :]
    else:
        out = out + [slice(None)] * (n - consumed)
    return out


def getitem(x, idx):
    entries = _expand_index(x, idx)
    y = x
    dim = 0
    adv = []  # (dim in y, index tensor)
    for i in entries:
        if i is None:
            y = S.expand_dims(y, (dim,))
            dim += 1
        elif isinstance(i, slice):
            n = shape(y)[dim]
            start, stop, step = i.indices(n)
            if step <= 0:
                raise ValueError("slice step must be positive (as in torch)")
            stop = max(stop, start)
            y = S.slice_in_dim(y, start, stop, step, dim)
            dim += 1
        elif type(i) in (int,) or (isinstance(i, int) and not isinstance(i, bool)):
            n = shape(y)[dim]
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {n}")
            # torch applies integer indices as basic indexing, even beside tensor indices
            y = S.squeeze(S.slice_in_dim(y, i % n, i % n + 1, 1, dim), (dim,))
        elif _is_index_tensor(i):
            adv.append((dim, i))
            dim += 1
        else:
            raise TypeError(f"unsupported index {i!r} of type {type(i).__name__}")
    if not adv:
        return y
    return _advanced(y, adv)


def _wrap(idx, n):
    if isinstance(idx, torch.Tensor):
        if idx.dtype not in (torch.int64, torch.int32):
            raise IndexError(f"tensors used as indices must be integer, got {idx.dtype}")
        return torch.where(idx < 0, idx + n, idx).to(torch.int64)
    if dtype(idx) not in (torch.int64, torch.int32):
        raise IndexError(f"tensors used as indices must be integer, got {dtype(idx)}")
    idx = U.convert(idx, torch.int64)
    return U.select(B.lt(idx, 0), B.add(idx, n), idx)


def _advanced(y, adv):
    dims = [d for d, _ in adv]
    sizes = [shape(y)[d] for d in dims]
    idxs = [_wrap(i, n) for (_, i), n in zip(adv, sizes)]
    bshape = broadcast_shapes(*[tuple(i.shape) for i in idxs])
    idxs = [_bcast_index(i, bshape) for i in idxs]
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if len(adv) == 1:
        return I.take(y, idxs[0], dims[0])
    # Move the indexed dims to the front, flatten them, and take with a linear index.
    rest = [d for d in range(ndim(y)) if d not in dims]
    y = S.transpose(y, dims + rest)
    total = 1
    for n in sizes:
        total *= n
    y = S.reshape(y, (total,) + tuple(shape(y)[len(dims) :]))
    linear = idxs[0]
    for i, n in zip(idxs[1:], sizes[1:]):
        linear = _add(_mul(linear, n), i)
    out = I.take(y, linear, 0)
    if adjacent and dims[0] != 0:
        k = len(bshape)
        perm = list(range(k, k + dims[0])) + list(range(k)) + list(range(k + dims[0], ndim(out)))
        out = S.transpose(out, perm)
    return out


def _bcast_index(i, shp):
    if isinstance(i, torch.Tensor):
        return i.expand(shp) if tuple(i.shape) != shp else i
    return S.broadcast_to(i, shp)


def _mul(a, n):
    return a * n if isinstance(a, torch.Tensor) else B.mul(a, n)


def _add(a, b):
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a + b
    return B.add(a, b)


def index_put(x, idx, v):
    """The functional `x[idx] = v`: positions are found by indexing an iota of x's elements."""
    from thunderx.lang.views import place

    n = math.prod(shape(x))
    positions = getitem(S.reshape(C.iota(torch.int64, (n,), 0, aval(x).device), shape(x)), idx)
    return place(x, positions, v)


register(torch.Tensor.__getitem__)(getitem)


@register(torch.Tensor.__setitem__)
def _setitem(x, idx, v):
    from thunderx.lang.inplace import mutate

    mask = idx[0] if isinstance(idx, tuple) and len(idx) == 1 else idx
    if is_unknown_mask(mask):
        new = masked_put(x, mask, v)
    else:
        new = index_put(x, idx, v)
    mutate(x, new, "x[...] = value")


def is_unknown_mask(i) -> bool:
    """Whether index `i` is a boolean mask whose value is not known while tracing."""
    return isinstance(i, Tracer) and dtype(i) is torch.bool and i.to_concrete() is None


def masked_put(x, mask, v, accumulate: bool = False):
    """`x[mask] = v` for a mask unknown while tracing: every selected position (or row, when the
    mask covers the leading dims) takes the same value, so the result is a select and its shape
    does not depend on the mask. A `v` with one row per selected element would, and is refused."""
    k = ndim(mask)
    if shape(mask) != shape(x)[:k]:
        raise IndexError(
            f"the boolean mask of shape {shape(mask)} does not match the indexed tensor's "
            f"leading dims {shape(x)[:k]}"
        )
    rows = shape(x)[k:]
    v_shape = tuple(v.shape) if isinstance(v, (Tracer, torch.Tensor)) else ()
    try:
        fits = broadcast_shapes(v_shape, rows) == rows
    except (RuntimeError, ValueError):
        fits = False
    if not fits:
        raise concretization(
            f"x[mask] = v with v of shape {v_shape} (one row per selected element, a number "
            "that depends on the mask)",
            aval(mask),
            "use torch.where(mask, v, x) with v broadcastable to x",
        )
    m = S.reshape(mask, shape(mask) + (1,) * len(rows)) if rows else mask
    if accumulate:  # index_put(accumulate=True): each selected position once
        return (x + torch.where(m, v, torch.zeros_like(x))).to(dtype(x))
    return torch.where(m, v, x).to(dtype(x))
