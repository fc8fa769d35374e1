"""thunderx.closure_convert with JAX's semantics: the custom-derivatives tutorial's fixed-point
solver differentiated with respect to a value its function closes over, against the closed form
and torch.func on the unrolled iteration; which values are hoisted; bad input."""

from functools import partial

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx import lax

F64 = torch.float64


@partial(tx.custom_vjp, nondiff_argnums=(0,))
def fixed_point(f, a, x_guess):
    """x with x = f(a, x), iterated to convergence (JAX's tutorial solver)."""

    def cond_fun(carry):
        x_prev, x = carry
        return (x_prev - x).abs().max() > 1e-14

    def body_fun(carry):
        _, x = carry
        return x, f(a, x)

    return lax.while_loop(cond_fun, body_fun, (x_guess, f(a, x_guess)))[1]


def _fixed_point_fwd(f, a, x_guess):
    x_star = fixed_point(f, a, x_guess)
    return x_star, (a, x_star)


def _fixed_point_bwd(f, res, x_star_bar):
    a, x_star = res
    _, vjp_a = tx.vjp(lambda a: f(a, x_star), a)
    u = fixed_point(partial(_rev_iter, f), (a, x_star, x_star_bar), x_star_bar)
    (a_bar,) = vjp_a(u)
    return a_bar, torch.zeros_like(x_star)


def _rev_iter(f, packed, u):
    a, x_star, x_star_bar = packed
    _, vjp_x = tx.vjp(lambda x: f(a, x), x_star)
    return x_star_bar + vjp_x(u)[0]


fixed_point.defvjp(_fixed_point_fwd, _fixed_point_bwd)


def scaled_sqrt(theta, a):
    """sqrt(theta * a) by Newton's iteration, theta closed over by the iterated function."""

    def newton(a, x):
        return 0.5 * (x + theta * a / x)

    fn, consts = tx.closure_convert(newton, a, a)
    return fixed_point(lambda p, x: fn(p[0], x, *p[1]), (a, consts), a)


def unrolled(theta, a, steps=60):
    x = a
    for _ in range(steps):
        x = 0.5 * (x + theta * a / x)
    return x


def test_a_fixed_point_differentiated_in_a_closed_over_value():
    theta = torch.tensor(1.7, dtype=F64)
    a = torch.tensor([0.5, 2.0, 9.0], dtype=F64)
    torch.testing.assert_close(scaled_sqrt(theta, a), (theta * a).sqrt())
    loss = lambda t, a: scaled_sqrt(t, a).sum()  # noqa: E731
    closed_form = (a / (2 * (theta * a).sqrt())).sum()
    torch.testing.assert_close(tx.grad(loss)(theta, a), closed_form)
    oracle = tf.grad(lambda t, a: unrolled(t, a).sum(), argnums=(0, 1))(theta, a)
    torch.testing.assert_close(tx.grad(loss, argnums=(0, 1))(theta, a), oracle)
    torch.testing.assert_close(tx.jit(tx.grad(loss))(theta, a), closed_form)
    thetas = torch.tensor([0.5, 1.0, 3.0], dtype=F64)
    torch.testing.assert_close(
        tx.vmap(tx.grad(loss), in_axes=(0, None))(thetas, a),
        tf.vmap(tf.grad(lambda t, a: unrolled(t, a).sum()), in_dims=(0, None))(thetas, a),
    )


def test_without_conversion_the_closed_over_value_has_left_its_transform():
    """The backward rule runs after the forward's trace of theta ended: as in JAX, a clear
    escaped-tracer error at the line that uses it, which closure_convert avoids."""

    def direct(theta, a):
        return fixed_point(lambda a, x: 0.5 * (x + theta * a / x), a, a).sum()

    with pytest.raises(tx.errors.UnexpectedTracerError, match="test_closure_convert.py"):
        tx.grad(direct)(torch.tensor(1.7, dtype=F64), torch.tensor([2.0], dtype=F64))


def test_only_floating_point_traced_values_are_hoisted():
    seen = {}
    k = torch.tensor([2, 3])  # a concrete tensor stays closed over

    def f(y, n):
        def g(x):
            return x * y + n * k  # n: an integer traced value, stays closed over too

        fn, consts = tx.closure_convert(g, torch.ones(2))
        seen["consts"] = len(consts)
        return fn(torch.full((2,), 2.0), *consts).sum()

    y = torch.tensor(1.5)
    assert tx.grad(f)(y, torch.tensor(4)) == 4.0
    assert seen["consts"] == 1
    assert tx.jit(f)(y, torch.tensor(4)) == 26.0  # (2 * 1.5 + 4 * k).sum()
    assert seen["consts"] == 1
    fn, consts = tx.closure_convert(lambda x: x * y, torch.ones(2))
    assert consts == []  # nothing traced outside a transform


def test_agrees_with_jax_on_what_is_hoisted():
    jax = pytest.importorskip("jax", reason="JAX not installed: the test extra installs it")

    counts = {}

    def jf(y):
        fn, consts = jax.closure_convert(lambda x: x * y + 2.0, 1.0)
        counts["jax"] = len(consts)
        return fn(3.0, *consts)

    def tf_(y):
        fn, consts = tx.closure_convert(lambda x: x * y + 2.0, torch.tensor(1.0))
        counts["thunderx"] = len(consts)
        return fn(torch.tensor(3.0), *consts)

    assert float(jax.grad(jf)(1.5)) == float(tx.grad(tf_)(torch.tensor(1.5))) == 3.0
    assert counts["jax"] == counts["thunderx"] == 1


def test_bad_input_is_a_clear_error():
    fn, consts = tx.closure_convert(lambda x, y: x + y, torch.ones(2), torch.ones(2))
    with pytest.raises(TypeError, match="takes 2 argument"):
        fn(torch.ones(2))
    with pytest.raises(TypeError, match="traced for arguments of structure"):
        fn((torch.ones(2), torch.ones(2)), torch.ones(2))
    with pytest.raises(TypeError, match="fun must be callable"):
        tx.closure_convert(3, torch.ones(2))
    with pytest.raises(TypeError, match="example arguments must be tensors"):
        tx.closure_convert(lambda x: x, "text")
