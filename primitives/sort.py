"""Order statistics: sort (several operands, lexicographic keys, stable or not), top_k, cumulative
max/min with their indices, logcumsumexp, and searchsorted (integer-valued). The floating outputs
of sort, top_k and cummax/cummin rearrange an operand, so their tangents are the operand's
tangents gathered by the same indices.

    >>> from thunderx.primitives import sort as SO
    >>> x = torch.tensor([3.0, 1.0, 2.0])
    >>> values, idx = SO.sort([x, SO.iota_along(x, 0)], dimension=0)  # torch.sort(x)
"""

from __future__ import annotations

import math

import torch

from thunderx.ad_util import Zero
from thunderx.avals import ShapedArray, is_float
from thunderx.core import declare, get_aval
from thunderx.primitives import _matrix as M
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import indexing as I
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U


def _check_axis(name, x: ShapedArray, axis: int) -> None:
    if not 0 <= axis < max(x.ndim, 1):
        raise TypeError(f"{name}: axis {axis} out of range for {x.str_short()}")


def iota_along(x, axis: int):
    """int64 positions 0..n-1 along `axis`, shaped like x."""
    a = get_aval(x)
    return C.iota(torch.int64, tuple(a.shape), axis, a.device)


def _gather_tangent(t, idx, axis):
    if type(t) is Zero:
        return Zero(ShapedArray(get_aval(idx).shape, t.aval.dtype, t.aval.device))
    if len(M.shape(t)) == 0:
        return t
    return I.gather(t, idx, axis)


def _front(args, dims):
    return M.batch_to_front(list(args), list(dims))


# ------------------------------------------------------------------------------------------ sort


def sort(
    operands, dimension: int, is_stable: bool = True, num_keys: int = 1, descending: bool = False
):
    """Sort `operands` (same shape) along `dimension` by the first `num_keys` of them,
    lexicographically; the rest follow the same permutation. NaN sorts as the largest value."""
    return sort_p.bind(
        *operands,
        dimension=dimension,
        is_stable=is_stable,
        num_keys=num_keys,
        descending=descending,
    )


def _sort_impl(*ops, dimension, is_stable, num_keys, descending):
    if ops[0].dim() == 0:
        return list(ops)
    if num_keys == 1:
        first, idx = torch.sort(ops[0], dim=dimension, stable=is_stable, descending=descending)
    else:
        # lexicographic: stable sorts from the last key to the first
        idx = torch.arange(ops[0].shape[dimension], device=ops[0].device)
        shape = [1] * ops[0].dim()
        shape[dimension] = -1
        idx = idx.reshape(shape).expand(ops[0].shape).contiguous()
        for key in reversed(ops[:num_keys]):
            _, j = torch.sort(
                key.gather(dimension, idx), dim=dimension, stable=True, descending=descending
            )
            idx = idx.gather(dimension, j)
        first = ops[0].gather(dimension, idx)
    return [first] + [o.gather(dimension, idx) for o in ops[1:]]


def _sort_codegen(args, avals, *, dimension, is_stable, num_keys, descending):
    call = f"torch.sort({args[0]}, dim={dimension}, stable={is_stable}, descending={descending})"
    if len(args) == 1:
        return f"({call}.values,)"
    return (
        f"_impl_sort({', '.join(args)}, dimension={dimension}, is_stable={is_stable}, "
        f"num_keys={num_keys}, descending={descending})"
    )


def _sort_abstract_eval(*ops, dimension, is_stable, num_keys, descending):
    if not 1 <= num_keys <= len(ops):
        raise TypeError(f"sort: num_keys={num_keys} with {len(ops)} operands")
    if any(o.shape != ops[0].shape for o in ops):
        raise TypeError(f"sort: operands differ in shape: {[o.str_short() for o in ops]}")
    _check_axis("sort", ops[0], dimension)
    return [o.strip_weak() for o in ops]


def _sort_jvp(primals, tangents, **params):
    dim = params["dimension"]
    if len(M.shape(primals[0])) == 0:
        return list(primals), list(tangents)
    *outs, perm = sort(list(primals) + [iota_along(primals[0], dim)], **params)
    return outs, [_gather_tangent(t, perm, dim) for t in tangents]


def _sort_batch(args, dims, *, dimension, **params):
    outs = sort(_front(args, dims), dimension + 1, **params)
    return outs, [0] * len(outs)


sort_p = declare(
    "sort",
    multiple_results=True,
    impl=_sort_impl,
    abstract_eval=_sort_abstract_eval,
    torch_codegen=_sort_codegen,
    jvp=_sort_jvp,
    batch=_sort_batch,
)

# ----------------------------------------------------------------------------------------- top_k


def top_k(x, k: int, axis: int, largest: bool = True, sorted: bool = True):  # noqa: A002
    """[values, int64 indices] of the k largest (or smallest) entries along `axis`: torch.topk."""
    return top_k_p.bind(x, k=k, axis=axis, largest=largest, sorted=sorted)


def _top_k_abstract_eval(x, *, k, axis, largest, sorted):  # noqa: A002
    _check_axis("top_k", x, axis)
    n = x.shape[axis] if x.ndim else 1
    if not 0 <= k <= n:
        raise TypeError(f"top_k: k={k} out of range for {x.str_short()} along axis {axis}")
    shape = tuple(x.shape[:axis]) + (k,) + tuple(x.shape[axis + 1 :]) if x.ndim else ()
    return [ShapedArray(shape, x.dtype, x.device), ShapedArray(shape, torch.int64, x.device)]


def _top_k_jvp(primals, tangents, **params):
    (x,), (t,) = primals, tangents
    vals, idx = top_k(x, **params)
    return [vals, idx], [_gather_tangent(t, idx, params["axis"]), Zero(get_aval(idx))]


def _top_k_batch(args, dims, *, axis, **params):
    return top_k(S.moveaxis(args[0], dims[0], 0), axis=axis + 1, **params), [0, 0]


top_k_p = declare(
    "top_k",
    multiple_results=True,
    impl=lambda x, *, k, axis, largest, sorted: list(  # noqa: A006
        torch.topk(x, k, axis, largest=largest, sorted=sorted)
    ),
    abstract_eval=_top_k_abstract_eval,
    torch_codegen=lambda args, avals, *, k, axis, largest, sorted: (  # noqa: A006
        f"torch.topk({args[0]}, {k}, {axis}, largest={largest}, sorted={sorted})"
    ),
    jvp=_top_k_jvp,
    batch=_top_k_batch,
)

# ------------------------------------------------------------------------------- cummax / cummin


def _def_cum_extremum(name, torch_fn):
    def abstract_eval(x, *, axis):
        _check_axis(name, x, axis)
        return [x.strip_weak(), ShapedArray(x.shape, torch.int64, x.device)]

    def jvp(primals, tangents, *, axis):
        (x,), (t,) = primals, tangents
        vals, idx = prim.bind(x, axis=axis)
        return [vals, idx], [_gather_tangent(t, idx, axis), Zero(get_aval(idx))]

    def batch(args, dims, *, axis):
        return prim.bind(S.moveaxis(args[0], dims[0], 0), axis=axis + 1), [0, 0]

    prim = declare(
        name,
        multiple_results=True,
        impl=lambda x, *, axis: list(torch_fn(x, axis)),
        abstract_eval=abstract_eval,
        torch_codegen=lambda args, avals, *, axis: f"torch.{torch_fn.__name__}({args[0]}, {axis})",
        jvp=jvp,
        batch=batch,
    )
    return prim


cummax_p = _def_cum_extremum("cummax", torch.cummax)
cummin_p = _def_cum_extremum("cummin", torch.cummin)


def cummax(x, axis: int):
    """[running max, int64 index of the last element attaining it] along axis: torch.cummax."""
    return cummax_p.bind(x, axis=axis)


def cummin(x, axis: int):
    return cummin_p.bind(x, axis=axis)


# ---------------------------------------------------------------------------------- logcumsumexp


def logcumsumexp(x, axis: int):
    return logcumsumexp_p.bind(x, axis=axis)


def _lcse_abstract_eval(x, *, axis):
    _check_axis("logcumsumexp", x, axis)
    if not is_float(x.dtype):
        raise TypeError(f"logcumsumexp: expected a floating dtype, got {x.str_short()}")
    return x.strip_weak()


def _lcse_jvp(primals, tangents, *, axis):
    """dy_k = sum_{i <= k} exp(x_i - y_k) t_i. Each weight is at most 1, so nothing overflows;
    the price is an n x n weight matrix per row along `axis`. The weights are computed as
    exp(x_i - m_k) / sum_{j <= k} exp(x_j - m_k), m_k the running max: differences of inputs,
    exact where the inputs are close, where y_k is rounded to its own magnitude (three equal
    entries of 4e88 have y_2 == x_2, and exp(x_i - y_2) gave the weights 1 instead of 1/3).
    The terms i > k are selected away from the exponent, from the weights and again after the
    product, so that a nan or inf tangent t_i (or, transposed, cotangent of y_k) reaches only
    the outputs (inputs) that depend on it, as in JAX, and that no overflowing weight meets a
    second derivative's zero cotangent (0 * inf = nan)."""
    from thunderx.primitives.higher_order import stop_gradient

    (x,), (t,) = primals, tangents
    y = logcumsumexp(x, axis)
    if len(M.shape(x)) == 0:
        return y, t
    xm, tm = (S.moveaxis(v, axis, -1) for v in (x, t))
    last = len(M.shape(xm)) - 1
    peak = stop_gradient(cummax(xm, last)[0])
    # a prefix holding +inf: no normalization, exp(x_i - y_k) as logsumexp's derivative, 0 at
    # the finite entries and nan at the infinite ones (the softmax's sum would be nan and reach
    # every entry)
    infinite = B.eq(peak, math.inf)
    e = M.tril(U.exp(M.tril(B.sub(M.row_vector(xm), M.col_vector(peak)))))  # [.., k, i]
    total = U.select(infinite, 1.0, R.reduce_sum(e, (last + 1,)))
    # (the terms i > k selected away again: a prefix of -inf entries has weights 0 / 0 = nan)
    w = M.tril(B.div(e, M.col_vector(total)))
    dy = R.reduce_sum(M.tril(B.mul(w, M.row_vector(tm))), (last + 1,))
    return y, S.moveaxis(dy, last, axis)


logcumsumexp_p = declare(
    "logcumsumexp",
    impl=lambda x, *, axis: torch.logcumsumexp(x, axis),
    abstract_eval=_lcse_abstract_eval,
    torch_codegen=lambda args, avals, *, axis: f"torch.logcumsumexp({args[0]}, {axis})",
    jvp=_lcse_jvp,
    batch=lambda args, dims, *, axis: (
        logcumsumexp(S.moveaxis(args[0], dims[0], 0), axis + 1),
        0,
    ),
)

# ---------------------------------------------------------------------------------- searchsorted


def searchsorted(sorted_sequence, values, right: bool = False, index_dtype=torch.int64):
    """Insertion points of `values` in the last dim of `sorted_sequence` (1-D, or with the same
    leading dims as `values`): torch.searchsorted. Integer-valued: no tangent."""
    return searchsorted_p.bind(sorted_sequence, values, right=right, index_dtype=index_dtype)


def _ss_abstract_eval(seq, values, *, right, index_dtype):
    if seq.ndim == 0 or (seq.ndim > 1 and seq.shape[:-1] != values.shape[:-1]):
        raise TypeError(
            f"searchsorted: sequence {seq.str_short()} must be 1-D or share the leading dims "
            f"of values {values.str_short()}"
        )
    return ShapedArray(values.shape, index_dtype, values.device)


def _ss_batch(args, dims, *, right, index_dtype):
    (seq, values), (ds, dv) = args, dims
    if ds is None and len(M.shape(seq)) == 1:
        return searchsorted(seq, values, right, index_dtype), dv
    seq, values = _front([seq, values], [ds, dv])
    vs, n = M.shape(values), M.shape(seq)[-1]
    if len(M.shape(seq)) == 2 and len(vs) > 2:
        # a batch of 1-D sequences: torch wants one per row of values
        seq = S.broadcast_in_dim(seq, vs[:-1] + (n,), (0, len(vs) - 1))
    return searchsorted(seq, values, right, index_dtype), 0


def _ss_impl(seq, values, *, right, index_dtype):
    return torch.searchsorted(seq, values, right=right, out_int32=index_dtype == torch.int32)


searchsorted_p = declare(
    "searchsorted",
    impl=_ss_impl,
    abstract_eval=_ss_abstract_eval,
    torch_codegen=lambda args, avals, *, right, index_dtype: (
        f"torch.searchsorted({args[0]}, {args[1]}, right={right}, "
        f"out_int32={index_dtype == torch.int32})"
    ),
    batch=_ss_batch,
)
