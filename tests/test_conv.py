"""The convolution kernel's cotangent runs as torch's convolution_backward (one primitive,
`conv_kernel_grad`), under grad, vmap (batch folded into groups) and higher orders; numbers
against torch.func in float64."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import thunderx as tx
from thunderx import core
from thunderx.testing.checks import check_transpose

from .samples import SAMPLES, Draw

D = torch.float64
CONFIGS = [  # stride, padding, dilation, groups
    (1, 0, 1, 1),
    (2, 1, 1, 1),
    (1, 1, 2, 2),
    (2, 0, 1, 2),
]


def _loss(stride, pad, dil, groups):
    def f(w, x):
        return F.conv2d(x, w, stride=stride, padding=pad, dilation=dil, groups=groups).tanh().sum()

    return f


def _args(groups, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, 9, 8, generator=g, dtype=D)
    w = torch.randn(6, 4 // groups, 3, 2, generator=g, dtype=D)
    return w, x


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_kernel_grad_is_convolution_backward_and_matches_torch_func(cfg):
    f = _loss(*cfg)
    w, x = _args(cfg[3])
    jaxpr = str(tx.make_jaxpr(tx.grad(f))(w, x))
    assert "conv_kernel_grad" in jaxpr and "concatenate" not in jaxpr  # no im2col patches
    _close(tx.jit(tx.grad(f))(w, x), tf.grad(f)(w, x))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_per_example_kernel_grads_fold_the_batch_into_groups(cfg):
    f = _loss(*cfg)
    w, x = _args(cfg[3], seed=1)
    per_example = lambda w, x: f(w, x[None])  # noqa: E731
    ours = tx.vmap(tx.grad(per_example), in_axes=(None, 0))
    jaxpr = tx.make_jaxpr(ours)(w, x).jaxpr
    (kg,) = [e for e in jaxpr.eqns if e.prim.name == "conv_kernel_grad"]
    assert kg.params["groups"] == 3 * cfg[3]  # one grouped call for the 3 examples
    _close(tx.jit(ours)(w, x), tf.vmap(tf.grad(per_example), in_dims=(None, 0))(w, x))


@pytest.mark.parametrize("cfg", CONFIGS[:2])
def test_second_order_through_the_kernel_grad(cfg):
    f = _loss(*cfg)
    w, x = _args(cfg[3], seed=2)
    for ours, theirs in (
        (
            tx.grad(lambda w, x: tx.grad(f)(w, x).square().sum()),
            tf.grad(lambda w, x: tf.grad(f)(w, x).square().sum()),
        ),
        (
            tx.grad(lambda w, x: tx.grad(f)(w, x).square().sum(), argnums=1),
            tf.grad(lambda w, x: tf.grad(f)(w, x).square().sum(), argnums=1),
        ),
    ):
        _close(ours(w, x), theirs(w, x))
    t = torch.randn_like(w)
    _close(
        tx.jvp(lambda w: tx.grad(f)(w, x), (w,), (t,))[1],
        tf.jvp(lambda w: tf.grad(f)(w, x), (w,), (t,))[1],
    )


@given(data=st.data())
def test_kernel_grad_transpose_in_the_input(data):
    sample = SAMPLES["conv_kernel_grad"](Draw(data))
    prim = core.primitives["conv_kernel_grad"]
    ct = sample.args[0]

    def f(x):
        return prim.bind(ct, x, **sample.params)

    check_transpose(f, [sample.args[1]])


def test_per_example_grads_of_a_small_cnn_match_torch_func():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 6, 3, padding=1)
    ).double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = torch.randn(5, 1, 1, 10, 10, dtype=D)

    def loss(p, xb):
        return tx.functional_call(model, p, (xb,)).sin().sum()

    def loss_ref(p, xb):
        return tf.functional_call(model, p, (xb,)).sin().sum()

    got = tx.jit(tx.vmap(tx.grad(loss), in_axes=(None, 0)))(params, x)
    want = tf.vmap(tf.grad(loss_ref), in_dims=(None, 0))(params, x)
    for k in params:
        _close(got[k], want[k])


POOLS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=2, dilation=2),
]


@pytest.mark.parametrize("kw", POOLS)
def test_max_pool_runs_torch_kernel_and_routes_ties_like_torch(kw):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 9, 8, generator=g, dtype=D)
    x[0, 0, :3, :3] = 1.0  # ties inside windows: torch sends the gradient to the first
    f = lambda x: F.max_pool2d(x, **kw).sin().sum()  # noqa: E731
    jaxpr = str(tx.make_jaxpr(f)(x))
    assert "max_pool" in jaxpr and "reduce_max" not in jaxpr
    torch.testing.assert_close(tx.jit(f)(x), f(x), rtol=0, atol=0)
    _close(tx.grad(f)(x), tf.grad(f)(x))
    _close(tx.jit(tx.vmap(tx.grad(f)))(x[:, None]), tf.vmap(tf.grad(f))(x[:, None]))
    hess = lambda h: h(lambda v: F.max_pool2d(v, **kw).square().sum())(x[:1, :1])  # noqa: E731
    _close(hess(tx.hessian), hess(tf.hessian))
    values, idx = tx.jit(lambda v: F.max_pool2d(v, **kw, return_indices=True))(x)
    want_values, want_idx = F.max_pool2d(x, **kw, return_indices=True)
    assert torch.equal(idx, want_idx) and torch.equal(values, want_values)


# ------------------------------------------------------------------ the input's cotangent


def _input_loss(stride, pad, dil, groups):
    def f(x, w):
        return F.conv2d(x, w, stride=stride, padding=pad, dilation=dil, groups=groups).tanh().sum()

    return f


@pytest.mark.parametrize("cfg", CONFIGS)
def test_input_grad_is_convolution_backward_and_matches_torch_func(cfg):
    # torch's kernel, not a convolution with a flipped kernel over a zero-dilated cotangent:
    # the same bits as torch.func
    f = _input_loss(*cfg)
    w, x = _args(cfg[3])
    jaxpr = tx.make_jaxpr(tx.grad(f))(x, w).jaxpr
    names = [e.prim.name for e in jaxpr.eqns]
    assert names.count("conv_input_grad") == 1 and names.count("conv") == 1, names
    torch.testing.assert_close(tx.jit(tx.grad(f))(x, w), tf.grad(f)(x, w), rtol=0, atol=0)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_input_grads_under_vmap_of_either_operand(cfg):
    f = _input_loss(*cfg)
    w, x = _args(cfg[3], seed=3)
    per_example = lambda x, w: f(x[None], w)  # noqa: E731
    _close(
        tx.jit(tx.vmap(tx.grad(per_example), in_axes=(0, None)))(x, w),
        tf.vmap(tf.grad(per_example), in_dims=(0, None))(x, w),
    )
    ws = torch.randn((2,) + tuple(w.shape), dtype=D)
    ours = tx.vmap(tx.grad(f), in_axes=(None, 0))
    jaxpr = tx.make_jaxpr(ours)(x, ws).jaxpr
    (ig,) = [e for e in jaxpr.eqns if e.prim.name == "conv_input_grad"]
    assert ig.params["groups"] == 2 * cfg[3]  # the kernels' batch folded into the groups
    _close(tx.jit(ours)(x, ws), tf.vmap(tf.grad(f), in_dims=(None, 0))(x, ws))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_second_order_through_the_input_grad(cfg):
    f = _input_loss(*cfg)
    w, x = _args(cfg[3], seed=4)
    for argnums in (0, 1):
        _close(
            tx.grad(lambda x, w: tx.grad(f)(x, w).square().sum(), argnums=argnums)(x, w),
            tf.grad(lambda x, w: tf.grad(f)(x, w).square().sum(), argnums=argnums)(x, w),
        )
    t = torch.randn_like(x)
    _close(
        tx.jvp(lambda x: tx.grad(f)(x, w), (x,), (t,))[1],
        tf.jvp(lambda x: tf.grad(f)(x, w), (x,), (t,))[1],
    )


@given(data=st.data())
def test_input_grad_transposes_in_each_operand(data):
    sample = SAMPLES["conv_input_grad"](Draw(data))
    prim = core.primitives["conv_input_grad"]
    ct, w = sample.args
    check_transpose(lambda c: prim.bind(c, w, **sample.params), [ct])
    check_transpose(lambda k: prim.bind(ct, k, **sample.params), [w])


# --------------------------------------------------------------------------- average pooling

AVG_POOLS = [
    (2, dict(kernel_size=3, stride=2, padding=1)),
    (2, dict(kernel_size=2)),
    (2, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    (2, dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0), divisor_override=5)),
    (1, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (3, dict(kernel_size=2, stride=1, padding=1, count_include_pad=False)),
]
_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


@pytest.mark.parametrize("case", AVG_POOLS)
def test_avg_pool_and_its_gradient_are_torchs_kernels(case):
    # one forward kernel and one backward kernel (no slice and padded add per window offset):
    # the bits of torch, for values, gradients, per-example gradients, second order and jvp
    n, kw = case
    x = torch.randn((2, 3) + (7,) * n, dtype=D)

    def f(x):
        return _AVG[n](x, **kw).sin().sum()

    names = [e.prim.name for e in tx.make_jaxpr(tx.grad(f))(x).jaxpr.eqns]
    assert "avg_pool_backward" in names and "pad" not in names and "slice" not in names, names
    exact = dict(rtol=0, atol=0)
    torch.testing.assert_close(tx.jit(lambda x: _AVG[n](x, **kw))(x), _AVG[n](x, **kw), **exact)
    torch.testing.assert_close(tx.jit(tx.grad(f))(x), tf.grad(f)(x), **exact)
    per_example = lambda x: f(x[None])  # noqa: E731
    torch.testing.assert_close(
        tx.jit(tx.vmap(tx.grad(per_example)))(x), tf.vmap(tf.grad(per_example))(x), **exact
    )
    _close(
        tx.grad(lambda x: tx.grad(f)(x).square().sum())(x),
        tf.grad(lambda x: tf.grad(f)(x).square().sum())(x),
    )
    t = torch.randn_like(x)
    _close(tx.jvp(f, (x,), (t,))[1], tf.jvp(f, (x,), (t,))[1])


@pytest.mark.parametrize("name", ["avg_pool", "avg_pool_backward"])
@given(data=st.data())
def test_avg_pool_pair_transposes(name, data):
    sample = SAMPLES[name](Draw(data))
    prim = core.primitives[name]
    check_transpose(lambda v: prim.bind(v, **sample.params), list(sample.args))
