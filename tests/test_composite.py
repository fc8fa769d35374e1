"""Composite operations (primitives/composite.py): torch's kernels and fused backward kernels in
the generated code, torch's numbers, decompositions equal to the kernels, rules derived from the
decompositions, and second derivatives against torch.func."""

import math
from functools import partial

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import thunderx as tx
from thunderx import core
from thunderx.ad_util import Zero
from thunderx.primitives import composite as K
from thunderx.testing import check_grads, check_vmap

from .samples import SAMPLES, Draw

F32, F64 = torch.float32, torch.float64

COMPOSITES = sorted(p.name for p in core.decomposition_rules)


def test_the_composites_are_declared_with_decompositions():
    for name in ("relu", "threshold", "gelu", "softmax", "log_softmax", "tanh_backward"):
        assert name in COMPOSITES


# --------------------------------------------------------- the torch.func tutorial's own asserts


def _tutorial_setup():
    # torch.func's "Jacobians, Hessians, hvp, vhp, and more" tutorial, D = 16
    torch.manual_seed(0)
    d = 16
    weight, bias, x = torch.randn(d, d), torch.randn(d), torch.randn(d)

    def predict(weight, bias, x):
        return F.linear(x, weight, bias).tanh()

    unit_vectors = torch.eye(d)
    xp = x.clone().requires_grad_()
    rows = [torch.autograd.grad(predict(weight, bias, xp), xp, v)[0] for v in unit_vectors]
    return predict, weight, bias, x, unit_vectors, torch.stack(rows)


def test_jacobians_tutorial_asserts_hold_at_default_tolerance():
    predict, weight, bias, x, unit_vectors, jacobian = _tutorial_setup()
    _, vjp_fn = tx.vjp(partial(predict, weight, bias), x)
    (ft_jacobian,) = tx.vmap(vjp_fn)(unit_vectors)
    assert torch.allclose(ft_jacobian, jacobian)
    ft_jacobian = tx.jacrev(predict, argnums=2)(weight, bias, x)
    assert torch.allclose(ft_jacobian, jacobian)
    assert torch.allclose(tx.jacfwd(predict, argnums=2)(weight, bias, x), jacobian)
    # with saturated units too, where `1 - y*y` in two float32 ops loses digits
    big = weight * 8
    xp = x.clone().requires_grad_()
    rows = [torch.autograd.grad(predict(big, bias, xp), xp, v)[0] for v in unit_vectors]
    assert torch.allclose(tx.jacrev(predict, argnums=2)(big, bias, x), torch.stack(rows))
    assert torch.allclose(tx.jit(tx.jacrev(predict, argnums=2))(big, bias, x), torch.stack(rows))


@pytest.mark.parametrize(
    "act",
    [torch.tanh, torch.sigmoid, torch.relu, F.gelu, F.silu, F.mish, F.hardswish, F.softplus]
    + [F.logsigmoid, F.elu, F.selu, F.celu],
)
def test_reverse_mode_has_torch_autograds_bits(act):
    torch.manual_seed(1)
    x = torch.randn(64, 32) * 4
    g = torch.randn(64, 32)
    xp = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(act(xp), xp, g)
    _, vjp_fn = tx.vjp(act, x)
    assert torch.equal(vjp_fn(g)[0], want)
    assert torch.equal(tx.jit(lambda x, g: tx.vjp(act, x)[1](g)[0])(x, g), want)


# ------------------------------------------------------------------ generated code shows kernels

_KERNELS = [
    (torch.tanh, "torch.ops.aten.tanh_backward"),
    (torch.sigmoid, "torch.ops.aten.sigmoid_backward"),
    (torch.relu, "torch.ops.aten.threshold_backward"),
    (lambda x: F.threshold(x, 0.5, -1.0), "torch.ops.aten.threshold_backward"),
    (F.gelu, "torch.ops.aten.gelu_backward"),
    (partial(F.gelu, approximate="tanh"), "approximate='tanh'"),
    (F.silu, "torch.ops.aten.silu_backward"),
    (F.mish, "torch.ops.aten.mish_backward"),
    (partial(torch.softmax, dim=-1), "torch.ops.aten._softmax_backward_data"),
    (partial(torch.log_softmax, dim=-1), "torch.ops.aten._log_softmax_backward_data"),
    (partial(F.layer_norm, normalized_shape=(5,)), "torch.ops.aten.native_layer_norm_backward"),
    (
        lambda x: F.cross_entropy(x, torch.tensor([0, 4, 2, 1])).expand(5),
        "torch.ops.aten.nll_loss_backward",
    ),
    (
        lambda x: F.nll_loss(x, torch.tensor([0, 4, -100, 1]), reduction="none")[:, None].expand(
            4, 5
        ),
        "torch.ops.aten.nll_loss_backward",
    ),
]


@pytest.mark.parametrize("fn,kernel", _KERNELS)
def test_generated_grad_calls_the_fused_backward_kernel(fn, kernel):
    x = torch.randn(4, 5)

    def loss(x):
        return (fn(x) * torch.arange(5.0)).sum()

    src = tx.jit(tx.grad(loss)).lower(x).as_text()
    assert kernel in src, src
    torch.testing.assert_close(tx.jit(tx.grad(loss))(x), tf.grad(loss)(x))


@pytest.mark.parametrize(
    "act", [torch.tanh, torch.sigmoid, torch.relu, partial(F.gelu, approximate="tanh")]
)
def test_backward_kernels_write_into_the_dead_gradient_buffer(act):
    # the gradient reaching the activation (a fresh matmul) dies at its backward kernel: the
    # kernel's out= overload writes the result over it instead of allocating
    w1, w2, x = torch.randn(6, 8), torch.randn(8, 3), torch.randn(5, 6)

    def loss(w1, w2, x):
        return (act(x @ w1) @ w2).square().sum()

    f = tx.grad(loss, argnums=(0, 1))
    src = tx.jit(f).lower(w1, w2, x).as_text()
    assert ".grad_input(" in src, src
    torch.testing.assert_close(tx.jit(f)(w1, w2, x), tf.grad(loss, argnums=(0, 1))(w1, w2, x))


def test_generated_forward_calls_the_kernels():
    def f(x):
        return F.log_softmax(F.gelu(torch.relu(x)).softmax(-1), -1)

    src = tx.jit(f).lower(torch.randn(3, 4)).as_text()
    # gelu writes over relu's output, dead after it, through aten's gelu.out
    for call in ("relu", "torch.ops.aten.gelu.out(", "torch.softmax(", "torch.log_softmax("):
        assert call in src, src


@pytest.mark.parametrize("act", [F.silu, F.mish])
def test_an_infinite_cotangent_meets_the_derivative_once(act):
    # x * s(x) by the product rule gives an infinite cotangent to both factors, inf - inf = nan
    # at x < 0; torch's backward kernel multiplies it by the finite derivative: +-inf
    x = torch.tensor([-0.75, -3.0, 0.5, 2.0], dtype=torch.float64)
    ct = torch.tensor([math.inf, -math.inf, math.inf, 1.0], dtype=torch.float64)
    want = tf.vjp(act, x)[1](ct)[0]
    assert torch.isinf(want[:3]).all()
    assert torch.equal(tx.vjp(act, x)[1](ct)[0], want)
    assert torch.equal(tx.jit(lambda x, ct: tx.vjp(act, x)[1](ct)[0])(x, ct), want)


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
    assert "binary_cross_entropy_backward(" in src, src


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
    assert "softplus_backward(" in tx.jit(tx.grad(s)).lower(pts).as_text()


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
    assert "log_sigmoid_backward(" in tx.jit(tx.grad(s)).lower(pts).as_text()


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


def test_vmap_of_grad_keeps_the_kernels_with_their_batch_dims():
    w = torch.randn(6, 5)

    def loss(w, x):
        return torch.log_softmax(torch.relu(x @ w), -1)[0]

    xs = torch.randn(8, 6)
    f = tx.vmap(tx.grad(loss), (None, 0))
    src = tx.jit(f).lower(w, xs).as_text()
    assert "_log_softmax_backward_data" in src and "threshold_backward" in src, src
    torch.testing.assert_close(f(w, xs), tf.vmap(tf.grad(loss), (None, 0))(w, xs))


# ------------------------------------------------------------ decompositions and derived rules


@pytest.mark.parametrize("name", COMPOSITES)
@given(data=st.data())
def test_decomposition_equals_the_kernel(name, data):
    prim = core.primitives[name]
    sample = SAMPLES[name](Draw(data))
    want = prim.bind(*sample.args, **sample.params)
    got = core.decomposition_rules[prim](*sample.args, **sample.params)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", COMPOSITES)
@given(data=st.data())
def test_rules_derived_from_the_decomposition(name, data):
    # the fallbacks a composite without a direct rule gets: jvp and batching of its decomposition
    prim = core.primitives[name]
    sample = SAMPLES[name](Draw(data))
    decomposition = core.decomposition_rules[prim]
    params = sample.params

    def jvp_rule(primals, tangents):
        return K.decomposition_jvp(decomposition, primals, tangents, params)

    gen = torch.Generator().manual_seed(0)
    ts = [
        torch.randn(a.shape, dtype=a.dtype, generator=gen)
        if a.dtype.is_floating_point
        else Zero(core.get_aval(a))
        for a in sample.args
    ]
    _, got = jvp_rule(sample.args, ts)
    _, want = core.jvp_rules[prim](sample.args, ts, **params)
    torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10)
    batched = [
        torch.stack([a, a * 1.1, a * 0.9] if a.dtype.is_floating_point else [a] * 3, 0)
        for a in sample.args
    ]
    out, bdim = K.decomposition_batch(prim, decomposition, batched, [0] * len(batched), params)
    loop = [prim.bind(*[b[i] for b in batched], **params) for i in range(3)]
    if prim.multiple_results:
        for j, (o, d) in enumerate(zip(out, bdim)):
            want = torch.stack([res[j] for res in loop])
            torch.testing.assert_close(o.movedim(d, 0), want, rtol=1e-8, atol=1e-10)
    else:
        torch.testing.assert_close(out.movedim(bdim, 0), torch.stack(loop), rtol=1e-8, atol=1e-10)


# ------------------------------------------------------------ derivatives against torch.func

_FUNCTIONS = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": lambda x: torch.relu(x) * x,
    "threshold": lambda x: F.threshold(x, 0.3, 0.3) * x,
    "gelu": F.gelu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
    "silu": F.silu,
    "mish": F.mish,
    "hardswish": F.hardswish,
    "logsigmoid": F.logsigmoid,
    "softplus": partial(F.softplus, beta=2.0, threshold=1.0),
    "softmax": partial(torch.softmax, dim=1),
    "log_softmax": partial(torch.log_softmax, dim=0),
    "cross_entropy": lambda x: F.cross_entropy(x, torch.tensor([0, 2, 1, 2])),
    "layer_norm": lambda x: F.layer_norm(x, (3,), torch.tensor([1.0, 2, 3], dtype=x.dtype)),
    "layer_norm_2d": lambda x: F.layer_norm(x, (4, 3), eps=1e-3),
}


@pytest.mark.parametrize("name", sorted(_FUNCTIONS))
def test_hessian_matches_torch_func(name):
    f = _FUNCTIONS[name]
    torch.manual_seed(2)
    x = torch.randn(4, 3, dtype=torch.float64)

    def scalar(x):
        return (f(x) * torch.linspace(-1, 1, 12, dtype=x.dtype).reshape(4, 3)).sum()

    torch.testing.assert_close(tx.hessian(scalar)(x), tf.hessian(scalar)(x))
    torch.testing.assert_close(tx.jit(tx.hessian(scalar))(x), tf.hessian(scalar)(x))
    check_grads(scalar, (x,), order=3)
    check_vmap(tx.grad(scalar), (torch.randn(3, 4, 3, dtype=torch.float64),))


def test_per_example_grads_of_an_mlp_match_torch_func():
    torch.manual_seed(3)
    params = [torch.randn(8, 16) * 0.3, torch.randn(16), torch.randn(16, 4) * 0.3]

    def loss(p, x, y):
        h = torch.relu(x @ p[0] + p[1])
        return F.cross_entropy(h @ p[2], y)

    x, y = torch.randn(10, 8), torch.randint(0, 4, (10,))
    f = tx.jit(tx.vmap(tx.grad(loss), (None, 0, 0)))
    got = f(params, x[:, None], y[:, None])
    src = f.lower(params, x[:, None], y[:, None]).as_text()
    for kernel in ("nll_loss_backward(", "_log_softmax_backward_data(", "threshold_backward."):
        assert f"torch.ops.aten.{kernel}" in src, src
    want = tf.vmap(tf.grad(loss), (None, 0, 0))(params, x[:, None], y[:, None])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_bad_gelu_approximation_is_a_clear_error():
    with pytest.raises(ValueError, match="approximate"):
        tx.jit(lambda x: F.gelu(x, approximate="fast"))(torch.randn(3))


def test_nvfuser_fuses_the_decompositions_and_agrees_with_torch():
    from thunderx.executors.decompose import expand_composites

    def loss(x):
        return torch.log_softmax(F.gelu(torch.relu(x), approximate="tanh"), -1).tanh().sum()

    x = torch.randn(4, 5)
    jaxpr = tx.make_jaxpr(tx.grad(loss))(x).jaxpr
    assert any(e.prim in core.decomposition_rules for e in jaxpr.eqns)
    expanded = expand_composites(jaxpr, keep=lambda prim: prim in core.nvfuser_rules)
    assert not any(e.prim in core.decomposition_rules for e in expanded.eqns)
    low = tx.jit(tx.grad(loss)).lower(x, executor="nvfuser").as_text()
    assert "fd.ops.tanh(" in low and "fd.ops.exp(" in low, low
    got = tx.jit(tx.grad(loss), executor="nvfuser")(x)
    torch.testing.assert_close(got, tf.grad(loss)(x))


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
