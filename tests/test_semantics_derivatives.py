"""torch's derivatives under transforms: at differentiable points (float64 finite differences
decide) and torch.func's conventions at kinks and ties (docs/conventions.md)."""

import math

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

F64 = torch.float64


def close(a, b, tol=1e-6):
    for x, y in zip(tx.tree.leaves(a), tx.tree.leaves(b), strict=True):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol, equal_nan=True)


# ------------------------------------------------- derivatives at differentiable points


def _fd_diag(g, x, eps=1e-6):
    """d g_i / d x_i by central finite differences in float64 (the independent oracle)."""
    out = torch.zeros_like(x)
    for i in range(x.numel()):
        e = torch.zeros_like(x)
        e[i] = eps
        out[i] = ((g(x + e) - g(x - e)) / (2 * eps))[i]
    return out


def test_xlogy_derivative_in_x_at_zero_is_log_y():
    y = torch.tensor([0.5, 2.0, 2.0], dtype=F64)
    f = lambda x: torch.xlogy(x, y).sum()  # noqa: E731
    x = torch.tensor([0.0, 0.0, 1.0], dtype=F64)
    want = torch.log(y)
    close(tx.grad(f)(x), want)
    close(tf.grad(f)(x), want)
    close(tx.jvp(lambda x: torch.xlogy(x, y), (x,), (torch.ones(3, dtype=F64),))[1], want)
    # values where x == 0 stay 0 for y == 0 and y == inf, nan for y == nan
    ys = torch.tensor([0.0, math.inf, math.nan, 3.0], dtype=F64)
    xs = torch.tensor([0.0, 0.0, 0.0, 2.0], dtype=F64)
    close(tx.jit(torch.xlogy)(xs, ys), torch.xlogy(xs, ys))
    g = tx.grad(lambda y: torch.xlogy(xs[[0, 3]], y).sum())(ys[[0, 3]] + 1)
    close(g, T(0, 2 / 4))


@pytest.mark.parametrize("fn", [torch.xlogy, torch.special.xlog1py])
def test_xlogy_at_zero_x_is_positive_zero_like_torch(fn):
    # 0 * a negative log is -0.0, which atan2 turns into -pi where torch's +0.0 gives pi (a
    # differential-run program index_add > xlogy > atan2); x < 0 with a zero log stays -0.0
    x = torch.tensor([0.0, -0.0, 0.0, -0.75, 0.5, 0.0, 0.0], dtype=F64)
    y = torch.tensor([0.6, 0.6, -0.5, 1.0, math.nan, 0.0, -2.0], dtype=F64)
    if fn is torch.xlogy:
        y[3] = 1.0  # log 1 = 0
    else:
        y[3] = 0.0  # log1p 0 = 0
    want = fn(x, y)
    for got in (fn(*(t.clone() for t in (x, y))), tx.jit(fn)(x, y), tx.vmap(fn)(x, y)):
        torch.testing.assert_close(got, want, equal_nan=True)
        assert torch.equal(torch.signbit(got), torch.signbit(want)), (got, want)
    z = torch.full_like(x, -0.75)
    torch.testing.assert_close(
        tx.jit(lambda x, y: torch.atan2(fn(x, y), z))(x, y), torch.atan2(want, z), equal_nan=True
    )
    # a Python-scalar x == 0: +0.0, and 0 for y outside the log's domain (nan only for nan y)
    scalar_want = fn(0.0, y)
    scalar_got = tx.jit(lambda y: fn(0.0, y))(y)
    torch.testing.assert_close(scalar_got, scalar_want, equal_nan=True)
    assert torch.equal(torch.signbit(scalar_got), torch.signbit(scalar_want))


@pytest.mark.parametrize("fn", [F.softplus, F.logsigmoid, F.mish])
def test_second_derivatives_of_softplus_family_at_zero(fn):
    x = torch.tensor([0.0, 1.0, -2.0, 30.0], dtype=F64)
    f = lambda x: fn(x).sum()  # noqa: E731
    want = torch.diagonal(tf.hessian(f)(x))
    close(torch.diagonal(tx.hessian(f)(x)), want)
    fd = _fd_diag(tf.grad(f), x[:3])
    close(want[:3], fd, tol=1e-5)  # torch agrees with finite differences
    close(tx.jit(fn)(x), fn(x))
    big = torch.tensor([-100.0, -30.0, 25.0, 100.0])
    close(tx.jit(fn)(big), fn(big))
    close(tx.grad(lambda v: fn(v).sum())(big), tf.grad(lambda v: fn(v).sum())(big))


def test_log_softmax_with_an_infinite_entry_is_nan_like_torch():
    x = torch.tensor([[1.0, math.inf, 0.5], [1.0, 2.0, 3.0], [-math.inf] * 3])
    want = F.log_softmax(x, -1)
    close(tx.jit(lambda x: F.log_softmax(x, -1))(x), want)
    close(tx.vmap(lambda r: F.log_softmax(r, 0))(x), want)
    close(tx.jit(torch.logsumexp, static_argnums=1)(x, 1), torch.logsumexp(x, 1))


def test_logsumexp_over_an_empty_dimension():
    x = torch.zeros(2, 0)
    want = torch.logsumexp(x, 1)
    f = lambda x: torch.logsumexp(x, 1)  # noqa: E731
    close(tx.jit(f)(x), want)
    close(tx.vmap(f)(torch.zeros(3, 2, 0)), torch.full((3, 2), -math.inf))
    close(tx.jvp(f, (x,), (x,)), (want, torch.zeros(2)))
    close(tx.grad(lambda x: f(x).exp().sum())(x), torch.zeros(2, 0))


# ------------------------------------------ gradients at kinks and ties: torch's conventions

T = lambda *v: torch.tensor(v, dtype=F64)  # noqa: E731

KINKS = {
    "vector_norm at 0": (lambda x: torch.linalg.vector_norm(x), T(0, 0, 0)),
    "vector_norm ord 3 at 0": (lambda x: torch.linalg.vector_norm(x, 3), T(0, 0, 0)),
    "norm at 0": (lambda x: torch.norm(x), T(0, 0)),
    "std of a constant": (lambda x: torch.std(x), T(2, 2, 2)),
    "std_mean of a constant": (lambda x: torch.std_mean(x)[0], T(2, 2, 2)),
    "atan2(0, 0)": (lambda x: torch.atan2(x, x * 0).sum() + torch.atan2(x * 0, x).sum(), T(0, 1)),
    "relu6 at 0 and 6": (lambda x: F.relu6(x).sum(), T(0, 6, 3, -1, 7)),
    "hardtanh at +-1": (lambda x: F.hardtanh(x).sum(), T(-1, 1, 0, 2)),
    "clamp at its bounds": (lambda x: torch.clamp(x, -1, 1).sum(), T(-1, 1, 0, 2)),
    "hardsigmoid at +-3": (lambda x: F.hardsigmoid(x).sum(), T(-3, 3, 0, 4)),
    "hardswish at +-3": (lambda x: F.hardswish(x).sum(), T(-3, 3, 0, 4)),
    "max(dim) with ties": (lambda x: torch.max(x, 0).values.sum(), T(1, 3, 3)),
    "min(dim) with ties": (lambda x: torch.min(x.reshape(2, 2), 1).values.sum(), T(1, 1, 3, 0)),
    "max() with ties (split)": (lambda x: torch.max(x), T(1, 3, 3)),
    "amax with ties (split)": (lambda x: torch.amax(x.reshape(2, 2), 1).sum(), T(1, 1, 3, 0)),
    "prod(1/x) at [0, 2]": (lambda x: torch.prod(1 / x), T(0, 2)),
    "prod with zeros": (lambda x: torch.prod(x), T(0, 2, 3)),
    "normalize of 0": (lambda x: F.normalize(x, dim=0).sum(), T(0, 0, 0)),
    "elu at 0": (lambda x: F.elu(x, alpha=2.0).sum(), T(0, -0.5, 1)),
    "cosine_similarity of 0": (lambda x: F.cosine_similarity(x, x * 0 + 1, dim=0), T(0, 0)),
}


@pytest.mark.parametrize("name", sorted(KINKS))
def test_gradient_at_kinks_and_ties_follows_torch(name):
    f, x = KINKS[name]
    close(tx.grad(f)(x), tf.grad(f)(x))
    close(tx.jit(tx.grad(f))(x), tf.grad(f)(x))


def test_fmax_fmin_ties_send_the_derivative_to_the_first_argument():
    a = T(1, 2)
    for fn in (torch.fmax, torch.fmin, torch.maximum, torch.minimum):
        f = lambda a, b: fn(a, b).sum()  # noqa: E731
        close(tx.grad(f, argnums=(0, 1))(a, a.clone()), tf.grad(f, argnums=(0, 1))(a, a.clone()))
    b = T(math.nan, 1)
    close(tx.jit(torch.fmax)(a, b), torch.fmax(a, b))
    close(tx.jit(torch.fmin)(b, a), torch.fmin(b, a))


@pytest.mark.parametrize("reduce", ["min", "amin", "max"])
def test_extremum_jvp_ignores_infinite_tangents_it_does_not_select(reduce):
    sign = -1 if reduce == "max" else 1
    if reduce == "amin":
        f = lambda x: torch.amin(1 / x, 0)  # noqa: E731
    else:
        f = lambda x: getattr(torch, reduce)(sign / x, 0).values  # noqa: E731
    x, t = T(1, 0), T(1, 1)
    close(tx.jvp(f, (x,), (t,)), tf.jvp(f, (x,), (t,)))


@pytest.mark.parametrize("loss", [F.huber_loss, F.smooth_l1_loss])
def test_huber_and_smooth_l1_gradients_at_infinite_and_nan_differences(loss):
    """The quadratic piece squared an infinite difference that the linear piece handles: its
    derivative (inf times the select's zero cotangent) made the gradient nan, where torch's
    backward gives +-1; a nan difference keeps torch's nan."""
    x = T(-math.inf, math.inf, 0.3, -2, 1, -1, math.nan)
    f = lambda x: loss(x, torch.zeros_like(x), reduction="sum")  # noqa: E731
    want = tf.grad(f)(x)
    assert want[:2].tolist() == [-1.0, 1.0] and want[-1].isnan()
    for got in (tx.grad(f)(x), tx.jit(tx.grad(f))(x), tx.vmap(tx.grad(f))(x[None])[0]):
        close(got, want)


def test_huber_forward_mode_at_a_nan_difference_is_nan_like_torch():
    """The value came from the linear piece at nan (|d| <= delta is false), whose tangent
    sign(nan) * t is 0, where torch's forward mode gives nan (the long profile, seed 0); it
    comes from the square now, one comparison deciding both pieces: value, both modes and the
    Hessian torch's at every point."""
    x = T(-math.inf, math.inf, 0.3, -2, 1, -1, 0, 2, math.nan)
    for delta in (1.0, 2.0):

        def f(x, delta=delta):
            return F.huber_loss(x, torch.zeros_like(x), reduction="none", delta=delta)

        t = torch.ones_like(x)
        want = tf.jvp(f, (x,), (t,))[1]
        assert want[-1].isnan()
        close(tx.jvp(f, (x,), (t,))[1], want)
        close(tx.jit(f)(x), f(x))
        s = lambda x: f(x).sum()  # noqa: E731
        close(tx.hessian(s)(x), tf.hessian(s)(x))


@pytest.mark.parametrize("fn", [F.elu, F.selu, F.celu])
def test_second_derivative_of_elu_family_at_zero(fn):
    x = T(0, 1, -1, -0.25)
    f = lambda x: fn(x).sum()  # noqa: E731
    close(torch.diagonal(tx.hessian(f)(x)), torch.diagonal(tf.hessian(f)(x)))
    close(tx.grad(f)(x), tf.grad(f)(x))


# ------------------------------- found by the differential test (tests/test_differential.py)


def test_logaddexp_at_ties_has_torchs_second_derivative_and_infinite_values():
    """max(a, b) + log1p(exp(-|a - b|)) had a zero Hessian at a == b (sign(0) terms) and gave
    nan for equal infinities."""
    f = lambda a, b: torch.logaddexp(a, b).sum()  # noqa: E731
    a = T(0, 1, -2, 30)
    for i in range(2):
        close(tx.hessian(f, argnums=i)(a, a.clone()), tf.hessian(f, argnums=i)(a, a.clone()))
    fd = _fd_diag(tf.grad(lambda a: f(a, a.detach() * 0 + T(0, 1, -2, 30))), a)
    close(torch.diagonal(tx.hessian(f)(a, a.clone())), fd, tol=1e-5)
    far = T(0, 1e3, -2, -1e3)
    close(tx.grad(f, argnums=(0, 1))(a, far), tf.grad(f, argnums=(0, 1))(a, far))
    inf = math.inf
    x, y = T(inf, -inf, inf, 1, math.nan), T(inf, -inf, -inf, inf, 1)
    close(tx.jit(torch.logaddexp)(x, y), torch.logaddexp(x, y))


@pytest.mark.parametrize("loss", [F.huber_loss, F.smooth_l1_loss])
def test_huber_and_smooth_l1_second_derivatives_at_zero_and_at_the_bound(loss):
    x = T(0, 1, -1, 0.5, 2)
    f = lambda x: loss(x, torch.zeros_like(x))  # noqa: E731
    close(tx.hessian(f)(x), tf.hessian(f)(x))
    close(tx.grad(f)(x), tf.grad(f)(x))
    fd = _fd_diag(tf.grad(f), x)  # differentiable away from |x| == 1
    close(torch.diagonal(tx.hessian(f)(x))[[0, 3, 4]], fd[[0, 3, 4]], tol=1e-5)


@pytest.mark.parametrize("fn", [F.elu, F.selu, F.celu])
def test_elu_family_gradient_at_large_inputs_is_finite(fn):
    """expm1's unused branch overflowed at x ~ 1e12: 0 * inf = nan in reverse mode."""
    x = T(1e12, -3, 800, 0.5)
    f = lambda x: fn(x).sum()  # noqa: E731
    close(tx.grad(f)(x), tf.grad(f)(x))
    close(tx.jit(tx.grad(f))(x), tf.grad(f)(x))


def test_second_derivative_of_division_at_a_zero_denominator_is_infinite_like_torch():
    """(tx - ty * out) / y in one division: tx / y alone gave 0 / 0 = nan beside ty's inf."""
    f = lambda x, y: (x / y).sum()  # noqa: E731
    x, y = T(-0.75), T(0.0, 0.75)
    want = tf.hessian(f, argnums=(0, 1))(x, y)
    close(tx.hessian(f, argnums=(0, 1))(x, y), want)
    assert want[1][1][0, 0] == -math.inf  # 2x / y^3 at y = +0, x < 0
    close(tx.jvp(f, (x, y), (T(0.0), T(1.0, 1.0))), tf.jvp(f, (x, y), (T(0.0), T(1.0, 1.0))))


def test_variance_over_no_elements_has_a_zero_tangent():
    x = torch.zeros(3, 0, dtype=F64)
    f = lambda x: torch.var(x, 1)  # noqa: E731
    close(tx.jvp(f, (x,), (x,)), tf.jvp(f, (x,), (x,)))
    close(tx.jit(f)(x), f(x))


def test_variance_over_no_elements_is_a_value_a_write_may_update():
    """The nan was made as a constant, so an in-place write of a value depending on the
    inputs into (a function of) it was refused as a write into a captured tensor under grad and
    vmap (seed 250000: logcumsumexp > div > var > setitem); torch.func computes it."""

    def f(x, c):
        y = torch.var(x, 0, keepdim=True) * 1
        y[0] = c * 2
        return y.sum() + x.sum()

    x, c = torch.zeros(0, dtype=F64), T(2.1)[0]
    close(tx.grad(f, (0, 1))(x, c), tf.grad(f, (0, 1))(x, c))
    xs, cs = torch.zeros(3, 0, dtype=F64), T(2.1, -0.5, 3.0)
    close(tx.vmap(f)(xs, cs), tf.vmap(f)(xs, cs))
    close(tx.jit(tx.vmap(tx.grad(f, (0, 1))))(xs, cs), tf.vmap(tf.grad(f, (0, 1)))(xs, cs))


@pytest.mark.parametrize("conv", [F.conv1d, F.conv2d])
def test_convolution_with_no_input_channels(conv):
    """torch returns (N, 0, *out) for an input without channels; thunderx raised."""
    nsp = 1 if conv is F.conv1d else 2
    x = torch.zeros((3, 0) + (3,) * nsp, dtype=F64)
    w = torch.zeros((2, 0) + (2,) * nsp, dtype=F64)
    assert tx.jit(conv)(x, w).shape == conv(x, w).shape
    f = lambda x, w: conv(x, w).sum()  # noqa: E731
    close(tx.grad(f, argnums=(0, 1))(x, w), tf.grad(f, argnums=(0, 1))(x, w))
    # a kernel without output channels (eager torch refuses one; the transpose of a conv whose
    # input has no channels builds one): an empty output and a zero gradient
    w = torch.randn((0, 2) + (2,) * nsp, dtype=F64)
    y = torch.randn((3, 2) + (3,) * nsp, dtype=F64)
    g = tx.grad(lambda y: conv(y, w).sum())(y)
    close(g, torch.zeros_like(y))


def test_attention_with_head_dim_zero_is_uniform_like_torch():
    q, k = torch.randn(2, 3, 0, dtype=F64), torch.randn(2, 4, 0, dtype=F64)
    v = torch.randn(2, 4, 5, dtype=F64)
    f = F.scaled_dot_product_attention
    close(tx.jit(f)(q, k, v), f(q, k, v))
    g = lambda v: f(q, k, v).sum()  # noqa: E731
    close(tx.grad(g)(v), tf.grad(g)(v))


@pytest.mark.parametrize("fn", [torch.log2, torch.log10])
def test_log2_log10_are_torchs_to_the_last_bit(fn):
    """log(x) * (1 / ln 10) gave log10(0.1) = -0.9999999999999998, so ceil gave -0, not -1."""
    x = torch.tensor([0.1, 0.001, 8.0, 1e-300, 3.7], dtype=F64)
    assert torch.equal(tx.jit(fn)(x), fn(x))
    assert torch.equal(tx.vmap(fn)(x), fn(x))
    assert torch.equal(tx.jit(lambda v: torch.ceil(fn(v)))(x), torch.ceil(fn(x)))
    f = lambda v: fn(v).sum()  # noqa: E731
    close(tx.grad(f)(x), tf.grad(f)(x))
    close(tx.hessian(f)(x[:3]), tf.hessian(f)(x[:3]))


@pytest.mark.parametrize("ord", [0.5, -1, -2, -3.5, 3, "fro", 2, -2])
def test_norm_gradients_at_the_zero_vector_and_matrix_follow_torch(ord):
    """torch's subgradient 0 (vector orders, 'fro') and I / n (spectral: tied singular values
    share); thunderx gave nan (0 * inf from |x|^(p-1), 0 / 0 under the root) or e1 e1^T."""
    x = torch.zeros(5, 5, dtype=F64) if ord in ("fro", 2, -2) else torch.zeros(5, dtype=F64)
    f = lambda x: torch.linalg.norm(x, ord)  # noqa: E731
    close(tx.grad(f)(x), tf.grad(f)(x))
    close(tx.jit(f)(x), f(x))
    y = T(0.0, 1.5, -2.0)  # a zero entry in a nonzero vector: its derivative is 0 for p < 1
    if ord not in ("fro", 2, -2):
        close(tx.grad(f)(y), tf.grad(f)(y))


@pytest.mark.parametrize("shape", [(0, 0), (5, 0), (0, 5)])
@pytest.mark.parametrize("ord", [1, -1, 2, -2, math.inf, -math.inf, "fro", "nuc"])
def test_matrix_norms_of_empty_matrices(shape, ord):
    """The largest of no values is 0 (torch); the smallest raises, in torch and here."""
    x = torch.zeros(shape, dtype=F64)
    f = lambda x: torch.linalg.norm(x, ord)  # noqa: E731
    try:
        want = f(x)
    except (IndexError, RuntimeError):
        with pytest.raises(ValueError, match="empty dimension"):
            tx.jit(f)(x)
        return
    close(tx.jit(f)(x), want)
    close(tx.grad(f)(x), tf.grad(f)(x))


def test_variance_gradient_with_an_infinite_cotangent_is_torchs():
    """d var = 2 / (n - c) * sum((x - mean) dx), as torch: differentiating through the centering
    added -mean(ct * (x - mean)), which is inf - inf = nan for an infinite cotangent."""
    x = torch.tensor([[30.0, -30.0, 2.0], [1.0, 30.0, -30.0], [5.0, 6.0, 30.0]], dtype=F64)
    f = lambda x: torch.cumsum(F.tanhshrink(torch.cosh(x.var(0))), 0).sum()  # noqa: E731
    close(tx.grad(f)(x), tf.grad(f)(x))
    g = lambda x: (torch.var_mean(x, 1)[0] * torch.var_mean(x, 1)[1]).sum()  # noqa: E731
    y = torch.randn(3, 4, dtype=F64)
    close(tx.hessian(g)(y), tf.hessian(g)(y))


def test_clamp_at_nan_is_nan_with_derivative_zero_like_torch():
    """A nan bound gave x itself (a silent wrong value); a nan x passed its tangent on."""
    nan = math.nan
    x, lo, hi = (
        T(0.5, 0.5, nan, 0, 0, 2, -3, 0.3),
        T(nan, 0, 0, 1, 1, -1, -1, -1),
        T(1, nan, 1, -1, nan, 1, 1, 1),
    )
    close(tx.jit(torch.clamp)(x, lo, hi), torch.clamp(x, lo, hi))
    w = torch.arange(1.0, 9.0, dtype=F64)
    g = lambda x, lo, hi: (torch.clamp(x, lo, hi) * w).sum()  # noqa: E731
    close(tx.grad(g, argnums=(0, 1, 2))(x, lo, hi), tf.grad(g, argnums=(0, 1, 2))(x, lo, hi))
    f = lambda x: torch.clamp(x, -1.0, 1.0)  # noqa: E731
    ones = torch.ones_like(x)
    close(tx.jvp(f, (x,), (ones,)), tf.jvp(f, (x,), (ones,)))
    close(tx.jit(lambda x: torch.clamp(x, min=nan))(x), torch.clamp(x, min=nan))


def test_logaddexp_keeps_an_infinite_tangent_of_the_larger_operand():
    """torch's d = da * sigmoid(a - b) + db * sigmoid(b - a): the value's own derivative gave
    sigmoid(lo - hi) * inf = 0 * inf = nan."""
    x, y = T(800.0, 3.0, -1.0), T(1.0, 2.0, -1.0)
    tangents = (T(math.inf, -math.inf, 1.0), T(1.0, 1.0, 1.0))
    close(tx.jvp(torch.logaddexp, (x, y), tangents), tf.jvp(torch.logaddexp, (x, y), tangents))


@pytest.mark.parametrize("x, y", [(0.0, 2.0), (0.0, 0.0), (0.0, 1.0), (0.0, 0.5), (0.0, -1.0)])
def test_pow_derivatives_in_the_exponent_at_a_zero_base_match_torch_func(x, y):
    # torch's pow_backward_exponent: 0 where x == 0 and y >= 0, out * log(x) otherwise (-inf
    # for 0 ** -1); the second derivatives there follow (0, not inf * 0 = nan)
    f = lambda x, y: (x**y).sum()  # noqa: E731
    X, Y = torch.tensor([x], dtype=torch.float64), torch.tensor([y], dtype=torch.float64)
    for a, b in zip(tx.grad(f, argnums=(0, 1))(X, Y), tf.grad(f, argnums=(0, 1))(X, Y)):
        torch.testing.assert_close(a, b, equal_nan=True)
    ours, ref = tx.hessian(f, argnums=(0, 1))(X, Y), tf.hessian(f, argnums=(0, 1))(X, Y)
    for i in range(2):
        for j in range(2):
            torch.testing.assert_close(ours[i][j], ref[i][j], equal_nan=True)


def test_jacobians_with_no_elements_on_one_side_skip_the_batching_rules():
    """jacrev of an output without elements vmapped the VJP over an empty basis, which ran
    max_pool2d's backward on a batch of 0 that torch's kernel rejects; the Jacobian has no
    elements, and jacfwd of an input without elements likewise."""
    x = torch.randn(3, 4, 4, dtype=torch.float64)
    f = lambda x: F.max_pool2d(x, 2)[..., :0].frac()  # noqa: E731
    want = tf.jacrev(f)(x)
    for jac in (tx.jacrev(f), tx.jit(tx.jacrev(f)), tx.jacfwd(f)):
        got = jac(x)
        assert got.shape == want.shape == (3, 2, 0, 3, 4, 4) and got.dtype == want.dtype
    e = torch.randn(0, 3, dtype=torch.float64)
    g = lambda e: (e.sum(0) * 2, e.t().sin())  # noqa: E731
    for jac in (tx.jacfwd, tx.jacrev):
        for got, want in zip(jac(g)(e), tf.jacfwd(g)(e), strict=True):
            assert got.shape == want.shape and got.dtype == want.dtype
            close(got, want)


def test_std_of_a_constant_row_has_no_gradient_along_the_constant_direction():
    """std of an expanded value is constant in it, but its computed deviations are rounding
    noise (std 1.4e-16 for three 0.7s) that d std = sum((x - m) dx) / ((n - 1) std) divided by
    noise: the gradient was 1.22. torch.func (exactly 0 there) and finite differences give 0."""
    g = lambda v: torch.std(v.expand(3, 2), 0).sum()  # noqa: E731
    y = T(0.0, 0.7)
    want = tf.grad(g)(y)
    assert torch.equal(want, torch.zeros(2, dtype=torch.float64))
    for got in (tx.grad(g)(y), tx.jit(tx.grad(g))(y), tx.vmap(tx.grad(g))(y[None])[0]):
        close(got, want)
    h = lambda v: torch.var(v.expand(4, 2) * 3, 0).sum()  # noqa: E731
    close(tx.grad(h)(y), tf.grad(h)(y))


@pytest.mark.parametrize("n", [3, 6, 7])
def test_variance_of_a_constant_row_is_exactly_zero(n):
    """Deviations are taken from the row's first entry before the mean: a constant row's are
    exactly 0. Centred on sum / n, which rounds away from 1/sqrt(0.1) for n = 3, var was 3e-31,
    so minimum(var, 0) was no tie and std missed its zero-derivative convention. torch's kernel
    for these (Welford, over the last dim of a 3-D tensor) gives exactly 0; so must we."""
    x = torch.full((2, 2, n), 1 / math.sqrt(0.1), dtype=F64)
    for f in (torch.var, torch.std, lambda x, d: torch.var_mean(x, d)[0]):
        want = f(x, -1)
        assert torch.equal(want, torch.zeros(2, 2, dtype=F64))
        assert torch.equal(f(x, -1), tx.jit(f, static_argnums=1)(x, -1))
    b = torch.zeros(2, 2, dtype=F64)
    tie = lambda x, b: torch.minimum(torch.var(x, -1), b).sum()  # noqa: E731
    for got, want in zip(tx.grad(tie, (0, 1))(x, b), tf.grad(tie, (0, 1))(x, b), strict=True):
        close(got, want)
    sd = lambda x: torch.std(x, -1).sum()  # noqa: E731
    close(tx.grad(sd)(x), tf.grad(sd)(x))


def test_variance_of_a_row_one_ulp_wide_is_exact():
    """Two values one ulp apart: the exact unbiased variance is (a - b)^2 / 2. Centred on the
    rounded mean it came out twice that (the mean rounds onto one of them); from the first entry
    the deviations are exact. The oracle is the closed form, not torch's kernel, which also
    rounds here (its std is sqrt(2) too large)."""
    a, b = -29.999999999999996, -30.0
    x = torch.tensor([a, b], dtype=F64)
    assert tx.jit(torch.var)(x).item() == (a - b) ** 2 / 2
    g = tx.grad(torch.std)(x)
    close(g, torch.tensor([0.5**0.5, -(0.5**0.5)], dtype=F64), tol=1e-12)
