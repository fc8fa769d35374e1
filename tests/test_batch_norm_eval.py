"""batch_norm in evaluation mode as torch's kernel (primitives/composite_batch_norm_eval.py):
the value is eager torch's bits without jit, under jit (one torch.batch_norm call) and under
vmap; derivatives (from the per-channel formula) agree with torch.autograd and torch.func, and
with float64 finite differences for the running statistics, which torch does not
differentiate."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

AFFINES = {"w and b": (True, True), "w only": (True, False), "b only": (False, True), "none": ()}


def _inputs(dtype, shape=(4, 6, 5, 5), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=dtype) * 3
    c = shape[1]
    mean, w, b = (torch.randn(c, generator=g, dtype=dtype) for _ in range(3))
    var = torch.rand(c, generator=g, dtype=dtype) + 0.5
    return x, mean, var, w, b


def _norm(affine):
    use_w, use_b = (AFFINES[affine] + (False, False))[:2]

    def f(x, mean, var, w, b):
        return F.batch_norm(x, mean, var, w if use_w else None, b if use_b else None)

    return f


@pytest.mark.parametrize("shape", [(4, 6, 5, 5), (4, 6), (3, 6, 7)])
@pytest.mark.parametrize("affine", sorted(AFFINES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_value_is_eager_torchs_bits(dtype, affine, shape):
    x, mean, var, w, b = _inputs(dtype, shape)
    f = _norm(affine)
    want = f(x, mean, var, w, b)
    assert torch.equal(tx.jit(f)(x, mean, var, w, b), want)
    assert torch.equal(
        tx.vmap(f, in_axes=(0, None, None, None, None))(x[None], mean, var, w, b)[0], want
    )
    code = tx.jit(f).lower(x, mean, var, w, b).as_text().split("# execution program")[1]
    assert code.count("torch.batch_norm(") == 1 and "rsqrt" not in code, code


def test_a_module_in_evaluation_mode_under_jit():
    m = torch.nn.BatchNorm2d(6).eval()
    x, mean, var, w, b = _inputs(torch.float32)
    with torch.no_grad():
        for p, v in ((m.running_mean, mean), (m.running_var, var), (m.weight, w), (m.bias, b)):
            p.copy_(v)
    state = {**dict(m.named_parameters()), **dict(m.named_buffers())}
    f = tx.jit(lambda s, x: tx.functional_call(m, s, (x,)))
    assert torch.equal(f(state, x), m(x))


@pytest.mark.parametrize("affine", sorted(AFFINES))
def test_gradients_agree_with_torch_autograd(affine):
    x, mean, var, w, b = _inputs(torch.float32)
    f = _norm(affine)
    ct = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))

    def loss(x, w, b):
        return (torch.sin(f(x, mean, var, w, b)) * ct).sum()

    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(loss(*xs), xs, allow_unused=True, materialize_grads=True)
    for grad in (tx.grad(loss, argnums=(0, 1, 2)), tx.jit(tx.grad(loss, argnums=(0, 1, 2)))):
        for got, ref in zip(grad(x, w, b), want):
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_transforms_agree_with_torch_func():
    dt = torch.float64
    x, mean, var, w, b = _inputs(dt, (5, 3, 4))
    f = _norm("w and b")
    wt = torch.randn(3, 4, generator=torch.Generator().manual_seed(2), dtype=dt)

    def loss(x, w, b):
        return (torch.tanh(f(x[None], mean, var, w, b)[0]) * wt).sum()

    def close(a, b):
        for u, v in zip(torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)):
            torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)

    nums, shared = (0, 1, 2), (0, None, None)
    close(
        tx.jit(tx.vmap(tx.grad(loss, argnums=nums), in_axes=shared))(x, w, b),
        tf.vmap(tf.grad(loss, argnums=nums), in_dims=shared)(x, w, b),
    )
    ws, bs = torch.randn(5, 3, dtype=dt), torch.randn(5, 3, dtype=dt)  # an ensemble
    close(
        tx.vmap(tx.grad(loss, argnums=nums))(x, ws, bs),
        tf.vmap(tf.grad(loss, argnums=nums))(x, ws, bs),
    )
    one = (x[0], w, b)
    for ours, theirs in ((tx.jacfwd, tf.jacfwd), (tx.jacrev, tf.jacrev), (tx.hessian, tf.hessian)):
        close(ours(loss, argnums=nums)(*one), theirs(loss, argnums=nums)(*one))

    # running statistics computed from a differentiated value, not differentiated themselves
    # (forward over reverse with operands whose tangent is zero: a tracer of the enclosing level)
    def detached(x, w, b):
        return F.batch_norm(x, (w * 0.3).detach(), (b * b + 0.5).detach(), w, b).sin().sum()

    close(tx.hessian(detached, argnums=nums)(x, w, b), tf.hessian(detached, argnums=nums)(x, w, b))


def test_derivatives_in_the_running_statistics_are_finite_differences():
    # torch does not differentiate its kernel in them ("not differentiable wrt running_mean");
    # thunderx differentiates the formula (x - mean) / sqrt(var + eps) * w + b
    dt = torch.float64
    x, mean, var, w, b = _inputs(dt, (3, 4, 2))
    wt = torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=dt)

    def loss(mean, var):
        return (torch.sin(F.batch_norm(x, mean, var, w, b)) * wt).sum()

    gm, gv = tx.grad(loss, argnums=(0, 1))(mean, var)
    h = 1e-6
    for k in range(4):
        e = torch.zeros(4, dtype=dt)
        e[k] = h
        fm = (loss(mean + e, var) - loss(mean - e, var)) / (2 * h)
        fv = (loss(mean, var + e) - loss(mean, var - e)) / (2 * h)
        torch.testing.assert_close(gm[k], fm, rtol=1e-6, atol=1e-8)
        torch.testing.assert_close(gv[k], fv, rtol=1e-6, atol=1e-8)
