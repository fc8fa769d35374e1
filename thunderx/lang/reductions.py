"""Reductions: sum, mean, prod, amax/amin, max/min, argmax/argmin, var/std, logsumexp, norms,
cumulative sums and products, all/any."""

from __future__ import annotations

import collections
import math

import torch

from thunderx.avals import is_float
from thunderx.lang._base import (
    aval,
    canon_dim,
    canon_dims,
    convert,
    dtype,
    in_opmath,
    keepdims,
    ndim,
    register,
    shape,
    where,
)
from thunderx.lang.complex import abs_complex
from thunderx.lang.elementwise import _maximum, _minimum
from thunderx.primitives import binary as B
from thunderx.primitives import complex as X
from thunderx.primitives import composite_norm2 as KN2
from thunderx.primitives import indexing as I
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives.slicing import slice_

MinMax = collections.namedtuple("MinMax", ["values", "indices"])


_dtype_of = dtype


def _count(x, dims) -> int:
    n = 1
    for d in dims:
        n *= shape(x)[d]
    return n


def _sum_dtype(x, dt):
    if dt is not None:
        return convert(x, dt)
    if not is_float(dtype(x)):
        return convert(x, torch.int64)
    return x


def _dims_arg(dim, n):
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        return tuple(range(n))
    return canon_dims(dim, n)


@register(torch.sum, methods=("sum",))
def _sum(x, dim=None, keepdim=False, *, dtype=None):
    x = _sum_dtype(x, dtype)
    dims = _dims_arg(dim, ndim(x))
    return keepdims(R.reduce_sum(x, dims), dims, keepdim)


@register(torch.nansum, methods=("nansum",))
def _nansum(x, dim=None, keepdim=False, *, dtype=None):
    if is_float(_dtype_of(x)):
        x = where(B.ne(x, x), 0.0, x)
    return _sum(x, dim, keepdim, dtype=dtype)  # integers have no nan: their sum (int64)


@register(torch.mean, methods=("mean",))
def _mean(x, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        x = convert(x, dtype)
    if not is_float(_dtype_of(x)):
        raise TypeError("mean: input dtype should be floating point; pass dtype= or call .float()")
    dims = _dims_arg(dim, ndim(x))
    total = R.reduce_sum(x, dims)
    return keepdims(B.div(total, float(_count(x, dims))), dims, keepdim)


@register(torch.prod, methods=("prod",))
def _prod(x, dim=None, keepdim=False, *, dtype=None):
    x = _sum_dtype(x, dtype)
    dims = canon_dims(dim, ndim(x))
    return keepdims(R.reduce_prod(x, dims), dims, keepdim)


def _extremum(reduce, x, dim, keepdim):
    dims = _dims_arg(dim, ndim(x))
    if ndim(x) == 0:
        # a 0-d tensor reduces as its one-element vector, as in torch: at nan the derivative is
        # nan (the extremum-of-nan rule), not the identity's 1
        return S.reshape(reduce(S.reshape(x, (1,)), (0,)), ())
    return keepdims(reduce(x, dims), dims, keepdim)


@register(torch.amax, methods=("amax",))
def _amax(x, dim=(), keepdim=False):
    return _extremum(R.reduce_max, x, dim, keepdim)


@register(torch.amin, methods=("amin",))
def _amin(x, dim=(), keepdim=False):
    return _extremum(R.reduce_min, x, dim, keepdim)


def _arg(prim_fn, x, dim, keepdim):
    if dim is None:
        flat = S.reshape(x, (_count(x, range(ndim(x))),))
        out = prim_fn(flat, 0)
        if keepdim and ndim(x):
            out = S.reshape(out, (1,) * ndim(x))
        return out
    d = canon_dim(dim, ndim(x))
    if ndim(x) == 0:
        return prim_fn(S.reshape(x, (1,)), 0)  # a scalar's only index, as int64
    return keepdims(prim_fn(x, d), (d,), keepdim)


@register(torch.argmax, methods=("argmax",))
def _argmax(x, dim=None, keepdim=False):
    return _arg(R.argmax, x, dim, keepdim)


@register(torch.argmin, methods=("argmin",))
def _argmin(x, dim=None, keepdim=False):
    return _arg(R.argmin, x, dim, keepdim)


def _minmax(reduce, arg, pairwise, x, dim, keepdim, other):
    if other is not None:
        return pairwise(x, other)
    if dim is None:
        return reduce(x, canon_dims(None, ndim(x)))
    if not isinstance(dim, int) and other is None and hasattr(dim, "shape"):
        return pairwise(x, dim)
    d = canon_dim(dim, ndim(x))
    if ndim(x) == 0:
        from thunderx.primitives import creation as C

        return MinMax(x, C.full((), 0, torch.int64, aval(x).device))
    # the values are read at the returned indices, so with ties the derivative goes to that
    # index alone (torch's rule for max(dim)/min(dim); amax/amin split it among the ties)
    # torch's max(dim)/min(dim) take bool, its argmax/argmin do not: find the index on uint8
    idx = arg(convert(x, torch.uint8) if dtype(x) is torch.bool else x, d)
    values = S.squeeze(I.gather(x, S.expand_dims(idx, (d,)), d), (d,))
    return MinMax(keepdims(values, (d,), keepdim), keepdims(idx, (d,), keepdim))


@register(torch.max, methods=("max",))
def _max(x, dim=None, keepdim=False, *, other=None):
    return _minmax(R.reduce_max, R.argmax, _maximum, x, dim, keepdim, other)


@register(torch.min, methods=("min",))
def _min(x, dim=None, keepdim=False, *, other=None):
    return _minmax(R.reduce_min, R.argmin, _minimum, x, dim, keepdim, other)


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    if unbiased is None:
        return 1
    return 1 if unbiased else 0


def _var(x, dim, correction, keepdim):
    if dtype(x).is_complex:
        # torch: the variance of a complex tensor is real, that of its real part plus that of
        # its imaginary part; the mean is complex
        vr, mr = _var(X.real(x), dim, correction, keepdim)
        vi, mi = _var(X.imag(x), dim, correction, keepdim)
        return B.add(vr, vi), X.complex_(mr, mi)
    dims = _dims_arg(dim, ndim(x))
    n = _count(x, dims)
    if n == 0:
        # no element: the variance is nan and its derivative the empty sum 0 (torch's var),
        # not 0 / 0 from dividing the sum's zero tangent by n. Computed from x (0 * sum + nan),
        # not made as a constant: like torch's, it is then a value of the function (batched
        # under vmap, traced under grad), which a later in-place write may update
        total = R.reduce_sum(x, dims)
        mean = B.div(total, 0.0)
        var = B.add(B.mul(total, 0.0), math.nan)
    else:
        var, mean = _var_mean_fn(dims, n, float(max(n - correction, 0)))(x)
    return keepdims(var, dims, keepdim), keepdims(mean, dims, keepdim)


def _var_mean_fn(dims, n, denom):
    """(variance, mean) over `dims` with torch's derivative: d var = 2 / denom * sum((x - mean)
    * dx). Differentiating through the centering adds -mean(ct * (x - mean)), zero in exact
    arithmetic, but inf - inf = nan where a cotangent is infinite (torch gives +-inf there)."""
    from thunderx.transforms.custom import custom_jvp

    def centered(x):
        # the deviations from the mean, computed as the deviations of x - x0 (x0 the first
        # entry of each reduced row): equal in exact arithmetic, but a constant row then has
        # deviations of exactly 0 (its variance 0, as torch's Welford kernels give, where sum / n
        # rounds away from the entries: std of 3 x 1/sqrt(0.1) was 5e-16), and a row whose mean
        # dwarfs its spread loses no digits to the mean's rounding
        mean = B.div(R.reduce_sum(x, dims, keepdims=True), float(n))
        x0 = slice_(x, [0] * ndim(x), [1 if d in dims else s for d, s in enumerate(shape(x))])
        d = B.sub(x, S.broadcast_to(x0, shape(x)))
        dmean = B.div(R.reduce_sum(d, dims, keepdims=True), float(n))
        return B.sub(d, S.broadcast_to(dmean, shape(x))), mean

    @custom_jvp
    def f(x):
        c, mean = centered(x)
        ss = R.reduce_sum(B.mul(c, c), dims)
        return B.div(ss, denom), S.reshape(mean, shape(ss))

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        var, mean = f(x)
        c, _ = centered(x)
        # centred again: the deviations of a (near-)constant row are rounding noise that does
        # not sum to 0, and d std = d var / (2 std) divides it by noise (std(x.expand(3)) got
        # gradient 1.22 where the function is constant); their mean removed, the derivative
        # along the all-ones direction is 0 as in exact arithmetic (var is shift-invariant)
        c = B.sub(
            c, S.broadcast_to(B.div(R.reduce_sum(c, dims, keepdims=True), float(n)), shape(c))
        )
        dvar = B.mul(R.reduce_sum(B.mul(c, t), dims), 2.0 / denom if denom else math.inf)
        dmean = B.div(R.reduce_sum(t, dims), float(n))
        return (var, mean), (dvar, dmean)

    return f


def _unpack_var_args(dim, unbiased):
    # torch.var(x, True) means unbiased=True
    if isinstance(dim, bool):
        return None, dim
    return dim, unbiased


@register(torch.var, methods=("var",))
@in_opmath
def _var_fn(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, unbiased = _unpack_var_args(dim, unbiased)
    return _var(x, dim, _correction(unbiased, correction), keepdim)[0]


@register(torch.std, methods=("std",))
@in_opmath
def _std_fn(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, unbiased = _unpack_var_args(dim, unbiased)
    return safe_root(_var(x, dim, _correction(unbiased, correction), keepdim)[0], 2)


def safe_root(v, p):
    """v ** (1/p) (p=2: sqrt) whose derivative is 0 where v == 0: torch's convention for the
    gradient of a norm at the zero vector and of std of a constant, where the root's derivative
    is infinite and the chain rule would give 0 * inf = nan."""
    zero = B.eq(v, 0.0)
    safe = U.select(zero, 1.0, v)
    root = U.sqrt(safe) if p == 2 else B.pow(safe, 1.0 / p)
    return U.select(zero, 0.0, root)


@register(torch.var_mean)
@in_opmath
def _var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, unbiased = _unpack_var_args(dim, unbiased)
    return _var(x, dim, _correction(unbiased, correction), keepdim)


@register(torch.std_mean)
@in_opmath
def _std_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, unbiased = _unpack_var_args(dim, unbiased)
    v, m = _var(x, dim, _correction(unbiased, correction), keepdim)
    return safe_root(v, 2), m


def logsumexp(x, dims, keepdim=False):
    from thunderx.primitives.higher_order import stop_gradient

    if any(shape(x)[d] == 0 for d in dims):
        # the log of an empty sum (amax has no value to offer here)
        from thunderx.primitives import creation as C

        total = R.reduce_sum(x, dims)
        out = C.full(shape(total), -math.inf, dtype(x).to_real(), aval(x).device)
        if dtype(x).is_complex:
            # -inf + 0j, torch's log(0j): a complex add of -inf would make the imaginary part nan
            out = X.complex_(B.add(out, X.real(total)), X.imag(total))
        else:
            out = B.add(out, total)
        return keepdims(out, dims, keepdim)

    from thunderx.transforms.custom import custom_jvp

    kept = tuple(i for i in range(ndim(x)) if i not in dims)

    def shift(x):
        """The largest entry (of the real parts, for complex x: torch's shift), x's dtype."""
        m = R.reduce_max(X.real(x) if dtype(x).is_complex else x, dims)
        return m if dtype(m) == dtype(x) else U.convert(m, dtype(x))

    @custom_jvp
    def f(x):
        m = shift(x)
        m = stop_gradient(where(U.isfinite(m), m, 0.0))
        mb = S.broadcast_in_dim(m, shape(x), kept)
        return B.add(U.log(R.reduce_sum(U.exp(B.sub(x, mb)), dims)), m)

    @f.defjvp
    def f_jvp(primals, tangents):
        from thunderx.transforms.jvp import jvp_reverse

        (x,), (t,) = primals, tangents
        out = f(x)
        if jvp_reverse():
            # torch's logsumexp_backward, grad * exp(x - result), as the tangent's transpose
            weights = U.exp(B.sub(x, S.broadcast_in_dim(out, shape(x), kept)))
            return out, R.reduce_sum(B.mul(t, weights), dims)
        # forward mode: torch's formula, sum(exp(x - max) t) / sum(exp(x - max)). Its weights
        # sum to 1 where the output rounds to the largest entry (entries of 4e44, two of them
        # tied: exp(x - result) is 1 at each, twice the derivative)
        m = stop_gradient(shift(x))
        e = U.exp(B.sub(x, S.broadcast_in_dim(m, shape(x), kept)))
        return out, B.div(R.reduce_sum(B.mul(e, t), dims), R.reduce_sum(e, dims))

    return keepdims(f(x), dims, keepdim)


@register(torch.logsumexp, methods=("logsumexp",))
def _logsumexp(x, dim=None, keepdim=False):
    if not is_float(dtype(x)):
        x = convert(x, torch.get_default_dtype())
    return logsumexp(x, _dims_arg(dim, ndim(x)), keepdim)


@register(torch.cumsum, methods=("cumsum",))
def _cumsum(x, dim, *, dtype=None):
    x = _sum_dtype(x, dtype)
    if ndim(x) == 0:
        return x
    return R.cumsum(x, canon_dim(dim, ndim(x)))


@register(torch.cumprod, methods=("cumprod",))
def _cumprod(x, dim, *, dtype=None):
    x = _sum_dtype(x, dtype)
    if ndim(x) == 0:
        return x
    return R.cumprod(x, canon_dim(dim, ndim(x)))


def vector_norm(x, ord=2, dim=None, keepdim=False):  # noqa: A002
    if not is_float(dtype(x)):
        x = convert(x, torch.get_default_dtype())
    dims = _dims_arg(dim, ndim(x))
    if dtype(x).is_complex:
        # the norm of the moduli, real; their derivative is torch's (z / |z|, 0 at 0)
        x = abs_complex(x)
    a = U.abs(x)
    if ord == 2 and dims and not dtype(x).is_complex:
        # torch's kernel (its root is correctly rounded; torch.sqrt's is not always)
        out = KN2.norm2(x, dims)
    elif ord == 2:
        out = safe_root(R.reduce_sum(B.mul(x, x), dims), 2)
    elif ord == math.inf:
        out = R.reduce_max(a, dims)
    elif ord == -math.inf:
        out = R.reduce_min(a, dims)
    elif ord == 1:
        out = R.reduce_sum(a, dims)
    elif ord == 0:
        out = R.reduce_sum(convert(B.ne(x, 0.0), dtype(x)), dims)
    else:
        # |x|^p with derivative 0 where x == 0 (torch's vector_norm backward masks those
        # entries): for p < 1 the power's own derivative is infinite there (0 * inf = nan)
        zero = B.eq(a, 0.0)
        powered = B.pow(U.select(zero, 1.0, a), float(ord))
        total = R.reduce_sum(U.select(zero, 0.0 if ord > 0 else math.inf, powered), dims)
        out = safe_root(total, ord) if ord > 0 else B.pow(total, 1.0 / ord)
    return keepdims(out, dims, keepdim)


@register(torch.linalg.vector_norm)
@in_opmath
def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    if dtype is not None:
        x = convert(x, dtype)
    return vector_norm(x, ord, dim, keepdim)


@register(torch.norm, methods=("norm",))
def _norm(x, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    if dtype is not None:
        x = convert(x, dtype)
    if p == "fro" or p is None:
        p = 2
    if p == "nuc":
        from thunderx.lang.linalg_functions import matrix_norm

        return matrix_norm(x, "nuc", (-2, -1) if dim is None else dim, keepdim)
    if isinstance(p, str):
        from thunderx.errors import unsupported

        raise unsupported(f"torch.norm(p={p!r})")
    return vector_norm(x, p, dim, keepdim)


@register(torch.all, methods=("all",))
def _all(x, dim=None, keepdim=False):
    dims = _dims_arg(dim, ndim(x))
    bad = R.reduce_sum(convert(U.logical_not(_truthy(x)), torch.int64), dims)
    return _uint8_like(keepdims(B.eq(bad, 0), dims, keepdim), x)


@register(torch.any, methods=("any",))
def _any(x, dim=None, keepdim=False):
    dims = _dims_arg(dim, ndim(x))
    good = R.reduce_sum(convert(_truthy(x), torch.int64), dims)
    return _uint8_like(keepdims(B.gt(good, 0), dims, keepdim), x)


def _uint8_like(out, x):
    # torch keeps uint8 for all / any of a uint8 tensor (its legacy byte-mask convention)
    return convert(out, torch.uint8) if dtype(x) is torch.uint8 else out


def _truthy(x):
    return x if dtype(x) is torch.bool else B.ne(x, 0)


@register(torch.count_nonzero, methods=("count_nonzero",))
def _count_nonzero(x, dim=None):
    return R.reduce_sum(convert(_truthy(x), torch.int64), _dims_arg(dim, ndim(x)))
