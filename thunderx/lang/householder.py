"""Products of Householder reflectors (LAPACK's orgqr/ormqr): torch.linalg.householder_product
and torch.ormqr as matmuls, so every transform differentiates and batches them through matmul.

Reflector i is H_i = I - tau_i v_i v_i^H, with v_i = (0, ..., 0, 1, A[i+1:, i]) (column i of A
below its diagonal, a unit in the diagonal entry); Q = H_1 H_2 ... H_k.

Also here, the other op_db linear algebra built on them or beside them: torch.linalg.eig/eigvals
(the eig primitive, primitives/eig.py) and the randomized torch.svd_lowrank / pca_lowrank."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from thunderx.lang._base import aval, ndim, register, shape


def _reflectors_product(a, tau):
    """The m x m product H_1 ... H_k of the reflectors stored in a (..., m, n) and tau (..., k)."""
    m, k = shape(a)[-2], shape(tau)[-1]
    if k > shape(a)[-1]:
        raise RuntimeError(
            f"householder_product: tau has {k} reflectors but input has {shape(a)[-1]} columns"
        )
    device = aval(a).device
    rows = torch.arange(m, device=device)
    q = torch.eye(m, dtype=a.dtype, device=device).expand(tuple(shape(a)[:-2]) + (m, m))
    for i in range(k):
        below = (rows > i).to(a.dtype)
        unit = (rows == i).to(a.dtype)
        v = a[..., :, i] * below + unit  # (..., m)
        qv = (q @ v.unsqueeze(-1)) * tau[..., i, None, None]  # tau_i Q v: (..., m, 1)
        q = q - qv @ v.conj().unsqueeze(-2)
    return q


@register(torch.linalg.householder_product, torch.orgqr, methods=("orgqr",))
def _householder_product(a, tau, *, out=None):
    if out is not None:
        raise TypeError("householder_product: out= is not supported under tracing")
    if ndim(a) < 2 or ndim(tau) != ndim(a) - 1:
        raise RuntimeError(
            "householder_product: input must be (..., m, n) and tau (..., k), got "
            f"{tuple(shape(a))} and {tuple(shape(tau))}"
        )
    m, n = shape(a)[-2:]
    if n > m:
        raise RuntimeError(f"householder_product: input must have m >= n, got {m} x {n}")
    return _reflectors_product(a, tau)[..., :, :n]


@register(torch.ormqr, methods=("ormqr",))
def _ormqr(a, tau, other, left=True, transpose=False, *, out=None):
    """op(Q) @ other (left) or other @ op(Q), op(Q) = Q^H where `transpose`, Q the m x m
    product of the reflectors."""
    if out is not None:
        raise TypeError("ormqr: out= is not supported under tracing")
    q = _reflectors_product(a, tau)
    if transpose:
        q = q.mH
    return q @ other if left else other @ q


# ------------------------------------------------------------------------------------ linalg.eig


@register(torch.linalg.eig)
def _eig(a, *, out=None):
    from thunderx.primitives import eig as E

    if out is not None:
        raise TypeError("linalg.eig: out= is not supported under tracing")
    w, v = E.eig(a)
    return _Eig(w, v)


@register(torch.linalg.eigvals)
def _eigvals(a, *, out=None):
    from thunderx.primitives import eig as E

    if out is not None:
        raise TypeError("linalg.eigvals: out= is not supported under tracing")
    return E.eig(a, compute_v=False)[0]


# torch.return_types.linalg_eig's fields
_Eig = NamedTuple("linalg_eig", [("eigenvalues", Any), ("eigenvectors", Any)])


# ---------------------------------------------------------------------- svd_lowrank, pca_lowrank


def _approximate_basis(a, q, niter, m):
    from thunderx.lang.random import draw

    """An orthonormal basis of a's range from a Gaussian test matrix and `niter` power
    iterations (torch._lowrank.get_approximate_basis; the same draw, so the same numbers)."""
    floating = (torch.float16, torch.float32, torch.float64)
    dt = a.dtype if a.dtype.is_complex or a.dtype in floating else torch.float32
    # through the random layer: a decomposition runs with the randomness mode popped, so a plain
    # torch.randn here would be drawn once while tracing and baked in as a constant
    r = draw("normal", (shape(a)[-1], q), dt, aval(a).device, "torch.svd_lowrank")

    def times(x, y):  # (a - m) @ y
        return x @ y if m is None else x @ y - (m if x is a else m.mH) @ y

    q_ = torch.linalg.qr(times(a, r)).Q
    for _ in range(niter):
        q_ = torch.linalg.qr(times(a.mH, q_)).Q
        q_ = torch.linalg.qr(times(a, q_)).Q
    return q_


def _svd_lowrank_of(a, q, niter, m=None):
    """Halko et al.'s algorithm 5.1, as torch._lowrank._svd_lowrank."""
    q = 6 if q is None else q
    niter = 2 if niter is None else niter
    rows, cols = shape(a)[-2:]
    if m is not None:
        m = m.broadcast_to(shape(a))
    if rows < cols:
        a = a.mH
        m = None if m is None else m.mH
    basis = _approximate_basis(a, q, niter, m)
    b = basis.mH @ a
    if m is not None:
        b = b - basis.mH @ m
    u, s, vh = torch.linalg.svd(b, full_matrices=False)
    u, v = basis @ u, vh.mH
    return (v, s, u) if rows < cols else (u, s, v)


@register(torch.svd_lowrank)
def _svd_lowrank(a, q=6, niter=2, M=None):
    """torch's randomized SVD run on traced values: its Gaussian test matrix is a random draw
    (vmap's randomness rules apply)."""
    return _svd_lowrank_of(a, q, niter, M)


@register(torch.pca_lowrank)
def _pca_lowrank(a, q=None, center=True, niter=2):
    m, n = shape(a)[-2:]
    if q is None:
        q = min(6, m, n)
    elif not 0 <= q <= min(m, n):
        raise ValueError(
            f"q(={q}) must be non-negative integer and not greater than min(m, n)={min(m, n)}"
        )
    if niter < 0:
        raise ValueError(f"niter(={niter}) must be non-negative integer")
    if center:
        a = a - a.mean(dim=(-2,), keepdim=True)
    return _svd_lowrank_of(a, q, niter)
