"""Composite operations give torch's own numbers: their forward is torch's kernel and their
derivatives torch's backward kernels or formulas, so that gradients equal torch.autograd's bit
for bit (float32 and float64, eager transforms and jit), and half-precision inputs are computed
in float32 as torch's kernels do."""

import math
from functools import partial

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

F32, F64 = torch.float32, torch.float64


def test_silu_and_mish_forward_are_torchs_kernels():
    # torch's silu is x / (1 + exp(-x)), which rounds differently from x * sigmoid(x)
    x = torch.randn(4096) * 6
    for act in (F.silu, F.mish):
        assert torch.equal(tx.jit(act)(x), act(x))
        assert torch.equal(tx.vmap(act)(x.reshape(64, 64)), act(x).reshape(64, 64))


def test_lerp_is_torchs_kernel_and_its_transpose_scales_the_cotangent_once():
    # torch's kernel: s + w (e - s) below |w| = 0.5, e - (e - s)(1 - w) above, fused on its
    # vectorized path; thunderx's forward is bit-equal in eager, jit and vmap
    g = torch.Generator().manual_seed(0)
    s, e = torch.randn(4096, generator=g), torch.randn(4096, generator=g)
    w = torch.rand(4096, generator=g) * 2 - 0.5
    for weight in (0.3, 0.7, w):
        f = lambda s, e: torch.lerp(s, e, weight)  # noqa: E731
        assert torch.equal(tx.jit(f)(s, e), f(s, e))
        want = tf.grad(lambda s, e: f(s, e).sum(), argnums=(0, 1))(s, e)
        got = tx.grad(lambda s, e: f(s, e).sum(), argnums=(0, 1))(s, e)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert torch.equal(
        tx.vmap(torch.lerp)(s.view(64, 64), e.view(64, 64), w.view(64, 64)),
        torch.lerp(s, e, w).view(64, 64),
    )
    # an infinite cotangent (a later overflow): (1 - w) * ct, not ct - w * ct = inf - inf
    x, y = torch.tensor([-0.5, 2.0], dtype=torch.float64), torch.tensor(30.0, dtype=torch.float64)
    h = lambda x, y: torch.cosh(2.0 ** torch.lerp(x, y, 0.3)).sum()  # noqa: E731
    want = tf.grad(h, argnums=(0, 1))(x, y)
    assert torch.isinf(want[0][1]) and torch.isinf(want[1])
    got = tx.grad(h, argnums=(0, 1))(x, y)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert "torch.lerp(" in tx.jit(torch.lerp).lower(s, e, w).as_text()
    # inside a program, where its output could reuse a dead buffer: scalar and tensor weights
    for weight in (0.3, w):
        chain = lambda s, e: torch.lerp(torch.sin(s), e, weight).cos()  # noqa: E731
        assert torch.equal(tx.jit(chain)(s, e), chain(s, e))
        assert torch.equal(
            tx.jit(tx.grad(lambda s: chain(s, e).sum()))(s), tf.grad(lambda s: chain(s, e).sum())(s)
        )


def test_hardswish_is_torchs_kernel_with_torchs_backward_by_piece():
    # torch's kernel rounds (x * clamp(x + 3, 0, 6)) / 6; x * hardsigmoid(x) differs in about
    # a quarter of the entries
    x = torch.randn(8192, generator=torch.Generator().manual_seed(0)) * 4
    assert torch.equal(tx.jit(F.hardswish)(x), F.hardswish(x))
    assert torch.equal(tx.vmap(F.hardswish)(x.view(64, 128)), F.hardswish(x).view(64, 128))
    f = lambda x: (F.hardswish(x) * torch.cos(x)).sum()  # noqa: E731
    want = tf.grad(f)(x)
    for got in (tx.grad(f)(x), tx.jit(tx.grad(f))(x), tx.vmap(tx.grad(f))(x.view(64, 128))):
        assert torch.equal(got.reshape(-1), want)
    assert "torch.nn.functional.hardswish(" in tx.jit(F.hardswish).lower(x).as_text()
    # the pieces at their bounds and beyond, to the second derivative (torch's double backward
    # is 1/3 strictly inside (-3, 3))
    pts = torch.tensor(
        [-math.inf, -4.0, -3.0, -2.9, 0.0, 2.9, 3.0, 4.0, math.inf], dtype=torch.float64
    )
    s = lambda x: F.hardswish(x).sum()  # noqa: E731
    assert torch.equal(tx.grad(s)(pts), tf.grad(s)(pts))
    assert torch.equal(tx.hessian(s)(pts), tf.hessian(s)(pts))
    assert torch.equal(tx.jvp(F.hardswish, (pts,), (torch.ones_like(pts),))[1], tf.grad(s)(pts))
    # the flat piece gets 0 whatever the cotangent: softmax of [hardswish(-5), inf] hands it a
    # nan one (the product rule's 0 * nan gave nan)
    h = lambda x: torch.softmax(torch.stack([F.hardswish(x[0]), x[1]]), 0)[0]  # noqa: E731
    z = torch.tensor([-5.0, math.inf], dtype=torch.float64)
    want = tf.grad(h)(z)
    assert want[0] == 0 and torch.isnan(want[1])
    assert torch.equal(tx.grad(h)(z)[:1], want[:1]) and torch.isnan(tx.grad(h)(z)[1])


def _assert_grad_is_autograds(f, x, batched):
    """thunderx's gradient of the scalar f at x, eager, under jit and under vmap over
    `batched` (x with a batch dim), equals torch.autograd's bit for bit."""
    leaf = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(f(leaf), leaf)
    grad = tx.grad(f)
    for got in (grad(x), tx.jit(grad)(x), tx.vmap(grad)(batched)):
        assert torch.equal(got.reshape(want.shape), want)


def test_binary_cross_entropy_has_torchs_kernel_and_backward_formulas():
    g = torch.Generator().manual_seed(0)
    # 1000 elements: the mean's 1 / n is not a power of two, so torch's order (dividing last)
    # shows
    for dtype in (torch.float32, torch.float64):
        x, t = (
            torch.rand(1000, generator=g, dtype=dtype),
            torch.rand(1000, generator=g, dtype=dtype),
        )
        for reduction in ("sum", "none", "mean"):
            f = lambda x, t: F.binary_cross_entropy(x, t, reduction=reduction)  # noqa: E731
            assert torch.equal(tx.jit(f)(x, t), f(x, t))
            s = lambda x, t: f(x, t).sum()  # noqa: E731
            leaves = x.clone().requires_grad_(), t.clone().requires_grad_()
            want = torch.autograd.grad(s(*leaves), leaves)
            grad = tx.grad(s, argnums=(0, 1))
            batched = tx.vmap(grad)(x[None], t[None])
            for got in (grad(x, t), tx.jit(grad)(x, t), [b[0] for b in batched]):
                assert all(torch.equal(a, b) for a, b in zip(got, want))
    # a saturated sigmoid (x = 0 or 1) and a tiny x: torch clamps the denominator x (1 - x) at
    # 1e-12; the logs' product rule gave nan and -5e29. The target's derivative -logit(x) is
    # unclamped: +-inf there, as torch
    x = torch.tensor([0.0, 1.0, 1e-30, 0.3, 0.9999999], dtype=torch.float64)
    t = torch.tensor([0.5, 0.5, 0.5, 0.3, 0.5], dtype=torch.float64)
    s = lambda x, t: F.binary_cross_entropy(x, t, reduction="sum")  # noqa: E731
    want = tf.grad(s, argnums=(0, 1))(x, t)
    assert torch.isfinite(want[0]).all() and torch.isinf(want[1][:2]).all()
    got = tx.grad(s, argnums=(0, 1))(x, t)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    # second derivatives (torch's double backward adds 1e-12 to x and 1 - x: 2e-5 relative at
    # x = 1 - 1e-7, so points away from the ends)
    x, t = torch.tensor([0.3, 0.7, 0.05], dtype=F64), torch.tensor([0.3, 0.2, 0.9], dtype=F64)
    torch.testing.assert_close(
        tx.hessian(s, argnums=(0, 1))(x, t), tf.hessian(s, argnums=(0, 1))(x, t)
    )
    src = tx.jit(tx.grad(s)).lower(x, t).as_text()
    assert "binary_cross_entropy_backward.default(" in src, src


def test_softplus_is_torchs_kernel_and_its_derivative_softplus_backward():
    # exp and log1p as separate kernels rounded differently from torch's fused one (a quarter
    # of the values and gradients in float32)
    g = torch.Generator().manual_seed(0)
    for dtype in (F32, F64):
        x = torch.randn(4096, generator=g, dtype=dtype) * 10
        for kw in ({}, {"beta": 2.0}, {"beta": 0.5, "threshold": 5.0}):
            fn = partial(F.softplus, **kw)
            f = lambda x, fn=fn: (fn(x) * torch.cos(x)).sum()  # noqa: E731
            assert torch.equal(tx.jit(fn)(x), fn(x)) and torch.equal(tx.vmap(fn)(x), fn(x))
            _assert_grad_is_autograds(f, x, x[:, None])
    # the second derivative is torch's softplus_double_backward: 0 at the threshold itself
    pts = torch.tensor([-100.0, 0.0, 10.0, 19.9, 20.0, 20.5, math.inf, -math.inf], dtype=F64)
    s = lambda x: F.softplus(x).sum()  # noqa: E731
    ours, theirs = tx.hessian(s)(pts), tf.hessian(s)(pts)
    # (torch's s (1 - s) cancels near the threshold: 4e-8 relative at 19.9, where z / (z + 1)^2
    # keeps every digit)
    torch.testing.assert_close(ours, theirs, rtol=1e-7, atol=0)
    assert ours[4, 4] == 0  # x == threshold
    assert "softplus_backward.default(" in tx.jit(tx.grad(s)).lower(pts).as_text()


def test_logsigmoid_is_torchs_kernel_and_its_derivative_log_sigmoid_backward():
    g = torch.Generator().manual_seed(0)
    for dtype in (F32, F64):
        x = torch.randn(4096, generator=g, dtype=dtype) * 10
        f = lambda x: (F.logsigmoid(x) * torch.cos(x)).sum()  # noqa: E731
        assert torch.equal(tx.jit(F.logsigmoid)(x), F.logsigmoid(x))
        _assert_grad_is_autograds(f, x, x[:, None])
    # second derivatives keep their digits where sigmoid saturates (s (1 - s) would lose 3 at
    # -30; torch's double backward loses 5 at 25), -1/4 at 0, 0 at the infinities: against
    # the exact -e^x / (1 + e^x)^2 in 40-digit arithmetic
    import mpmath as mp

    mp.mp.dps = 40
    vals = [-30.0, -21.0, -1.5, 0.0, 1.5, 25.0, 800.0, -800.0]
    exact = torch.tensor([float(-mp.exp(v) / (1 + mp.exp(v)) ** 2) for v in vals], dtype=F64)
    pts = torch.tensor(vals + [math.inf], dtype=F64)
    s = lambda x: F.logsigmoid(x).sum()  # noqa: E731
    ours = tx.hessian(s)(pts)
    torch.testing.assert_close(ours.diagonal()[:-1], exact, rtol=1e-14, atol=0)
    assert ours[-1, -1] == 0 and torch.equal(ours, torch.diag(ours.diagonal()))
    assert "log_sigmoid_backward.default(" in tx.jit(tx.grad(s)).lower(pts).as_text()


def test_the_2_norm_is_torchs_kernel_and_its_gradient_torchs_backward():
    # the kernel's root is correctly rounded; torch.sqrt of the sum of squares is 1 ulp off in
    # about 1% of float64 values on some builds (sqrt(2)), which a later ceil makes a unit
    g = torch.Generator().manual_seed(0)
    for dtype in (F32, F64):
        x = torch.randn(64, 33, generator=g, dtype=dtype)
        for dim in (None, 1, 0, (0, 1)):
            f = partial(torch.linalg.vector_norm, ord=2, dim=dim)
            s = lambda x, f=f: (
                f(x) * torch.linspace(0.5, 2, f(x).numel(), dtype=dtype).reshape(f(x).shape)
            ).sum()  # noqa: E501, E731
            assert torch.equal(tx.jit(f)(x), f(x)) and torch.equal(tx.vmap(f)(x[None])[0], f(x))
            _assert_grad_is_autograds(s, x, x[None])
    a, b = torch.tensor([0.0, 1.0, 1.0], dtype=F64), torch.tensor([0.0, 0.75, 0.75], dtype=F64)
    cos = lambda a, b: torch.ceil(F.cosine_similarity(a, b, dim=0))  # noqa: E731
    assert tx.jit(cos)(a, b) == cos(a, b) == 1.0
    assert torch.equal(tx.vmap(cos)(a[None], b[None]), cos(a, b)[None])
    # the zero vector: 0 in every order (torch's convention)
    n = torch.linalg.vector_norm  # noqa: E731
    z = torch.zeros(3, dtype=F64)
    assert torch.equal(tx.grad(n)(z), tf.grad(n)(z))
    assert torch.equal(tx.hessian(n)(z), torch.zeros(3, 3, dtype=F64))
    x = torch.randn(5, dtype=F64, generator=g)
    torch.testing.assert_close(tx.hessian(n)(x), tf.hessian(n)(x))
    assert "torch.linalg.vector_norm(" in tx.jit(n).lower(x).as_text()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addcmul_addcdiv_are_torchs_kernels(name, dtype):
    # torch's kernels (a fused multiply-add in float32, float32 arithmetic for half types):
    # values bit for bit (x + value * t1 * t2 as three ops differed in a quarter of the float32
    # entries), and gradients as torch's derivative formulas give them
    fn = getattr(torch, name)
    g = torch.Generator().manual_seed(0)
    x, a = (torch.randn(64, 3, generator=g).to(dtype) for _ in range(2))
    b = torch.randn(3, generator=g).to(dtype)  # broadcast
    for value in (1, 0.3, -2.0):
        f = lambda x, a, b: fn(x, a, b, value=value)  # noqa: E731
        want = f(x, a, b)
        for got in (tx.jit(f)(x, a, b), tx.vmap(f, in_axes=(0, 0, None))(x, a, b)):
            assert got.dtype == want.dtype and torch.equal(got, want)
    if dtype in (torch.float16, torch.bfloat16):
        return
    loss = lambda x, a, b: fn(x, a, b, value=0.3).sin().sum()  # noqa: E731
    xs = [t.clone().requires_grad_() for t in (x, a, b)]
    want = torch.autograd.grad(loss(*xs), xs)
    for grad in (tx.grad(loss, argnums=(0, 1, 2)), tx.jit(tx.grad(loss, argnums=(0, 1, 2)))):
        for got, ref in zip(grad(x, a, b), want):
            assert torch.equal(got, ref)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_are_computed_in_float32_as_torchs_kernels(dtype):
    # var, std, sinc, logaddexp, addmm, adaptive_avg_pool2d and the attention's math path in
    # float16/bfloat16: torch computes in float32 and rounds once (lang._base.in_opmath); each
    # primitive rounding to the half type was up to 20x torch's error (var in bfloat16)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 6, 8, generator=g) * 3).to(dtype)
    m = torch.randn(8, 5, generator=g).to(dtype)
    cases = [
        lambda x: torch.var(x, -1, correction=0),
        lambda x: torch.std_mean(x, -1),
        torch.sinc,
        lambda x: torch.logaddexp(x, x.flip(-1)),
        lambda x: torch.addmm(x[0, :, :5], x[0], m),
        lambda x: F.adaptive_avg_pool2d(x[None], (2, 4)),
        lambda x: F.scaled_dot_product_attention(x, x, x, attn_mask=x[..., :6] > 0),
    ]
    for f in cases:
        want, got = f(x), tx.jit(f)(x)
        for w, o in zip(
            want if isinstance(want, tuple) else [want], got if isinstance(got, tuple) else [got]
        ):
            assert o.dtype == w.dtype and torch.equal(o, w), f


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_an_optimizer_step_is_eager_torchs_bits(dtype):
    # Adam's and SGD's updates are torch.add/sub with alpha, addcmul_ and addcdiv_: torch's
    # kernels (one fused multiply-add in float32; float32 arithmetic for half types), where
    # x + alpha * y as two ops differed in up to a quarter of the entries
    g = torch.Generator().manual_seed(0)
    p, m, v, gr = (torch.randn(1000, generator=g).to(dtype) for _ in range(4))
    v = v.abs()

    def step(p, m, v, gr):
        m = m.mul(0.9).add_(gr, alpha=0.1)
        v = v.mul(0.999).addcmul_(gr, gr, value=0.001)
        p = p.clone().addcdiv_(m, v.sqrt().add_(1e-8), value=-1e-3)
        return p.sub(gr, alpha=1e-2), torch.rsub(m, v, alpha=0.5), v

    for got, want in zip(tx.jit(step)(p, m, v, gr), step(p, m, v, gr)):
        assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_bce_with_logits_gradients_are_torchs_bits(reduction, dtype):
    # torch's backward formulas: (sigmoid(x) - y) g and -x g, divided by n last for the mean
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 5, generator=g, dtype=dtype) * 4
    y = torch.rand(64, 5, generator=g, dtype=dtype)
    w = torch.randn(64, 5, generator=g, dtype=dtype) if reduction == "none" else 1.0

    def loss(x, y):
        return (F.binary_cross_entropy_with_logits(x, y, reduction=reduction) * w).sum()

    xs = [t.clone().requires_grad_() for t in (x, y)]
    want = torch.autograd.grad(loss(*xs), xs)
    assert torch.equal(tx.jit(loss)(x, y), loss(x, y))
    for grad in (tx.grad(loss, argnums=(0, 1)), tx.jit(tx.grad(loss, argnums=(0, 1)))):
        for got, ref in zip(grad(x, y), want):
            assert torch.equal(got, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logsumexp_gradient_is_torchs_bits(dtype):
    # torch's logsumexp_backward, grad * exp(x - result), with infinite and nan rows
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 7, generator=g, dtype=dtype) * 3
    w = torch.randn(64, generator=g, dtype=dtype)
    x[0, 0], x[1], x[2, 3] = math.inf, -math.inf, math.nan

    def loss(x):
        return (torch.logsumexp(x, 1) * w).sum()

    xg = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(loss(xg), xg)
    for grad in (tx.grad(loss), tx.jit(tx.grad(loss))):
        assert torch.equal(grad(x).nan_to_num(7.0), want.nan_to_num(7.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logsumexp_forward_mode_is_torchs_bits(dtype):
    # torch's forward formula, sum(exp(x - max) t) / sum(exp(x - max)), in every forward API
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 7, generator=g, dtype=dtype) * 3
    t = torch.randn(64, 7, generator=g, dtype=dtype)
    x[0, 0], x[1], x[2, 3] = math.inf, -math.inf, math.nan

    def f(x):
        return torch.logsumexp(x, -1)

    want = torch.func.jvp(f, (x,), (t,))[1].nan_to_num(7.0)
    for got in (
        tx.jvp(f, (x,), (t,))[1],
        tx.jit(lambda x, t: tx.jvp(f, (x,), (t,))[1])(x, t),
        tx.linearize(f, x)[1](t),
        tx.vmap(lambda x, t: tx.jvp(f, (x,), (t,))[1])(x, t),
    ):
        assert torch.equal(got.nan_to_num(7.0), want)
    # the differential test's finding (seed 3200000): two tied entries of 4e44, where the
    # output rounds to them and exp(x - result) is 1 at each; the derivative splits evenly
    x = torch.tensor([4.1178226419e44, 2.0589113209e44, 4.1178226419e44], dtype=torch.float64)
    t = torch.tensor([1.9134e45, 6.6986e44, 1.2186e45], dtype=torch.float64)
    assert tx.jvp(f, (x,), (t,))[1] == 0.5 * (t[0] + t[2])
    assert torch.equal(tx.jacfwd(f)(x), torch.tensor([0.5, 0.0, 0.5], dtype=torch.float64))


@pytest.mark.parametrize(
    "shape,reps",
    [((3, 4), (2, 1, 3)), ((3, 4), (2, 2)), ((5,), (3, 2, 4)), ((2, 3), (1, 4, 1)), ((), (3,))],
)
def test_repeat_gradient_is_torchs_repeat_backward(shape, reps):
    # torch sums the leading repeats one at a time, then every other repeat (r > 1) at once
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    w = torch.randn(x.repeat(*reps).shape, generator=g)

    def loss(x):
        return (x.repeat(*reps) * w).sum()

    xg = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(loss(xg), xg)
    assert torch.equal(tx.jit(lambda x: x.repeat(*reps))(x), x.repeat(*reps))
    for grad in (tx.grad(loss), tx.jit(tx.grad(loss))):
        assert torch.equal(grad(x), want)


@pytest.mark.parametrize(
    "fn", [F.relu6, lambda v: F.hardtanh(v, -1.0, 0.0), lambda v: F.hardtanh(v, 0.0, 1.0)]
)
def test_hardtanh_keeps_the_input_at_its_bounds_as_torchs_clamp(fn):
    # relu6(-0.0) is -0.0 in torch (max(x, 0) keeps x); atan2 after it told the two apart
    x = torch.tensor([-0.0, 0.0, -1.0, 1.0, 6.0, 7.0, math.nan, 0.5], dtype=F64)
    for ours in (fn, tx.jit(fn), tx.vmap(fn)):
        got = ours(x)
        assert torch.equal(got.nan_to_num(), fn(x).nan_to_num())
        assert torch.equal(got.signbit(), fn(x).signbit())
    # the derivative stays 0 at the bounds, 1 strictly inside (torch's hardtanh_backward; at
    # nan see docs/conventions.md, nan-derivative-by-kernel-path)
    g = lambda v: fn(v).sum()  # noqa: E731
    finite = ~x.isnan()
    assert torch.equal(tx.grad(g)(x)[finite], tf.grad(g)(x)[finite])
