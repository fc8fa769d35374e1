"""Products of Householder reflectors (LAPACK's orgqr/ormqr): torch.linalg.householder_product
and torch.ormqr as matmuls, so every transform differentiates and batches them through matmul.

Reflector i is H_i = I - tau_i v_i v_i^H, with v_i = (0, ..., 0, 1, A[i+1:, i]) (column i of A
below its diagonal, a unit in the diagonal entry); Q = H_1 H_2 ... H_k."""

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
