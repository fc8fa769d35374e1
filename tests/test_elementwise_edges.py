"""Elementwise functions at the edges of floating point, against torch (values bit for bit,
derivatives against torch.func, and finite differences or closed forms where torch is off).

Floor division and remainder: torch's float quotient is the one of x - fmod(x, y) (Python's
float //), not floor(x / y), which rounds the other way where x / y rounds up to an integer:
1.0 // 0.1 is 9.0 (the double 0.1 is a little more than a tenth) and 1.0 % 0.1 is 0.0999...
The remainder's derivative in y is minus that same quotient. hypot where the squares overflow
or underflow; sinc, i1 and i1e derivatives at tiny and subnormal x."""

import math

import pytest
import torch
import torch.nn.functional as F

import thunderx as tx

INF, NAN = math.inf, math.nan
# (x, y): quotients that round up to an integer, overflowing quotients (torch's vectorized fmod
# gives NaN there), zeros of both signs, infinities and NaN
PAIRS = [
    (1.0, 0.1),
    (-1.0, 0.1),
    (0.3, 0.1),
    (7.0, 0.7),
    (2.0, 0.2),
    (-0.7, -0.1),
    (1e300, 1e-10),
    (-1e300, 1e-10),
    (1e300, -1e-10),
    (5.0, -0.0),
    (0.0, 0.0),
    (-0.0, 2.0),
    (0.0, -3.0),
    (3.0, INF),
    (-2.0, INF),
    (INF, 2.0),
    (1.0, NAN),
    (0.25, 0.5),
]


def same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal values, NaN where NaN, and the same sign on zeros."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    nan = want.isnan()
    return (
        torch.equal(got.isnan(), nan)
        and torch.equal(got[~nan], want[~nan])
        and torch.equal(torch.signbit(got[~nan]), torch.signbit(want[~nan]))
    )


FUNCTIONS = {
    "floordiv": lambda x, y: x // y,
    "div_floor": lambda x, y: torch.div(x, y, rounding_mode="floor"),
    "floor_divide": torch.floor_divide,
    "remainder": torch.remainder,
    "mod": lambda x, y: x % y,
    "floordiv_by_literal": lambda x, y: x // 0.1,
    "literal_floordiv": lambda x, y: 1.0 // y,
    "remainder_by_literal": lambda x, y: x % 0.1,
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("repeat", [1, 3])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_values_match_torch_at_the_edges(name, repeat, dtype):
    fn = FUNCTIONS[name]
    x = torch.tensor([p[0] for p in PAIRS] * repeat, dtype=torch.float64).to(dtype)
    y = torch.tensor([p[1] for p in PAIRS] * repeat, dtype=torch.float64).to(dtype)
    want = fn(x, y)
    assert same(tx.jit(fn)(x, y), want)
    assert same(tx.vmap(fn)(x, y), want)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_values_match_torch_over_wide_magnitudes(dtype):
    g = torch.Generator().manual_seed(0)

    def draw():
        return torch.randn(20000, generator=g, dtype=dtype) * torch.exp(
            torch.randn(20000, generator=g, dtype=dtype) * 4
        )

    x, y = draw(), draw()
    # quotients near integers, where floor(x / y) and torch disagree most often
    k = torch.randint(-50, 50, (20000,), generator=g).to(dtype)
    x[::2] = (k * y)[::2]
    for name in ("floordiv", "remainder"):
        fn = FUNCTIONS[name]
        assert same(tx.jit(fn)(x, y), fn(x, y)), name


def test_floor_division_is_not_floor_of_the_quotient():
    # the case itself, with Python's own float // as a second oracle
    x, y = torch.tensor(1.0, dtype=torch.float64), torch.tensor(0.1, dtype=torch.float64)
    assert tx.jit(lambda x, y: x // y)(x, y).item() == 1.0 // 0.1 == 9.0
    assert tx.jit(torch.remainder)(x, y).item() == 1.0 % 0.1


def test_remainder_derivatives_match_torch_func():
    # dividends that are (rounded) multiples of the divisor: the quotient the value used, not
    # x / y rounded, is the derivative in y
    y = torch.tensor([0.1, 0.1, 0.7, 0.2, 0.3, -0.1], dtype=torch.float64)
    x = torch.arange(-12, 12, dtype=torch.float64)[:, None] * y
    x = torch.cat([x, torch.tensor([[1.0, -1.0, 7.0, 2.0, 1.0, 0.3]], dtype=torch.float64)])
    f = lambda x, y: torch.remainder(x, y).sin().sum()  # noqa: E731
    for argnum in (0, 1):
        want = torch.func.grad(f, argnums=argnum)(x, y)
        got = tx.grad(f, argnums=argnum)(x, y)
        assert torch.equal(got, want), argnum
    tangents = (torch.ones_like(x), torch.ones_like(y))
    want = torch.func.jvp(f, (x, y), tangents)[1]
    got = tx.jvp(f, (x, y), tangents)[1]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_second_derivative_of_a_remainder_in_its_divisor():
    # what the differential test found: d²/dy² of sin(remainder(sign(x), y*y + 0.1)).sum() at
    # y = 0, where 1 / 0.1 rounds up to 10 but the remainder's quotient is 9
    s = torch.tensor([[1.0, 0.0, -1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)

    def f(y):
        return torch.remainder(s, y * y + 0.1).sin().sum()

    y = torch.tensor(0.0, dtype=torch.float64)
    want = torch.func.hessian(f)(y)
    assert torch.equal(tx.hessian(f)(y), want)
    assert torch.equal(tx.jit(tx.hessian(f))(y), want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_rounds_once_as_torchs_scalar_loop(dtype):
    # torch's vectorized half kernel rounds every step and can pass the quotient (pytorch#193754:
    # bfloat16 560 // 3 gives 187); its scalar loop computes in float32 and rounds once
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(2000, generator=g) * 100).to(dtype)
    y = (torch.randn(2000, generator=g) * 3).to(dtype)
    scalar_loop = torch.cat([x[i : i + 1] // y[i : i + 1] for i in range(len(x))])
    assert torch.equal(scalar_loop, (x.float() // y.float()).to(dtype))
    assert same(tx.jit(lambda x, y: x // y)(x, y), scalar_loop)


def test_hypot_where_the_squares_overflow_or_underflow():
    x = torch.tensor([1e200, 5e-324, 3.0, 0.0, INF, NAN, INF, -0.0, 1e-200], dtype=torch.float64)
    y = torch.tensor([1e200, 0.0, 4.0, 0.0, NAN, INF, 1.0, 2.0, 1e-200], dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        a, b = x.to(dtype), y.to(dtype)
        assert same(tx.jit(torch.hypot)(a, b), torch.hypot(a, b))
    assert tx.jit(torch.hypot)(x, y)[0].item() == math.hypot(1e200, 1e200)
    f = lambda x, y: torch.hypot(x, y).sum()  # noqa: E731
    for got, want in zip(tx.grad(f, (0, 1))(x, y), torch.func.grad(f, (0, 1))(x, y)):
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    xs, ys = x[[0, 1, 2, 8]], y[[0, 1, 2, 8]]
    want = torch.func.hessian(f, (0, 1))(xs, ys)
    for got_row, want_row in zip(tx.hessian(f, (0, 1))(xs, ys), want):
        for got, w in zip(got_row, want_row):
            torch.testing.assert_close(got, w, equal_nan=True)


@pytest.mark.parametrize(
    "fn, d1, d2",
    [  # closed forms near 0: sinc' = -pi^2 x / 3, sinc'' = -pi^2 / 3; i1' = 1/2, i1'' = 3x/8;
        # i1e' = 1/2 - |x|, i1e'' = -sign(x) (to first order)
        (torch.sinc, lambda x: -(math.pi**2) * x / 3, lambda x: -(math.pi**2) / 3),
        (torch.special.i1, lambda x: 0.5, lambda x: 3 * x / 8),
        (torch.special.i1e, lambda x: 0.5 - abs(x), lambda x: -math.copysign(1.0, x)),
    ],
)
def test_derivatives_at_tiny_and_subnormal_inputs(fn, d1, d2):
    # the derivatives divided by x (or by x^2): 0 / 0 or 0 * inf where x is subnormal, and
    # cancellation below ~1e-6; torch's own second derivatives there are 0 (also off)
    for v in (5e-324, -1e-310, 1e-200, -1e-50, 1e-9, 3e-6):
        x = torch.tensor(v, dtype=torch.float64)
        assert math.isclose(tx.grad(fn)(x).item(), d1(v), rel_tol=1e-9, abs_tol=1e-300), v
        assert math.isclose(tx.jit(tx.grad(fn))(x).item(), d1(v), rel_tol=1e-9, abs_tol=1e-300)
        assert math.isclose(tx.hessian(fn)(x).item(), d2(v), rel_tol=1e-4, abs_tol=1e-300), v
    # away from 0, torch.func's derivatives
    x = torch.tensor([0.00999, 0.01, -0.3, 2.5, 40.0], dtype=torch.float64)
    g = lambda x: fn(x).sum()  # noqa: E731
    torch.testing.assert_close(tx.grad(g)(x), torch.func.grad(g)(x), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(tx.hessian(g)(x), torch.func.hessian(g)(x), rtol=1e-9, atol=1e-12)
    assert torch.equal(tx.jit(fn)(x), fn(x))


def test_logsigmoid_and_bce_with_logits_below_softplus_threshold():
    # -softplus(-x) rounds to x below x = -20 (softplus' threshold): -21.0 where torch gives
    # -21.00000000076 (2e-11 relative), a derivative of exactly 1; torch's formula is
    # min(x, 0) - log1p(exp(-|x|)). binary_cross_entropy_with_logits in torch's form too: the
    # symmetric form gave -inf where torch gives nan (x = -inf, target outside [0, 1])
    import torch.nn.functional as F

    x = torch.tensor([-21.0, -30.0, -45.0, 25.0, 0.5, -0.0, INF, -INF, NAN], dtype=torch.float64)
    assert same(tx.jit(F.logsigmoid)(x), F.logsigmoid(x))  # short: torch's scalar loop
    g = lambda v: F.logsigmoid(v).sum()  # noqa: E731
    torch.testing.assert_close(tx.grad(g)(x), torch.func.grad(g)(x), equal_nan=True)
    assert tx.grad(g)(x)[0] < 1.0  # sigmoid(21), not the threshold's 1
    y = torch.tensor([0.5, -30.0, 0.9, 0.2, 1.0, 0.3, 0.5, -30.0, 0.5], dtype=torch.float64)
    pw = torch.tensor([2.0, 0.5, 1.0, 3.0, 0.1, 1.5, 2.5, 1.0, 1.0], dtype=torch.float64)
    for kw in ({}, {"pos_weight": pw}, {"weight": pw}):
        f = lambda x, y, kw=kw: F.binary_cross_entropy_with_logits(x, y, reduction="none", **kw)
        assert same(tx.jit(f)(x, y), f(x, y)), kw
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(4000, dtype=torch.float64, generator=g) * 30
    ys = torch.rand(4000, dtype=torch.float64, generator=g)
    # long tensors: torch's vectorized exp and log1p, within an ulp of the scalar loop's
    torch.testing.assert_close(tx.jit(F.logsigmoid)(xs), F.logsigmoid(xs), rtol=5e-16, atol=0)
    h = lambda x, y: F.binary_cross_entropy_with_logits(x, y)  # noqa: E731
    for got, want in zip(tx.grad(h, (0, 1))(xs, ys), torch.func.grad(h, (0, 1))(xs, ys)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-18)


def test_sinc_tangent_at_zero_is_zero_even_where_the_incoming_one_is_nan():
    # hypot's tangent at (0, 0) is nan (torch's too); sinc's derivative at 0 is 0, and torch's
    # forward mode gives 0 there: sinc(hypot(a, b)) has the finite derivative finite differences
    # find, which the series' t * 0 = nan lost (the long profile, seed 2)
    z, one = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    f = lambda a, b: torch.sinc(torch.hypot(a, b))  # noqa: E731
    want = torch.func.jvp(f, (z, z), (one, one))[1]
    assert torch.equal(want, z)
    assert torch.equal(tx.jvp(f, (z, z), (one, one))[1], want)
    assert torch.equal(tx.jit(lambda a, b: tx.jvp(f, (a, b), (one, one))[1])(z, z), want)


def test_torch_autograd_through_thunderx_differentiates_sinc_as_torch_does_near_zero():
    # sinc(sinc(30)) = sinc(-1.1e-16), padded: torch autograd through jit's program (and an
    # eager vmap, and torch.func of jit) differentiated sinc's decomposition sin(pi x) / (pi x),
    # whose quotient rule cancels every digit there: 0.105 where torch's derivative is 0 (the
    # differential test, seed 4718255). sinc is torch's kernel in those programs now.
    x = torch.tensor([30.0, 30.0, -30.0, 12.0, 0.4], dtype=torch.float64)
    w = torch.arange(1.0, 8.0, dtype=torch.float64)

    def f(x):
        return F.pad(torch.sinc(torch.sinc(x)), (2, 0))

    def torch_grad(f):
        xr = x.clone().requires_grad_()
        return torch.autograd.grad((f(xr) * w).sum(), xr)[0]

    want = torch_grad(f)
    assert torch.equal(want[:4], torch.zeros(4, dtype=torch.float64))
    torch.testing.assert_close(torch_grad(tx.jit(f)), want, rtol=1e-12, atol=1e-15)
    vm = tx.vmap(lambda x: f(x)[2:])
    got = torch_grad(lambda x: F.pad(vm(x[:, None])[:, 0], (2, 0)))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)
    got = torch.func.grad(lambda x: (tx.jit(f)(x) * w).sum())(x)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)
    # thunderx's own derivative: the series' -pi^2 x / 3 at the inner 1e-16 (1e-17 overall)
    got = tx.grad(lambda x: (f(x) * w).sum())(x)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)


def test_softmax_of_a_0d_tensor_is_torch_s_in_value_and_first_derivatives():
    # log_softmax was x * 0.0: -0.0 for a negative x, where torch gives +0.0 (atan2 of it then
    # gave -pi instead of pi: the long profile, seed 2). Then x - x: a derivative of 0 at nan and
    # inf, where torch (and a one-element vector) give nan; a nan operand of `minimum` was blamed
    # on it (the long profile, seed 0). A 0-d input is now a one-element vector.
    import torch.nn.functional as F

    one = torch.tensor(1.0, dtype=torch.float64)
    for fn in (F.log_softmax, F.softmax):
        f = lambda x, fn=fn: fn(x, -1)  # noqa: E731
        for v in (-1.72, 2.0, -0.0, INF, -INF, NAN):
            x = torch.tensor(v, dtype=torch.float64)
            want = f(x)
            assert same(tx.jit(f)(x), want), (fn, v)
            assert same(tx.vmap(f)(x[None])[0], want), (fn, v)
            assert same(tx.grad(f)(x), torch.func.grad(f)(x)), (fn, v)
            assert same(tx.jvp(f, (x,), (one,))[1], torch.func.jvp(f, (x,), (one,))[1]), (fn, v)
            # second derivatives: a one-element vector's, torch's too (its 0-d double backward
            # gives 0 at nan and inf)
            g = lambda x, fn=fn: fn(x.reshape(1), 0).reshape(())  # noqa: E731
            assert same(tx.hessian(f)(x), torch.func.hessian(g)(x)), (fn, v)


@pytest.mark.parametrize("eps", [None, 1e-2])
def test_logit_derivative_is_torchs_logit_backward_at_the_ends_and_outside(eps):
    # g / (x (1 - x)) on [0, 1] (inf at the ends), nan outside; with eps 0 outside
    # [eps, 1 - eps]: the quotient's chain rule gave nan at 0 and a finite slope at x = 3
    x = torch.tensor([0.0, 1.0, 0.3, 3.0, -1.0, 1e-3, 0.999, NAN, 0.01, 0.99], dtype=torch.float64)
    f = lambda v: torch.logit(v, eps).sum()  # noqa: E731
    leaf = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(f(leaf), leaf)
    for got in (tx.grad(f)(x), tx.jit(tx.grad(f))(x)):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    ones = torch.ones_like(x)
    torch.testing.assert_close(
        tx.jvp(lambda v: torch.logit(v, eps), (x,), (ones,))[1], want, equal_nan=True
    )
    # bit for bit inside, in float32 too
    u = torch.rand(4096, generator=torch.Generator().manual_seed(0))
    g = lambda v: torch.logit(v, eps).sum()  # noqa: E731
    leaf = u.clone().requires_grad_()
    assert torch.equal(tx.grad(g)(u), torch.autograd.grad(g(leaf), leaf)[0])
    y = torch.tensor([0.3, 0.7, 0.05], dtype=torch.float64)
    torch.testing.assert_close(tx.hessian(f)(y), torch.func.hessian(f)(y))


def test_rsqrt_derivative_is_torchs_formula():
    # -0.5 y^3: +inf at -0.0 (y = -inf), bit for bit elsewhere (y / x rounded differently)
    x = torch.tensor([-0.0, 0.0, 1e-30, 0.5, 2.0], dtype=torch.float64)
    f = lambda v: torch.rsqrt(v).sum()  # noqa: E731
    assert torch.equal(tx.grad(f)(x), torch.func.grad(f)(x))
    u = torch.rand(4096, generator=torch.Generator().manual_seed(1)) + 0.01
    assert torch.equal(tx.grad(f)(u), torch.func.grad(f)(u))
    assert torch.equal(tx.jit(tx.grad(f))(u), torch.func.grad(f)(u))


def test_elu_family_values_are_torchs_kernel_bit_for_bit():
    # torch's kernel: expm1(x * input_scale) * (alpha * scale), the coefficient rounded in the
    # input's precision; selu as scale * elu(x) rounded differently in 15% of the values
    from functools import partial

    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(4096, generator=g, dtype=dtype) * 3
        for fn in (F.elu, partial(F.elu, alpha=0.5), F.selu, F.celu, partial(F.celu, alpha=0.7)):
            assert torch.equal(tx.jit(fn)(x), fn(x))
            assert torch.equal(tx.vmap(fn)(x.view(64, 64)), fn(x).view(64, 64))
            f = lambda v, fn=fn: (fn(v) * torch.cos(v)).sum()  # noqa: E731
            torch.testing.assert_close(tx.grad(f)(x), torch.func.grad(f)(x))
    # torch's conventions: at the kink the negative side's slope and a zero second derivative;
    # at a nan the positive side's slope (torch's scalar loop: a one-element tensor)
    pts = torch.tensor([-3.0, -0.0, 0.0, 1.0, INF, -INF, -1e-30], dtype=torch.float64)
    nan = torch.tensor([NAN], dtype=torch.float64)
    for fn in (F.elu, F.selu, partial(F.celu, alpha=0.7)):
        s = lambda v, fn=fn: fn(v).sum()  # noqa: E731
        # (torch's celu backward takes input_scale 1 / float32(alpha): 1 + 1.7e-8 at the kink,
        # 5.6e-8 relative at -3)
        torch.testing.assert_close(tx.grad(s)(pts), torch.func.grad(s)(pts), rtol=1e-7, atol=0)
        torch.testing.assert_close(tx.hessian(s)(pts), torch.func.hessian(s)(pts))
        assert torch.equal(tx.grad(s)(nan), torch.func.grad(s)(nan))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "name,domain",
    [
        ("log", (0.01, 9.0)),
        ("log1p", (-0.9, 9.0)),
        ("log2", (0.01, 9.0)),
        ("log10", (0.01, 9.0)),
        ("sqrt", (0.01, 9.0)),
        ("atanh", (-0.95, 0.95)),
    ],
)
def test_derivatives_divide_as_torch_does(name, domain, dtype):
    # torch's formulas divide (grad / x, grad / (2 * sqrt(x)), ...): a tangent t * (1 / x)
    # rounded twice and differed from torch.autograd in a few entries of every thousand
    fn = getattr(torch, name)
    lo, hi = domain
    g = torch.Generator().manual_seed(0)
    x = lo + (hi - lo) * torch.rand(4096, generator=g, dtype=dtype)
    w = torch.randn(4096, generator=g, dtype=dtype)
    loss = lambda x: (fn(x) * w).sum()  # noqa: E731
    xg = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(loss(xg), xg)
    assert torch.equal(tx.grad(loss)(x), want)
    assert torch.equal(tx.jit(tx.grad(loss))(x), want)
    # forward mode: torch's jvp applies the same formula to the tangent
    _, want_t = torch.func.jvp(fn, (x,), (w,))
    assert torch.equal(tx.jvp(fn, (x,), (w,))[1], want_t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["atan2"])
def test_binary_gradients_multiply_in_torchs_order(name, dtype):
    # torch's backward formula, (grad * other) * recip for atan2: the tangent is written so that
    # its transpose runs it in that order. (hypot keeps t * (x / out): torch's (grad * x) / out
    # as a transpose needs the tangent (t / out) * x, which overflows at subnormal values, where
    # x / out is 1)
    fn = getattr(torch, name)
    g = torch.Generator().manual_seed(0)
    x, y, w = (torch.randn(4096, generator=g, dtype=dtype) for _ in range(3))
    loss = lambda x, y: (fn(x, y) * w).sum()  # noqa: E731
    xs = [t.clone().requires_grad_() for t in (x, y)]
    want = torch.autograd.grad(loss(*xs), xs)
    for grad in (tx.grad(loss, argnums=(0, 1)), tx.jit(tx.grad(loss, argnums=(0, 1)))):
        for got, ref in zip(grad(x, y), want):
            assert torch.equal(got, ref)


def test_pow_derivatives_at_exponent_zero_and_base_zero_are_torch_s():
    # torch's pow_backward_self is 0 wherever the exponent is 0 and the base 0 or nan, whatever
    # comes in (hypot at (0, 0) before it has a nan tangent: forward mode gives 0, as torch's,
    # and reverse mode hypot's own nan, as torch's); a scalar base 0 with a negative exponent
    # has the exponent derivative out * log(0) = -inf (was nan)
    nan, inf = math.nan, math.inf
    x = torch.tensor([0.0, -0.0, nan, 0.0, nan], dtype=torch.float64)
    y = torch.tensor([0.0, 0.0, 0.0, -0.0, -0.0], dtype=torch.float64)
    for c in (1.0, nan, inf):
        ct = torch.full((5,), c, dtype=torch.float64)
        for fn in (tx.vjp, torch.func.vjp):
            gx, _ = fn(torch.pow, x, y)[1](ct)
            assert torch.equal(gx, torch.zeros(5, dtype=torch.float64)), (fn, c)
        ours = tx.jvp(lambda x: torch.pow(x, y), (x,), (ct,))[1]
        assert torch.equal(ours, torch.func.jvp(lambda x: torch.pow(x, y), (x,), (ct,))[1])
    z, ts = torch.zeros((), dtype=torch.float64), (torch.tensor(-0.79, dtype=torch.float64),) * 3
    hp = lambda a, b, e: torch.hypot(a, b) ** e  # noqa: E731
    assert tx.jvp(hp, (z, z, z), ts)[1] == torch.func.jvp(hp, (z, z, z), ts)[1] == 0
    assert torch.isnan(tx.grad(hp)(z, z, z)) and torch.isnan(torch.func.grad(hp)(z, z, z))
    e = torch.tensor([-1.5, -inf, 0.0, 2.0], dtype=torch.float64)
    for s in (0.0, -0.0):
        f = lambda e, s=s: (torch.pow(s, e) * torch.arange(1.0, 5.0, dtype=e.dtype)).sum()
        want = torch.func.grad(f)(e)
        assert torch.equal(tx.grad(f)(e), want) and torch.equal(want[:2], torch.full((2,), -inf))
