"""JAX's official transform tutorials, run step by step with thunderx and torch in place of jax
and jax.numpy: "The Autodiff Cookbook", "Custom derivative rules" and "Automatic
vectorization". `jnp.x` becomes `torch.x`, `jax.random` becomes a seeded torch generator and
Python floats become float64 scalars (JAX's x64 mode), everything else as written.

The oracles: the closed forms and printed values the tutorials show, finite differences in
float64, torch.autograd / torch.func on the same inputs, and a Python loop for vmap.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.func as tf

import thunderx as tx
from thunderx.testing import check_grads

f64 = torch.float64


def _t(v) -> torch.Tensor:
    return torch.tensor(v, dtype=f64)


# --- The Autodiff Cookbook --------------------------------------------------------------------


def test_cookbook_grad_of_tanh_and_higher_derivatives():
    x = _t(2.0)
    grad_tanh = tx.grad(torch.tanh)
    t = math.tanh(2.0)
    assert torch.allclose(grad_tanh(x), _t(1 - t * t))  # 0.070650816
    d2 = -2 * t * (1 - t * t)
    d3 = -2 * (1 - t * t) ** 2 + 4 * t * t * (1 - t * t)
    assert torch.allclose(tx.grad(tx.grad(torch.tanh))(x), _t(d2))
    assert torch.allclose(tx.grad(tx.grad(tx.grad(torch.tanh)))(x), _t(d3))


def _logistic_problem():
    def sigmoid(x):
        return 0.5 * (torch.tanh(x / 2) + 1)

    def predict(W, b, inputs):
        return sigmoid(inputs @ W + b)

    inputs = _t([[0.52, 1.12, 0.77], [0.88, -1.08, 0.15], [0.52, 0.06, -1.30], [0.74, -2.49, 1.39]])
    targets = torch.tensor([True, True, False, True])

    def loss(W, b):
        preds = predict(W, b, inputs)
        label_probs = preds * targets + (1 - preds) * (~targets)
        return -torch.sum(torch.log(label_probs))

    g = torch.Generator().manual_seed(0)
    W = torch.randn(3, generator=g, dtype=f64)
    b = torch.randn((), generator=g, dtype=f64)
    return loss, predict, inputs, targets, W, b


def test_cookbook_logistic_regression_gradients():
    loss, _, _, _, W, b = _logistic_problem()
    W_grad = tx.grad(loss, argnums=0)(W, b)
    b_grad = tx.grad(loss, 1)(W, b)
    W_grad2, b_grad2 = tx.grad(loss, (0, 1))(W, b)
    ref_W, ref_b = tf.grad(loss, (0, 1))(W, b)
    assert torch.allclose(W_grad, ref_W) and torch.allclose(b_grad, ref_b)
    assert torch.allclose(W_grad2, ref_W) and torch.allclose(b_grad2, ref_b)

    def loss2(params_dict):
        return loss(params_dict["W"], params_dict["b"])

    grads = tx.grad(loss2)({"W": W, "b": b})
    assert set(grads) == {"W", "b"}
    assert torch.allclose(grads["W"], ref_W) and torch.allclose(grads["b"], ref_b)

    loss_value, (gW, gb) = tx.value_and_grad(loss, (0, 1))(W, b)
    assert torch.allclose(loss_value, loss(W, b))
    assert torch.allclose(gW, ref_W) and torch.allclose(gb, ref_b)

    # "Checking against numerical differences"
    eps = 1e-4
    b_grad_numerical = (loss(W, b + eps / 2.0) - loss(W, b - eps / 2.0)) / eps
    assert torch.allclose(b_grad, b_grad_numerical, rtol=1e-6)
    check_grads(loss, (W, b), order=2)


def test_cookbook_jacobians_hessians_hvp():
    loss, predict, inputs, _, W, b = _logistic_problem()

    def f(W):
        return predict(W, b, inputs)

    J = tx.jacfwd(f)(W)
    assert J.shape == (4, 3)
    assert torch.allclose(J, tx.jacrev(f)(W))
    assert torch.allclose(J, torch.autograd.functional.jacobian(f, W))

    def hessian(f):
        return tx.jacfwd(tx.jacrev(f))

    H = hessian(f)(W)
    assert H.shape == (4, 3, 3)
    assert torch.allclose(H, tf.hessian(f)(W))

    def hvp_rr(f, x, v):
        return tx.grad(lambda x: torch.vdot(tx.grad(f)(x), v))(x)

    def hvp_fr(f, primals, tangents):
        return tx.jvp(tx.grad(f), primals, tangents)[1]

    def hvp_rf(f, primals, tangents):
        g = lambda primals: tx.jvp(f, primals, tangents)[1]  # noqa: E731
        return tx.grad(g)(primals)

    def lw(W):
        return loss(W, b)

    v = torch.randn(3, generator=torch.Generator().manual_seed(1), dtype=f64)
    ref = tf.hessian(lw)(W) @ v
    assert torch.allclose(hvp_rr(lw, W, v), ref)
    assert torch.allclose(hvp_fr(lw, (W,), (v,)), ref)
    assert torch.allclose(hvp_rf(lw, (W,), (v,))[0], ref)

    # "batching HVPs with vmap"
    vs = torch.randn(5, 3, generator=torch.Generator().manual_seed(2), dtype=f64)
    assert torch.allclose(tx.vmap(lambda v: hvp_fr(lw, (W,), (v,)))(vs), vs @ tf.hessian(lw)(W).T)


def test_cookbook_jvp_vjp_and_per_example_gradients():
    loss, predict, inputs, targets, W, b = _logistic_problem()

    def f(W):
        return predict(W, b, inputs)

    v = torch.randn(3, generator=torch.Generator().manual_seed(3), dtype=f64)
    y, u = tx.jvp(f, (W,), (v,))
    ry, ru = tf.jvp(f, (W,), (v,))
    assert torch.allclose(y, ry) and torch.allclose(u, ru)

    y, vjp_fun = tx.vjp(f, W)
    y_bar = torch.ones_like(y)
    (x_bar,) = vjp_fun(y_bar)
    assert torch.allclose(x_bar, tf.vjp(f, W)[1](y_bar)[0])

    def example_loss(W, b, x, t):
        p = torch.sigmoid(x @ W + b)
        return -(t * torch.log(p) + (1 - t) * torch.log(1 - p))

    perex_grads = tx.jit(tx.vmap(tx.grad(example_loss), in_axes=(None, None, 0, 0)))
    tf_targets = targets.to(f64)
    got = perex_grads(W, b, inputs, tf_targets)
    loop = torch.stack([tf.grad(example_loss)(W, b, x, t) for x, t in zip(inputs, tf_targets)])
    assert torch.allclose(got, loop)


def test_cookbook_complex_gradients():
    # torch's convention (the oracle here): grad of a real function of z is the conjugate of
    # JAX's answer, so torch.func gives 6+8j where the cookbook prints 6-8j.
    def f(z):
        x, y = torch.real(z), torch.imag(z)
        return x**2 + y**2

    z = torch.tensor(3.0 + 4.0j, dtype=torch.complex128)
    assert torch.allclose(tx.grad(f)(z), tf.grad(f)(z))
    assert torch.allclose(tx.grad(f)(z), torch.tensor(6.0 + 8.0j, dtype=torch.complex128))

    # holomorphic functions: grad(holomorphic=True) is the complex derivative
    got = tx.grad(torch.sin, holomorphic=True)(z)
    assert torch.allclose(got, torch.cos(z))
    J = tx.jacfwd(torch.sin, holomorphic=True)(torch.stack([z, z * 0.5]))
    assert torch.allclose(J, torch.diag(torch.cos(torch.stack([z, z * 0.5]))))


def test_cookbook_cholesky_covariance():
    # "How it's made: two foundational autodiff functions" uses a covariance's Cholesky factor.
    def f(X):
        cov = X @ X.T + torch.eye(X.shape[0], dtype=f64)
        L = torch.linalg.cholesky(cov)
        return torch.log(torch.diagonal(L)).sum()

    X = torch.randn(4, 3, generator=torch.Generator().manual_seed(4), dtype=f64)
    assert torch.allclose(tx.grad(f)(X), tf.grad(f)(X))
    assert torch.allclose(tx.hessian(f)(X), tf.hessian(f)(X))


# --- Custom derivative rules ------------------------------------------------------------------


def test_custom_jvp_log1pexp():
    def log1pexp_naive(x):
        return torch.log(1.0 + torch.exp(x))

    # the motivating failure: the naive derivative is nan at 100 in float32
    assert torch.isnan(tx.grad(log1pexp_naive)(torch.tensor(100.0)))

    @tx.custom_jvp
    def log1pexp(x):
        return torch.log(1.0 + torch.exp(x))

    @log1pexp.defjvp
    def log1pexp_jvp(primals, tangents):
        (x,), (x_dot,) = primals, tangents
        ans = log1pexp(x)
        ans_dot = (1 - 1 / (1 + torch.exp(x))) * x_dot
        return ans, ans_dot

    assert tx.grad(log1pexp)(torch.tensor(100.0)).item() == 1.0
    x3 = _t(3.0)
    assert torch.allclose(tx.jit(log1pexp)(x3), log1pexp_naive(x3))
    assert torch.allclose(tx.jit(tx.grad(log1pexp))(x3), torch.sigmoid(x3))
    xs = torch.arange(3.0, dtype=f64)
    assert torch.allclose(tx.vmap(tx.jit(tx.grad(log1pexp)))(xs), torch.sigmoid(xs))


def test_custom_jvp_defjvps_and_python_control_flow():
    @tx.custom_jvp
    def f(x):
        return x / (1 + torch.sqrt(x))

    f.defjvps(lambda t, ans, x: ((torch.sqrt(x) + 2) / (2 * (torch.sqrt(x) + 1) ** 2)) * t)
    x = _t(2.0)
    ref = tf.grad(lambda x: x / (1 + torch.sqrt(x)))(x)
    assert torch.allclose(tx.grad(f)(x), ref)

    # "custom_jvp ... with Python control flow": the rule may branch on the value
    @tx.custom_jvp
    def g(x):
        return torch.where(x > 0, x, torch.zeros_like(x))

    @g.defjvp
    def g_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        ans = g(x)
        if x > 0:
            return ans, 2.0 * t
        return ans, 3.0 * t

    assert tx.grad(g)(_t(1.0)).item() == 2.0
    assert tx.grad(g)(_t(-1.0)).item() == 3.0


def test_custom_vjp_clip_gradient():
    @tx.custom_vjp
    def clip_gradient(lo, hi, x):
        return x

    def clip_gradient_fwd(lo, hi, x):
        return x, (lo, hi)

    def clip_gradient_bwd(res, g):
        lo, hi = res
        return (None, None, torch.clamp(g, lo, hi))

    clip_gradient.defvjp(clip_gradient_fwd, clip_gradient_bwd)

    def clip_sin(x):
        x = clip_gradient(-0.75, 0.75, x)
        return torch.sin(x)

    t = torch.linspace(0, 10, 1000, dtype=f64)
    got = tx.vmap(tx.grad(clip_sin))(t)
    assert torch.allclose(got, torch.clamp(torch.cos(t), -0.75, 0.75))


def test_custom_vjp_fixed_point_with_while_loop():
    @partial(tx.custom_vjp, nondiff_argnums=(0,))
    def fixed_point(f, a, x_guess):
        def cond_fun(carry):
            x_prev, x = carry
            return torch.abs(x_prev - x) > 1e-6

        def body_fun(carry):
            _, x = carry
            return x, f(a, x)

        _, x_star = tx.lax.while_loop(cond_fun, body_fun, (x_guess, f(a, x_guess)))
        return x_star

    def fixed_point_fwd(f, a, x_init):
        x_star = fixed_point(f, a, x_init)
        return x_star, (a, x_star)

    def rev_iter(f, packed, u):
        a, x_star, x_star_bar = packed
        _, vjp_x = tx.vjp(partial(f, a), x_star)
        return x_star_bar + vjp_x(u)[0]

    def fixed_point_rev(f, res, x_star_bar):
        a, x_star = res
        _, vjp_a = tx.vjp(lambda a: f(a, x_star), a)
        (a_bar,) = vjp_a(fixed_point(partial(rev_iter, f), (a, x_star, x_star_bar), x_star_bar))
        return a_bar, torch.zeros_like(x_star)

    fixed_point.defvjp(fixed_point_fwd, fixed_point_rev)

    def newton_sqrt(a):
        update = lambda a, x: 0.5 * (x + a / x)  # noqa: E731
        return fixed_point(update, a, a)

    a = _t(2.0)
    assert torch.allclose(newton_sqrt(a), _t(math.sqrt(2.0)))
    assert torch.allclose(tx.grad(newton_sqrt)(a), _t(0.5 / math.sqrt(2.0)), atol=1e-6)
    assert torch.allclose(tx.jit(tx.grad(newton_sqrt))(a), _t(0.5 / math.sqrt(2.0)), atol=1e-6)
    # the second derivative -1/(4 a^1.5) also goes through the custom rule
    assert torch.allclose(tx.grad(tx.grad(newton_sqrt))(a), _t(-0.25 * 2.0**-1.5), atol=1e-5)


# --- Automatic vectorization ------------------------------------------------------------------


def _convolve(x, w):
    output = []
    for i in range(1, len(x) - 1):
        output.append(torch.dot(x[i - 1 : i + 2], w))
    return torch.stack(output)


def test_vectorization_tutorial():
    x = torch.arange(5, dtype=f64)
    w = _t([2.0, 3.0, 4.0])
    assert torch.equal(_convolve(x, w), _t([11.0, 20.0, 29.0]))

    xs = torch.stack([x, x])
    ws = torch.stack([w, w])

    def manually_batched_convolve(xs, ws):
        return torch.stack([_convolve(x, w) for x, w in zip(xs, ws)])

    expected = manually_batched_convolve(xs, ws)
    auto_batch_convolve = tx.vmap(_convolve)
    assert torch.equal(auto_batch_convolve(xs, ws), expected)

    auto_batch_convolve_v2 = tx.vmap(_convolve, in_axes=1, out_axes=1)
    xst, wst = xs.T, ws.T
    assert torch.equal(auto_batch_convolve_v2(xst, wst), expected.T)

    batch_convolve_v3 = tx.vmap(_convolve, in_axes=[0, None])
    assert torch.equal(batch_convolve_v3(xs, w), expected)

    jitted_batch_convolve = tx.jit(auto_batch_convolve)
    assert torch.equal(jitted_batch_convolve(xs, ws), expected)
