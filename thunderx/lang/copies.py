"""Shape functions torch spells several ways: the `*_copy` forms of views (a fresh tensor, never
a view of the input), the `atleast_*d`/`*stack`/`*split` families, and aliases. Each is written
with torch calls the language layer already decomposes, so every rule comes with them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunderx.lang._base import ndim, register, shape

_VF = torch._C._VariableFunctions


def _fresh(out):
    """A copy that is no view of the input (what torch's `*_copy` functions return)."""
    if isinstance(out, (tuple, list)):
        return type(out)(o.clone() for o in out)
    return out.clone()


def _copy_of(view_fn):
    def impl(x, *args, **kwargs):
        kwargs.pop("out", None)
        return _fresh(view_fn(x, *args, **kwargs))

    return impl


for _copy, _view in [
    (torch.alias_copy, lambda x: x),
    (torch.permute_copy, torch.permute),
    (torch.t_copy, torch.t),
    (torch.transpose_copy, torch.transpose),
    (torch.squeeze_copy, torch.squeeze),
    (torch.unsqueeze_copy, torch.unsqueeze),
    (torch.unbind_copy, torch.unbind),
    (torch.diagonal_copy, torch.diagonal),
    (torch.narrow_copy, torch.narrow),
    (torch.split_with_sizes_copy, lambda x, sizes, dim=0: torch.split(x, list(sizes), dim)),
    (torch.expand_copy, lambda x, size, implicit=False: x.expand(*size)),
    (torch.unfold_copy, lambda x, dim, size, step: x.unfold(dim, size, step)),
]:
    register(_copy)(_copy_of(_view))


@register(torch.view_copy)
def _view_copy(x, size, *, out=None):
    if isinstance(size, torch.dtype):
        return x.view(size).clone()
    return x.reshape(size).clone()


@register(torch.split_with_sizes, methods=("split_with_sizes",))
def _split_with_sizes(x, split_sizes, dim=0):
    return torch.split(x, list(split_sizes), dim)


register(torch.unsafe_split, methods=("unsafe_split",))(torch.split)
register(torch.unsafe_chunk, methods=("unsafe_chunk",))(torch.chunk)


@register(torch.ravel, methods=("ravel",))
def _ravel(x):
    return torch.reshape(x, (-1,))


def _atleast(n):
    def one(x):
        d = ndim(x)
        if d >= n:
            return x
        if n == 3 and d == 2:
            return x.unsqueeze(-1)  # torch puts a matrix in the middle: (1, m, n) -> (m, n, 1)
        if n == 3 and d == 1:
            return x.reshape(1, -1, 1)
        return x.reshape((1,) * (n - d) + shape(x))

    def impl(*tensors):
        if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
            return tuple(one(t) for t in tensors[0])
        if len(tensors) == 1:
            return one(tensors[0])
        return tuple(one(t) for t in tensors)

    return impl


register(torch.atleast_1d, _VF.atleast_1d)(_atleast(1))
register(torch.atleast_2d, _VF.atleast_2d)(_atleast(2))
register(torch.atleast_3d, _VF.atleast_3d)(_atleast(3))


@register(torch.column_stack)
def _column_stack(tensors):
    return torch.cat([t.reshape(-1, 1) if ndim(t) <= 1 else t for t in tensors], 1)


@register(torch.dstack)
def _dstack(tensors):
    return torch.cat(torch.atleast_3d(*tensors), 2)


def _split_along(name, dim_of):
    def impl(x, indices_or_sections):
        if ndim(x) < (2 if name == "vsplit" else 3 if name == "dsplit" else 1):
            raise RuntimeError(f"torch.{name} needs a tensor of more dimensions, got {ndim(x)}")
        dim = dim_of(x)
        if isinstance(indices_or_sections, int) and shape(x)[dim] % indices_or_sections:
            raise RuntimeError(
                f"torch.{name}: dimension {dim} of size {shape(x)[dim]} is not divisible by "
                f"{indices_or_sections}"
            )
        return torch.tensor_split(x, indices_or_sections, dim)

    return impl


register(torch.hsplit, methods=("hsplit",))(
    _split_along("hsplit", lambda x: 1 if ndim(x) > 1 else 0)
)
register(torch.vsplit, methods=("vsplit",))(_split_along("vsplit", lambda x: 0))
register(torch.dsplit, methods=("dsplit",))(_split_along("dsplit", lambda x: 2))


@register(torch.linalg.diagonal)
def _linalg_diagonal(a, *, offset=0, dim1=-2, dim2=-1):
    return torch.diagonal(a, offset, dim1, dim2)


def _diag_matrix(v, k):
    """The square matrix with the vector v on its k-th diagonal."""
    e = torch.diag_embed(v)
    a = abs(k)
    return F.pad(e, (k, 0, 0, k) if k >= 0 else (0, a, a, 0))


@register(torch.diag, methods=("diag",))
def _diag(x, diagonal=0):
    if ndim(x) == 1:
        return _diag_matrix(x, diagonal)
    if ndim(x) == 2:
        return torch.diagonal(x, diagonal).clone()
    raise RuntimeError(f"torch.diag: expected a 1-D or 2-D tensor, got {ndim(x)}-D")


@register(torch.diagflat, methods=("diagflat",))
def _diagflat(x, offset=0):
    return _diag_matrix(x.reshape(-1), offset)


@register(methods=("sum_to_size",))
def _sum_to_size(x, *size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    lead = ndim(x) - len(size)
    if lead < 0:
        raise RuntimeError(f"sum_to_size: size {tuple(size)} is not expandable to {shape(x)}")
    dims = list(range(lead)) + [
        lead + i for i, s in enumerate(size) if s == 1 and shape(x)[lead + i] != 1
    ]
    out = x.sum(dims, keepdim=True) if dims else x
    return out.reshape(size)


@register(torch.take, methods=("take",))
def _take(x, index):
    return x.reshape(-1)[index]


@register(torch.index_fill, methods=("index_fill",))
def _index_fill(x, dim, index, value):
    d = dim % max(ndim(x), 1)
    n = shape(x)[d] if ndim(x) else 1
    hit = (torch.arange(n, device=x.device)[:, None] == index.reshape(1, -1)).any(1)
    hit = hit.reshape((n,) + (1,) * (ndim(x) - d - 1)) if ndim(x) else hit.reshape(())
    return torch.where(hit, value, x)


@register(methods=("unfold",))
def _tensor_unfold(x, dimension, size, step):
    """Windows of `size` every `step` along `dimension`, as a new last dimension (a copy here,
    a view in torch: thunderx gathers the windows)."""
    if ndim(x) == 0:
        if size != 1:
            raise RuntimeError(f"unfold: size {size} exceeds the size 1 of a 0-d tensor")
        return x.reshape(1)
    d = dimension % ndim(x)
    length = shape(x)[d]
    if size > length or step <= 0:
        raise RuntimeError(f"unfold: size {size} / step {step} invalid for a dim of {length}")
    n = (length - size) // step + 1
    idx = torch.arange(n)[:, None] * step + torch.arange(size)[None, :]
    out = x.index_select(d, idx.reshape(-1).to(x.device))
    out = out.reshape(shape(x)[:d] + (n, size) + shape(x)[d + 1 :])
    return out.movedim(d + 1, -1)


# ------------------------------------------------------------- writes into a copy of a view


def _write_into_copy(view_of_copy):
    """torch's `*_scatter` and `index_copy`: a copy of x with `src` written into one of its
    views (the in-place write is functionalized, so every transform sees through it)."""

    def impl(x, src, *args, **kwargs):
        out = x.clone()
        view_of_copy(out, *args, **kwargs).copy_(src)
        return out

    return impl


register(torch.select_scatter)(_write_into_copy(lambda out, dim, index: out.select(dim, index)))
register(torch.diagonal_scatter)(
    _write_into_copy(lambda out, offset=0, dim1=0, dim2=1: out.diagonal(offset, dim1, dim2))
)


@register(torch.slice_scatter)
def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    out = x.clone()
    d = dim % max(ndim(x), 1)
    out[(slice(None),) * d + (slice(start, end, step),)] = src
    return out


@register(torch.index_copy, methods=("index_copy",))
def _index_copy(x, dim, index, source):
    # torch leaves the result of repeated indices unspecified; each is then one of the sources
    if ndim(x) == 0:
        return source.reshape(()).clone() if index.numel() else x.clone()
    out = x.clone()
    d = dim % ndim(x)
    out[(slice(None),) * d + (index,)] = source
    return out


@register(torch.nn.functional.channel_shuffle, torch.channel_shuffle)
def _channel_shuffle(x, groups):
    n, c = shape(x)[:2]
    rest = shape(x)[2:]
    if c % groups:
        raise RuntimeError(f"channel_shuffle: {c} channels are not divisible by groups={groups}")
    y = x.reshape((n, groups, c // groups) + rest).transpose(1, 2)
    return y.reshape((n, c) + rest)
