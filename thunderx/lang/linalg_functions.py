"""torch.linalg functions built on the factorizations: det, slogdet, logdet, matrix norms, norm,
matrix_exp, lstsq, pinv, matrix_rank, cond, matrix_power, multi_dot."""

from __future__ import annotations

import math

import torch

from thunderx.lang._base import (
    aval,
    broadcast_shapes,
    canon_dim,
    convert,
    dtype,
    is_tensor,
    ndim,
    register,
    shape,
)
from thunderx.lang.complex import abs_complex, modulus_squared, sgn_complex
from thunderx.lang.decompositions import (
    RT,
    _broadcast_batch,
    _eye,
    _last,
    _lu_solve,
    _matrix,
    _solve_with_lu,
    svdvals,
)
from thunderx.primitives import _matrix as M
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import linalg_decomp as D
from thunderx.primitives import matrix_functions as MF
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import slicing as SL
from thunderx.primitives import unary as U

# ------------------------------------------------------------------------ determinants and norms


def _lu_diag_and_sign(a, name):
    packed, pivots, _ = D.lu(_matrix(a, name, square=True))
    n = shape(a)[-1]
    diag = M.diagonal(packed)
    # each pivot that is not its own row is one transposition, a factor -1
    own = B.add(S.broadcast_to(C.iota(torch.int32, (n,), 0), shape(pivots)), 1)
    flips = B.sub(1.0, B.mul(U.convert(B.ne(pivots, own), dtype(a)), 2.0))
    parity = R.reduce_prod(flips, (ndim(pivots) - 1,))
    return diag, parity


def _det_value(a):
    diag, parity = _lu_diag_and_sign(a, "linalg.det")
    return B.mul(parity, R.reduce_prod(diag, (ndim(diag) - 1,)))


def _products_of_the_others(s):
    """g_i = prod_{j != i} s_j along the last dim, exact when some s_j are zero."""
    last = ndim(s) - 1
    k = shape(s)[-1]
    keep = [(0, 0, 0)] * last

    def exclusive(v):
        return SL.pad(
            SL.slice_in_dim(R.cumprod(v, last), 0, k - 1, 1, last), 1.0, keep + [(1, 0, 0)]
        )

    return B.mul(exclusive(s), SL.rev(exclusive(SL.rev(s, (last,))), (last,)))


def _batch_select(pred, x, y):
    """select per matrix: pred has the batch shape, x and y are (*batch, n, n)."""
    return U.select(S.broadcast_in_dim(pred, shape(x), tuple(range(ndim(pred)))), x, y)


def _det_jvp(primals, tangents):
    """torch's derivative: d det = det * tr(A^-1 dA) where A is invertible, and through the
    adjugate from the SVD, A^adj = det(U) det(V^H) V diag(prod_{j != i} s_j) U^H, where it is
    singular. Each branch runs on a harmless stand-in where the other applies, so neither leaks
    infinities into derivatives of higher order."""
    (a,), (t,) = primals, tangents
    d = det(a)
    n = shape(a)[-1]
    diag, _ = _lu_diag_and_sign(a, "linalg.det")
    singular = B.gt(R.reduce_sum(U.convert(B.eq(diag, 0.0), torch.int64), (ndim(diag) - 1,)), 0)
    eye = _eye(n, a)
    spread = M.diag_embed(
        S.broadcast_to(U.convert(C.iota(torch.int64, (n,), 0), dtype(a)), shape(diag))
    )
    invertible = _batch_select(singular, eye, a)
    packed, _, perm = D.lu(invertible)
    trace = M.diagonal(_solve_with_lu(packed, perm, t))  # linear in t: transposable
    regular = B.mul(d, R.reduce_sum(trace, (ndim(trace) - 1,)))
    degenerate = _batch_select(singular, a, B.add(eye, spread))
    u, s, vh = D.svd(degenerate)
    alpha = B.mul(det(u), det(vh))
    others = _products_of_the_others(s)  # real: the singular values are
    adj_t = M.mm(_cols_scale(M.mH(vh), M.like(others, vh)), M.mH(u))  # A^adj
    along = R.reduce_sum(B.mul(M.mT(adj_t), t), (ndim(t) - 2, ndim(t) - 1))
    return d, U.select(singular, B.mul(alpha, along), regular)


def _cols_scale(x, v):
    return B.mul(x, _cols(v, shape(x)[-2]))


@register(torch.linalg.det, torch.det, methods=("det",))
def det(a, *, out=None):
    from thunderx.transforms.custom import custom_jvp

    _matrix(a, "linalg.det", square=True)
    f = custom_jvp(_det_value)
    f.defjvp(_det_jvp)
    return f(a)


@register(torch.linalg.slogdet, torch.slogdet, methods=("slogdet",))
def slogdet(a, *, out=None):
    """The sign and log|det| from the LU factors' diagonal. For a complex `a` the sign is
    det / |det| (complex, of modulus 1; 0 where `a` is singular) and log|det| is real, as torch's.

    >>> thunderx.jit(torch.linalg.slogdet)(torch.eye(2, dtype=torch.complex128) * 1j).sign
    tensor(-1.+0.j, dtype=torch.complex128)
    """
    diag, parity = _lu_diag_and_sign(a, "linalg.slogdet")
    last = (ndim(diag) - 1,)
    # U.sign and U.abs are real functions, their derivatives too: complex has its own
    sgn, modulus = (sgn_complex, abs_complex) if M.is_complex(a) else (U.sign, U.abs)
    sign = B.mul(parity, R.reduce_prod(sgn(diag), last))
    logabs = R.reduce_sum(U.log(modulus(diag)), last)
    return RT.linalg_slogdet((sign, logabs))


@register(torch.logdet, methods=("logdet",))
def logdet(a):
    """log det(a): nan where a real determinant is negative; for a complex `a` the complex
    log, log(sign) + log|det| (torch's formula)."""
    sign, logabs = slogdet(a)
    if M.is_complex(a):
        return B.add(U.log(sign), M.like(logabs, sign))
    return U.select(B.lt(sign, 0.0), math.nan, logabs)


def _move_matrix_dims(a, dim):
    n = ndim(a)
    d0, d1 = (canon_dim(d, n) for d in dim)
    if d0 == d1:
        raise ValueError(f"matrix_norm: dims must be different, got {dim}")
    rest = [i for i in range(n) if i not in (d0, d1)]
    return S.transpose(a, tuple(rest) + (d0, d1)), (d0, d1)


@register(torch.linalg.matrix_norm)
def matrix_norm(a, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):  # noqa: A002
    if dtype is not None:
        a = U.convert(a, dtype)
    _matrix(a, "linalg.matrix_norm")
    x, (d0, d1) = _move_matrix_dims(a, dim)
    r = ndim(x)
    if ord not in ("nuc", 2, -2) and aval(x).dtype.is_complex:
        # the entrywise norms read the moduli (real; torch's derivative z / |z|, 0 at 0)
        x = abs_complex(x)
    if 0 in shape(x)[-2:] and ord in ("nuc", 2, 1, math.inf):
        # torch: the largest-type norms of an empty matrix are 0 (a max over nothing)
        out = C.full(shape(x)[:-2], 0.0, aval(x).dtype)
    elif ord == "fro":
        # the vector 2-norm's root: derivative 0 at the zero matrix (torch's), not 0 / 0
        from thunderx.lang.reductions import safe_root

        out = safe_root(R.reduce_sum(B.mul(x, x), (r - 2, r - 1)), 2)
    elif ord == "nuc":
        out = R.reduce_sum(svdvals(x), (r - 2,))
    elif ord in (2, -2):
        s = svdvals(x)
        k = shape(s)[-1]
        if k == 0:
            out = _empty_extremum(shape(x)[:-2], ord, x)
        else:
            # the extreme singular value as torch takes it (amax/amin): tied values share
            # the derivative evenly (at the zero matrix every value ties: I / n, as torch)
            out = (R.reduce_max if ord == 2 else R.reduce_min)(s, (r - 2,))
    elif ord in (1, -1, math.inf, -math.inf):
        # 1: max over columns of the column sums; inf: max over rows of the row sums
        sums = R.reduce_sum(U.abs(x), (r - 2,) if ord in (1, -1) else (r - 1,))
        if shape(sums)[r - 2] == 0:
            out = _empty_extremum(shape(sums)[: r - 2], ord, x)
        else:
            pick = R.reduce_max if ord > 0 else R.reduce_min
            out = pick(sums, (r - 2,))
    else:
        raise ValueError(f"linalg.matrix_norm: order {ord!r} is not supported")
    if keepdim:
        out = S.expand_dims(out, tuple(sorted((d0, d1))))
    return out


def _empty_extremum(out_shape, ord, x):  # noqa: A002
    """The largest of no (nonnegative) values is 0, as torch gives; the smallest has none."""
    if ord < 0:
        raise ValueError(
            f"linalg.matrix_norm: ord={ord} is the minimum over an empty dimension of "
            f"{tuple(shape(x))}, which has no value (torch raises too)"
        )
    return C.full(tuple(out_shape), 0.0, dtype(x), aval(x).device)


@register(torch.linalg.norm)
def norm(a, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):  # noqa: A002
    from thunderx.lang.reductions import _vector_norm

    if isinstance(dim, int):
        dim = (dim,)
    matrix = isinstance(ord, str) or (dim is not None and len(dim) == 2)
    if ord is not None and dim is None:
        matrix = ndim(a) == 2
    if matrix and ord is not None:
        return matrix_norm(a, ord, dim if dim is not None else (-2, -1), keepdim, dtype=dtype)
    if ord is None:
        return _vector_norm(a, 2, dim, keepdim, dtype=dtype)
    return _vector_norm(a, ord, dim, keepdim, dtype=dtype)


@register(torch.linalg.matrix_exp, torch.matrix_exp, methods=("matrix_exp",))
def matrix_exp(a):
    return MF.expm(_matrix(a, "linalg.matrix_exp", square=True))


# ------------------------------------------------------------------------------- lstsq and pinv


_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _stop_gradient(x):
    from thunderx.primitives.higher_order import stop_gradient

    return stop_gradient(x)


@register(torch.linalg.lstsq)
def lstsq(a, b, rcond=None, *, driver=None):
    """Full-rank least squares through QR (of a, or of a^H when a is wide: the minimum-norm
    solution). The other outputs follow the driver as torch's do: rank (counting singular values
    above rcond * the largest) for all but 'gels', singular values for 'gelsd'/'gelss', squared
    residuals for a tall a except with 'gelsy' (the CPU default)."""
    _matrix(a, "linalg.lstsq")
    if driver is None:
        driver = "gels" if aval(a).device.type == "cuda" else "gelsy"
    if driver not in _DRIVERS:
        raise RuntimeError(f"torch.linalg.lstsq: parameter `driver` should be one of {_DRIVERS}")
    vector = ndim(b) == ndim(a) - 1
    if vector:
        b = S.expand_dims(b, (ndim(b),))
    a, b = _broadcast_batch(a, _matrix(b, "linalg.lstsq"))
    *batch, m, n = shape(a)
    if m >= n:
        q, r = D.qr(a)
        x = D.triangular_solve(r, M.mm(M.mH(q), b), left_side=True, lower=False)
    else:
        # a = R^H Q^H: solve R^H y = b (as conj(R)^T y = b), then x = Q y
        q, r = D.qr(M.mH(a))
        y = D.triangular_solve(M.conj(r), b, left_side=True, lower=False, transpose_a=True)
        x = M.mm(q, y)
    real = dtype(a).to_real()  # residuals and singular values are real for complex a
    empty = C.full((0,), 0.0, real)
    residuals = empty
    if m > n and driver != "gelsy":
        res = B.sub(M.mm(a, x), b)
        squares = modulus_squared(res) if M.is_complex(res) else B.mul(res, res)
        # for a vector b too torch keeps the column's dim: (*batch, 1)
        residuals = R.reduce_sum(squares, (ndim(res) - 2,))
    if vector:
        x = S.squeeze(x, (ndim(x) - 1,))
    s = svdvals(a)
    rank = C.full((0,), 0, torch.int64)
    if driver != "gels":
        eps = torch.finfo(dtype(a)).eps
        tol = rcond if rcond is not None and rcond > 0 else eps * max(m, n)
        if shape(s)[-1]:
            smax = S.broadcast_to(_last(s, 0, ndim(s) - 1), shape(s))
            above = B.gt(s, B.mul(smax, tol))
        else:
            above = B.gt(s, 0.0)
        rank = R.reduce_sum(U.convert(above, torch.int64), (ndim(s) - 1,))
    # torch does not differentiate the singular values lstsq reports
    sv = _stop_gradient(s) if driver in ("gelsd", "gelss") else empty
    return RT.linalg_lstsq((x, residuals, rank, sv))


def _cols(v, rows):
    nb = ndim(v) - 1
    return S.broadcast_in_dim(v, shape(v)[:-1] + (rows, shape(v)[-1]), tuple(range(nb)) + (nb + 1,))


def _tol(value, batch, dt):
    """atol / rtol (a number, or a tensor broadcasting against the batch) as a (*batch, 1)."""
    v = convert(value, dt) if is_tensor(value) else C.full((), float(value), dt)
    v = S.broadcast_to(v, broadcast_shapes(shape(v), batch))
    return S.expand_dims(v, (ndim(v),))


def _pinv_value(a, atol, rtol, hermitian):
    *batch, m, n = shape(a)
    if min(m, n) == 0:
        return M.mH(a)
    if hermitian:
        # torch: eigenvalues by magnitude; the pseudo-inverse inverts the kept eigenvalues
        w, v = D.eigh(a)
        s, values, left, right = U.abs(w), w, v, v
    else:
        left, s, vh = D.svd(a, full_matrices=False)
        values, right = s, M.mH(vh)
    smax = R.reduce_max(s, (ndim(s) - 1,))
    smax = S.broadcast_in_dim(smax, shape(s), tuple(range(ndim(s) - 1)))
    cut = B.maximum(B.mul(S.broadcast_to(rtol, shape(s)), smax), S.broadcast_to(atol, shape(s)))
    keep = B.gt(s, cut)
    inv_s = M.like(U.select(keep, B.div(1.0, U.select(keep, values, 1.0)), 0.0), a)
    return M.mm(B.mul(right, _cols(inv_s, shape(right)[-2])), M.mH(left))


@register(torch.linalg.pinv, torch.pinverse, methods=("pinverse",))
def pinv(a, *, atol=None, rtol=None, hermitian=False, out=None, rcond=None):
    """Moore-Penrose inverse from the SVD (eigh when hermitian), with torch's derivative (the
    pinv identity, valid where the rank does not change), so repeated singular values need no
    special care. The tolerances are real, for complex `a` too."""
    from thunderx.transforms.custom import custom_jvp

    _matrix(a, "linalg.pinv")
    if rcond is not None:
        rtol = rcond
    *batch, m, n = shape(a)
    if rtol is None:
        zero_atol = atol is None or (not is_tensor(atol) and atol <= 0)
        rtol = torch.finfo(dtype(a)).eps * max(m, n) if zero_atol else 0.0
    atol_t = _tol(0.0 if atol is None else atol, tuple(batch), dtype(a).to_real())
    rtol_t = _tol(rtol, tuple(batch), dtype(a).to_real())

    @custom_jvp
    def _pinv(x, atol_t, rtol_t):
        return _pinv_value(x, atol_t, rtol_t, hermitian)

    @_pinv.defjvp
    def _pinv_jvp(primals, tangents):
        # the tolerances only choose the rank: they have no derivative (as in torch)
        x, atol_t, rtol_t = primals
        t = tangents[0]
        p = _pinv(x, atol_t, rtol_t)
        pt, tt = M.mH(p), M.mH(t)
        eye_m, eye_n = _eye(m, x), _eye(n, x)
        dp = B.neg(M.mm(p, M.mm(t, p)))
        dp = B.add(dp, M.mm(M.mm(p, pt), M.mm(tt, B.sub(eye_m, M.mm(x, p)))))
        dp = B.add(dp, M.mm(B.sub(eye_n, M.mm(p, x)), M.mm(tt, M.mm(pt, p))))
        return p, dp

    return _pinv(a, atol_t, rtol_t)


# ------------------------------------------------------------------- rank, condition, powers


@register(torch.linalg.matrix_rank)
def matrix_rank(a, *, atol=None, rtol=None, hermitian=False, tol=None, out=None):
    """The number of singular values (|eigenvalues| when hermitian) above max(atol, rtol * the
    largest); integer-valued."""
    _matrix(a, "linalg.matrix_rank")
    if tol is not None:
        atol, rtol = tol, 0.0
    *batch, m, n = shape(a)
    if min(m, n) == 0:
        return C.full(tuple(batch), 0, torch.int64)
    if rtol is None:
        zero_atol = atol is None or (not is_tensor(atol) and atol <= 0)
        rtol = torch.finfo(dtype(a)).eps * max(m, n) if zero_atol else 0.0
    if hermitian:
        s = U.abs(D.eigh(a, compute_v=False)[0])
    else:
        s = svdvals(a)
    smax = S.broadcast_in_dim(R.reduce_max(s, (ndim(s) - 1,)), shape(s), tuple(range(len(batch))))
    atol_t = _tol(0.0 if atol is None else atol, tuple(batch), dtype(s))
    rtol_t = _tol(rtol, tuple(batch), dtype(s))
    cut = B.maximum(B.mul(S.broadcast_to(rtol_t, shape(s)), smax), S.broadcast_to(atol_t, shape(s)))
    return R.reduce_sum(U.convert(B.gt(s, cut), torch.int64), (ndim(s) - 1,))


@register(torch.linalg.cond)
def cond(a, p=None, *, out=None):
    """sigma_max / sigma_min for p in (None, 2) (the reverse for -2); otherwise
    norm(A, p) * norm(A^-1, p), with A^-1 from an LU solve that does not refuse singular A."""
    _matrix(a, "linalg.cond")
    if p in (None, 2, -2):
        s = svdvals(a)
        k = shape(s)[-1]
        big, small = (_last(s, 0, ndim(s) - 1), _last(s, k - 1, ndim(s) - 1))
        big, small = S.squeeze(big, (ndim(s) - 1,)), S.squeeze(small, (ndim(s) - 1,))
        return B.div(big, small) if p != -2 else B.div(small, big)
    _matrix(a, "linalg.cond", square=True)
    inverse = _lu_solve(a, _eye(shape(a)[-1], a), "")
    return B.mul(matrix_norm(a, p), matrix_norm(inverse, p))


@register(torch.linalg.matrix_power, torch.matrix_power, methods=("matrix_power",))
def matrix_power(a, n, *, out=None):
    """A^n by repeated squaring; a negative n powers the inverse (torch.linalg.inv's errors)."""
    from thunderx.lang.decompositions import inv

    if not isinstance(n, int):
        raise TypeError(f"linalg.matrix_power: n must be an int, got {type(n).__name__}")
    _matrix(a, "linalg.matrix_power", square=True)
    if n == 0:
        return _eye(shape(a)[-1], a)
    if n < 0:
        a, n = inv(a), -n
    result, base = None, a
    while n:
        if n & 1:
            result = base if result is None else M.mm(result, base)
        n >>= 1
        if n:
            base = M.mm(base, base)
    return result


@register(torch.chain_matmul)
def _chain_matmul(*matrices, out=None):
    """The deprecated torch.chain_matmul: multi_dot of 2-D matrices (one matrix is itself)."""
    for i, t in enumerate(matrices):
        if ndim(t) != 2:
            raise RuntimeError(
                f"Tensor dimension is {ndim(t)}, expected 2 instead. (chain_matmul argument {i})"
            )
    return matrices[0] if len(matrices) == 1 else multi_dot(matrices)


@register(torch.linalg.multi_dot)
def multi_dot(tensors, *, out=None):
    """A chain of matmuls, left to right; the first operand may be a row vector and the last a
    column vector, as torch allows."""
    from thunderx.lang.linalg import matmul

    tensors = list(tensors)
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    for i, t in enumerate(tensors):
        allowed = (1, 2) if i in (0, len(tensors) - 1) else (2,)
        if ndim(t) not in allowed:
            raise RuntimeError(
                f"multi_dot(): tensor {i} must be {' or '.join(f'{r}D' for r in allowed)} "
                f"but got {ndim(t)}D"
            )
    out = tensors[0]
    for t in tensors[1:]:
        out = matmul(out, t)
    return out
