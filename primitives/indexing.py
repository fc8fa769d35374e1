"""Indexing primitives: gather / scatter_add (torch.gather semantics), take / index_add (one axis,
any index shape), dynamic_slice / dynamic_update_slice (traced start indices)."""

from __future__ import annotations

import math

import torch

from thunderx.ad_util import Zero, instantiate, is_undefined
from thunderx.avals import ShapedArray, is_float
from thunderx.core import declare, get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import shape as S


def _shape(x):
    return tuple(get_aval(x).shape)


def _zeros_like_aval(aval):
    return instantiate(Zero(aval))


def _check_index(name, idx: ShapedArray):
    if idx.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name}: indices must be int32/int64, got {idx.str_short()}")


def _to_front(x, d, size):
    return S.broadcast_batch(x, size, 0) if d is None else S.moveaxis(x, d, 0)


def _batch_size(args, dims):
    return next(_shape(x)[d] for x, d in zip(args, dims) if d is not None)


# ---------------------------------------------------------------------------- gather / scatter_add


def _gather_abstract_eval(x, idx, *, axis):
    _check_index("gather", idx)
    if idx.ndim != x.ndim or any(
        i > n for d, (i, n) in enumerate(zip(idx.shape, x.shape)) if d != axis
    ):
        raise TypeError(f"gather: index {idx.str_short()} does not fit operand {x.str_short()}")
    return ShapedArray(idx.shape, x.dtype, x.device)


def _scatter_add_abstract_eval(x, idx, src, *, axis):
    _check_index("scatter_add", idx)
    if idx.shape != src.shape or src.dtype != x.dtype or idx.ndim != x.ndim:
        raise TypeError(
            f"scatter_add: operand {x.str_short()}, index {idx.str_short()}, "
            f"source {src.str_short()} do not agree"
        )
    return x.strip_weak()


def gather(x, idx, axis: int):
    return gather_p.bind(x, idx, axis=axis)


def scatter_add(x, idx, src, axis: int):
    return scatter_add_p.bind(x, idx, src, axis=axis)


def _gather_batch(args, dims, *, axis):
    x, idx = S.batch_to_front(args, dims)
    return gather(x, idx, axis + 1), 0


def _scatter_add_batch(args, dims, *, axis):
    x, idx, src = S.batch_to_front(args, dims)
    return scatter_add(x, idx, src, axis + 1), 0


gather_p = declare(
    "gather",
    impl=lambda x, idx, *, axis: torch.gather(x, axis, idx),
    abstract_eval=_gather_abstract_eval,
    linear=True,
    nonlinear=(1,),
    transpose=lambda ct, x, idx, *, axis: [
        scatter_add(_zeros_like_aval(x.aval), idx, ct, axis),
        None,
    ],
    batch=_gather_batch,
    torch_codegen=lambda args, avals, *, axis: f"torch.gather({args[0]}, {axis}, {args[1]})",
)
scatter_add_p = declare(
    "scatter_add",
    impl=lambda x, idx, src, *, axis: torch.scatter_add(x, axis, idx, src),
    abstract_eval=_scatter_add_abstract_eval,
    linear=True,
    nonlinear=(1,),
    transpose=lambda ct, x, idx, src, *, axis: [
        ct if is_undefined(x) else None,
        None,
        gather(ct, idx, axis) if is_undefined(src) else None,
    ],
    batch=_scatter_add_batch,
    torch_codegen=lambda args, avals, *, axis: (
        f"torch.scatter_add({args[0]}, {axis}, {args[1]}, {args[2]})"
    ),
)

# ------------------------------------------------------------------------------ take / index_add


def _take_shape(xs, idxs, axis):
    return tuple(xs[:axis]) + tuple(idxs) + tuple(xs[axis + 1 :])


def _take_impl(x, idx, *, axis):
    out = torch.index_select(x, axis, idx.reshape(-1))
    return out.reshape(_take_shape(x.shape, idx.shape, axis))


def _index_add_impl(x, idx, src, *, axis):
    flat = src.reshape(tuple(x.shape[:axis]) + (idx.numel(),) + tuple(x.shape[axis + 1 :]))
    return x.index_add(axis, idx.reshape(-1), flat)


def _take_abstract_eval(x, idx, *, axis):
    _check_index("take", idx)
    if not 0 <= axis < x.ndim:
        raise TypeError(f"take: axis {axis} out of range for {x.str_short()}")
    return ShapedArray(_take_shape(x.shape, idx.shape, axis), x.dtype, x.device)


def _index_add_abstract_eval(x, idx, src, *, axis):
    _check_index("index_add", idx)
    want = _take_shape(x.shape, idx.shape, axis)
    if src.shape != want or src.dtype != x.dtype:
        raise TypeError(f"index_add: source {src.str_short()} should be {want} of {x.dtype}")
    return x.strip_weak()


def take(x, idx, axis: int):
    return take_p.bind(x, idx, axis=axis)


def index_add(x, idx, src, axis: int):
    return index_add_p.bind(x, idx, src, axis=axis)


def _flat_offsets(idx, n, size):
    """Per-example indices into a (batch * n) flattened axis: idx[b] + b * n."""
    ishape = _shape(idx)
    dtype = get_aval(idx).dtype
    offs = B.mul(C.iota(dtype, ishape, 0, get_aval(idx).device), n)
    return B.add(idx, offs)


def _take_batch(args, dims, *, axis):
    (x, idx), (dx, di) = args, dims
    if di is None:
        return take(S.moveaxis(x, dx, 0), idx, axis + 1), 0
    if dx is None:
        return take(x, idx, axis), axis + di
    size = _batch_size(args, dims)
    x = S.moveaxis(S.moveaxis(x, dx, 0), axis + 1, 1)
    idx = S.moveaxis(idx, di, 0)
    xs = _shape(x)
    rest = xs[2:]
    flat = S.reshape(x, (size * xs[1],) + rest)
    out = take(flat, _flat_offsets(idx, xs[1], size), 0)  # [B, I..., pre..., post...]
    q = len(_shape(idx)) - 1
    p = axis
    perm = (
        [0]
        + [1 + q + j for j in range(p)]
        + [1 + i for i in range(q)]
        + list(range(1 + q + p, len(_shape(out))))
    )
    return S.transpose(out, perm), 0


def _index_add_batch(args, dims, *, axis):
    (x, idx, src), (dx, di, ds) = args, dims
    size = _batch_size(args, dims)
    x = _to_front(x, dx, size)
    src = _to_front(src, ds, size)
    if di is None:
        return index_add(x, idx, src, axis + 1), 0
    idx = S.moveaxis(idx, di, 0)
    q = len(_shape(idx)) - 1
    p = axis
    # src: [B, pre(p), I(q), post...] -> [B, I, pre, post] -> [B * |I|, pre, post]
    sn = len(_shape(src))
    perm = (
        [0] + [1 + p + i for i in range(q)] + [1 + j for j in range(p)] + list(range(1 + p + q, sn))
    )
    src_t = S.transpose(src, perm)
    xm = S.moveaxis(x, axis + 1, 1)
    xs = _shape(xm)
    flat_x = S.reshape(xm, (size * xs[1],) + xs[2:])
    flat_idx = S.reshape(_flat_offsets(idx, xs[1], size), (math.prod(_shape(idx)),))
    flat_src = S.reshape(src_t, (math.prod(_shape(idx)),) + xs[2:])
    out = index_add(flat_x, flat_idx, flat_src, 0)
    return S.moveaxis(S.reshape(out, xs), 1, axis + 1), 0


take_p = declare(
    "take",
    impl=_take_impl,
    abstract_eval=_take_abstract_eval,
    linear=True,
    nonlinear=(1,),
    transpose=lambda ct, x, idx, *, axis: [
        index_add(_zeros_like_aval(x.aval), idx, ct, axis),
        None,
    ],
    batch=_take_batch,
    torch_codegen=lambda args, avals, *, axis: (
        f"torch.index_select({args[0]}, {axis}, {args[1]}.reshape(-1))"
        f".reshape({_take_shape(avals[0].shape, avals[1].shape, axis)!r})"
    ),
)
index_add_p = declare(
    "index_add",
    impl=_index_add_impl,
    abstract_eval=_index_add_abstract_eval,
    linear=True,
    nonlinear=(1,),
    transpose=lambda ct, x, idx, src, *, axis: [
        ct if is_undefined(x) else None,
        None,
        take(ct, idx, axis) if is_undefined(src) else None,
    ],
    batch=_index_add_batch,
)

# ---------------------------------------------------------------- dynamic_slice / update_slice


def _clamped_starts(starts, shape, sizes):
    # JAX semantics: starts are clamped so the slice stays in bounds.
    return [max(0, min(int(s), n - k)) for s, n, k in zip(starts, shape, sizes)]


def _dynamic_slice_impl(x, *starts, sizes):
    starts = _clamped_starts(starts, x.shape, sizes)
    return x[tuple(slice(s, s + k) for s, k in zip(starts, sizes))]


def _dynamic_update_slice_impl(x, update, *starts):
    starts = _clamped_starts(starts, x.shape, update.shape)
    out = x.clone()
    out[tuple(slice(s, s + k) for s, k in zip(starts, update.shape))] = update
    return out


def _dynamic_slice_abstract_eval(x, *starts, sizes):
    if len(starts) != x.ndim or len(sizes) != x.ndim or any(s.shape for s in starts):
        raise TypeError(f"dynamic_slice: needs {x.ndim} scalar start indices and sizes")
    if any(k > n for k, n in zip(sizes, x.shape)):
        raise TypeError(f"dynamic_slice: sizes {sizes} exceed {x.str_short()}")
    return ShapedArray(sizes, x.dtype, x.device)


def _dynamic_update_slice_abstract_eval(x, update, *starts):
    if len(starts) != x.ndim or update.ndim != x.ndim or update.dtype != x.dtype:
        raise TypeError(f"dynamic_update_slice: {update.str_short()} into {x.str_short()}")
    return x.strip_weak()


def dynamic_slice(x, starts, sizes):
    return dynamic_slice_p.bind(x, *starts, sizes=tuple(sizes))


def dynamic_update_slice(x, update, starts):
    return dynamic_update_slice_p.bind(x, update, *starts)


def _ds_transpose(ct, x, *starts, sizes):
    zeros = _zeros_like_aval(x.aval)
    return [dynamic_update_slice(zeros, ct, starts)] + [None] * len(starts)


def _dus_transpose(ct, x, update, *starts):
    uaval = update.aval if is_undefined(update) else get_aval(update)
    ct_x = ct_u = None
    if is_undefined(x):
        ct_x = dynamic_update_slice(ct, _zeros_like_aval(uaval), starts)
    if is_undefined(update):
        ct_u = dynamic_slice(ct, starts, uaval.shape)
    return [ct_x, ct_u] + [None] * len(starts)


def _index_vectors(starts, sdims, shape, sizes, size, device):
    """Per-example index vectors [B, k] for each axis: clamp(start) + arange(k)."""
    out = []
    for s, d, n, k in zip(starts, sdims, shape, sizes):
        s = _to_front(s, d, size) if d is not None or not isinstance(s, int) else s
        if isinstance(s, int):
            s = C.full((size,), s, torch.int64, device)
        s = _clamp(s, 0, n - k)
        base = S.broadcast_in_dim(s, (size, k), (0,))
        out.append(B.add(base, C.iota(get_aval(s).dtype, (size, k), 1, get_aval(s).device)))
    return out


def _clamp(x, lo, hi):
    return B.minimum(B.maximum(x, lo), hi)


def _ds_batch(args, dims, *, sizes):
    x, starts = args[0], args[1:]
    dx, sdims = dims[0], dims[1:]
    size = _batch_size(args, dims)
    x = _to_front(x, dx, size)
    if all(d is None for d in sdims):
        return dynamic_slice(x, (0,) + tuple(starts), (size,) + tuple(sizes)), 0
    shape = _shape(x)[1:]
    vectors = _index_vectors(starts, sdims, shape, sizes, size, get_aval(x).device)
    for axis, idx in enumerate(vectors):
        x, _ = _take_batch((x, idx), (0, 0), axis=axis)
    return x, 0


def _dus_batch(args, dims):
    x, update, starts = args[0], args[1], args[2:]
    dx, du, sdims = dims[0], dims[1], dims[2:]
    size = _batch_size(args, dims)
    x = _to_front(x, dx, size)
    update = _to_front(update, du, size)
    if all(d is None for d in sdims):
        return dynamic_update_slice(x, update, (0,) + tuple(starts)), 0
    # Place the update on a zero canvas and a mask through index_add, then select.
    shape = _shape(x)[1:]
    usizes = _shape(update)[1:]
    dev = get_aval(x).device
    idxs = _index_vectors(starts, sdims, shape, usizes, size, dev)
    placed = update
    mask_dtype = get_aval(x).dtype if is_float(get_aval(x).dtype) else torch.float32
    mask = C.full((size,) + tuple(usizes), 1.0, mask_dtype, dev)
    for axis, idx in enumerate(idxs):
        canvas_shape = (size,) + tuple(shape[: axis + 1]) + tuple(usizes[axis + 1 :])
        zeros_p = C.full(canvas_shape, 0, get_aval(placed).dtype, dev)
        zeros_m = C.full(canvas_shape, 0, get_aval(mask).dtype, dev)
        placed, _ = _index_add_batch((zeros_p, idx, placed), (0, 0, 0), axis=axis)
        mask, _ = _index_add_batch((zeros_m, idx, mask), (0, 0, 0), axis=axis)
    from thunderx.primitives import unary as U

    return U.select(B.gt(mask, 0.5), placed, x), 0


dynamic_slice_p = declare(
    "dynamic_slice",
    impl=_dynamic_slice_impl,
    abstract_eval=_dynamic_slice_abstract_eval,
    linear=True,
    nonlinear=lambda i: i >= 1,
    transpose=_ds_transpose,
    batch=_ds_batch,
    aliases=(0,),  # basic indexing: a view of the operand
)
dynamic_update_slice_p = declare(
    "dynamic_update_slice",
    impl=_dynamic_update_slice_impl,
    abstract_eval=_dynamic_update_slice_abstract_eval,
    linear=True,
    nonlinear=lambda i: i >= 2,
    transpose=_dus_transpose,
    batch=_dus_batch,
)
