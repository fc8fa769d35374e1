"""Batch, instance and group norm with their affine in torch's kernels under jit (with a weight
or a bias alone, primitives/composite_channel_affine.py and lang/norms.py): the
generated code calls the kernel eager torch calls, so
the values are eager torch's bit for bit, even where rounding decides a later `trunc` or tie;
gradients are checked against torch.autograd."""

import pytest
import torch
import torch.nn.functional as F

import thunderx as tx

NORMS = {
    "batch_norm": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        "torch.native_batch_norm(",
    ),
    # with a weight: batch norm of x seen as one sample of N * C channels, as torch computes it
    "instance_norm": (
        lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
        "torch.native_batch_norm(",
    ),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), "torch.native_group_norm("),
}
AFFINES = {"w and b": (True, True), "w only": (True, False), "b only": (False, True)}
ARGNUMS = [(0, 1, 2), (0,), (1,), (1, 2), (2,)]


def _inputs(dtype, constant_channel=True):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 5, generator=g, dtype=dtype) * 3
    w = torch.randn(4, generator=g, dtype=dtype)
    b = torch.randn(4, generator=g, dtype=dtype)
    if constant_channel:  # the normalized value is rounding noise there, times a large weight
        x[:, 0], w[0], b[0] = 30.0, 30.0, -30.0
    return x, w, b


def _code(f, *args):
    return tx.jit(f).lower(*args).as_text().split("# execution program")[1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("affine", sorted(AFFINES))
@pytest.mark.parametrize("name", sorted(NORMS))
def test_forward_is_eager_torchs_bits(name, affine, dtype):
    norm, kernel = NORMS[name]
    x, w, b = _inputs(dtype)
    use_w, use_b = AFFINES[affine]
    f = lambda x, w, b: norm(x, w if use_w else None, b if use_b else None)
    code = _code(f, x, w, b)
    assert kernel in code and "mul" not in code and "add" not in code, code
    assert torch.equal(tx.jit(f)(x, w, b), f(x, w, b))
    # what the rounding decides downstream: trunc at the constant channel's -30
    g = lambda x, w, b: torch.trunc(f(x, w, b))
    assert torch.equal(tx.jit(g)(x, w, b), g(x, w, b))


BACKWARDS = {
    "batch_norm": "torch.ops.aten.native_batch_norm_backward.default(",
    "instance_norm": "torch.ops.aten.native_batch_norm_backward.default(",
    "group_norm": "torch.ops.aten.native_group_norm_backward.default(",
}


# (affine, the arguments differentiated): each with at least one differentiable argument
GRAD_CASES = [
    (affine, nums)
    for affine, (use_w, use_b) in sorted(AFFINES.items())
    for nums in {tuple(a for a in wanted if (True, use_w, use_b)[a]) for wanted in ARGNUMS}
    if nums
]


# layer norm over the last dim (patterns_norm.layer_norm_affine), beside the channel norms
WITH_LAYER = {
    **NORMS,
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (5,), w, b), "torch.native_layer_norm("),
}
BACKWARDS["layer_norm"] = "torch.ops.aten.native_layer_norm_backward.default("


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("affine,argnums", sorted(GRAD_CASES))
@pytest.mark.parametrize("name", sorted(WITH_LAYER))
def test_gradients_are_torch_autograds_bits(name, affine, argnums, dtype):
    # the weight's and bias's cotangents come from torch's backward kernel with the weight, as
    # torch.autograd computes them: bit for bit, also at a constant channel (where the
    # normalized value is rounding noise and a product-then-sum rounds differently)
    norm, forward = WITH_LAYER[name]
    x, w, b = _inputs(dtype)
    if name == "layer_norm":  # a constant row of 30s, weight and bias over the last dim
        g = torch.Generator().manual_seed(2)
        w, b = (torch.randn(5, generator=g, dtype=dtype) for _ in range(2))
        x[0, 1], w[0], b[0] = 30.0, 30.0, -30.0
    use_w, use_b = AFFINES[affine]
    ct = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)

    def loss(x, w, b):
        return (torch.sin(norm(x, w if use_w else None, b if use_b else None)) * ct).sum()

    vg = tx.jit(tx.value_and_grad(loss, argnums=argnums))
    code = vg.lower(x, w, b).as_text().split("# execution program")[1]
    # the backward kernel is called where the input's or the weight's cotangent marks the
    # gradient as the norm's (a bias's alone is a sum of a cotangent, like any other)
    kernel = 0 in argnums or (use_w and 1 in argnums)
    if use_w and kernel:  # one forward kernel call, one backward call, no product of the affine
        assert code.count(forward) == 1, code
        assert BACKWARDS[name] in code, code
    value, grads = vg(x, w, b)
    assert torch.equal(value, loss(x, w, b))  # the forward: torch's kernel, its rounding
    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    bitwise = kernel
    if name == "group_norm" and not use_w:
        # torch's group norm backward raises without a weight ("tensor does not have a
        # device"): the bias added outside the norm is the same function
        def loss(x, w, b):  # noqa: F811
            return (torch.sin(F.group_norm(x, 2) + b[:, None]) * ct).sum()

        bitwise = False
    want = torch.autograd.grad(loss(*xs), [xs[a] for a in argnums])
    for got, ref in zip(grads, want):
        if bitwise:
            assert torch.equal(got, ref), (got - ref).abs().max()
        else:  # the bias's cotangent alone has nothing marking it as the norm's: torch.sum
            tol = 1e-5 if dtype == torch.float32 else 1e-12
            torch.testing.assert_close(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["batch_norm", "group_norm"])
def test_the_backward_reads_the_forwards_statistics(name):
    norm, kernel = NORMS[name]
    x, w, b = _inputs(torch.float64, constant_channel=False)
    loss = lambda x, w, b: norm(x, w, b).pow(2).sum()
    grad = tx.jit(tx.grad(loss))
    code = grad.lower(x, w, b).as_text().split("# execution program")[1]
    assert code.count(kernel) == 1 and "_cna_stats" in code, code  # no second statistics pass
    xp = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(loss(xp, w, b), xp)
    torch.testing.assert_close(grad(x, w, b), want, rtol=1e-10, atol=1e-12)


def test_a_weight_made_from_the_normalized_value_is_used_where_it_exists():
    # the affine's weight is computed from the normalized value itself: the kernel call must
    # come after it (it is emitted at the group's last equation)
    def f(x, b):
        y = F.batch_norm(x, None, None, None, None, training=True)
        w = y.abs().mean((0, 2)) + 1.0
        return y * w[None, :, None] + b[None, :, None], w

    x, _, b = _inputs(torch.float64)
    code = _code(f, x, b)
    assert "torch.native_batch_norm(" in code
    got, want = tx.jit(f)(x, b), f(x, b)
    torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-12)
    assert torch.equal(got[1], want[1])


def test_running_buffers_and_vmap_keep_their_own_lowering():
    x, w, b = _inputs(torch.float32, constant_channel=False)
    rm, rv = torch.zeros(4), torch.ones(4)

    def f(x, w, b, rm, rv):
        return F.batch_norm(x, rm, rv, w, b, training=True)

    want_rm, want_rv = rm.clone(), rv.clone()
    want = F.batch_norm(x, want_rm, want_rv, w, b, training=True)
    got = tx.jit(f)(x, w, b, rm, rv)
    assert torch.equal(got, want)
    assert "_bn_train" in _code(f, x, w, b, rm, rv)  # patterns_norm.batch_norm_training
    torch.testing.assert_close((rm, rv), (want_rm, want_rv))  # the update: its own rounding
    for name, (norm, _) in NORMS.items():
        batched = tx.jit(tx.vmap(norm, in_axes=(0, None, None)))(x[:, None], w, b)
        ref = torch.stack([norm(x[i : i + 1], w, b) for i in range(x.shape[0])])
        torch.testing.assert_close(batched, ref, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("name", sorted(NORMS))
def test_forward_mode_where_the_tangents_backward_comes_before_the_affine(name):
    # under jvp the normalization's tangent (its backward kernel applied to t) is computed
    # before the affine's add, where the kernel call is emitted: that backward must not read
    # statistics of a forward the group replaced (group norm's raised a NameError)
    norm, kernel = NORMS[name]
    x, w, b = _inputs(torch.float64, constant_channel=False)
    t = torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=x.dtype)
    f = lambda x: norm(x, w, b)  # noqa: E731
    want_value, want_tangent = torch.func.jvp(f, (x,), (t,))
    jvp = tx.jit(lambda x, t: tx.jvp(f, (x,), (t,)))
    assert kernel in jvp.lower(x, t).as_text()
    value, tangent = jvp(x, t)
    assert torch.equal(value, want_value)  # torch's kernel under jit
    torch.testing.assert_close(tangent, want_tangent, rtol=1e-10, atol=1e-12)
    value, tangent = tx.jvp(f, (x,), (t,))
    torch.testing.assert_close(value, want_value, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(tangent, want_tangent, rtol=1e-10, atol=1e-12)
    hvp = tx.jit(lambda x, t: tx.jvp(tx.grad(lambda x: f(x).pow(2).sum()), (x,), (t,))[1])
    want = torch.func.jvp(torch.func.grad(lambda x: f(x).pow(2).sum()), (x,), (t,))[1]
    torch.testing.assert_close(hvp(x, t), want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("module", [torch.nn.BatchNorm1d, torch.nn.BatchNorm2d])
def test_a_training_norm_modules_gradients_and_buffers_are_torchs(module, dtype):
    # nn.BatchNorm in training updates its running buffers (patterns_norm.batch_norm_training):
    # its parameters' cotangents come from the same backward kernel call
    x, _, _ = _inputs(dtype)
    if module is torch.nn.BatchNorm2d:
        x = x.reshape(3, 4, 5, 1).expand(3, 4, 5, 2).contiguous()
    m = module(4, affine=True, track_running_stats=True).to(dtype)
    with torch.no_grad():
        m.weight.copy_(torch.linspace(-2.0, 30.0, 4))
        m.bias.copy_(torch.linspace(-30.0, 1.0, 4))
    params = {k: v.detach().clone() for k, v in m.named_parameters()}
    buffers = {k: v.detach().clone() for k, v in m.named_buffers()}

    def loss(p, x):
        return tx.functional_call(m, {**p, **buffers}, (x,)).sin().sum()

    grad = tx.jit(tx.grad(loss, argnums=(0, 1)))
    code = grad.lower(params, x).as_text().split("# execution program")[1]
    assert "native_batch_norm_backward" in code and "[True, True, True]" in code, code
    initial = {k: v.clone() for k, v in buffers.items()}
    gp, gx = grad(params, x)
    xs = x.clone().requires_grad_()
    want = torch.autograd.grad(m(xs).sin().sum(), [m.weight, m.bias, xs])
    assert torch.equal(gp["weight"], want[0]) and torch.equal(gp["bias"], want[1])
    assert torch.equal(gx, want[2])
    for k, v in m.named_buffers():  # the running statistics: updated as torch's module did
        torch.testing.assert_close(buffers[k], v, rtol=1e-6, atol=1e-7, msg=k)
    assert not torch.equal(buffers["running_mean"], initial["running_mean"])  # it moved


RMS_DTYPES = [
    (torch.float32, torch.float32),
    (torch.float64, torch.float64),
    (torch.float16, torch.float16),
    (torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float32),
    (torch.float32, torch.float64),
]


@pytest.mark.parametrize("eps", [None, 1e-6])
@pytest.mark.parametrize("dtype,weight_dtype", RMS_DTYPES)
def test_rms_norm_is_torchs_composition(dtype, weight_dtype, eps):
    # torch's rms_norm on CPU is a composition (pow, mean, rsqrt, two products) computed in
    # float32 for half inputs, with float32's epsilon by default, and returned in the input's
    # dtype: values and gradients bit for bit, with and without jit (the square as x * x gave
    # a derivative one ulp off; half inputs were computed in half, 6.9 off at values near 30)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 8, 64, generator=g) * 30).to(dtype)
    w = torch.randn(64, generator=g).to(weight_dtype)

    def f(x, w):
        return F.rms_norm(x, (64,), w, eps=eps)

    want = f(x, w)
    for got in (tx.jit(f)(x, w), tx.vmap(f, in_axes=(0, None))(x, w)):
        assert got.dtype == want.dtype and torch.equal(got, want)

    def loss(x, w):
        return f(x, w).float().sin().sum()

    xs = [t.clone().requires_grad_() for t in (x, w)]
    want = torch.autograd.grad(loss(*xs), xs)
    for grad in (tx.grad(loss, argnums=(0, 1)), tx.jit(tx.grad(loss, argnums=(0, 1)))):
        for got, ref in zip(grad(x, w), want):
            assert got.dtype == ref.dtype and torch.equal(got, ref)


def test_rms_norm_checks_the_normalized_shape():
    with pytest.raises(ValueError, match="rms_norm: normalized_shape"):
        tx.jit(lambda x: F.rms_norm(x, (3,)))(torch.ones(2, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_norm_gradient_whose_forward_value_is_dead(dtype):
    # a loss linear in the norm's output: no affine reads the normalized value under grad, only
    # the backward does; its input's and weight's cotangents still come from torch's kernel
    # with the weight (differential seed 1630628 found jit(grad) 0.2% off there)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 5, generator=g, dtype=dtype) * 3
    x[0, 1] = 30.0
    w, b, ct = (torch.randn(s, generator=g, dtype=dtype) for s in (5, 5, (4, 3, 5)))

    def loss(x, w, b):
        return (F.layer_norm(x, (5,), w, b) * ct).sum()

    grad = tx.jit(tx.grad(loss, argnums=(0, 1, 2)))
    code = grad.lower(x, w, b).as_text().split("# execution program")[1]
    assert "native_layer_norm_backward" in code and "[True, True, True]" in code, code
    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(loss(*xs), xs)
    for got, ref in zip(grad(x, w, b), want):
        assert torch.equal(got, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["batch_norm", "group_norm"])
def test_channel_norm_gradient_whose_forward_value_is_dead(name, dtype):
    # as for layer norm: a loss linear in the norm's output has no affine reading y under grad;
    # the weight comes from the backward's scaled cotangent (_backward_weight)
    norm, _ = NORMS[name]
    x, w, b = _inputs(dtype)
    ct = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)

    def loss(x, w, b):
        return (norm(x, w, b) * ct).sum()

    grad = tx.jit(tx.grad(loss, argnums=(0, 1, 2)))
    code = grad.lower(x, w, b).as_text().split("# execution program")[1]
    assert BACKWARDS[name] in code and "[True, True, True]" in code, code
    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(loss(*xs), xs)
    for got, ref in zip(grad(x, w, b), want):
        assert torch.equal(got, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(NORMS))
def test_an_affine_written_out_after_a_norm_keeps_eager_rounding_under_jit(name, dtype):
    # the user's own product and sum after a norm without an affine: jit computes what eager
    # torch computes (before, jit gave the group back to the kernel, which rounds otherwise)
    norm, _ = NORMS[name]
    x, w, b = _inputs(dtype)

    def f(x, w, b):
        return norm(x, None, None) * w[None, :, None] + b[None, :, None]

    assert torch.equal(tx.jit(f)(x, w, b), f(x, w, b))
    assert torch.equal(tx.jit(f)(x, w, b), tx.vmap(f)(x[None], w[None], b[None])[0])
    assert not torch.equal(norm(x, w, b), f(x, w, b))  # the kernel rounds otherwise
