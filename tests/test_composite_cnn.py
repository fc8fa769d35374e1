"""CNN composites (primitives/composite_channel_norm.py, thunderx/lang/norms.py): batch_norm,
group_norm and instance_norm run as torch's kernels with torch's fused backward kernels, and
agree with torch eager, torch.autograd and torch.func."""

from functools import partial

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx
from thunderx.testing import check_grads, check_vmap

_NORMS = {
    "batch_norm": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-3),
        "torch.ops.aten.native_batch_norm_backward.default(",
    ),
    "group_norm": (
        lambda x, w, b: F.group_norm(x, 2, w, b, eps=1e-3),
        "torch.ops.aten.native_group_norm_backward.default(",
    ),
    "instance_norm": (
        lambda x, w, b: F.instance_norm(x, weight=w, bias=b, eps=1e-3),
        "torch.ops.aten.native_batch_norm_backward.default(",
    ),
}


def _inputs(dtype=torch.float32, shape=(3, 4, 5, 2)):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g, dtype=dtype) * 3 + 1
    w = torch.randn(shape[1], generator=g, dtype=dtype)
    b = torch.randn(shape[1], generator=g, dtype=dtype)
    return x, w, b


@pytest.mark.parametrize("name", sorted(_NORMS))
def test_generated_code_calls_the_kernels_and_matches_torch(name):
    f, backward = _NORMS[name]
    x, w, b = _inputs()
    ct = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))

    def loss(x, w, b):
        return (f(x, w, b) * ct).sum()

    grad = tx.jit(tx.grad(loss, argnums=(0, 1, 2)))
    src = grad.lower(x, w, b).as_text()
    assert backward in src, src
    forward = {"group_norm": "torch.native_group_norm("}
    assert forward.get(name, "torch.native_batch_norm(") in tx.jit(f).lower(x, w, b).as_text()
    # the affine inside torch's kernel (composite_channel_affine.py): eager torch's bits
    assert torch.equal(tx.jit(f)(x, w, b), f(x, w, b))
    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(loss(*xs), xs)
    for got, w_ in zip(grad(x, w, b), want):
        torch.testing.assert_close(got, w_)


@pytest.mark.parametrize("name", ["batch_norm", "group_norm"])
def test_reverse_mode_without_affine_has_torch_autograds_bits(name):
    f = _NORMS[name][0]
    x, _, _ = _inputs()
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    xp = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(f(xp, None, None), xp, g)
    _, vjp_fn = tx.vjp(lambda x: f(x, None, None), x)
    assert torch.equal(vjp_fn(g)[0], want)


@pytest.mark.parametrize("name", sorted(_NORMS))
def test_rules_hessian_and_vmap_against_torch_func(name):
    f = _NORMS[name][0]
    x, w, b = _inputs(torch.float64, (2, 4, 3))
    weights = torch.linspace(-1, 1, x.numel(), dtype=x.dtype).reshape(x.shape)

    def scalar(x, w):
        return (f(x, w, b).tanh() * weights).sum()

    # jvp vs finite differences, vjp vs the transposed jvp, to third order
    check_grads(scalar, (x, w), order=3)
    torch.testing.assert_close(tx.hessian(scalar)(x, w), tf.hessian(scalar)(x, w))
    # vmap vs a loop, and per-example gradients vs torch.func
    xs = torch.randn((5,) + x.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(3))
    check_vmap(lambda x: f(x, w, b), (xs,))
    check_vmap(lambda x: tx.grad(scalar)(x, w), (xs,))
    per_example = tx.jit(tx.vmap(tx.grad(scalar, argnums=1), (0, None)))
    want = tf.vmap(tf.grad(scalar, argnums=1), (0, None))(xs, w)
    torch.testing.assert_close(per_example(xs, w), want)


def test_vmap_folds_the_batch_into_the_kernels_own_dims():
    x, w, b = _inputs(shape=(3, 4, 5))
    xs = torch.stack([x, x * 2 + 1, x - 3])

    def f(x):
        return F.batch_norm(x, None, None, w, b, training=True) + F.group_norm(x, 2)

    src = tx.jit(tx.vmap(f)).lower(xs).as_text()
    assert "torch.native_batch_norm(" in src and "torch.native_group_norm(" in src, src
    torch.testing.assert_close(tx.vmap(f)(xs), torch.stack([f(v) for v in xs]))


def test_aten_spellings_return_torchs_statistics():
    x, w, b = _inputs(torch.float64)
    rm, rv = torch.zeros(4, dtype=x.dtype), torch.ones(4, dtype=x.dtype)
    for training in (True, False):
        call = partial(torch.native_batch_norm, training=training, momentum=0.1, eps=1e-5)
        for stats in ((None, None), (rm, rv)) if training else ((rm, rv),):
            # jit writes the running statistics back in training mode, as the kernel does
            mine = tuple(s if s is None else s.clone() for s in stats)
            got = tx.jit(lambda x: call(x, w, b, *mine))(x)
            want = call(x, w, b, *stats)
            for a, e in zip(list(got) + list(mine), list(want) + list(stats)):
                torch.testing.assert_close(a, e)
    got = tx.jit(lambda x: torch.native_group_norm(x, w, b, 3, 4, 10, 2, 1e-5))(x)
    for a, e in zip(got, torch.native_group_norm(x, w, b, 3, 4, 10, 2, 1e-5)):
        torch.testing.assert_close(a, e)

    # the group statistics are differentiable outputs in torch too
    def stats(x):
        _, mean, rstd = torch.native_group_norm(x, None, None, 3, 4, 10, 2, 1e-5)
        return (mean * 2 + rstd).sum()

    torch.testing.assert_close(tx.grad(stats)(x), tf.grad(stats)(x))


def test_eval_mode_uses_the_running_statistics():
    x, w, b = _inputs(torch.float64)
    rm = torch.randn(4, dtype=x.dtype)
    rv = torch.rand(4, dtype=x.dtype) + 0.5

    def f(x, w):
        return F.batch_norm(x, rm, rv, w, b, training=False).sin().sum()

    torch.testing.assert_close(tx.grad(f, argnums=(0, 1))(x, w), tf.grad(f, argnums=(0, 1))(x, w))
    g = lambda x: F.instance_norm(x, rm, rv, w, b, use_input_stats=False)  # noqa: E731
    torch.testing.assert_close(tx.jit(g)(x), g(x))


def test_decompositions_equal_the_kernels_under_the_nvfuser_expansion():
    from thunderx import core
    from thunderx.primitives import composite_channel_norm as KC

    x, _, _ = _inputs(torch.float64)
    g = torch.randn(x.shape, dtype=x.dtype)
    for prim, args, params in [
        (KC.batch_norm_p, (x,), {"eps": 1e-5}),
        (KC.batch_norm_backward_p, (g, x), {"eps": 1e-5}),
        (KC.group_norm_p, (x,), {"groups": 2, "eps": 1e-5}),
        (KC.group_norm_backward_p, (g, x), {"groups": 4, "eps": 1e-5}),
    ]:
        want = prim.bind(*args, **params)
        got = core.decomposition_rules[prim](*args, **params)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_bad_inputs_are_clear_errors():
    x = torch.randn(2, 6, 3)
    with pytest.raises(ValueError, match="divisible"):
        tx.jit(lambda x: F.group_norm(x, 4))(x)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        tx.jit(lambda x: F.batch_norm(x, None, None, training=True))(torch.randn(1, 3))
    with pytest.raises(ValueError, match="running"):
        tx.jit(lambda x: F.instance_norm(x, use_input_stats=False))(x)


# ------------------------------------------------------------------------------ max pooling


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_max_pool3d_with_indices_matches_torch(ceil_mode):
    x = torch.randn(2, 3, 5, 6, 7, dtype=torch.float64)
    kw = dict(kernel_size=(2, 3, 2), stride=(2, 2, 3), padding=(1, 0, 1), ceil_mode=ceil_mode)

    def f(x):
        return F.max_pool3d_with_indices(x, **kw)

    out, idx = tx.jit(f)(x)
    want_out, want_idx = f(x)
    assert torch.equal(out, want_out) and torch.equal(idx, want_idx)
    g = torch.randn(want_out.shape, dtype=x.dtype)
    xp = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(f(xp)[0], xp, g)
    assert torch.equal(tx.vjp(lambda x: f(x)[0], x)[1](g)[0], want)
    check_vmap(lambda x: f(x)[0], (torch.randn(3, 2, 3, 5, 6, 7, dtype=x.dtype),))


@pytest.mark.parametrize("nsp", [2, 3])
def test_max_pool_with_indices_backward_ops_match_torchs_kernels(nsp):
    pool = F.max_pool2d_with_indices if nsp == 2 else F.max_pool3d_with_indices
    op = getattr(torch.ops.aten, f"max_pool{nsp}d_with_indices_backward")
    x = torch.randn((2, 3) + (5,) * nsp, dtype=torch.float64)
    k, s, p, d = [2] * nsp, [1] * nsp, [1] * nsp, [2] * nsp  # overlapping, dilated windows
    out, idx = pool(x, k, s, p, d, return_indices=True)
    g = torch.randn(out.shape, dtype=x.dtype)

    def back(g):
        return op(g, x, k, s, p, d, False, idx)

    torch.testing.assert_close(tx.jit(back)(g), back(g))
    # linear in the gradient: its vjp is the gather at the indices, as torch's
    ct = torch.randn(x.shape, dtype=x.dtype)
    gp = g.clone().requires_grad_()
    (want,) = torch.autograd.grad(back(gp), gp, ct)
    torch.testing.assert_close(tx.vjp(back, g)[1](ct)[0], want)
    check_grads(back, (g,), order=1)
    check_vmap(back, (torch.randn((4,) + g.shape, dtype=x.dtype),))


@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_max_pool_reverse_mode_is_torchs_backward_kernel(nsp):
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nsp]
    kernel = (
        "max_pool3d_with_indices_backward.default("
        if nsp == 3
        else "max_pool2d_with_indices_backward.default("
    )

    def f(x):
        return pool(x, 3, 2, 1, 2, True)  # overlapping, padded, dilated windows, ceil mode

    x = torch.randn((2, 3) + (7,) * nsp)
    g = torch.randn(f(x).shape)
    vjp = tx.jit(lambda x, g: tx.vjp(f, x)[1](g)[0])
    assert f"torch.ops.aten.{kernel}" in vjp.lower(x, g).as_text()
    xp = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(f(xp), xp, g)
    assert torch.equal(vjp(x, g), want)
    # forward mode gathers at the maxima, as torch.func's jvp
    t = torch.randn(x.shape)
    torch.testing.assert_close(tx.jvp(f, (x,), (t,))[1], tf.jvp(f, (x,), (t,))[1])

    # per-example gradients (the kernel's leading dims take the batch) against torch.func
    def loss(x, w):
        return (f(x * w).tanh() ** 2).sum()

    xs, w = torch.randn((4, 3) + (7,) * nsp, dtype=torch.float64), torch.tensor(1.5).double()
    got = tx.jit(tx.vmap(tx.grad(loss), (0, None)))(xs, w)
    torch.testing.assert_close(got, tf.vmap(tf.grad(loss), (0, None))(xs, w))
    check_grads(lambda x: loss(x, w), (xs[0],), order=2)
