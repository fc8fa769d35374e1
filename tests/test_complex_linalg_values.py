"""torch functions of complex tensors whose values were silently wrong, or which raised, under jit
and vmap: vecdot, vdot, lstsq, cholesky(upper=True), torch.svd's V, cholesky_solve,
cholesky_inverse and lu_solve(adjoint=True) lacked the conjugation torch applies, cov and corrcoef
cast to float32, slogdet / logdet / pinv / matrix_rank / logsumexp raised on complex input, and
isclose raised under vmap for every dtype. Values and dtypes against torch eager (vmap against a
loop over the examples), derivatives of real losses against torch.func."""

import math

import pytest
import torch
import torch.func as tf

import thunderx as tx

from .complex_samples import complex_randn

L = torch.linalg


_z = complex_randn


def _hermitian(n, seed):
    a = _z(n, n, seed=seed)
    return a @ a.mH + 4 * torch.eye(n, dtype=torch.float64)


def _cholesky_factor(n, seed):
    return L.cholesky(_hermitian(n, seed))


def _singular(n, seed):
    a = _z(n, n, seed=seed)
    a[:, 1] = 0
    return a


B_TALL = _z(5, 2, seed=11)
B_VECTOR = _z(5, seed=12)
B_SQUARE = _z(4, 2, seed=13)
B_ROWS = _z(2, 4, seed=14)
CHOLESKY_FACTOR = _cholesky_factor(4, 3)
FWEIGHTS = torch.tensor([1, 2, 1, 3])
AWEIGHTS = torch.tensor([0.5, 1.0, 2.0, 0.25], dtype=torch.float64)

# name: (function, the example's maker from a seed)
COMPLEX_FUNCTIONS = {
    "vecdot": (lambda a: L.vecdot(a, a.flip(0)), lambda s: _z(4, 3, seed=s)),
    "vecdot_dim0": (lambda a: L.vecdot(a, a.flip(1), dim=0), lambda s: _z(4, 3, seed=s)),
    "vdot": (lambda a: torch.vdot(a[0], a[1]), lambda s: _z(2, 5, seed=s)),
    "tensor_vdot": (lambda a: a[1].vdot(a[0]), lambda s: _z(2, 5, seed=s)),
    "cov": (torch.cov, lambda s: _z(3, 6, seed=s)),
    "cov_vector": (torch.cov, lambda s: _z(6, seed=s)),
    "cov_weights": (
        lambda a: torch.cov(a, correction=0, fweights=FWEIGHTS, aweights=AWEIGHTS),
        lambda s: _z(3, 4, seed=s),
    ),
    "corrcoef": (torch.corrcoef, lambda s: _z(3, 6, seed=s)),
    "lstsq_tall": (lambda a: L.lstsq(a, B_TALL).solution, lambda s: _z(5, 3, seed=s)),
    "lstsq_wide": (lambda a: L.lstsq(a, B_TALL[:3]).solution, lambda s: _z(3, 5, seed=s)),
    "lstsq_vector": (lambda a: L.lstsq(a, B_VECTOR).solution, lambda s: _z(5, 3, seed=s)),
    "lstsq_residuals": (
        lambda a: L.lstsq(a, B_TALL, driver="gelsd").residuals,
        lambda s: _z(5, 3, seed=s),
    ),
    "slogdet_logabsdet": (lambda a: L.slogdet(a).logabsdet, lambda s: _z(4, 4, seed=s)),
    "slogdet_sign": (lambda a: L.slogdet(a).sign, lambda s: _z(4, 4, seed=s)),
    "logdet": (torch.logdet, lambda s: _z(4, 4, seed=s)),
    "logdet_hermitian": (torch.logdet, lambda s: _hermitian(4, s)),
    "pinv_tall": (L.pinv, lambda s: _z(5, 3, seed=s)),
    "pinv_wide": (L.pinv, lambda s: _z(3, 5, seed=s)),
    "pinv_hermitian": (lambda a: L.pinv(a, hermitian=True), lambda s: _hermitian(4, s)),
    "pinverse_atol": (lambda a: torch.pinverse(a, rcond=0.3), lambda s: _z(4, 4, seed=s)),
    "cholesky_solve": (
        lambda a: torch.cholesky_solve(B_SQUARE, a),
        lambda s: _cholesky_factor(4, s),
    ),
    "cholesky_solve_upper": (
        lambda a: torch.cholesky_solve(B_SQUARE, a.mH, upper=True),
        lambda s: _cholesky_factor(4, s),
    ),
    "cholesky_solve_rhs": (
        lambda b: b.cholesky_solve(CHOLESKY_FACTOR),
        lambda s: _z(4, 2, seed=s),
    ),
    "cholesky_inverse": (torch.cholesky_inverse, lambda s: _cholesky_factor(4, s)),
    "cholesky_inverse_upper": (
        lambda a: torch.cholesky_inverse(a.mH, upper=True),
        lambda s: _cholesky_factor(4, s),
    ),
    "lu_solve_adjoint": (
        lambda a: L.lu_solve(*L.lu_factor(a), B_SQUARE, adjoint=True),
        lambda s: _z(4, 4, seed=s),
    ),
    "lu_solve_right_adjoint": (
        lambda a: L.lu_solve(*L.lu_factor(a), B_ROWS, left=False, adjoint=True),
        lambda s: _z(4, 4, seed=s),
    ),
    "logsumexp": (lambda a: torch.logsumexp(a, 0), lambda s: _z(4, 3, seed=s)),
    "logsumexp_keepdim": (lambda a: a.logsumexp((0, 1), keepdim=True), lambda s: _z(4, 3, seed=s)),
}

# values only: integer or boolean results, and factors whose derivatives are the decomposition
# primitives' (tests/test_complex_decompositions.py)
VALUES_ONLY = {
    "cholesky_upper": (lambda a: L.cholesky(a, upper=True), lambda s: _hermitian(4, s)),
    "cholesky_ex_upper": (lambda a: L.cholesky_ex(a, upper=True).L, lambda s: _hermitian(4, s)),
    "svd_V": (lambda a: torch.svd(a).V, lambda s: _z(5, 3, seed=s)),
    "svd_V_wide_complete": (lambda a: torch.svd(a, some=False).V, lambda s: _z(3, 5, seed=s)),
    "matrix_rank": (L.matrix_rank, lambda s: _z(4, 4, seed=s)),
    "matrix_rank_singular": (L.matrix_rank, lambda s: _singular(4, s)),
    "matrix_rank_hermitian": (
        lambda a: L.matrix_rank(a, hermitian=True),
        lambda s: _hermitian(4, s),
    ),
    "matrix_rank_tolerances": (
        lambda a: L.matrix_rank(a, atol=1.0, rtol=0.2),
        lambda s: _z(4, 4, seed=s),
    ),
    "isclose": (lambda a: torch.isclose(a, a + 1e-9), lambda s: _z(4, 3, seed=s)),
    "isclose_far": (lambda a: torch.isclose(a, a.flip(0), rtol=0.5), lambda s: _z(4, 3, seed=s)),
}


def _check_values(f, make):
    x = make(0)
    want = f(x)
    for got in (tx.jit(f)(x), tx.vmap(f)(x[None])[0]):
        assert got.dtype == want.dtype, f"dtype {got.dtype}, torch gives {want.dtype}"
        torch.testing.assert_close(got, want)
    xs = torch.stack([make(1), make(2)])
    got = tx.vmap(f)(xs)
    assert got.dtype == want.dtype, f"dtype {got.dtype} under vmap, torch gives {want.dtype}"
    torch.testing.assert_close(got, torch.stack([f(w) for w in xs]))


@pytest.mark.parametrize("name", sorted(COMPLEX_FUNCTIONS) + sorted(VALUES_ONLY))
def test_value_of_a_complex_input_matches_torch_under_jit_and_vmap(name):
    _check_values(*{**COMPLEX_FUNCTIONS, **VALUES_ONLY}[name])


LOSSES = {
    "abs": lambda y: y.abs().sum(),
    "real": lambda y: y.real.sum(),
}


# where torch.func.jvp is no oracle, the tangent is checked against torch.func.grad
JVP_BY_PAIRING = {
    # torch's forward formula disagrees with its own gradient (real inputs too)
    "cholesky_inverse",
    "cholesky_inverse_upper",
    # torch.func.jvp of lu_solve(left=False) trips an internal assert on a view's tangent
    "lu_solve_right_adjoint",
}


@pytest.mark.parametrize("loss_name", sorted(LOSSES))
@pytest.mark.parametrize("name", sorted(COMPLEX_FUNCTIONS))
def test_derivatives_of_a_real_loss_match_torch_func(name, loss_name):
    f, make = COMPLEX_FUNCTIONS[name]
    x, t = make(0), make(5)

    def loss(z):
        return LOSSES[loss_name](f(z))

    g = tf.grad(loss)(x)
    torch.testing.assert_close(tx.grad(loss)(x), g)
    torch.testing.assert_close(tx.jit(tx.grad(loss))(x), g)
    if name in JVP_BY_PAIRING:
        want = (loss(x), (g.conj() * t).real.sum())  # the gradient's pairing Re <g, t>
    else:
        want = tf.jvp(loss, (x,), (t,))
    torch.testing.assert_close(tx.jvp(loss, (x,), (t,)), want)
    xs = torch.stack([make(1), make(2)])
    want = torch.stack([tf.grad(loss)(w) for w in xs])
    torch.testing.assert_close(tx.vmap(tx.grad(loss))(xs), want)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex64_and_complex128_keep_their_dtype(dtype):
    x = _z(3, 5, seed=3).to(dtype)
    for f in (torch.cov, torch.corrcoef, L.pinv, lambda a: torch.logsumexp(a, 1)):
        want = f(x)
        got = tx.jit(f)(x)
        assert got.dtype == want.dtype == dtype
        torch.testing.assert_close(got, want)


def test_slogdet_and_logdet_of_a_singular_complex_matrix_match_torch():
    a = _singular(4, 7)
    sign, logabs = L.slogdet(a)
    for got in (tx.jit(L.slogdet)(a), tx.vmap(L.slogdet)(a[None])):
        torch.testing.assert_close(got.sign.reshape(()), sign)
        assert got.logabsdet.reshape(()) == -math.inf and got.logabsdet.dtype == logabs.dtype
    want = torch.logdet(a)  # log(0j) + (-inf): -inf + nan j in torch
    got = tx.jit(torch.logdet)(a)
    assert got.real == want.real == -math.inf
    assert math.isnan(got.imag) == math.isnan(want.imag)


def test_logsumexp_of_complex_entries_with_infinite_real_parts_matches_torch():
    z = torch.tensor([[1 + 1j, math.inf + 0j], [2 - 1j, -math.inf + 0j]], dtype=torch.complex128)
    for dim in (0, 1):
        want = torch.logsumexp(z, dim)
        for got in (
            tx.jit(lambda w: w.logsumexp(dim))(z),
            tx.vmap(lambda w: w.logsumexp(dim))(z[None])[0],
        ):
            torch.testing.assert_close(got, want, equal_nan=True)


def test_logsumexp_over_an_empty_complex_dim_is_minus_inf_plus_0j():
    z = torch.zeros(0, 3, dtype=torch.complex128)
    want = torch.logsumexp(z, 0)
    assert torch.equal(want.imag, torch.zeros(3, dtype=torch.float64))
    for got in (
        tx.jit(lambda w: torch.logsumexp(w, 0))(z),
        tx.vmap(lambda w: w.logsumexp(0))(z[None])[0],
    ):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_lstsq_residuals_of_a_vector_right_hand_side_keep_torchs_shape(dtype):
    a, b = _z(5, 3, seed=1), _z(5, seed=2)
    if not dtype.is_complex:
        a, b = a.real, b.real
    want = L.lstsq(a, b, driver="gelsd").residuals  # (1,): torch keeps the column's dim
    for got in (
        tx.jit(lambda a: L.lstsq(a, b, driver="gelsd").residuals)(a),
        tx.vmap(lambda a: L.lstsq(a, b, driver="gelsd").residuals)(a[None])[0],
    ):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want)


_NAN, _INF = math.nan, math.inf
ISCLOSE_CASES = {
    "float32": (
        torch.tensor([1.0, _NAN, _INF, -_INF, 2.0, 1e-9, 0.0]),
        torch.tensor([1.0 + 1e-6, _NAN, _INF, _INF, 2.1, 0.0, -0.0]),
    ),
    "complex128": (
        torch.tensor([1 + 1j, _NAN + 0j, 2 + 0j, 3j], dtype=torch.complex128),
        torch.tensor([1 + 1.000001j, _NAN + 0j, 2.1 + 0j, 3.0000001j], dtype=torch.complex128),
    ),
    "int64": (torch.tensor([1, 2, 3, -4]), torch.tensor([1, 3, 6, -4])),
    "bool": (torch.tensor([True, False, True]), torch.tensor([True, True, False])),
}


@pytest.mark.parametrize(
    "kwargs", [{}, {"equal_nan": True}, {"rtol": 0.1, "atol": 1.5}, {"rtol": 0, "atol": 0}]
)
@pytest.mark.parametrize("case", sorted(ISCLOSE_CASES))
def test_isclose_under_vmap_matches_torch(case, kwargs):
    a, b = ISCLOSE_CASES[case]
    want = torch.isclose(a, b, **kwargs)
    got = tx.vmap(lambda x, y: torch.isclose(x, y, **kwargs))(a[None], b[None])[0]
    assert got.dtype == torch.bool
    assert torch.equal(got, want), f"{got} != torch's {want}"
    assert torch.equal(tx.vmap(lambda x: x.isclose(b, **kwargs))(a[None])[0], want)
    assert torch.equal(tx.jit(lambda x, y: torch.isclose(x, y, **kwargs))(a, b), want)


def test_isclose_refuses_what_torch_refuses():
    x = torch.ones(3)
    with pytest.raises(RuntimeError, match="did not match"):
        tx.vmap(lambda a: torch.isclose(a, a.double()))(x[None])
    with pytest.raises(RuntimeError, match="rtol must be greater than or equal to zero"):
        tx.vmap(lambda a: torch.isclose(a, a, rtol=-1.0))(x[None])
