"""Gathers and scatters: gather, take_along_dim, index_select, scatter(_add), index_add, and
F.pad (constant padding as a primitive; reflect/replicate/circular as gathers)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunderx.errors import unsupported
from thunderx.lang._base import (
    SCALARS,
    broadcast_shapes,
    canon_dim,
    dtype,
    is_tensor,
    ndim,
    register,
    shape,
)
from thunderx.lang._base import aval as _aval
from thunderx.lang.shape_ops import _numel, _wrap_index
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import indexing as I
from thunderx.primitives import shape as S


@register(torch.gather, methods=("gather",))
def _gather(x, dim, index, *, sparse_grad=False):
    if 0 in shape(index):
        return C.full(shape(index), 0, dtype(x), _aval(x).device)
    if ndim(x) == 0:
        canon_dim(dim, 0)
        flat_idx = S.reshape(_wrap_index(index, 1), (1,))
        return S.reshape(I.gather(S.reshape(x, (1,)), flat_idx, 0), shape(index))
    d = canon_dim(dim, ndim(x))
    return I.gather(x, _wrap_index(index, shape(x)[d]), d)


@register(torch.take_along_dim, methods=("take_along_dim",))
def _take_along_dim(x, indices, dim=None):
    if dim is None:
        return _gather(S.reshape(x, (_numel(x),)), 0, S.reshape(indices, (_numel(indices),)))
    d = canon_dim(dim, ndim(x))
    xs, is_ = list(shape(x)), list(shape(indices))
    xs[d] = is_[d] = 1
    b = broadcast_shapes(tuple(xs), tuple(is_))
    tx = list(b)
    tx[d] = shape(x)[d]
    ti = list(b)
    ti[d] = shape(indices)[d]
    return _gather(S.broadcast_to(x, tuple(tx)), d, S.broadcast_to(indices, tuple(ti)))


@register(torch.index_select, methods=("index_select",))
def _index_select(x, dim, index):
    if ndim(x) == 0:
        return S.reshape(I.take(S.reshape(x, (1,)), _wrap_index(index, 1), 0), ())
    d = canon_dim(dim, ndim(x))
    return I.take(x, _wrap_index(index, shape(x)[d]), d)


def _on_1d(fn, x, dim, index, src, **kwargs):
    """fn on a 0-d x as on its one-element vector (torch treats a 0-d tensor, its 0-d index and
    source, as of size 1 along dim 0 or -1)."""
    canon_dim(dim, 0)

    def one(t):
        return S.reshape(t, (1,)) if is_tensor(t) and ndim(t) == 0 else t

    return S.reshape(fn(one(x), 0, one(index), one(src), **kwargs), ())


@register(torch.scatter_add, methods=("scatter_add",))
def _scatter_add(x, dim, index, src):
    if ndim(x) == 0:
        return _on_1d(_scatter_add, x, dim, index, src)
    d = canon_dim(dim, ndim(x))
    src = S.slice_(src, (0,) * ndim(src), shape(index)) if shape(src) != shape(index) else src
    return I.scatter_add(x, _wrap_index(index, shape(x)[d]), src, d)


@register(torch.scatter, methods=("scatter",))
def _scatter(x, dim, index, src=None, *, value=None, reduce=None):
    if ndim(x) == 0:
        return _on_1d(_scatter, x, dim, index, src, value=value, reduce=reduce)
    d = canon_dim(dim, ndim(x))
    if reduce == "add":
        if src is None or type(src) in SCALARS:
            src = C.full(shape(index), value if src is None else src, dtype(x))
        return _scatter_add(x, dim, index, src)
    if reduce is not None:
        raise unsupported(f"torch.scatter(reduce={reduce!r})")
    index = _wrap_index(index, shape(x)[d])
    if src is None or type(src) in SCALARS:
        v = value if src is None else src
        src = C.full(shape(index), v, dtype(x))
    elif shape(src) != shape(index):
        src = S.slice_(src, (0,) * ndim(src), shape(index))
    # where indices repeat, torch's CPU kernel writes in index order: the last writer's value
    # stays (a sum of the writes would be a silent wrong answer), found as the largest flat
    # position among the writers
    from thunderx.primitives import unary as U
    from thunderx.primitives.scatter_reduce import scatter_reduce

    dev = _aval(x).device
    n = _numel(index)
    positions = torch.arange(n, device=dev).reshape(shape(index))
    none = C.full(shape(x), -1, torch.int64, dev)
    writer = scatter_reduce(none, index, positions, d, "amax", True)
    flat_src = S.reshape(src, (n,))
    safe = U.select(B.ge(writer, 0), writer, 0)
    got = S.reshape(I.take(flat_src, S.reshape(safe, (_numel(x),)), 0), shape(x))
    return U.select(B.ge(writer, 0), got, x)


@register(torch.index_add, methods=("index_add",))
def _index_add(x, dim, index, source, *, alpha=1):
    if ndim(x) == 0:
        return _on_1d(_index_add, x, dim, index, source, alpha=alpha)
    d = canon_dim(dim, ndim(x))
    src = source if alpha == 1 else B.mul(source, alpha)
    return I.index_add(x, _wrap_index(index, shape(x)[d]), src, d)


@register(F.pad)
def _pad(x, pad, mode="constant", value=None):
    if mode != "constant":
        return _pad_nonconstant(x, pad, mode)
    pad = list(pad)
    config = [(0, 0, 0)] * ndim(x)
    for i in range(len(pad) // 2):
        d = ndim(x) - 1 - i
        config[d] = (pad[2 * i], pad[2 * i + 1], 0)
    v = 0.0 if value is None else value
    if not dtype(x).is_floating_point:
        v = int(v)
    return S.pad(x, v, config)


def _pad_nonconstant(x, pad, mode):
    if mode not in ("reflect", "replicate", "circular"):
        raise unsupported(f"F.pad(mode={mode!r})")
    for i in range(len(pad) // 2):
        d = ndim(x) - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        n = shape(x)[d]
        # These modes are gathers along each padded dim; torch itself gives the source index of
        # every output position when it pads a probe holding 0..n-1 (negative pads included).
        probe = torch.arange(n, dtype=torch.float64).reshape(1, 1, n)
        idx = F.pad(probe, (lo, hi), mode=mode).reshape(-1).long().tolist()
        x = I.take(x, torch.tensor(idx, dtype=torch.int64, device=_aval(x).device), d)
    return x
