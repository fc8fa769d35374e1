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
    for kernel in (
        "nll_loss_backward.default(",
        "_log_softmax_backward_data.default(",
        "threshold_backward.",
    ):
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
