"""Smaller torch functions op_db lists, written with torch calls the language layer already
decomposes (so every rule comes with them): pointwise helpers, products, norms, linalg's `*_ex`
forms, index writes and layout queries, in torch's formulas (torch/_refs and torch/_decomp give
the same ones)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.errors import unsupported
from thunderx.lang._base import SCALARS, aval, in_opmath, ndim, register, shape


@register(torch.positive, methods=("positive",))
def _positive(x):
    if x.dtype == torch.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return x


def _to_float(x):
    return x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())


@register(torch.rad2deg, methods=("rad2deg",))
def _rad2deg(x):
    return _to_float(x) * (180.0 / math.pi)


@register(torch.deg2rad, methods=("deg2rad",))
def _deg2rad(x):
    return _to_float(x) * (math.pi / 180.0)


@register(torch.logaddexp2, methods=("logaddexp2",))
@in_opmath
def _logaddexp2(a, b):
    ln2 = math.log(2.0)
    return torch.logaddexp(a * ln2, b * ln2) / ln2


@register(torch.ldexp, methods=("ldexp",))
def _ldexp(x, other):
    return x * torch.pow(2.0, other)


@register(torch.nanmean, methods=("nanmean",))
def _nanmean(x, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        x = x.to(dtype)
    dims = list(range(ndim(x))) if dim is None else dim
    count = (~torch.isnan(x)).sum(dims, keepdim=keepdim)
    return torch.nansum(x, dims, keepdim=keepdim) / count


@register(torch.addr, methods=("addr",))
def _addr(x, vec1, vec2, *, beta=1, alpha=1):
    outer = torch.outer(vec1, vec2)
    if alpha != 1:
        outer = outer * alpha
    if beta == 0:  # torch ignores the input then, nan and inf included
        return torch.zeros_like(x) + outer
    return (x if beta == 1 else x * beta) + outer


@register(torch.inner, methods=("inner",))
def _inner(a, b):
    if ndim(a) == 0 or ndim(b) == 0:
        return a * b
    return torch.tensordot(a, b, dims=([-1], [-1]))


@register(torch.linalg.vecdot)
def _vecdot(x, y, *, dim=-1):
    """sum(conj(x) * y) along dim: torch conjugates the first operand."""
    return (x.conj() * y).sum(dim)


@register(torch.isclose, methods=("isclose",))
def _isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol * |b| where finite, or a == b (nan == nan with equal_nan): torch's
    formula, integers compared in the default dtype, complex by modulus.

    >>> thunderx.vmap(torch.isclose)(torch.ones(2, 3), torch.ones(2, 3) + 1e-9).all()
    tensor(True)
    """
    if a.dtype != b.dtype:
        raise RuntimeError(f"torch.isclose: {a.dtype} did not match {b.dtype}")
    if rtol < 0 or atol < 0:
        name, value = ("rtol", rtol) if rtol < 0 else ("atol", atol)
        raise RuntimeError(f"{name} must be greater than or equal to zero, but got {value}")
    close = a == b
    exact = not (a.dtype.is_floating_point or a.dtype.is_complex)
    if equal_nan and not exact:
        close = close | (torch.isnan(a) & torch.isnan(b))
    if rtol == 0 and atol == 0:
        return close
    if exact:
        a, b = a.to(torch.get_default_dtype()), b.to(torch.get_default_dtype())
    allowed = atol + torch.abs(b * rtol)
    actual = torch.abs(a - b)
    return close | (torch.isfinite(actual) & (actual <= allowed))


@register(torch.dist, methods=("dist",))
def _dist(a, b, p=2):
    return torch.linalg.vector_norm(a - b, p)


@register(torch.renorm, methods=("renorm",))
def _renorm(x, p, dim, maxnorm):
    d = dim % max(ndim(x), 1)
    others = [i for i in range(ndim(x)) if i != d]
    norm = torch.linalg.vector_norm(x, p, dim=others, keepdim=True)
    # torch's formula: maxnorm / (norm + 1e-7) for the slices whose norm exceeds maxnorm
    factor = torch.where(norm > maxnorm, maxnorm / (norm + 1e-7), 1.0)
    return x * factor


@register(torch.aminmax, methods=("aminmax",))
def _aminmax(x, *, dim=None, keepdim=False):
    if dim is None:
        mn, mx = torch.amin(x), torch.amax(x)
        if keepdim:
            mn, mx = mn.reshape((1,) * ndim(x)), mx.reshape((1,) * ndim(x))
    else:
        mn, mx = torch.amin(x, dim, keepdim), torch.amax(x, dim, keepdim)
    return torch.return_types.aminmax((mn, mx))


@register(F.hardshrink, torch.hardshrink, methods=("hardshrink",))
def _hardshrink(x, lambd=0.5):
    return torch.where((x > lambd) | (x < -lambd), x, 0.0)


@register(F.softshrink)
def _softshrink(x, lambd=0.5):
    return torch.where(x > lambd, x - lambd, torch.where(x < -lambd, x + lambd, 0.0))


@register(torch.fill, methods=("fill",))
def _fill(x, value):
    if isinstance(value, (int, float, bool)):
        return torch.full_like(x, value)
    return torch.zeros_like(x) + value  # a 0-d tensor value


@register(torch.zero_)
def _zero_(x):
    return x.zero_()


# ------------------------------------------------------------------------------------ layout
# A traced value has a shape and a dtype but no memory layout (the generated code decides it):
# stride() and is_contiguous() answer as torch does for a contiguous tensor of that shape.


def _contiguous_like(x):
    return torch.empty(shape(x), dtype=x.dtype, device="meta")


@register(methods=("stride",))
def _stride(x, dim=None):
    strides = _contiguous_like(x).stride()
    return strides if dim is None else strides[dim]


@register(methods=("is_contiguous",))
def _is_contiguous(x, memory_format=torch.contiguous_format):
    return _contiguous_like(x).is_contiguous(memory_format=memory_format)


# -------------------------------------------------------- linalg's *_ex forms and tensor solves
# The `*_ex` forms return torch's `info` beside the result: 0 where the factorization succeeded.
# thunderx's factorizations raise torch's error instead (check_errors=True behaviour), so a
# returned info is always 0.


def _info(a, batch_dims=2):
    return torch.zeros(shape(a)[: ndim(a) - batch_dims], dtype=torch.int32, device=a.device)


@register(torch.linalg.cholesky_ex)
def _cholesky_ex(a, *, upper=False, check_errors=False):
    return torch.return_types.linalg_cholesky_ex((torch.linalg.cholesky(a, upper=upper), _info(a)))


@register(torch.linalg.inv_ex)
def _inv_ex(a, *, check_errors=False):
    return torch.return_types.linalg_inv_ex((torch.linalg.inv(a), _info(a)))


@register(torch.linalg.solve_ex)
def _solve_ex(a, b, *, left=True, check_errors=False):
    return torch.return_types.linalg_solve_ex((torch.linalg.solve(a, b, left=left), _info(a)))


@register(torch.linalg.lu_factor_ex)
def _lu_factor_ex(a, *, pivot=True, check_errors=False):
    lu, piv = torch.linalg.lu_factor(a, pivot=pivot)
    return torch.return_types.linalg_lu_factor_ex((lu, piv, _info(a)))


@register(torch.linalg.tensorinv)
def _tensorinv(a, ind=2):
    out_shape = shape(a)[ind:] + shape(a)[:ind]
    rows = math.prod(shape(a)[:ind])
    return torch.linalg.inv(a.reshape(rows, -1)).reshape(out_shape)


@register(torch.linalg.tensorsolve)
def _tensorsolve(a, b, dims=None):
    if dims is not None:
        a = torch.movedim(a, dims, tuple(range(ndim(a) - len(dims), ndim(a))))
    x_shape = shape(a)[ndim(b) :]
    n = math.prod(x_shape)
    return torch.linalg.solve(a.reshape(-1, n), b.reshape(-1)).reshape(x_shape)


# --------------------------------------------------------------- index_put, put, pad, pairs


def _linear_index(x, indices):
    """The flat positions `x[indices]` addresses, in the shape `x[indices]` has: torch's indexing
    of an iota of x's elements. A boolean mask must be known while tracing (the caller handles a
    lone traced mask)."""
    if any(i is None for i in indices):
        raise TypeError("index_put: indices must be tensors, got None (as torch requires)")
    idx = tuple(indices)
    iota = torch.arange(math.prod(shape(x)), device=aval(x).device).reshape(shape(x))
    positions = iota[idx]
    return positions.reshape(-1), shape(positions)


@register(torch.index_put, torch.Tensor.index_put, methods=("index_put",))
def _index_put(x, indices, values, accumulate=False):
    from thunderx.lang.indexing import is_unknown_mask, masked_put

    if len(indices) == 1 and is_unknown_mask(indices[0]):
        return masked_put(x, indices[0], values, accumulate)
    flat_lin, addressed = _linear_index(x, tuple(indices))
    flat_val = torch.broadcast_to(values, addressed).reshape(-1).to(x.dtype)
    flat = x.reshape(-1)
    if not accumulate:
        # torch leaves a repeated position's value unspecified: here the last one written
        # (a pairwise comparison of the positions, so the number of them is bounded)
        m = shape(flat_lin)[0]
        if m > 4096:
            raise unsupported(
                f"index_put(accumulate=False) of {m} positions", "at most 4096 under a transform"
            )
        k = torch.arange(m, device=flat_lin.device)
        later_same = (flat_lin[:, None] == flat_lin[None, :]) & (k[None, :] > k[:, None])
        flat_val = torch.where(later_same.any(1), 0.0, flat_val)
        flat = flat.index_fill(0, flat_lin, 0)
    return flat.index_add(0, flat_lin, flat_val).reshape(shape(x))


@register(torch.put, methods=("put",))
def _put(x, index, source, accumulate=False):
    return _index_put(x.reshape(-1), (index.reshape(-1),), source.reshape(-1), accumulate).reshape(
        shape(x)
    )


@register(torch.constant_pad_nd)
def _constant_pad_nd(x, pad, value=0):
    return F.pad(x, pad, "constant", value)


@register(torch.cartesian_prod)
def _cartesian_prod(*tensors):
    if len(tensors) == 1:
        return tensors[0]
    n = len(tensors)
    sizes = [shape(t)[0] for t in tensors]
    grids = [
        t.reshape([-1 if i == k else 1 for i in range(n)]).expand(sizes)
        for k, t in enumerate(tensors)
    ]
    return torch.stack([g.reshape(-1) for g in grids], 1)


@register(torch.combinations)
def _combinations(x, r=2, with_replacement=False):
    import itertools

    n = shape(x)[0]
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = list(pick(range(n), r))
    if not rows:
        return x.new_zeros((0,) if r == 0 else (0, r))
    return x[torch.tensor(rows, dtype=torch.int64, device=x.device)]


@register(F.pdist, torch.pdist)
def _pdist(x, p=2.0):
    n = shape(x)[0]
    i, j = torch.triu_indices(n, n, 1, device=x.device)
    return torch.linalg.vector_norm(x[i] - x[j], p, dim=-1)


@register(torch.resolve_neg, methods=("resolve_neg",))
def _resolve_neg(x):
    return x  # traced values never carry torch's lazy negation bit


@register(torch.ops.aten.slice.Tensor)
def _aten_slice(x, dim=0, start=None, end=None, step=1):
    d = dim % max(ndim(x), 1)
    return x[(slice(None),) * d + (slice(start, end, step),)]


def _clamped(x, indices, name):
    """torch's decomposition clamps the indices (masked-out ones may be out of range)."""
    if any(i is None for i in indices):
        raise unsupported(f"{name} with None indices")
    return tuple(i.clamp(-n, n - 1) for i, n in zip(indices, shape(x)))


@register(torch._unsafe_masked_index)
def _unsafe_masked_index(x, mask, indices, fill):
    return torch.where(mask, x[_clamped(x, indices, "_unsafe_masked_index")], fill)


@register(torch._unsafe_masked_index_put_accumulate)
def _unsafe_masked_index_put_accumulate(x, mask, indices, values):
    idx = _clamped(x, indices, "_unsafe_masked_index_put_accumulate")
    return _index_put(x, idx, torch.where(mask, values, 0.0), accumulate=True)


@register(torch.lu)
def _lu(a, pivot=True, get_infos=False, out=None):
    lu, piv, info = torch.linalg.lu_factor_ex(a, pivot=pivot)
    return (lu, piv, info) if get_infos else (lu, piv)


@register(torch.cdist)
def _cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    return torch.linalg.vector_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p, dim=-1)


@register(F.local_response_norm)
def _local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0):
    if ndim(x) < 3:
        raise ValueError(f"local_response_norm: expected 3D or higher input, got {ndim(x)}D")
    c = shape(x)[1]
    sq = x * x
    before, after = size // 2, (size - 1) // 2
    pad_shape = list(shape(x))
    parts = []
    if before:
        pad_shape[1] = before
        parts.append(sq.new_zeros(pad_shape))
    parts.append(sq)
    if after:
        pad_shape[1] = after
        parts.append(sq.new_zeros(pad_shape))
    padded = torch.cat(parts, 1)
    window = sum(padded.narrow(1, s, c) for s in range(size)) / size
    return x / (window * alpha + k) ** beta


@register(torch.isin)
def _isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element equals one of test_elements: one comparison against all of them."""
    if type(elements) in SCALARS:
        elements = torch.tensor(elements)
    if type(test_elements) in SCALARS:
        test_elements = torch.tensor(test_elements)
    hit = (elements.unsqueeze(-1) == test_elements.reshape(-1)).any(-1)
    return ~hit if invert else hit


@register(torch.unravel_index)
def _unravel_index(indices, shape):
    """The coordinates of flat `indices` in an array of `shape`, one tensor per dimension."""
    if isinstance(shape, int):
        shape = (shape,)
    coords, rest = [], indices
    for size in reversed(tuple(shape)):
        coords.append(rest % size)
        rest = rest // size
    return tuple(reversed(coords))
