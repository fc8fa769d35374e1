"""Reductions (sum, max, min, prod, argmax, argmin) and cumulative sums/products."""

from __future__ import annotations

import math

import torch

from thunderx.ad_util import Zero
from thunderx.avals import ShapedArray
from thunderx.core import declare, get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U


def _shape(x):
    return tuple(get_aval(x).shape)


def _reduced(x: ShapedArray, axes, dtype=None) -> ShapedArray:
    for a in axes:
        if not 0 <= a < x.ndim:
            raise TypeError(f"reduction axis {a} out of range for {x.str_short()}")
    shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    return ShapedArray(shape, x.dtype if dtype is None else dtype, x.device)


def _reduce_batch(prim, args, dims, axes):
    x = S.moveaxis(args[0], dims[0], 0)
    return prim.bind(x, axes=tuple(a + 1 for a in axes)), 0


def def_reduction(name, torch_fn, codegen, nvf_op, **declared):
    """Declare a reduction over `axes`; `codegen(arg, axes)` is its torch source (None where a
    full `torch_codegen` rule, which also sees the operands' avals, is given instead), other
    keywords (jvp, linearity) go to `declare`."""
    torch_codegen = declared.pop("torch_codegen", None) or (
        lambda args, avals, *, axes: codegen(args[0], axes)
    )
    prim = declare(
        name,
        impl=torch_fn,
        abstract_eval=lambda x, *, axes: _reduced(x, axes),
        batch=lambda args, dims, *, axes: _reduce_batch(prim, args, dims, axes),
        torch_codegen=torch_codegen,
        nvfuser=lambda fd, x, *, axes: getattr(fd.ops, nvf_op)(x, list(axes)),
        **declared,
    )
    return prim


def _prod_impl(x, axes):
    if len(axes) == x.ndim and x.ndim > 1:
        # torch's full product: its backward is the one torch autograd runs for `torch.prod(x)`
        # (0 where two or more entries are 0, even for a nan or infinite cotangent), where
        # products axis by axis would pass the nan on
        return torch.prod(x)
    for a in sorted(axes, reverse=True):
        x = torch.prod(x, a)
    return x


def _sum_transpose(ct, x, *, axes):
    shape = x.aval.shape
    kept = tuple(i for i in range(len(shape)) if i not in axes)
    return [S.broadcast_in_dim(ct, shape, kept)]


def _sum_codegen(args, avals, *, axes):
    """torch.sum; over dims that all have size 1 (a per-example gradient's bias, summed over
    its one row), `x.reshape(out) + 0.0`: torch's sum kernel takes 25 us on a (256, 1, 128)
    float32 tensor there, the add 6 us, and both give x exactly, -0.0 as +0.0 (the sum's
    accumulator starts at +0.0)."""
    x, aval = args[0], avals[0]
    if axes and aval.dtype.is_floating_point and all(aval.shape[a] == 1 for a in axes):
        shape = tuple(d for i, d in enumerate(aval.shape) if i not in axes)
        return f"({x}.reshape({shape!r}) + 0.0)"
    return f"torch.sum({x}, {axes!r})"


reduce_sum_p = def_reduction(
    "reduce_sum",
    lambda x, *, axes: torch.sum(x, axes),
    None,
    "sum",
    linear=True,
    transpose=_sum_transpose,
    torch_codegen=_sum_codegen,
)
reduce_max_p = def_reduction(
    "reduce_max",
    lambda x, *, axes: torch.amax(x, axes),
    lambda x, axes: f"torch.amax({x}, {axes!r})",
    "max",
    jvp=lambda primals, tangents, *, axes: _extremum_jvp(reduce_max_p, primals, tangents, axes),
)
reduce_min_p = def_reduction(
    "reduce_min",
    lambda x, *, axes: torch.amin(x, axes),
    lambda x, axes: f"torch.amin({x}, {axes!r})",
    "min",
    jvp=lambda primals, tangents, *, axes: _extremum_jvp(reduce_min_p, primals, tangents, axes),
)
reduce_prod_p = def_reduction(
    "reduce_prod",
    lambda x, *, axes: _prod_impl(x, axes),
    lambda x, axes: f"_impl_reduce_prod({x}, axes={axes!r})",
    "prod",
    jvp=lambda primals, tangents, *, axes: _prod_jvp(primals, tangents, axes=axes),
)


def reduce_sum(x, axes, keepdims: bool = False):
    axes = tuple(sorted(axes))
    if not axes:
        return x
    out = reduce_sum_p.bind(x, axes=axes)
    return S.expand_dims(out, axes) if keepdims else out


def reduce_max(x, axes):
    axes = tuple(sorted(axes))
    return reduce_max_p.bind(x, axes=axes) if axes else x


def reduce_min(x, axes):
    axes = tuple(sorted(axes))
    return reduce_min_p.bind(x, axes=axes) if axes else x


def reduce_prod(x, axes):
    axes = tuple(sorted(axes))
    return reduce_prod_p.bind(x, axes=axes) if axes else x


def _kept(shape, axes):
    return tuple(i for i in range(len(shape)) if i not in axes)


def _extremum_jvp(prim, primals, tangents, axes):
    """Tangent is the mean of the tangents at the locations attaining the extremum (JAX's and
    torch's amax rule). Tangents elsewhere are selected away, not multiplied by 0: an infinite
    tangent at an unselected location must not turn the result into nan (0 * inf).

    A nan extremum (a nan in the row) is attained nowhere (nan != nan): its derivative is nan,
    at every location of the row in reverse mode too (torch's amax and JAX, in both modes), where
    dividing by the zero count alone gives nan forward but selects the cotangent away (0)."""
    (x,), (t,) = primals, tangents
    y = prim.bind(x, axes=axes)
    if type(t) is Zero:
        return y, Zero(get_aval(y))
    shape = _shape(x)
    kept = _kept(shape, axes)
    y_nan = B.ne(y, y)
    hit = B.or_p.bind(
        B.eq(x, S.broadcast_in_dim(y, shape, kept)), S.broadcast_in_dim(y_nan, shape, kept)
    )
    count = U.select(y_nan, math.nan, reduce_sum(U.convert(hit, get_aval(x).dtype), axes))
    return y, B.div(reduce_sum(U.select(hit, t, 0.0), axes), count)


def _prod_jvp(primals, tangents, *, axes):
    """d prod = sum_i t_i * prod_{j != i} x_j, with the products of the others taken without
    division (exact where x has zeros or infinities, as torch's rule)."""
    (x,), (t,) = primals, tangents
    y = reduce_prod(x, axes)
    if type(t) is Zero:
        return y, Zero(get_aval(y))
    return y, reduce_sum(B.mul(t, _products_of_others(x, axes)), axes)


def _products_of_others(x, axes):
    """For each element, the product of the other elements of its reduction group: exclusive
    cumulative products from the left times those from the right."""
    from thunderx.primitives import slicing

    shape = _shape(x)
    kept = _kept(shape, axes)
    n = 1
    for a in axes:
        n *= shape[a]
    perm = kept + tuple(axes)
    r = len(kept)
    flat = S.reshape(S.transpose(x, perm), tuple(shape[k] for k in kept) + (n,))
    shift = [(0, 0, 0)] * r + [(1, -1, 0)]  # (1, a, b, ...) from (a, b, c, ...)
    left = slicing.pad(cumprod(flat, r), 1.0, shift)
    rev = slicing.rev(flat, (r,))
    right = slicing.rev(slicing.pad(cumprod(rev, r), 1.0, shift), (r,))
    others = S.reshape(B.mul(left, right), tuple(shape[p] for p in perm))
    return S.transpose(others, S._inverse(perm))


# ---------------------------------------------------------------------------- argmax / argmin


def def_arg_reduction(name, torch_fn):
    def batch(args, dims, *, axis, index_dtype):
        x = S.moveaxis(args[0], dims[0], 0)
        return prim.bind(x, axis=axis + 1, index_dtype=index_dtype), 0

    prim = declare(
        name,
        impl=lambda x, *, axis, index_dtype: torch_fn(x, axis).to(index_dtype),
        abstract_eval=lambda x, *, axis, index_dtype: _reduced(x, (axis,), index_dtype),
        batch=batch,
        torch_codegen=lambda args, avals, *, axis, index_dtype: (
            f"torch.{torch_fn.__name__}({args[0]}, {axis})"
            + ("" if index_dtype == torch.int64 else f".to({index_dtype})")
        ),
    )
    return prim


argmax_p = def_arg_reduction("argmax", torch.argmax)
argmin_p = def_arg_reduction("argmin", torch.argmin)


def _mode_batch(args, dims, *, axis):
    x = S.moveaxis(args[0], dims[0], 0)
    return mode_index_p.bind(x, axis=axis + 1), 0


# the index torch.mode returns along `axis` (torch's kernel chooses among equal elements)
mode_index_p = declare(
    "mode_index",
    impl=lambda x, *, axis: torch.mode(x, axis).indices,
    abstract_eval=lambda x, *, axis: _reduced(x, (axis,), torch.int64),
    batch=_mode_batch,
    torch_codegen=lambda args, avals, *, axis: f"torch.mode({args[0]}, {axis}).indices",
)


def mode_index(x, axis: int):
    return mode_index_p.bind(x, axis=axis)


def argmax(x, axis: int, index_dtype=torch.int64):
    return argmax_p.bind(x, axis=axis, index_dtype=index_dtype)


def argmin(x, axis: int, index_dtype=torch.int64):
    return argmin_p.bind(x, axis=axis, index_dtype=index_dtype)


# -------------------------------------------------------------------------------------- cumsum


def _cumsum_impl(x, *, axis, reverse):
    if reverse:
        return torch.flip(torch.cumsum(torch.flip(x, (axis,)), axis), (axis,))
    return torch.cumsum(x, axis)


def _cumsum_codegen(args, avals, *, axis, reverse):
    if reverse:
        return f"torch.flip(torch.cumsum(torch.flip({args[0]}, ({axis},)), {axis}), ({axis},))"
    return f"torch.cumsum({args[0]}, {axis})"


def _cumsum_batch(args, dims, *, axis, reverse):
    x = S.moveaxis(args[0], dims[0], 0)
    return cumsum(x, axis + 1, reverse), 0


cumsum_p = declare(
    "cumsum",
    impl=_cumsum_impl,
    abstract_eval=lambda x, *, axis, reverse: x.strip_weak(),
    linear=True,
    transpose=lambda ct, x, *, axis, reverse: [cumsum(ct, axis, not reverse)],
    batch=_cumsum_batch,
    torch_codegen=_cumsum_codegen,
)


def cumsum(x, axis: int, reverse: bool = False):
    return cumsum_p.bind(x, axis=axis, reverse=reverse)


# ------------------------------------------------------------------------------------- cumprod


def cumprod(x, axis: int):
    return cumprod_p.bind(x, axis=axis)


def _cumprod_jvp(primals, tangents, *, axis):
    """dy_k = sum_{i<=k} t_i L_i R_ik with L_i = prod_{j<i} x_j and R_ik = prod_{i<j<=k} x_j:
    exact where x has zeros (no division), O(n^2) through a cumprod of an n x n matrix."""
    (x,), (t,) = primals, tangents
    y = cumprod(x, axis)
    if type(t) is Zero or _shape(x)[axis] == 0:
        return y, t
    from thunderx.primitives import creation

    shape = _shape(x)
    n = shape[axis]
    xm, tm = S.moveaxis(x, axis, -1), S.moveaxis(t, axis, -1)
    lead = _shape(xm)[:-1]
    r = len(lead)
    dev = get_aval(x).device
    i_idx = creation.iota(torch.int64, (n, n), 0, dev)
    j_idx = creation.iota(torch.int64, (n, n), 1, dev)
    # M[i, j] = x_j for j > i else 1; its cumprod along j is R[i, k]
    after = S.broadcast_in_dim(B.gt(j_idx, i_idx), lead + (n, n), (r, r + 1))
    m = U.select(after, S.broadcast_in_dim(xm, lead + (n, n), tuple(range(r)) + (r + 1,)), 1.0)
    right = cumprod(m, r + 1)  # [..., i, k]
    # L: exclusive cumprod (1, x_0, x_0 x_1, ...)
    left = S.pad(S.slice_in_dim(cumprod(xm, r), 0, n - 1, 1, r), 1.0, [(0, 0, 0)] * r + [(1, 0, 0)])
    weight = S.broadcast_in_dim(B.mul(tm, left), lead + (n, n), tuple(range(r)) + (r,))
    upper = S.broadcast_in_dim(B.le(i_idx, j_idx), lead + (n, n), (r, r + 1))  # i <= k
    dy = reduce_sum(U.select(upper, B.mul(weight, right), 0.0), (r,))
    return y, S.moveaxis(dy, len(shape) - 1, axis)


cumprod_p = declare(
    "cumprod",
    impl=lambda x, *, axis: torch.cumprod(x, axis),
    abstract_eval=lambda x, *, axis: x.strip_weak(),
    jvp=_cumprod_jvp,
    batch=lambda args, dims, *, axis: (cumprod(S.moveaxis(args[0], dims[0], 0), axis + 1), 0),
    torch_codegen=lambda args, avals, *, axis: f"torch.cumprod({args[0]}, {axis})",
)
