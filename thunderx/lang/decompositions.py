"""torch.linalg on the decomposition primitives: cholesky, eigh, svd, qr, lu and the functions
built from them (solve, inv, det, slogdet, lstsq, pinv, matrix norms, matrix_exp,
cholesky_solve, cholesky_inverse, solve_triangular). Batch dims of two operands broadcast here;
the primitives never broadcast."""

from __future__ import annotations

import torch

from thunderx.avals import is_float
from thunderx.lang._base import (
    broadcast_shapes,
    dtype,
    ndim,
    register,
    shape,
)
from thunderx.primitives import _matrix as M
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import linalg_decomp as D
from thunderx.primitives import shape as S
from thunderx.primitives import slicing as SL
from thunderx.primitives import unary as U

RT = torch.return_types


def _matrix(x, name: str, square: bool = False):
    if ndim(x) < 2:
        raise ValueError(f"{name}: the input must have at least 2 dimensions, got {shape(x)}")
    if square and shape(x)[-1] != shape(x)[-2]:
        raise ValueError(f"{name}: A must be batches of square matrices, got {shape(x)}")
    if not is_float(dtype(x)):
        raise TypeError(f"{name}: expected a floating point tensor, got {dtype(x)}")
    return x


def _broadcast_batch(a, b, b_vector: bool = False):
    """Broadcast the batch dims of a (*, n, n) and b (*, n, k), or (*, n) when b_vector."""
    bb = shape(b)[:-1] if b_vector else shape(b)[:-2]
    batch = broadcast_shapes(shape(a)[:-2], bb)
    a = S.broadcast_to(a, batch + shape(a)[-2:])
    tail = shape(b)[-1:] if b_vector else shape(b)[-2:]
    return a, S.broadcast_to(b, batch + tail)


def _eye(n, like):
    """The n x n identity with like's batch dims and dtype."""
    return M.eye_like(S.broadcast_to(C.full((), 0.0, dtype(like)), shape(like)[:-2] + (n, n)))


def _last(x, k: int, axis: int):
    return SL.slice_in_dim(x, k, k + 1, 1, axis)


# ------------------------------------------------------------------------------- factorizations


@register(torch.linalg.cholesky)
def cholesky(a, *, upper=False, out=None):
    low = D.cholesky(_matrix(a, "linalg.cholesky", square=True))
    return M.mH(low) if upper else low  # A = L L^H = U^H U


@register(torch.cholesky, methods=("cholesky",))
def _cholesky_old(a, upper=False, *, out=None):
    return cholesky(a, upper=upper)


def _lower(UPLO) -> bool:  # noqa: N803 - torch's name
    if UPLO not in ("L", "U"):
        raise ValueError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    return UPLO == "L"


@register(torch.linalg.eigh)
def eigh(a, UPLO="L", *, out=None):  # noqa: N803
    w, v = D.eigh(_matrix(a, "linalg.eigh", square=True), lower=_lower(UPLO))
    return RT.linalg_eigh((w, v))


@register(torch.linalg.eigvalsh)
def eigvalsh(a, UPLO="L", *, out=None):  # noqa: N803
    (w,) = D.eigh(_matrix(a, "linalg.eigvalsh", square=True), compute_v=False, lower=_lower(UPLO))
    return w


@register(torch.linalg.svd)
def svd(a, full_matrices=True, *, driver=None, out=None):
    u, s, vh = D.svd(_matrix(a, "linalg.svd"), full_matrices=full_matrices)
    return RT.linalg_svd((u, s, vh))


@register(torch.linalg.svdvals)
def svdvals(a, *, driver=None, out=None):
    return D.svd(_matrix(a, "linalg.svdvals"), compute_uv=False)[0]


@register(torch.svd, methods=("svd",))
def _svd_old(a, some=True, compute_uv=True, *, out=None):
    """torch.svd: V = Vh^H rather than Vh; without compute_uv, U and V are zero-filled (torch's)."""
    u, s, vh = D.svd(_matrix(a, "svd"), full_matrices=not some)
    if not compute_uv:
        return RT.svd((B.mul(u, 0.0), s, B.mul(M.mT(vh), 0.0)))
    return RT.svd((u, s, M.mH(vh)))


@register(torch.linalg.qr)
def qr(a, mode="reduced", *, out=None):
    q, r = D.qr(_matrix(a, "linalg.qr"), mode=mode)
    return RT.linalg_qr((q, r))


@register(torch.qr, methods=("qr",))
def _qr_old(a, some=True, *, out=None):
    return RT.qr(tuple(qr(a, "reduced" if some else "complete")))


@register(torch.linalg.lu_factor)
def lu_factor(a, *, pivot=True, out=None):
    if not pivot:
        from thunderx.errors import unsupported

        raise unsupported("linalg.lu_factor(pivot=False)", "LAPACK always pivots on the CPU")
    packed, pivots, _ = D.lu(_matrix(a, "linalg.lu_factor"))
    return RT.linalg_lu_factor((packed, pivots))


def _permutation_matrix(perm, dt):
    """P with P[perm[i], i] = 1, so that A = P L U."""
    m = shape(perm)[-1]
    rows = S.broadcast_to(C.iota(torch.int64, (m, m), 0), shape(perm)[:-1] + (m, m))
    return U.convert(B.eq(rows, M.row_vector(perm)), dt)


@register(torch.linalg.lu)
def lu(a, *, pivot=True, out=None):
    packed, pivots = lu_factor(a, pivot=pivot)
    return RT.linalg_lu(tuple(lu_unpack(packed, pivots)))


def _unpack_factors(packed):
    *_, m, n = shape(packed)
    k = min(m, n)
    nd = ndim(packed)
    low = M.tril(SL.slice_in_dim(packed, 0, k, 1, nd - 1), -1)
    low = B.add(low, U.convert(M.eye_mask(low), dtype(packed)))
    return low, M.triu(SL.slice_in_dim(packed, 0, k, 1, nd - 2))


@register(torch.lu_unpack)
def lu_unpack(lu_data, lu_pivots, unpack_data=True, unpack_pivots=True, *, out=None):
    """(P, L, U) with A = P L U from lu_factor's output; parts not unpacked are empty, as torch's."""
    _matrix(lu_data, "lu_unpack")
    empty = C.full((0,), 0.0, dtype(lu_data))
    low, up = _unpack_factors(lu_data) if unpack_data else (empty, empty)
    p = empty
    if unpack_pivots:
        perm = D.lu_pivots_to_permutation(lu_pivots, shape(lu_data)[-2])
        p = _permutation_matrix(perm, dtype(lu_data))
    return RT.lu_unpack((p, low, up))


@register(torch.linalg.lu_solve)
def lu_solve(lu_data, pivots, b, *, left=True, adjoint=False, out=None):
    """X with A X = B (A^H X = B when adjoint; X A = B, or X A^H = B, when not left) from
    lu_factor's output."""
    _matrix(lu_data, "linalg.lu_solve", square=True)
    if not left:
        # X A = B is A^T X^T = B^T; X A^H = B is conj(A) X^T = B^T
        b = M.mT(_matrix(b, "linalg.lu_solve"))
        lu_data = M.conj(lu_data) if adjoint else lu_data
        return M.mT(_lu_solve_factored(lu_data, pivots, b, transpose=not adjoint))
    return _lu_solve_factored(M.conj(lu_data) if adjoint else lu_data, pivots, b, adjoint)


def _lu_solve_factored(lu_data, pivots, b, transpose):
    """X with A X = B (A^T X = B when transpose), A = P L U packed in lu_data."""
    from thunderx.primitives import indexing as I

    lu_data, b = _broadcast_batch(lu_data, _matrix(b, "linalg.lu_solve"))
    perm = D.lu_pivots_to_permutation(pivots, shape(lu_data)[-1])
    perm = S.broadcast_to(perm, shape(b)[:-2] + shape(perm)[-1:])
    if not transpose:
        return _solve_with_lu(lu_data, perm, b)
    # A^T X = B with A = P L U: U^T L^T (P^T X) = B
    y = D.triangular_solve(lu_data, b, left_side=True, lower=False, transpose_a=True)
    y = D.triangular_solve(
        lu_data, y, left_side=True, lower=True, transpose_a=True, unit_diagonal=True
    )
    rows = S.broadcast_in_dim(perm, shape(y), tuple(range(ndim(y) - 2)) + (ndim(y) - 2,))
    return I.scatter_add(B.mul(y, 0.0), rows, y, ndim(y) - 2)


@register(torch.lu_solve, methods=("lu_solve",))
def _lu_solve_old(b, lu_data, lu_pivots, *, out=None):
    return lu_solve(lu_data, lu_pivots, b)


# ---------------------------------------------------------------------------------------- solves


@register(torch.linalg.solve_triangular)
def solve_triangular(a, b, *, upper, left=True, unitriangular=False, out=None):
    _matrix(a, "linalg.solve_triangular", square=True)
    a, b = _broadcast_batch(a, _matrix(b, "linalg.solve_triangular"))
    return D.triangular_solve(a, b, left_side=left, lower=not upper, unit_diagonal=unitriangular)


@register(torch.triangular_solve, methods=("triangular_solve",))
def _triangular_solve_old(b, a, upper=True, transpose=False, unitriangular=False, *, out=None):
    a2, b2 = _broadcast_batch(_matrix(a, "triangular_solve", square=True), b)
    x = D.triangular_solve(
        a2, b2, left_side=True, lower=not upper, transpose_a=transpose, unit_diagonal=unitriangular
    )
    return RT.triangular_solve((x, a2))


def _solve_with_lu(packed, perm, b):
    """x with A x = b, from P^T A = L U: x = U^-1 L^-1 (P^T b)."""
    from thunderx.primitives import indexing as I

    rows = S.broadcast_in_dim(perm, shape(b), tuple(range(ndim(b) - 2)) + (ndim(b) - 2,))
    pb = I.gather(b, rows, ndim(b) - 2)
    y = D.triangular_solve(packed, pb, left_side=True, lower=True, unit_diagonal=True)
    return D.triangular_solve(packed, y, left_side=True, lower=False)


def _lu_solve(a, b, check: str):
    """a x = b through one LU factorization. Its derivative is dx = A^-1 (db - dA x) with the
    same factors, as torch's: differentiating through the factorization would cost several more
    triangular solves."""
    from thunderx.transforms.custom import custom_jvp

    def value(a, b):
        packed, _, perm = D.lu(a, check)
        return _solve_with_lu(packed, perm, b)

    def jvp(primals, tangents):
        (a, b), (da, db) = primals, tangents
        packed, _, perm = D.lu(a, check)
        x = _solve_with_lu(packed, perm, b)
        return x, _solve_with_lu(packed, perm, B.sub(db, M.mm(da, x)))

    f = custom_jvp(value)
    f.defjvp(jvp)
    return f(a, b)


@register(torch.linalg.solve)
def solve(a, b, *, left=True, out=None):
    _matrix(a, "linalg.solve", square=True)
    # torch's rule: b is a batch of vectors when it is 1-D or has a's batch shape plus one dim
    vector = ndim(b) == 1 or (ndim(b) == ndim(a) - 1 and shape(b) == shape(a)[:-1])
    if vector:
        a, b = _broadcast_batch(a, b, b_vector=True)
        b = S.expand_dims(b, (ndim(b),))
    else:
        a, b = _broadcast_batch(a, b)
    if not left:
        x = M.mT(_lu_solve(M.mT(a), M.mT(b), "torch.linalg.solve"))
    else:
        x = _lu_solve(a, b, "torch.linalg.solve")
    return S.squeeze(x, (ndim(x) - 1,)) if vector else x


@register(torch.linalg.inv, torch.inverse, methods=("inverse",))
def inv(a, *, out=None):
    _matrix(a, "linalg.inv", square=True)
    return _lu_solve(a, _eye(shape(a)[-1], a), "linalg.inv")


def _cholesky_solve_value(b, low, upper):
    # A = L L^H (or U^H U): two triangular solves, L^H y = b solved as conj(L)^T y = b
    first = dict(left_side=True, lower=not upper, transpose_a=upper)
    second = dict(left_side=True, lower=not upper, transpose_a=not upper)
    y = D.triangular_solve(M.conj(low) if upper else low, b, **first)
    return D.triangular_solve(low if upper else M.conj(low), y, **second)


def _cholesky_solve_fn(upper: bool):
    """cholesky_solve with torch's derivative: A = L L^H of the whole factor, so a tangent of L
    off its triangle counts too (torch's gradient for L is a full matrix)."""
    from thunderx.transforms.custom import custom_jvp

    @custom_jvp
    def f(b, low):
        return _cholesky_solve_value(b, low, upper)

    @f.defjvp
    def f_jvp(primals, tangents):
        (b, low), (db, dlow) = primals, tangents
        x = f(b, low)
        # d(L L^H) = dL L^H + L dL^H; for U^H U it is dU^H U + U^H dU
        half = M.mm(M.mH(dlow), low) if upper else M.mm(dlow, M.mH(low))
        rhs = B.sub(db, M.mm(B.add(half, M.mH(half)), x))
        return x, _cholesky_solve_value(rhs, low, upper)

    return f


@register(torch.cholesky_solve, methods=("cholesky_solve",))
def cholesky_solve(b, low, upper=False, *, out=None):
    _matrix(low, "cholesky_solve", square=True)
    low, b = _broadcast_batch(low, _matrix(b, "cholesky_solve"))
    return _cholesky_solve_fn(bool(upper))(b, low)


@register(torch.cholesky_inverse, methods=("cholesky_inverse",))
def cholesky_inverse(low, upper=False, *, out=None):
    _matrix(low, "cholesky_inverse", square=True)
    return cholesky_solve(_eye(shape(low)[-1], low), low, upper)
