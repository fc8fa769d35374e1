"""Derivatives of the matrix decompositions (svd, eigh, qr, cholesky, and det through the SVD
where singular) on complex matrices, against torch.func and float64 finite differences. The
rules had been written for real matrices only (transposes where the conjugate transpose
belongs, singular values and eigenvalues typed complex): complex QR and Cholesky gradients and
SVD and eigh tangents were silently wrong, and svdvals / eigvalsh raised under grad."""

import pytest
import torch
import torch.func as tf

import thunderx as tx

from .complex_samples import complex_randn

L = torch.linalg


_c = complex_randn


def _hermitian(n, seed=0):
    a = _c(n, n, seed=seed)
    return a @ a.mH + n * torch.eye(n, dtype=a.dtype)


def _svd_rebuilt(a):
    u, s, vh = L.svd(a, full_matrices=False)
    return (u @ torch.diag_embed(s).to(a.dtype) @ vh).real.sum()


# real losses of a general complex matrix whose value does not depend on the phases LAPACK picks
GENERAL = {
    "svdvals": (lambda a: L.svdvals(a).pow(2).sum(), (5, 3)),
    "svdvals_wide": (lambda a: L.svdvals(a).sum(), (3, 5)),
    "svd_abs_u": (lambda a: L.svd(a, full_matrices=False)[0].abs().sum(), (5, 3)),
    "svd_abs_vh_wide": (lambda a: L.svd(a, full_matrices=False)[2].abs().sum(), (3, 5)),
    "svd_rebuilt": (_svd_rebuilt, (4, 4)),
    "svd_projector": (
        lambda a: (lambda u: (u[:, :2] @ u[:, :2].mH).imag.sum())(L.svd(a)[0]),
        (5, 3),
    ),
    "matrix_norm_2": (lambda a: L.matrix_norm(a, 2), (4, 3)),
    "matrix_norm_nuc": (lambda a: L.matrix_norm(a, "nuc"), (3, 4)),
    "qr_r": (lambda a: L.qr(a)[1].abs().sum(), (5, 3)),
    "qr_q": (lambda a: L.qr(a)[0].real.sum(), (5, 3)),
    "qr_wide": (lambda a: (L.qr(a)[1] * 1j).real.sum() + L.qr(a)[0].imag.sum(), (3, 5)),
    "det_abs": (lambda a: L.det(a).abs(), (4, 4)),
}


@pytest.mark.parametrize("name", sorted(GENERAL))
def test_gradient_and_tangent_of_a_complex_decomposition_match_torch_func(name):
    f, shp = GENERAL[name]
    a, t = _c(*shp), _c(*shp, seed=1)
    want = tf.grad(f)(a)
    torch.testing.assert_close(tx.grad(f)(a), want)
    torch.testing.assert_close(tx.jit(tx.grad(f))(a), want)
    torch.testing.assert_close(tx.jvp(f, (a,), (t,)), tf.jvp(f, (a,), (t,)))
    batch = torch.stack([a, _c(*shp, seed=2)])
    torch.testing.assert_close(
        tx.vmap(tx.grad(f))(batch), torch.stack([tf.grad(f)(b) for b in batch])
    )


def test_svd_tangents_of_each_factor_match_torch_func():
    # torch's phase: U^H dU and V^H dV share the imaginary part of diag(U^H dA V) / s evenly
    for shp in ((5, 3), (3, 5), (4, 4)):
        a, t = _c(*shp), _c(*shp, seed=3)
        got = tx.jvp(lambda m: L.svd(m, full_matrices=False), (a,), (t,))
        want = tf.jvp(lambda m: L.svd(m, full_matrices=False), (a,), (t,))
        torch.testing.assert_close(got, want)


def test_singular_and_eigen_values_of_complex_matrices_are_real_under_jit():
    a, h = _c(4, 3), _hermitian(3)
    for f, x in (
        (L.svdvals, a),
        (L.eigvalsh, h),
        (lambda m: L.svd(m)[1], a),
        (lambda m: L.eigh(m)[0], h),
    ):
        got = tx.jit(f)(x)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, f(x))


HERMITIAN = {
    "eigvalsh": lambda h: L.eigvalsh(h).pow(3).sum(),
    "eigh_abs_v": lambda h: L.eigh(h)[1].abs().pow(2).sum(1)[0],
    "eigh_projector": lambda h: (lambda v: (v[:, :1] @ v[:, :1].mH).real.sum())(L.eigh(h)[1]),
    "cholesky_real": lambda h: L.cholesky(h).real.sum(),
    "cholesky_imag": lambda h: L.cholesky(h).imag.sum(),
    "cholesky_abs": lambda h: L.cholesky(h).abs().sum(),
}


@pytest.mark.parametrize("name", sorted(HERMITIAN))
def test_hermitian_decompositions_along_hermitian_directions(name):
    # eigh and cholesky read one triangle of a Hermitian matrix: their derivatives are defined
    # along Hermitian directions, where thunderx, torch.func and finite differences agree
    f, h = HERMITIAN[name], _hermitian(4)
    t = _c(4, 4, seed=4)
    t = t + t.mH
    eps = 1e-6
    fd = (f(h + eps * t) - f(h - eps * t)) / (2 * eps)
    _, got = tx.jvp(f, (h,), (t,))
    torch.testing.assert_close(got, tf.jvp(f, (h,), (t,))[1])
    torch.testing.assert_close(got, fd, rtol=1e-6, atol=1e-7)
    g, want = tx.grad(f)(h), tf.grad(f)(h)
    # thunderx's gradient is Hermitian (as torch's is for real matrices); torch's complex
    # Cholesky gradient adds an anti-Hermitian part no Hermitian direction sees
    torch.testing.assert_close(g, g.mH)
    torch.testing.assert_close((g + g.mH) / 2, (want + want.mH) / 2)
    torch.testing.assert_close((g.conj() * t).real.sum(), fd, rtol=1e-6, atol=1e-7)
