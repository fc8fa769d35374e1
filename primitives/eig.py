"""The general (non-symmetric) eigendecomposition, torch.linalg.eig: complex eigenvalues and
unit-norm eigenvectors of a real or complex square matrix. Batching moves the batch dim to the
front (LAPACK batches over leading dims); the jvp is torch's (FunctionsManual linalg_eig_jvp):

    dP = V^{-1} dA V,  dL = diag(dP),
    dV = V (dP / (L_j - L_i), diagonal zeroed),  dV -= V Re(diag(V^H dV))  (unit-norm gauge).

Reverse mode is its transpose. Repeated eigenvalues make the eigenvector derivative infinite, as
in torch."""

from __future__ import annotations

import torch

from thunderx.avals import ShapedArray
from thunderx.core import declare
from thunderx.primitives.linalg_decomp import _batch_front


def eig(x, compute_v: bool = True):
    """[eigenvalues, eigenvectors] (complex) of square matrices; [eigenvalues] without V."""
    return eig_p.bind(x, compute_v=compute_v)


def _impl(x, *, compute_v):
    if compute_v:
        return list(torch.linalg.eig(x))
    return [torch.linalg.eigvals(x)]


def _codegen(args, avals, *, compute_v):
    if compute_v:
        return f"torch.linalg.eig({args[0]})"
    return f"(torch.linalg.eigvals({args[0]}),)"


def _complex_of(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_complex:
        return dtype
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"linalg.eig: expected a float or complex dtype, got {dtype}")
    return torch.complex128 if dtype == torch.float64 else torch.complex64


def _abstract_eval(x, *, compute_v):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise TypeError(f"linalg.eig: expected (*batch, n, n) matrices, got {x.str_short()}")
    c = _complex_of(x.dtype)
    w = ShapedArray(tuple(x.shape[:-1]), c, x.device)
    return [w, ShapedArray(tuple(x.shape), c, x.device)] if compute_v else [w]


def _jvp(primals, tangents, *, compute_v):
    (x,), (t,) = primals, tangents
    w, v = eig(x, compute_v=True)
    # V^{-1} depends on the primal only, so the tangent passes through matmuls alone
    dp = torch.linalg.inv(v) @ (t.to(w.dtype) @ v)
    dw = torch.diagonal(dp, 0, -2, -1)
    if not compute_v:
        return [w], [dw]
    n = x.shape[-1]
    off = ~torch.eye(n, dtype=torch.bool, device=x.device)
    gaps = w.unsqueeze(-2) - w.unsqueeze(-1)  # L_j - L_i at [i, j]
    dv = v @ torch.where(off, dp / torch.where(off, gaps, torch.ones_like(gaps)), 0)
    dv = dv - v * torch.real(torch.diagonal(v.mH @ dv, 0, -2, -1)).unsqueeze(-2)
    return [w, v], [dw, dv]


eig_p = declare(
    "eig",
    multiple_results=True,
    impl=_impl,
    abstract_eval=_abstract_eval,
    torch_codegen=_codegen,
    jvp=_jvp,
    batch=lambda args, dims, **params: _batch_front(eig_p)(args, dims, **params),
)
