"""thunderx.lax.custom_linear_solve and custom_root (implicit differentiation, JAX's API) against
independent oracles: torch.func through torch.linalg.solve and through closed forms, float64
finite differences, the dot-product identity for the transpose, a loop for vmap, and JAX's own
custom_linear_solve / custom_root when JAX is installed."""

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx import lax

F64 = torch.float64


def system(n=3, seed=0, spd=False):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g, dtype=F64)
    a = a @ a.T + n * torch.eye(n, dtype=F64) if spd else a + n * torch.eye(n, dtype=F64)
    return a, torch.randn(n, generator=g, dtype=F64)


def dense_solve(a, b, transpose=True):
    """x = A^{-1} b through custom_linear_solve, the solver detached: only the implicit rule can
    give derivatives."""
    return lax.custom_linear_solve(
        lambda x: a @ x,
        b,
        lambda mv, r: torch.linalg.solve(a.detach(), r),
        transpose_solve=(lambda vm, r: torch.linalg.solve(a.detach().T, r)) if transpose else None,
    )


def reference(a, b):
    return torch.linalg.solve(a, b)


def cg(matvec, b, iters=50):
    """Conjugate gradients with lax.while_loop (a run-time trip count, never differentiated)."""
    x = torch.zeros_like(b)
    r = b - matvec(x)

    def cond(c):
        return (c[3] < iters) & (c[1].square().sum() > 1e-28)

    def body(c):
        x, r, p, k = c
        ap = matvec(p)
        alpha = r.square().sum() / (p * ap).sum()
        x2, r2 = x + alpha * p, r - alpha * ap
        beta = r2.square().sum() / r.square().sum()
        return x2, r2, r2 + beta * p, k + 1

    return lax.while_loop(cond, body, (x, r, r, torch.tensor(0)))[0]


def test_derivatives_of_a_solve_match_torch_linalg_solve():
    a, b = system()
    w = torch.randn(3, dtype=F64)
    loss = lambda f: lambda a, b: (f(a, b) * w).sum()  # noqa: E731
    torch.testing.assert_close(dense_solve(a, b), reference(a, b))
    want = tf.grad(loss(reference), argnums=(0, 1))(a, b)
    torch.testing.assert_close(tx.grad(loss(dense_solve), argnums=(0, 1))(a, b), want)
    torch.testing.assert_close(tx.jit(tx.grad(loss(dense_solve), argnums=(0, 1)))(a, b), want)
    torch.testing.assert_close(
        tx.jacfwd(dense_solve, argnums=(0, 1))(a, b), tf.jacrev(reference, argnums=(0, 1))(a, b)
    )
    torch.testing.assert_close(
        tx.jacrev(dense_solve, argnums=(0, 1))(a, b), tf.jacrev(reference, argnums=(0, 1))(a, b)
    )
    torch.testing.assert_close(
        tx.hessian(loss(dense_solve), argnums=(0, 1))(a, b),
        tf.hessian(loss(reference), argnums=(0, 1))(a, b),
    )
    # batched matrices, batched right-hand sides, or both
    a2 = torch.stack([a, system(seed=1)[0]])
    b2 = torch.stack([b, system(seed=2)[1]])
    for axes in ((0, None), (None, 0), (0, 0)):
        args = (a2 if axes[0] == 0 else a, b2 if axes[1] == 0 else b)
        torch.testing.assert_close(
            tx.vmap(dense_solve, in_axes=axes)(*args), tf.vmap(reference, in_dims=axes)(*args)
        )
        torch.testing.assert_close(
            tx.jit(tx.vmap(tx.grad(loss(dense_solve), argnums=(0, 1)), in_axes=axes))(*args),
            tf.vmap(tf.grad(loss(reference), argnums=(0, 1)), in_dims=axes)(*args),
        )


def test_rule_checks_on_a_consistent_system():
    """jvp against float64 central differences, vjp as the transpose of jvp, vmap as a loop."""
    a, b = system(seed=3)
    ta, tb = torch.randn(3, 3, dtype=F64), torch.randn(3, dtype=F64)
    eps = 1e-6
    fd = (dense_solve(a + eps * ta, b + eps * tb) - dense_solve(a - eps * ta, b - eps * tb)) / (
        2 * eps
    )
    _, jv = tx.jvp(dense_solve, (a, b), (ta, tb))
    torch.testing.assert_close(jv, fd, rtol=1e-7, atol=1e-9)
    w = torch.randn(3, dtype=F64)
    _, pullback = tx.vjp(dense_solve, a, b)
    ca, cb = pullback(w)
    torch.testing.assert_close((ca * ta).sum() + (cb * tb).sum(), (w * jv).sum())
    bs = torch.randn(4, 3, dtype=F64)
    loop = torch.stack([dense_solve(a, r) for r in bs])
    torch.testing.assert_close(tx.vmap(dense_solve, in_axes=(None, 0))(a, bs), loop)


def test_an_iterative_symmetric_solver_is_differentiated_implicitly():
    a, b = system(4, seed=4, spd=True)

    def solve(a, b):
        return lax.custom_linear_solve(lambda x: a @ x, b, cg, symmetric=True)

    def loss(f):
        return lambda a, b: f(a, b).square().sum()

    torch.testing.assert_close(solve(a, b), reference(a, b))
    want = tf.grad(loss(reference), argnums=(0, 1))(a, b)
    torch.testing.assert_close(tx.grad(loss(solve), argnums=(0, 1))(a, b), want)
    torch.testing.assert_close(tx.jit(tx.grad(loss(solve), argnums=(0, 1)))(a, b), want)
    torch.testing.assert_close(
        tx.jacfwd(solve, argnums=1)(a, b), tf.jacfwd(reference, argnums=1)(a, b)
    )


def test_pytree_right_hand_sides_and_aux():
    a1, b1 = system(2, seed=5)
    a2, b2 = system(3, seed=6)

    def matvec(x):
        return (a1 @ x[0], a2 @ x[1])

    def solve(mv, r):
        x = (torch.linalg.solve(a1.detach(), r[0]), torch.linalg.solve(a2.detach(), r[1]))
        return x, {"residual": (mv(x)[0] - r[0]).abs().max()}

    def tsolve(vm, r):
        return (torch.linalg.solve(a1.detach().T, r[0]), torch.linalg.solve(a2.detach().T, r[1])), {
            "residual": torch.zeros((), dtype=F64)
        }

    def f(a1, a2, b1, b2):
        x, aux = lax.custom_linear_solve(matvec, (b1, b2), solve, tsolve, has_aux=True)
        return x, aux

    (x1, x2), aux = f(a1, a2, b1, b2)
    torch.testing.assert_close(x1, reference(a1, b1))
    torch.testing.assert_close(x2, reference(a2, b2))
    assert aux["residual"] < 1e-12

    def loss(a1, a2, b1, b2):
        (x1, x2), _ = lax.custom_linear_solve(
            lambda x: (a1 @ x[0], a2 @ x[1]), (b1, b2), solve, tsolve, has_aux=True
        )
        return x1.sum() + x2.square().sum()

    def ref(a1, a2, b1, b2):
        return reference(a1, b1).sum() + reference(a2, b2).square().sum()

    got = tx.grad(loss, argnums=(0, 1, 2, 3))(a1, a2, b1, b2)
    torch.testing.assert_close(got, tf.grad(ref, argnums=(0, 1, 2, 3))(a1, a2, b1, b2))


def test_bad_input_is_a_clear_error():
    a, b = system()
    with pytest.raises(TypeError, match="needs transpose_solve"):
        tx.grad(lambda b: dense_solve(a, b, transpose=False).sum())(b)
    # forward mode needs no transpose
    _, jv = tx.jvp(lambda b: dense_solve(a, b, transpose=False), (b,), (b,))
    torch.testing.assert_close(jv, reference(a, b))
    with pytest.raises(TypeError, match="x must have b's structure"):
        lax.custom_linear_solve(lambda x: a @ x, b, lambda mv, r: (r, r))
    with pytest.raises(TypeError, match="matvec returned the structure"):
        lax.custom_linear_solve(lambda x: (a @ x, x), b, lambda mv, r: r)
    with pytest.raises(TypeError, match="solve must be callable"):
        lax.custom_linear_solve(lambda x: a @ x, b, None)
    with pytest.raises(TypeError, match="b must be a tensor"):
        lax.custom_linear_solve(lambda x: x, [1.0], lambda mv, r: r)
    with pytest.raises(TypeError, match=r"solve returned f64\[2\]"):
        lax.custom_linear_solve(lambda x: a @ x, b, lambda mv, r: r[:2])


def newton_sqrt(theta, a):
    """sqrt(theta * a) as the root of x^2 - theta a, Newton's iteration detached from theta."""

    def f(x):
        return x * x - theta * a

    def solve(f, x0):
        x = x0
        for _ in range(60):
            x = 0.5 * (x + (x * x - f(x)) / x)
        return x.detach()

    return lax.custom_root(f, a.clone(), solve, lambda g, y: y / g(torch.ones_like(y)))


def test_a_root_is_differentiated_in_its_parameters():
    theta = torch.tensor(1.7, dtype=F64)
    a = torch.tensor([0.5, 2.0, 9.0], dtype=F64)

    def ref(t, a):
        return (t * a).sqrt()

    torch.testing.assert_close(newton_sqrt(theta, a), ref(theta, a))
    loss = lambda f: lambda t, a: f(t, a).sum()  # noqa: E731
    want = tf.grad(loss(ref), argnums=(0, 1))(theta, a)
    torch.testing.assert_close(tx.grad(loss(newton_sqrt), argnums=(0, 1))(theta, a), want)
    torch.testing.assert_close(tx.jit(tx.grad(loss(newton_sqrt), argnums=(0, 1)))(theta, a), want)
    torch.testing.assert_close(
        tx.jacfwd(newton_sqrt, argnums=(0, 1))(theta, a), tf.jacfwd(ref, argnums=(0, 1))(theta, a)
    )
    torch.testing.assert_close(
        tx.hessian(loss(newton_sqrt), argnums=(0, 1))(theta, a),
        tf.hessian(loss(ref), argnums=(0, 1))(theta, a),
    )
    thetas = torch.tensor([0.5, 1.0, 3.0], dtype=F64)
    torch.testing.assert_close(
        tx.vmap(tx.grad(loss(newton_sqrt)), in_axes=(0, None))(thetas, a),
        tf.vmap(tf.grad(loss(ref)), in_dims=(0, None))(thetas, a),
    )


def test_a_vector_root_against_the_implicit_function_theorem():
    """x with tanh(W x) + x = c: dx/dc and dx/dW from the theorem with torch.func's Jacobians."""
    g = torch.Generator().manual_seed(7)
    w = torch.randn(3, 3, generator=g, dtype=F64) * 0.4
    c = torch.randn(3, generator=g, dtype=F64)

    def residual(x, w, c):
        return torch.tanh(w @ x) + x - c

    def root(w, c):
        def solve(f, x0):
            x = x0
            for _ in range(50):  # Newton with a dense Jacobian, detached
                j = torch.func.jacfwd(f)(x.detach())
                x = x - torch.linalg.solve(j.detach(), f(x).detach())
            return x.detach()

        def tangent_solve(g, y):
            return torch.linalg.solve(tx.jacfwd(g)(y), y)

        return lax.custom_root(
            lambda x: residual(x, w, c), torch.zeros(3, dtype=F64), solve, tangent_solve
        )

    x = root(w, c)
    torch.testing.assert_close(residual(x, w, c), torch.zeros(3, dtype=F64), atol=1e-12, rtol=0)
    jx = tf.jacrev(residual, argnums=0)(x, w, c)
    jw, jc = tf.jacrev(residual, argnums=(1, 2))(x, w, c)
    want_c = -torch.linalg.solve(jx, jc)
    want_w = -torch.linalg.solve(jx, jw.reshape(3, 9)).reshape(3, 3, 3)
    got_w, got_c = tx.jacrev(root, argnums=(0, 1))(w, c)
    torch.testing.assert_close(got_c, want_c)
    torch.testing.assert_close(got_w, want_w)
    got_w, got_c = tx.jacfwd(root, argnums=(0, 1))(w, c)
    torch.testing.assert_close(got_c, want_c)
    torch.testing.assert_close(got_w, want_w)


def test_root_with_aux_and_bad_input():
    theta = torch.tensor(2.0, dtype=F64)

    def with_aux(t):
        def solve(f, x0):
            x, steps = x0, 0
            while steps < 40:
                x, steps = x - f(x) / (2 * x), steps + 1
            return x.detach(), torch.tensor(steps)

        return lax.custom_root(
            lambda x: x * x - t,
            torch.tensor(1.0, dtype=F64),
            solve,
            lambda g, y: y / g(1.0),
            has_aux=True,
        )

    (x, iters) = with_aux(theta)
    assert int(iters) == 40
    torch.testing.assert_close(x, theta.sqrt())
    torch.testing.assert_close(tx.grad(lambda t: with_aux(t)[0])(theta), 0.5 / theta.sqrt())
    with pytest.raises(TypeError, match="other shapes than the initial guess"):
        lax.custom_root(lambda x: x, torch.ones(2), lambda f, x0: x0[:1], lambda g, y: y)
    with pytest.raises(TypeError, match="tangent_solve must be callable"):
        lax.custom_root(lambda x: x, torch.ones(2), lambda f, x0: x0, 3)


def test_agrees_with_jax():
    jax = pytest.importorskip("jax", reason="JAX not installed: the test extra installs it")
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    a, b = system(seed=8)
    an, bn = a.numpy(), b.numpy()

    def jsolve(a, b):
        return jax.lax.custom_linear_solve(
            lambda x: a @ x,
            b,
            lambda mv, r: jnp.linalg.solve(jax.lax.stop_gradient(a), r),
            transpose_solve=lambda vm, r: jnp.linalg.solve(jax.lax.stop_gradient(a).T, r),
        )

    got = tx.grad(lambda a, b: dense_solve(a, b).square().sum(), argnums=(0, 1))(a, b)
    want = jax.grad(lambda a, b: (jsolve(a, b) ** 2).sum(), argnums=(0, 1))(an, bn)
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_.numpy(), np.asarray(w_), rtol=1e-10)

    def newton(f, x0):  # the same iterations on both sides, reaching t through f
        x = x0
        for _ in range(40):
            x = x - f(x) / (2 * x)
        return x

    def jroot(t):
        return jax.lax.custom_root(lambda x: x * x - t, 1.0, newton, lambda g, y: y / g(1.0))

    def troot(t):
        return lax.custom_root(
            lambda x: x * x - t, torch.tensor(1.0, dtype=F64), newton, lambda g, y: y / g(1.0)
        )

    t = 2.5
    np.testing.assert_allclose(
        float(tx.grad(troot)(torch.tensor(t, dtype=F64))), float(jax.grad(jroot)(t)), rtol=1e-12
    )
    np.testing.assert_allclose(
        float(tx.hessian(troot)(torch.tensor(t, dtype=F64))),
        float(jax.hessian(jroot)(t)),
        rtol=1e-10,
    )


@pytest.mark.parametrize("executor", ["torch", "nvfuser", "inductor"])
def test_user_function_primitives_under_each_executor(executor):
    """linear_solve, pure_callback and custom_vmap_call run their user functions through the
    impl call in every executor's program (nvFuser on CPU: its reference interpreter)."""
    import numpy as np

    a, b = system(seed=9)

    @tx.custom_vmap
    def row_norm(r):
        return r.square().sum()

    row_norm.def_vmap(lambda n, batched, r: (r.square().sum(1), True))

    def f(a, b):
        x = dense_solve(a, b)
        y = tx.pure_callback(
            lambda v: torch.from_numpy(np.tanh(v.numpy())),
            tx.ShapeDtypeStruct(x.shape, F64),
            tx.stop_gradient(x),
        )
        return x.square().sum() + y.sum() + tx.vmap(row_norm)(a).sum()

    def ref(a, b):
        return reference(a, b).square().sum() + a.square().sum()

    got = tx.jit(tx.grad(f, argnums=(0, 1)), executor=executor)(a, b)
    torch.testing.assert_close(got, tf.grad(ref, argnums=(0, 1))(a, b))
    # the callback's value is there, without a derivative
    x = reference(a, b)
    torch.testing.assert_close(tx.jit(f, executor=executor)(a, b), ref(a, b) + torch.tanh(x).sum())
