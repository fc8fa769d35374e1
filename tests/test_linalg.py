"""torch.linalg under jit, grad and vmap against torch eager and torch.func (float64).

Gradients are of losses torch defines a gradient for: eigenvector and singular-vector losses are
gauge-invariant (squares of the entries of U diag(s) V^T pieces, or |v|^2-weighted sums), and the
matrices have distinct eigen/singular values."""

import pytest
import torch

import thunderx as tx

F64 = torch.float64
GEN = torch.Generator().manual_seed(0)


def rand(*shape):
    return torch.randn(*shape, dtype=F64, generator=GEN)


def spd(n, batch=()):
    x = rand(*batch, n, n)
    return x @ x.mT + n * torch.eye(n, dtype=F64)


def well(n, batch=()):
    return rand(*batch, n, n) + 3 * torch.eye(n, dtype=F64)


def lower(n):
    return torch.tril(rand(n, n)) + 3 * torch.eye(n, dtype=F64)


def _sq(out):
    """A scalar from every floating output; squares of eigenvectors are sign-invariant."""
    total = 0
    for o in tx.tree.leaves(out):
        if o.dtype.is_floating_point:
            total = total + (o * o).sum()
    return total


def _weighted_vectors(vecs):
    # sum_j (j + 1) * sum_i v_ij^4: invariant to each column's sign
    w = torch.arange(1, vecs.shape[-1] + 1, dtype=vecs.dtype)
    return ((vecs**4) * w).sum()


B3 = rand(3, 2)

CASES = [
    ("cholesky", lambda a: torch.linalg.cholesky(a), lambda: [spd(3)]),
    ("cholesky_upper", lambda a: torch.linalg.cholesky(a, upper=True), lambda: [spd(3)]),
    ("eigvalsh", lambda a: torch.linalg.eigvalsh(a), lambda: [spd(4)]),
    (
        "eigh",
        lambda a: (
            torch.linalg.eigh(a).eigenvalues.sum() + _weighted_vectors(torch.linalg.eigh(a)[1])
        ),
        lambda: [spd(4)],
    ),
    (
        "eigh_upper",
        lambda a: _weighted_vectors(torch.linalg.eigh(a, UPLO="U").eigenvectors),
        lambda: [spd(3)],
    ),
    ("svdvals", lambda a: torch.linalg.svdvals(a), lambda: [rand(4, 3)]),
    (
        "svd_tall",
        lambda a: _weighted_vectors(torch.linalg.svd(a, full_matrices=False).U),
        lambda: [rand(5, 3)],
    ),
    (
        "svd_wide",
        lambda a: _weighted_vectors(torch.linalg.svd(a, full_matrices=False).Vh.mT),
        lambda: [rand(2, 4)],
    ),
    (
        "svd_reconstruct",
        lambda a: (lambda u, s, vh: u @ torch.diag_embed(s) @ vh)(
            *torch.linalg.svd(a, full_matrices=False)
        ),
        lambda: [rand(3, 4)],
    ),  # fmt: skip
    ("qr_tall", lambda a: torch.linalg.qr(a), lambda: [rand(5, 3)]),
    ("qr_wide", lambda a: torch.linalg.qr(a), lambda: [rand(3, 5)]),
    ("qr_complete_square", lambda a: torch.linalg.qr(a, mode="complete"), lambda: [rand(3, 3)]),
    ("lu", lambda a: torch.linalg.lu(a), lambda: [rand(4, 3)]),
    ("lu_factor", lambda a: torch.linalg.lu_factor(a).LU, lambda: [rand(3, 4)]),
    ("solve", lambda a, b: torch.linalg.solve(a, b), lambda: [well(3), rand(3, 2)]),
    ("solve_vector", lambda a, b: torch.linalg.solve(a, b), lambda: [well(3), rand(3)]),
    (
        "solve_right",
        lambda a, b: torch.linalg.solve(a, b, left=False),
        lambda: [well(3), rand(2, 3)],
    ),
    ("solve_broadcast", lambda a, b: torch.linalg.solve(a, b), lambda: [well(3, (2,)), rand(3, 2)]),
    ("inv", lambda a: torch.linalg.inv(a), lambda: [well(3)]),
    ("det", lambda a: torch.linalg.det(a), lambda: [rand(4, 4)]),
    ("slogdet", lambda a: torch.linalg.slogdet(a), lambda: [rand(4, 4)]),
    ("logdet", lambda a: torch.logdet(a), lambda: [spd(3)]),
    (
        "lstsq_tall",
        lambda a, b: torch.linalg.lstsq(a, b).solution,
        lambda: [rand(5, 3), rand(5, 2)],
    ),
    (
        "lstsq_wide",
        lambda a, b: torch.linalg.lstsq(a, b).solution,
        lambda: [rand(2, 4), rand(2, 3)],
    ),
    (
        "lstsq_gelsd",
        lambda a, b: torch.linalg.lstsq(a, b, driver="gelsd"),
        lambda: [rand(5, 3), rand(5, 2)],
    ),  # fmt: skip
    ("pinv", lambda a: torch.linalg.pinv(a), lambda: [rand(4, 3)]),
    ("pinv_rank_deficient", lambda a: torch.linalg.pinv(a), lambda: [rand(4, 2) @ rand(2, 3)]),
    ("pinv_hermitian", lambda a: torch.linalg.pinv(a, hermitian=True), lambda: [spd(3)]),
    ("norm_nuc", lambda a: torch.linalg.matrix_norm(a, "nuc"), lambda: [rand(3, 4)]),
    ("norm_2", lambda a: torch.linalg.matrix_norm(a, 2), lambda: [rand(3, 4)]),
    ("norm_m2", lambda a: torch.linalg.matrix_norm(a, -2), lambda: [rand(4, 3)]),
    ("norm_inf", lambda a: torch.linalg.matrix_norm(a, float("inf")), lambda: [rand(3, 4)]),
    (
        "norm_1_dims",
        lambda a: torch.linalg.matrix_norm(a, 1, dim=(0, 2), keepdim=True),
        lambda: [rand(3, 2, 4)],
    ),  # fmt: skip
    ("linalg_norm_nuc", lambda a: torch.linalg.norm(a, "nuc"), lambda: [rand(3, 3)]),
    ("torch_norm_nuc", lambda a: torch.norm(a, p="nuc"), lambda: [rand(3, 3)]),
    ("matrix_exp", lambda a: torch.linalg.matrix_exp(a), lambda: [0.5 * rand(3, 3)]),
    ("cholesky_solve", lambda b, l: torch.cholesky_solve(b, l), lambda: [rand(3, 2), lower(3)]),
    (
        "cholesky_solve_upper",
        lambda b, u: torch.cholesky_solve(b, u, upper=True),
        lambda: [rand(3, 2), lower(3).mT.contiguous()],
    ),  # fmt: skip
    ("cholesky_inverse", lambda l: torch.cholesky_inverse(l), lambda: [lower(3)]),
    (
        "solve_triangular",
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=False),
        lambda: [lower(3), rand(3, 2)],
    ),  # fmt: skip
    (
        "solve_triangular_right_unit",
        lambda a, b: torch.linalg.solve_triangular(
            a, b, upper=True, left=False, unitriangular=True
        ),
        lambda: [lower(3).mT, rand(2, 3)],
    ),  # fmt: skip
]
CASES += [
    ("cond", lambda a: torch.linalg.cond(a), lambda: [well(3)]),
    ("cond_fro", lambda a: torch.linalg.cond(a, "fro"), lambda: [well(3)]),
    ("matrix_power_5", lambda a: torch.linalg.matrix_power(a, 5), lambda: [0.5 * rand(3, 3)]),
    ("matrix_power_m2", lambda a: torch.linalg.matrix_power(a, -2), lambda: [well(3)]),
    (
        "lu_solve",
        lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
        lambda: [rand(3, 3), rand(3, 2)],
    ),
    (
        "lu_solve_adjoint_right",
        lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, left=False, adjoint=True),
        lambda: [rand(3, 3), rand(2, 3)],
    ),
    (
        "lu_solve_adjoint",
        lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, adjoint=True),
        lambda: [rand(4, 4), rand(4, 2)],
    ),
    ("lu_unpack", lambda a: torch.lu_unpack(*torch.linalg.lu_factor(a)), lambda: [rand(4, 3)]),
    (
        "multi_dot",
        lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
        lambda: [rand(3), rand(3, 4), rand(4, 2)],
    ),  # fmt: skip
]
IDS = [c[0] for c in CASES]
# torch.func cannot differentiate torch.linalg.cond(A, 'fro') (an in-place error inside torch):
# its definition, ||A||_F ||A^-1||_F, is the oracle there
TORCH_ORACLE = {
    "cond_fro": lambda a: (
        torch.linalg.matrix_norm(a) * torch.linalg.matrix_norm(torch.linalg.inv(a))
    )
}


def _close(got, want, tol=1e-7):
    gl, wl = tx.tree.leaves(got), tx.tree.leaves(want)
    assert len(gl) == len(wl), f"{len(gl)} outputs, expected {len(wl)}"
    for g, w in zip(gl, wl):
        assert g.dtype == w.dtype and g.shape == w.shape, (
            f"{g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        )
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)


def _loss(fn):
    return lambda *xs: _sq(fn(*xs))


@pytest.mark.parametrize("name,fn,make", CASES, ids=IDS)
def test_jit_matches_torch(name, fn, make):
    args = make()
    _close(tx.jit(fn)(*args), fn(*args))


@pytest.mark.parametrize("name,fn,make", CASES, ids=IDS)
def test_grad_matches_torch_func(name, fn, make):
    args = make()
    argnums = tuple(range(len(args)))
    got = tx.grad(_loss(fn), argnums=argnums)(*args)
    want = torch.func.grad(_loss(TORCH_ORACLE.get(name, fn)), argnums=argnums)(*args)
    _close(got, want, 1e-6)


@pytest.mark.parametrize("name,fn,make", CASES, ids=IDS)
def test_vmap_matches_torch_func(name, fn, make):
    args = make()
    batched = [torch.stack([a, a * 1.05 + 0.01 * torch.eye(*a.shape[-2:], dtype=F64)
                            if a.dim() >= 2 else a * 0.9]) for a in args]  # fmt: skip
    if name.startswith("cholesky_") or name == "cholesky_inverse":
        batched = [torch.stack([a, a * 1.05]) for a in args]  # stay triangular
    got = tx.vmap(fn)(*batched)
    want = [fn(*[b[i] for b in batched]) for i in range(2)]
    want = tx.tree.map(lambda *xs: torch.stack(xs), *want)
    _close(got, want, 1e-7)


SECOND_ORDER = ["cholesky", "eigvalsh", "svdvals", "solve", "inv", "det", "matrix_exp", "qr_tall"]


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_hessian_matches_torch_func(name):
    _, fn, make = next(c for c in CASES if c[0] == name)
    (a, *rest) = make()

    def f(x):
        # a symmetric operand is read from one triangle: differentiate through (x + x^T) / 2,
        # where every convention for the other triangle agrees
        if name in ("cholesky", "eigvalsh"):
            x = (x + x.mT) / 2
        return _sq(fn(x, *rest))

    _close(tx.hessian(f)(a), torch.func.hessian(f)(a), 1e-6)


def test_vmap_of_grad_of_slogdet_matches_torch_func():
    a = rand(3, 4, 4)

    def f(x):
        return torch.linalg.slogdet(x).logabsdet

    _close(tx.vmap(tx.grad(f))(a), torch.func.vmap(torch.func.grad(f))(a))


@pytest.mark.parametrize(
    "transform", ["vmap(hessian)", "jit(vmap(hessian))", "vmap(jacfwd(jacrev))"]
)
def test_per_example_hessian_through_solve_with_a_shared_matrix_matches_the_loop(transform):
    # Per-example Hessians of a solve whose matrix is shared and whose right-hand side is
    # batched. The oracle is a loop of torch.func.hessian, one example at a time (and JAX's
    # vmap(hessian) in tests/test_jax_oracle.py's style where installed). torch.func's own
    # vmap(hessian) is not the oracle here: in torch 2.13 it is off by up to 5e11 on this
    # function (the vmap of forward over reverse through linalg_solve; docs/conventions.md,
    # "Known differences"), while each example alone is right.
    g = torch.Generator().manual_seed(0)
    a0 = torch.randn(4, 4, dtype=torch.float64, generator=g) + 4 * torch.eye(4, dtype=torch.float64)
    w = torch.randn(4, 4, dtype=torch.float64, generator=g)
    xb = torch.randn(5, 4, dtype=torch.float64, generator=g)

    def f(w, x):
        return torch.linalg.solve(a0 + w, x).square().sum()

    loop = torch.stack([torch.func.hessian(f)(w, x) for x in xb])
    ours = {
        "vmap(hessian)": tx.vmap(tx.hessian(f), in_axes=(None, 0)),
        "jit(vmap(hessian))": tx.jit(tx.vmap(tx.hessian(f), in_axes=(None, 0))),
        "vmap(jacfwd(jacrev))": tx.vmap(tx.jacfwd(tx.jacrev(f)), in_axes=(None, 0)),
    }[transform]
    _close(ours(w, xb), loop, 1e-10)
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        ja0 = jnp.asarray(a0.numpy())
        jf = lambda w, x: jnp.square(jnp.linalg.solve(ja0 + w, x)).sum()  # noqa: E731
        jw, jx = jnp.asarray(w.numpy()), jnp.asarray(xb.numpy())
        theirs = jax.vmap(jax.hessian(jf), in_axes=(None, 0))(jw, jx)
    finally:
        jax.config.update("jax_enable_x64", x64)
    _close(ours(w, xb), torch.tensor(jax.device_get(theirs).tolist(), dtype=torch.float64), 1e-10)


# ------------------------------------------------------------------------ degenerate inputs


def test_singular_solve_raises_torchs_error_under_every_transform():
    a = torch.ones(3, 3, dtype=F64)
    b = rand(3)
    for run in (
        lambda: tx.jit(torch.linalg.solve)(a, b),
        lambda: tx.grad(lambda x: torch.linalg.solve(x, b).sum())(a),
        lambda: tx.vmap(torch.linalg.solve, in_axes=(0, None))(torch.stack([a, a]), b),
        lambda: tx.jit(torch.linalg.inv)(a),
    ):
        with pytest.raises(torch.linalg.LinAlgError, match="singular"):
            run()


def test_det_and_slogdet_of_a_singular_matrix_are_torchs():
    a = torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=F64)
    _close(tx.jit(torch.linalg.det)(a), torch.linalg.det(a))
    got, want = tx.jit(torch.linalg.slogdet)(a), torch.linalg.slogdet(a)
    assert got.sign == want.sign == 0 and got.logabsdet == want.logabsdet == -torch.inf


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_det_gradient_of_a_singular_matrix_is_torchs_adjugate(rank):
    a = rand(3, rank) @ rand(rank, 3)
    _close(tx.grad(torch.linalg.det)(a), torch.func.grad(torch.linalg.det)(a))
    batch = torch.stack([a, rand(3, 3)])
    want = torch.func.vmap(torch.func.grad(torch.linalg.det))(batch)
    _close(tx.jit(tx.vmap(tx.grad(torch.linalg.det)))(batch), want)


def test_det_hessian_at_the_identity_is_finite():
    # torch.func gives NaN here (its double backward goes through an SVD with repeated singular
    # values); the exact second derivative of det at I is d2/dA_ij dA_kl = [i=j][k=l] - [i=l][j=k]
    eye = torch.eye(3, dtype=F64)
    want = torch.einsum("ij,kl->ijkl", eye, eye) - torch.einsum("il,jk->ijkl", eye, eye)
    _close(tx.hessian(torch.linalg.det)(eye), want)


def test_cholesky_of_a_non_positive_definite_matrix_raises():
    a = -torch.eye(2, dtype=F64)
    with pytest.raises(torch.linalg.LinAlgError):
        tx.jit(torch.linalg.cholesky)(a)
    with pytest.raises(torch.linalg.LinAlgError):
        tx.grad(lambda x: torch.linalg.cholesky(x).sum())(a)


def test_eigvalsh_gradient_at_repeated_eigenvalues_is_finite_like_torch():
    a = torch.eye(3, dtype=F64)

    def f(x):
        return (torch.linalg.eigvalsh(x) ** 2).sum()

    _close(tx.grad(f)(a), torch.func.grad(f)(a))


def test_eigenvector_gradient_at_repeated_eigenvalues_is_not_finite_like_torch():
    a = torch.eye(3, dtype=F64)

    def f(x):
        return _weighted_vectors(torch.linalg.eigh(x).eigenvectors)

    got, want = tx.grad(f)(a), torch.func.grad(f)(a)
    assert not torch.isfinite(want).all() and not torch.isfinite(got).all()


def test_qr_mode_r_is_not_differentiable_as_in_torch():
    a = rand(3, 2)
    assert tx.jit(lambda x: torch.linalg.qr(x, mode="r").R)(a).shape == (2, 2)
    with pytest.raises(ValueError, match="mode='r'"):
        tx.grad(lambda x: torch.linalg.qr(x, mode="r").R.sum())(a)


def test_matrix_rank_counts_torchs_singular_values():
    a = torch.stack([rand(4, 2) @ rand(2, 5), rand(4, 5), torch.zeros(4, 5, dtype=F64)])
    _close(tx.jit(torch.linalg.matrix_rank)(a), torch.linalg.matrix_rank(a))
    _close(tx.vmap(torch.linalg.matrix_rank)(a), torch.linalg.matrix_rank(a))
    sym = spd(4) - 4.5 * torch.eye(4, dtype=F64)
    _close(
        tx.jit(lambda x: torch.linalg.matrix_rank(x, atol=1.0, hermitian=True))(sym),
        torch.linalg.matrix_rank(sym, atol=1.0, hermitian=True),
    )


def test_integer_input_is_refused_with_the_function_name():
    with pytest.raises(TypeError, match="linalg.inv"):
        tx.jit(torch.linalg.inv)(torch.eye(2, dtype=torch.int64))


def test_generated_code_calls_torch_linalg():
    src = tx.jit(lambda a: torch.linalg.eigh(a)).lower(spd(3)).as_text()
    assert "torch.linalg.eigh" in src
