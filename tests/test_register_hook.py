"""Tensor.register_hook under thunderx's reverse mode, against torch.func running the same
function: hooks on computed values and on inputs, their order, remove(), a hook returning None,
under grad, jit(grad), vmap(grad) and vjp; and the clear errors where thunderx cannot run one."""

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx.errors import UnsupportedOperationError

X = torch.linspace(-0.7, 0.9, 6, dtype=torch.float64)
XS = torch.stack([X, 2 * X - 0.3])


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def scaled(x):
    y = x * 2
    y.register_hook(lambda g: g * 3)
    return (y * y.sin()).sum()


def input_clamped(x):
    x.register_hook(lambda g: g.clamp(-1, 1))
    return (x.exp() * x).sum()


def two_in_order(x):
    y = x.sin()
    y.register_hook(lambda g: g * 2)
    y.register_hook(lambda g: g + 1)  # after the first: (g * 2) + 1
    return (y * x).sum()


def removed(x):
    y = x.sin()
    handle = y.register_hook(lambda g: g * 100)
    handle.remove()
    return (y * x).sum()


def returns_none(x):
    seen = []
    y = x * 2
    y.register_hook(lambda g: seen.append(g.shape) or None)
    return (y**2).sum()


def gradient_reversal(x):
    # a domain-adaptation layer: the identity forward, the negated gradient backward
    h = torch.tanh(x * 1.5)
    r = h.clone()
    r.register_hook(lambda g: -0.5 * g)
    return (h**2).sum() + (r * x).sum()


def clone_and_source(x):
    # the clone is a use of h before h's hook: refused (it once went into the clone's list)
    h = torch.tanh(x * 1.5)
    r = h.clone()
    r.register_hook(lambda g: -0.5 * g)
    h.register_hook(lambda g: 3 * g)
    return (h**2).sum() + (r * x).sum()


def used_before(x):
    y = x.sin()
    z = y * 2  # registered after this use: torch's hook sees its gradient too
    v = y[1:4]  # a view made before
    y.register_hook(lambda g: g * 3)
    return (z + y).sum() + (v**2).sum()


CASES = {
    f.__name__: f
    for f in (
        scaled,
        input_clamped,
        two_in_order,
        removed,
        returns_none,
        gradient_reversal,
    )
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hooks_change_the_gradient_as_torch_func(name):
    fn = CASES[name]
    want = tf.grad(fn)(X)
    close(tx.grad(fn)(X), want)
    close(tx.jit(tx.grad(fn))(X), want)
    close(tx.vmap(tx.grad(fn))(XS), tf.vmap(tf.grad(fn))(XS))
    ct = torch.tensor(0.7, dtype=torch.float64)
    close(tx.vjp(fn, X)[1](ct)[0], tf.vjp(fn, X)[1](ct)[0])


def test_hooks_under_jacrev_and_hessian():
    for fn in (scaled, gradient_reversal, input_clamped):
        close(tx.jacrev(fn)(X), tf.jacrev(fn)(X))
        close(tx.hessian(fn)(X), tf.hessian(fn)(X))


def test_a_hook_on_a_value_used_before_it_is_refused():
    for fn in (used_before, clone_and_source):
        with pytest.raises(UnsupportedOperationError, match="already used before the hook"):
            tx.grad(fn)(X)


def test_a_hook_where_no_reverse_mode_runs_is_refused():
    def fn(x):
        y = x * 2
        y.register_hook(lambda g: g * 3)
        return (y * y).sum()

    with pytest.raises(UnsupportedOperationError, match="not differentiated by thunderx"):
        tx.jit(fn)(X.clone().requires_grad_())
    with pytest.raises(UnsupportedOperationError, match="not differentiated by thunderx"):
        tx.vmap(fn)(XS)


def test_a_hook_on_a_constant_is_torchs_error():
    def fn(x):
        c = torch.ones(6, dtype=torch.float64)
        y = c * 2
        y.register_hook(lambda g: g)  # a tracer of no differentiated input: as torch refuses
        return (x * y).sum()

    with pytest.raises((RuntimeError, UnsupportedOperationError)):
        tx.grad(fn)(X)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        tf.grad(fn)(X)
