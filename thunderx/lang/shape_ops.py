"""Shape and layout functions: reshape/view, permute, squeeze, expand, cat/stack, split, flip,
roll, repeat, diagonal, tril/triu, gather/scatter, index_select, pad."""

from __future__ import annotations

import torch

from thunderx.errors import ShapeError, unsupported
from thunderx.lang._base import (
    aval,
    broadcast_shapes,
    canon_dim,
    canon_dims,
    convert,
    dtype,
    is_tensor,
    known_value,
    ndim,
    register,
    shape,
    where,
)
from thunderx.primitives import binary as B
from thunderx.primitives import indexing as I
from thunderx.primitives import shape as S


def _sizes(args):
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return tuple(args[0])
    return tuple(args)


def infer_shape(in_shape, sizes) -> tuple:
    sizes = [int(s) for s in sizes]
    total = 1
    for s in in_shape:
        total *= s
    if sizes.count(-1) > 1:
        raise ValueError(f"reshape: only one dimension can be -1, got {tuple(sizes)}")
    known = 1
    for s in sizes:
        if s != -1:
            known *= s
    if -1 in sizes:
        if known == 0 or total % known:
            raise ValueError(f"reshape: shape {tuple(sizes)} is invalid for input of size {total}")
        sizes[sizes.index(-1)] = total // known
    elif known != total:
        raise ValueError(f"reshape: shape {tuple(sizes)} is invalid for input of size {total}")
    return tuple(sizes)


@register(torch.reshape, methods=("reshape", "view"))
def _reshape(x, *sizes, **kwargs):
    if "shape" in kwargs:
        sizes = (kwargs["shape"],)
    if len(sizes) == 1 and isinstance(sizes[0], torch.dtype):
        raise unsupported("Tensor.view(dtype)", "bit reinterpretation is not supported")
    return S.reshape(x, infer_shape(shape(x), _sizes(sizes)))


@register(methods=("reshape_as", "view_as"))
def _reshape_as(x, other):
    return S.reshape(x, shape(other))


@register(torch.flatten, methods=("flatten",))
def _flatten(x, start_dim=0, end_dim=-1):
    n = ndim(x)
    if n == 0:
        return S.reshape(x, (1,))
    s, e = canon_dim(start_dim, n), canon_dim(end_dim, n)
    shp = shape(x)
    mid = 1
    for d in shp[s : e + 1]:
        mid *= d
    return S.reshape(x, shp[:s] + (mid,) + shp[e + 1 :])


@register(torch.unflatten, methods=("unflatten",))
def _unflatten(x, dim, sizes):
    d = canon_dim(dim, ndim(x))
    shp = shape(x)
    part = infer_shape((shp[d],), sizes)
    return S.reshape(x, shp[:d] + part + shp[d + 1 :])


@register(torch.squeeze, methods=("squeeze",))
def _squeeze(x, dim=None):
    shp = shape(x)
    if dim is None:
        dims = tuple(i for i, s in enumerate(shp) if s == 1)
    else:
        dims = tuple(d for d in canon_dims(dim, len(shp)) if shp[d] == 1)
    return S.squeeze(x, dims)


@register(torch.unsqueeze, methods=("unsqueeze",))
def _unsqueeze(x, dim):
    return S.expand_dims(x, (canon_dim(dim, ndim(x) + 1),))


@register(torch.permute, methods=("permute",))
def _permute(x, *dims):
    dims = _sizes(dims)
    n = ndim(x)
    return S.transpose(x, tuple(canon_dim(d, n) for d in dims))


@register(
    torch.transpose, torch.swapaxes, torch.swapdims, methods=("transpose", "swapaxes", "swapdims")
)
def _transpose(x, dim0, dim1):
    n = ndim(x)
    if n == 0:
        canon_dim(dim0, 0), canon_dim(dim1, 0)
        return x
    perm = list(range(n))
    a, b = canon_dim(dim0, n), canon_dim(dim1, n)
    perm[a], perm[b] = perm[b], perm[a]
    return S.transpose(x, perm)


@register(torch.t, methods=("t",))
def _t(x):
    if ndim(x) > 2:
        raise ValueError(f"t() expects a tensor with <= 2 dimensions, got {ndim(x)}")
    return S.transpose(x, (1, 0)) if ndim(x) == 2 else x


def matrix_transpose(x):
    n = ndim(x)
    if n < 2:
        raise ValueError("mT needs a tensor of rank >= 2")
    return _transpose(x, -2, -1)


def full_transpose(x):
    return S.transpose(x, tuple(reversed(range(ndim(x)))))


def conj_transpose(x):
    """x.mH / adjoint: the matrix transpose, conjugated for complex x."""
    y = matrix_transpose(x)
    return torch.conj(y) if dtype(y).is_complex else y


def _h(x):
    y = _t(x)
    return torch.conj(y) if dtype(y).is_complex else y


@register(torch.adjoint, methods=("adjoint",))
def _adjoint(x):
    return conj_transpose(x)


@register(torch.movedim, torch.moveaxis, methods=("movedim", "moveaxis"))
def _movedim(x, source, destination):
    n = ndim(x)
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [canon_dim(d, n) for d in src]
    dst = [canon_dim(d, n) for d in dst]
    perm = [None] * n
    for s_, d_ in zip(src, dst):
        perm[d_] = s_
    rest = iter(i for i in range(n) if i not in src)
    perm = [p if p is not None else next(rest) for p in perm]
    return S.transpose(x, perm)


@register(methods=("expand",))
def _expand(x, *sizes):
    sizes = _sizes(sizes)
    shp = shape(x)
    lead = len(sizes) - len(shp)
    if lead < 0:
        raise ValueError(f"expand: {tuple(sizes)} has fewer dims than {shp}")
    target = tuple(shp[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    return S.broadcast_in_dim(x, target, tuple(range(lead, len(target))))


@register(methods=("expand_as",))
def _expand_as(x, other):
    return _expand(x, *shape(other))


@register(torch.broadcast_to, methods=("broadcast_to",))
def _broadcast_to(x, size):
    return _expand(x, *tuple(size))


@register(torch.broadcast_tensors)
def _broadcast_tensors(*xs):
    shp = broadcast_shapes(*[shape(x) for x in xs])
    return tuple(S.broadcast_to(x, shp) for x in xs)


@register(torch.atleast_1d)
def _atleast_1d(x):
    return S.reshape(x, (1,)) if ndim(x) == 0 else x


def _same_dtype(tensors):
    from thunderx.avals import ShapedArray, result_dtype

    dt = result_dtype(*[ShapedArray(shape(t), dtype(t)) for t in tensors])
    return [convert(t, dt) for t in tensors]


@register(torch.cat, torch.concat, torch.concatenate)
def _cat(tensors, dim=0, *, out=None):
    # torch skips legacy empty 1-D tensors in cat
    tensors = [t for t in tensors if shape(t) != (0,)] or list(tensors)[:1]
    xs = _same_dtype(tensors)
    return S.concatenate(xs, canon_dim(dim, ndim(xs[0])))


@register(torch.stack)
def _stack(tensors, dim=0, *, out=None):
    tensors = _same_dtype(list(tensors))
    d = canon_dim(dim, ndim(tensors[0]) + 1)
    return S.concatenate([S.expand_dims(t, (d,)) for t in tensors], d)


@register(torch.hstack)
def _hstack(tensors):
    tensors = [_atleast_1d(t) for t in tensors]
    return _cat(tensors, 0 if ndim(tensors[0]) == 1 else 1)


@register(torch.vstack)
def _vstack(tensors):
    tensors = [S.reshape(t, (1,) + shape(_atleast_1d(t))) if ndim(t) < 2 else t for t in tensors]
    return _cat(tensors, 0)


@register(torch.split, methods=("split",))
def _split(x, split_size_or_sections, dim=0):
    d = canon_dim(dim, ndim(x))
    n = shape(x)[d]
    if isinstance(split_size_or_sections, int):
        k = split_size_or_sections
        sizes = [k] * (n // k) + ([n % k] if n % k else [])
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise ShapeError(
                f"split: sections {sizes} do not sum to {n}, the size of dim {dim} of a tensor "
                f"of shape {shape(x)}"
            )
    out, start = [], 0
    for s in sizes:
        out.append(S.slice_in_dim(x, start, start + s, 1, d))
        start += s
    return tuple(out)


def _concrete_ints(t, what: str):
    """An integer tensor argument that fixes output shapes, as Python ints: a concrete tensor, or
    a traced one whose value the transform knows (reverse mode on concrete values)."""
    from thunderx.errors import concretization

    value = known_value(t)
    if value is None:
        raise concretization(f"{what}'s indices_or_sections (they fix the output shapes)", aval(t))
    if value.dtype.is_floating_point or value.dtype.is_complex or value.ndim > 1:
        raise TypeError(f"{what}: indices_or_sections must be a 0-d or 1-d integer tensor")
    return value.tolist()


@register(torch.tensor_split, methods=("tensor_split",))
def _tensor_split(x, indices_or_sections, dim=0):
    d = canon_dim(dim, ndim(x))
    n = shape(x)[d]
    if is_tensor(indices_or_sections):  # torch: 0-d is sections, 1-d indices
        indices_or_sections = _concrete_ints(indices_or_sections, "tensor_split")
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        q, r = divmod(n, k)
        sizes = [q + 1] * r + [q] * (k - r)
        return _split(x, sizes, d)
    # torch slices x[i_k : i_k+1] with Python's rules: negative indices count from the end, and
    # a piece whose end is before its start is empty (the pieces may overlap)
    bounds = [0] + list(indices_or_sections) + [n]
    pieces = []
    for a, b in zip(bounds, bounds[1:]):
        start, stop, _ = slice(a, b).indices(n)
        pieces.append(S.slice_in_dim(x, start, max(start, stop), 1, d))
    return tuple(pieces)


@register(torch.chunk, methods=("chunk",))
def _chunk(x, chunks, dim=0):
    d = canon_dim(dim, ndim(x))
    n = shape(x)[d]
    k = -(-n // chunks)
    return _split(x, k, d)


@register(torch.unbind, methods=("unbind",))
def _unbind(x, dim=0):
    d = canon_dim(dim, ndim(x))
    return tuple(S.squeeze(S.slice_in_dim(x, i, i + 1, 1, d), (d,)) for i in range(shape(x)[d]))


@register(torch.narrow, methods=("narrow",))
def _narrow(x, dim, start, length):
    d = canon_dim(dim, ndim(x))
    if not isinstance(start, int) and not isinstance(start, torch.Tensor):
        # a traced start index: a dynamic slice (clamped into range)
        from thunderx.primitives import unary as U

        zero = 0
        starts = [zero] * ndim(x)
        s = U.convert(start, torch.int64) if dtype(start) != torch.int64 else start
        starts[d] = where(B.lt(s, 0), B.add(s, shape(x)[d]), s)
        sizes = list(shape(x))
        sizes[d] = int(length)
        return I.dynamic_slice(x, starts, sizes)
    start = int(start)
    start = start % shape(x)[d] if start < 0 else start
    return S.slice_in_dim(x, start, start + int(length), 1, d)


@register(torch.select, methods=("select",))
def _select(x, dim, index):
    d = canon_dim(dim, ndim(x))
    n = shape(x)[d]
    if isinstance(index, int):
        if not -n <= index < n:
            raise IndexError(f"select: index {index} out of range for dimension of size {n}")
        i = index % n
        return S.squeeze(S.slice_in_dim(x, i, i + 1, 1, d), (d,))
    return I.take(x, _wrap_index(index, n), d)


def _wrap_index(idx, n):
    if dtype(idx) is not torch.int64:
        idx = _to_i64(idx)
    return where(B.lt(idx, 0), B.add(idx, n), idx)


def _to_i64(idx):
    from thunderx.primitives import unary as U

    return U.convert(idx, torch.int64)


@register(torch.flip, methods=("flip",))
def _flip(x, dims):
    return S.rev(x, canon_dims(dims, ndim(x)))


@register(torch.fliplr)
def _fliplr(x):
    return S.rev(x, (1,))


@register(torch.flipud)
def _flipud(x):
    return S.rev(x, (0,))


@register(torch.roll, methods=("roll",))
def _roll(x, shifts, dims=None):
    if dims is None:
        flat = S.reshape(x, (_numel(x),))
        return S.reshape(_roll(flat, shifts, 0), shape(x))
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    for s, d in zip(shifts, dims):
        d = canon_dim(d, ndim(x))
        n = shape(x)[d]
        if n == 0:
            continue
        s %= n
        if s:
            x = S.concatenate(
                [S.slice_in_dim(x, n - s, n, 1, d), S.slice_in_dim(x, 0, n - s, 1, d)], d
            )
    return x


def _numel(x):
    n = 1
    for s in shape(x):
        n *= s
    return n


@register(methods=("repeat",))
def _repeat(x, *sizes):
    sizes = _sizes(sizes)
    lead = len(sizes) - ndim(x)
    if lead < 0:
        raise ValueError("repeat: number of repeat dims can not be smaller than the tensor's dims")
    # built so that its transpose is torch's repeat_backward: the input's own dims broadcast to
    # [r, s] pairs (only where r > 1) and merged, whose transpose is one sum over every r; then
    # each leading dim added in front, whose transposes sum them one at a time, the outermost
    # first (a single sum over all of them rounds differently)
    shp = shape(x)
    own = sizes[lead:]
    target, dims = [], []
    for r, s in zip(own, shp):
        if r != 1:
            target.append(r)
        dims.append(len(target))
        target.append(s)
    if len(target) != len(shp):
        merged = tuple(r * s for r, s in zip(own, shp))
        x = S.reshape(S.broadcast_in_dim(x, tuple(target), tuple(dims)), merged)
    for r in reversed(sizes[:lead]):
        x = S.broadcast_in_dim(x, (r,) + shape(x), tuple(range(1, ndim(x) + 1)))
    return x


@register(torch.tile, methods=("tile",))
def _tile(x, dims):
    dims = tuple(dims)
    if len(dims) < ndim(x):
        dims = (1,) * (ndim(x) - len(dims)) + dims
    return _repeat(x, *dims)


@register(torch.repeat_interleave, methods=("repeat_interleave",))
def _repeat_interleave(x, repeats, dim=None, *, output_size=None):
    if not isinstance(repeats, int):
        from thunderx.lang.misc_ops import repeat_interleave_tensor

        return repeat_interleave_tensor(x, repeats, dim, output_size)
    if dim is None:
        x = S.reshape(x, (_numel(x),))
        dim = 0
    d = canon_dim(dim, ndim(x))
    shp = shape(x)
    y = S.broadcast_in_dim(
        x,
        shp[: d + 1] + (repeats,) + shp[d + 1 :],
        tuple(range(d + 1)) + tuple(range(d + 2, len(shp) + 1)),
    )
    return S.reshape(y, shp[:d] + (shp[d] * repeats,) + shp[d + 1 :])
