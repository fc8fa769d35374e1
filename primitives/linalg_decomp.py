"""Matrix decompositions (as JAX's `lax.linalg`): cholesky, eigh, svd, qr, lu; triangular_solve
lives in primitives/triangular.py. Each takes (*batch, m, n) operands and batches natively over
leading dims; the jvp rules are the matrix-calculus identities (conjugate transposes for complex
matrices), written with these primitives so they differentiate again. Degenerate inputs
(repeated eigenvalues or singular values, singular matrices) give what
torch gives: infinities or NaNs in derivatives, torch's errors from the factorizations.

    >>> from thunderx.primitives import linalg_decomp as D
    >>> a = torch.tensor([[4.0, 2.0], [2.0, 3.0]])
    >>> D.cholesky(a)  # the lower factor, as torch.linalg.cholesky
"""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero
from thunderx.core import declare, get_aval
from thunderx.primitives import _matrix as M
from thunderx.primitives import binary as B
from thunderx.primitives import complex as X
from thunderx.primitives import creation as C
from thunderx.primitives import indexing as I
from thunderx.primitives import shape as S
from thunderx.primitives import slicing as SL
from thunderx.primitives import unary as U
from thunderx.primitives.triangular import (  # noqa: F401 (re-exported: triangular_solve_p)
    _aval,
    _batch_front,
    _matrix_aval,
    _real_aval,
    triangular_solve,
    triangular_solve_p,
)

# -------------------------------------------------------------------------------------- cholesky


def cholesky(x):
    """The lower Cholesky factor; only the lower triangle of x is read."""
    return cholesky_p.bind(x)


def _cholesky_abstract_eval(x):
    _matrix_aval("cholesky", x, square=True)
    return x.strip_weak()


def _cholesky_jvp(primals, tangents):
    """dL = L Phi(L^-1 sym(dA) L^-H), Phi = lower triangle with the diagonal halved."""
    (x,), (t,) = primals, tangents
    low = cholesky(x)
    tmp = triangular_solve(low, M.sym(t), left_side=True, lower=True)
    # X L^H = T, solved as conj(X) L^T = conj(T)
    tmp = M.conj(triangular_solve(low, M.conj(tmp), left_side=False, lower=True, transpose_a=True))
    phi = U.select(M.eye_mask(tmp), B.mul(tmp, 0.5), M.tril(tmp, -1))
    return low, M.mm(low, phi)


cholesky_p = declare(
    "cholesky",
    impl=lambda x: torch.linalg.cholesky(x),
    abstract_eval=_cholesky_abstract_eval,
    torch_codegen=lambda args, avals: f"torch.linalg.cholesky({args[0]})",
    jvp=_cholesky_jvp,
    batch=lambda args, dims, **params: _batch_front(cholesky_p)(args, dims, **params),
)

# ------------------------------------------------------------------------------------------ eigh


def eigh(x, compute_v: bool = True, lower: bool = True):
    """[eigenvalues ascending, eigenvectors] of a symmetric matrix, read from its lower (or
    upper) triangle; [eigenvalues] when compute_v is False. LAPACK's eigenvector signs depend on
    the triangle read, so `lower` is a parameter rather than a transpose."""
    return eigh_p.bind(x, compute_v=compute_v, lower=lower)


def _eigh_impl(x, *, compute_v, lower):
    uplo = "L" if lower else "U"
    if compute_v:
        return list(torch.linalg.eigh(x, UPLO=uplo))
    return [torch.linalg.eigvalsh(x, UPLO=uplo)]


def _eigh_codegen(args, avals, *, compute_v, lower):
    uplo = "L" if lower else "U"
    if compute_v:
        return f"torch.linalg.eigh({args[0]}, UPLO={uplo!r})"
    return f"(torch.linalg.eigvalsh({args[0]}, UPLO={uplo!r}),)"


def _eigh_abstract_eval(x, *, compute_v, lower):
    _matrix_aval("eigh", x, square=True)
    w = _real_aval(x, x.shape[:-1])
    return [w, x.strip_weak()] if compute_v else [w]


def _eigh_jvp(primals, tangents, *, compute_v, lower):
    """dw = Re diag(V^H dA V), dV = V (F o V^H dA V), F[i, j] = 1 / (w_j - w_i) off the
    diagonal (so V^H dV has a zero diagonal, torch's choice of phase); dA made Hermitian, so
    reverse mode gives torch's Hermitian gradient."""
    (x,), (t,) = primals, tangents
    w, v = eigh(x, compute_v=True, lower=lower)
    vt_dx_v = M.mm(M.mH(v), M.mm(M.sym(t), v))
    dw = M.real_part(M.diagonal(vt_dx_v))
    if not compute_v:
        return [w], [dw]
    f = U.select(M.eye_mask(vt_dx_v), 0.0, B.div(1.0, B.sub(M.row_vector(w), M.col_vector(w))))
    return [w, v], [dw, M.mm(v, B.mul(M.like(f, v), vt_dx_v))]


eigh_p = declare(
    "eigh",
    multiple_results=True,
    impl=_eigh_impl,
    abstract_eval=_eigh_abstract_eval,
    torch_codegen=_eigh_codegen,
    jvp=_eigh_jvp,
    batch=lambda args, dims, **params: _batch_front(eigh_p)(args, dims, **params),
)

# ------------------------------------------------------------------------------------------- svd


def svd(x, full_matrices: bool = False, compute_uv: bool = True):
    """[U, S, Vh] as torch.linalg.svd (S descending); [S] when compute_uv is False."""
    return svd_p.bind(x, full_matrices=full_matrices, compute_uv=compute_uv)


def _svd_impl(x, *, full_matrices, compute_uv):
    if compute_uv:
        return list(torch.linalg.svd(x, full_matrices=full_matrices))
    return [torch.linalg.svdvals(x)]


def _svd_codegen(args, avals, *, full_matrices, compute_uv):
    if compute_uv:
        return f"torch.linalg.svd({args[0]}, full_matrices={full_matrices})"
    return f"(torch.linalg.svdvals({args[0]}),)"


def _svd_abstract_eval(x, *, full_matrices, compute_uv):
    _matrix_aval("svd", x)
    *batch, m, n = x.shape
    k = min(m, n)
    s = _real_aval(x, (*batch, k))
    if not compute_uv:
        return [s]
    um, vn = (m, n) if full_matrices else (k, k)
    return [_aval(x, (*batch, m, um)), s, _aval(x, (*batch, vn, n))]


def _svd_jvp(primals, tangents, *, full_matrices, compute_uv):
    """The thin-SVD identities, with dP = U^H dA V: dS = Re diag(dP); U^H dU and V^H dV off the
    diagonal from dP S + S dP^H and S dP + dP^H S over s_j^2 - s_i^2; for complex A the
    imaginary part of diag(dP) / s, which fixes only the difference of the two diagonals, split
    evenly between them (torch's choice of phase). With full_matrices, the columns beyond
    min(m, n) are not determined by A; their tangents are zero (torch ignores their gradients
    likewise)."""
    (x,), (t,) = primals, tangents
    u_full, s, vh_full = svd(x, full_matrices=full_matrices)
    *batch, m, n = M.shape(x)
    k = min(m, n)
    nd = len(batch) + 2
    u = SL.slice_in_dim(u_full, 0, k, 1, nd - 1) if full_matrices and m > k else u_full
    vh = SL.slice_in_dim(vh_full, 0, k, 1, nd - 2) if full_matrices and n > k else vh_full
    v = M.mH(vh)
    ds_mat = M.mm(M.mH(u), M.mm(t, v))
    ds = M.real_part(M.diagonal(ds_mat))
    if not compute_uv:
        return [s], [ds]
    s_row, s_col = M.row_vector(s), M.col_vector(s)
    diffs = B.mul(B.add(s_row, s_col), B.sub(s_row, s_col))  # s_j^2 - s_i^2
    f = M.like(U.select(M.eye_mask(diffs), 0.0, B.div(1.0, diffs)), t)
    dss = B.mul(ds_mat, M.like(s_row, t))
    sds = B.mul(M.like(s_col, t), ds_mat)
    omega_u = B.mul(f, B.add(dss, M.mH(dss)))
    omega_v = B.mul(f, B.add(sds, M.mH(sds)))
    if M.is_complex(t):
        half = B.div(X.imag(M.diagonal(ds_mat)), B.mul(s, 2.0))
        phase = M.diag_embed(M.imaginary(half))
        omega_u, omega_v = B.add(omega_u, phase), B.sub(omega_v, phase)
    du = M.mm(u, omega_u)
    dv = M.mm(v, omega_v)
    if m > n:
        dav = M.mm(t, v)
        du = B.add(du, M.scale_cols(B.sub(dav, M.mm(u, M.mm(M.mH(u), dav))), M.like(s, t)))
    if n > m:
        dau = M.mm(M.mH(t), u)
        dv = B.add(dv, M.scale_cols(B.sub(dau, M.mm(v, M.mm(vh, dau))), M.like(s, t)))
    dvh = M.mH(dv)
    if full_matrices and m > k:
        du = SL.pad(du, 0.0, [(0, 0, 0)] * (nd - 1) + [(0, m - k, 0)])
    if full_matrices and n > k:
        dvh = SL.pad(dvh, 0.0, [(0, 0, 0)] * (nd - 2) + [(0, n - k, 0), (0, 0, 0)])
    return [u_full, s, vh_full], [du, ds, dvh]


svd_p = declare(
    "svd",
    multiple_results=True,
    impl=_svd_impl,
    abstract_eval=_svd_abstract_eval,
    torch_codegen=_svd_codegen,
    jvp=_svd_jvp,
    batch=lambda args, dims, **params: _batch_front(svd_p)(args, dims, **params),
)

# -------------------------------------------------------------------------------------------- qr


def qr(x, mode: str = "reduced"):
    """[Q, R] as torch.linalg.qr(x, mode) (Q is empty for mode='r')."""
    return qr_p.bind(x, mode=mode)


def _qr_abstract_eval(x, *, mode):
    _matrix_aval("qr", x)
    if mode not in ("reduced", "complete", "r"):
        raise TypeError(f"qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    *batch, m, n = x.shape
    k = m if mode == "complete" else min(m, n)
    q = _aval(x, (0,)) if mode == "r" else _aval(x, (*batch, m, k))
    return [q, _aval(x, (*batch, k, n))]


def _qr_square_jvp(q, r, dx):
    """m >= n: dQ = Q (dO - Q^H dA R^-1) + dA R^-1, dR = (Q^H dA R^-1 - dO) R, where dO is the
    skew-Hermitian part built from the strict lower triangle of Q^H dA R^-1, plus for complex A
    the imaginary part of its diagonal (R's diagonal stays real, as LAPACK's) (JAX's rule)."""
    dx_rinv = triangular_solve(r, dx, left_side=False, lower=False)
    qt_dx_rinv = M.mm(M.mH(q), dx_rinv)
    low = M.tril(qt_dx_rinv, -1)
    do = B.sub(low, M.mH(low))
    if M.is_complex(qt_dx_rinv):
        do = B.add(do, M.diag_embed(M.imaginary(X.imag(M.diagonal(qt_dx_rinv)))))
    dq = B.add(M.mm(q, B.sub(do, qt_dx_rinv)), dx_rinv)
    dr = M.mm(B.sub(qt_dx_rinv, do), r)
    return dq, dr


def _qr_jvp(primals, tangents, *, mode):
    (x,), (t,) = primals, tangents
    *batch, m, n = M.shape(x)
    if mode == "r":
        raise ValueError(
            "The derivative of linalg.qr depends on Q, which is not computed when mode='r'. "
            "Use linalg.qr(A, mode='reduced') to differentiate through linalg.qr."
        )
    if mode == "complete" and m > n:
        raise ValueError(
            "The QR decomposition is not differentiable when mode='complete' and nrows > ncols."
        )
    q, r = qr(x, mode=mode)
    if m >= n:
        dq, dr = _qr_square_jvp(q, r, t)
        return [q, r], [dq, dr]
    # wide: A = [X | Y] with X = Q R1 square; R2 = Q^T Y
    nd = len(batch) + 2
    r1 = SL.slice_in_dim(r, 0, m, 1, nd - 1)
    r2 = SL.slice_in_dim(r, m, n, 1, nd - 1)
    dq, dr1 = _qr_square_jvp(q, r1, SL.slice_in_dim(t, 0, m, 1, nd - 1))
    dy = SL.slice_in_dim(t, m, n, 1, nd - 1)
    dr2 = M.mm(M.mH(q), B.sub(dy, M.mm(dq, r2)))
    return [q, r], [dq, SL.concatenate([dr1, dr2], nd - 1)]


def _qr_batch(args, dims, *, mode):
    q, r = qr(S.moveaxis(args[0], dims[0], 0), mode=mode)
    return [q, r], [None if mode == "r" else 0, 0]


qr_p = declare(
    "qr",
    multiple_results=True,
    impl=lambda x, *, mode: list(torch.linalg.qr(x, mode=mode)),
    abstract_eval=_qr_abstract_eval,
    torch_codegen=lambda args, avals, *, mode: f"torch.linalg.qr({args[0]}, {mode!r})",
    jvp=_qr_jvp,
    batch=_qr_batch,
)

# -------------------------------------------------------------------------------------------- lu


def lu(x, check: str = ""):
    """[LU packed, pivots (int32, 1-based, as torch.linalg.lu_factor), permutation (int64: row i
    of L @ U is row permutation[i] of x)]. A singular x is factored without an error (as
    torch.linalg.lu_factor_ex) unless `check` names the torch function whose error to raise
    when it runs (torch.linalg.solve and inv refuse singular matrices)."""
    return lu_p.bind(x, check=check)


def _lu_impl(x, *, check):
    packed, pivots, info = torch.linalg.lu_factor_ex(x)
    if check and bool((info > 0).any()):
        raise torch.linalg.LinAlgError(
            f"{check}: The solver failed because the input matrix is singular."
        )
    if x.shape[-2] == 0:
        return [packed, pivots, torch.zeros(x.shape[:-1], dtype=torch.int64, device=x.device)]
    perm, _, _ = torch.lu_unpack(packed, pivots, unpack_data=False)
    # a permutation matrix of x's dtype: its real part for complex x (argmax takes no complex)
    return [packed, pivots, (perm.real if perm.is_complex() else perm).argmax(-2)]


def _lu_abstract_eval(x, *, check):
    _matrix_aval("lu", x)
    *batch, m, n = x.shape
    k = min(m, n)
    return [
        x.strip_weak(),
        _aval(x, (*batch, k), torch.int32),
        _aval(x, (*batch, m), torch.int64),
    ]


def _lu_jvp(primals, tangents, *, check):
    """JAX's rule: with P^T A = L U, L^-1 P^T dA U^-1 splits into dL (strict lower part) and dU
    (upper part); L is padded to m x m and U to n x n with identity blocks."""
    (x,), (t,) = primals, tangents
    packed, pivots, perm = lu(x, check)
    *batch, m, n = M.shape(x)
    k = min(m, n)
    nd = len(batch) + 2
    rows_idx = S.broadcast_in_dim(perm, (*batch, m, n), tuple(range(nd - 1)))
    pt = I.gather(t, rows_idx, nd - 2)
    keep = [(0, 0, 0)] * (nd - 2)
    low = M.tril(SL.slice_in_dim(packed, 0, k, 1, nd - 1), -1)
    low = SL.pad(low, 0.0, keep + [(0, 0, 0), (0, m - k, 0)])
    low = B.add(low, M.eye_like(low))
    up = M.triu(SL.slice_in_dim(packed, 0, k, 1, nd - 2))
    up = SL.pad(up, 0.0, keep + [(0, n - k, 0), (0, 0, 0)])
    if n > k:
        dev = get_aval(x).device
        r = C.iota(torch.int64, (n, n), 0, dev)
        c = C.iota(torch.int64, (n, n), 1, dev)
        corner = U.convert(B.and_p.bind(B.eq(r, c), B.ge(r, k)), get_aval(x).dtype)
        up = B.add(up, S.broadcast_to(corner, M.shape(up)))
    la = triangular_solve(low, pt, left_side=True, lower=True, unit_diagonal=True)
    lau = triangular_solve(up, la, left_side=False, lower=False)
    dlu = B.add(M.mm(low, M.tril(lau, -1)), M.mm(M.triu(lau), up))
    return [packed, pivots, perm], [dlu, Zero(get_aval(pivots)), Zero(get_aval(perm))]


def _lu_codegen(args, avals, *, check):
    return f"_impl_lu({args[0]}, check={check!r})"


lu_p = declare(
    "lu",
    multiple_results=True,
    impl=_lu_impl,
    abstract_eval=_lu_abstract_eval,
    torch_codegen=_lu_codegen,
    jvp=_lu_jvp,
    batch=lambda args, dims, **params: _batch_front(lu_p)(args, dims, **params),
)

# ------------------------------------------------------------------------ pivots -> permutation


def lu_pivots_to_permutation(pivots, permutation_size: int):
    """The row permutation (int64, 0-based) that LAPACK's 1-based `pivots` describe: row i of
    L @ U is row permutation[i] of the factored matrix. Integer-valued: no tangent."""
    return lu_pivots_to_permutation_p.bind(pivots, permutation_size=permutation_size)


def _pivots_impl(pivots, *, permutation_size):
    batch = pivots.shape[:-1]
    perm = torch.arange(permutation_size, device=pivots.device).expand(*batch, -1).clone()
    for i in range(pivots.shape[-1]):
        j = pivots[..., i : i + 1].long() - 1
        here = perm[..., i : i + 1].clone()
        perm[..., i : i + 1] = perm.gather(-1, j)
        perm.scatter_(-1, j, here)
    return perm


def _pivots_abstract_eval(pivots, *, permutation_size):
    if pivots.ndim < 1 or pivots.dtype not in (torch.int32, torch.int64):
        raise TypeError(
            f"lu_pivots_to_permutation: expected integer pivots, got {pivots.str_short()}"
        )
    if pivots.shape[-1] > permutation_size:
        raise TypeError(
            f"lu_pivots_to_permutation: {pivots.shape[-1]} pivots for a permutation of "
            f"{permutation_size}"
        )
    return _aval(pivots, pivots.shape[:-1] + (permutation_size,), torch.int64)


lu_pivots_to_permutation_p = declare(
    "lu_pivots_to_permutation",
    impl=_pivots_impl,
    abstract_eval=_pivots_abstract_eval,
    batch=lambda args, dims, **params: _batch_front(lu_pivots_to_permutation_p)(
        args, dims, **params
    ),
)
