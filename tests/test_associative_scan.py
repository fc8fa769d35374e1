"""thunderx.lax.associative_scan against independent oracles: torch's cumulative kernels, a
Python loop of the same operation, jax.lax.associative_scan itself (when JAX is installed), and
torch.func for its derivatives and batching."""

import pytest
import torch
import torch.func as tf

import thunderx as tx
import thunderx.lax as lax

F64 = torch.float64


def loop_scan(fn, xs: list, reverse=False):
    """The prefixes one by one (suffixes combined later-first for reverse, as JAX does)."""
    order = list(reversed(range(len(xs)))) if reverse else list(range(len(xs)))
    out, acc = [None] * len(xs), None
    for i in order:
        acc = xs[i] if acc is None else fn(acc, xs[i])
        out[i] = acc
    return out


def affine(a, b):
    """Composition of affine maps x -> m x + c (associative, not commutative): b after a."""
    (m1, c1), (m2, c2) = a, b
    return m2 @ m1, (m2 @ c1.unsqueeze(-1)).squeeze(-1) + c2


@pytest.mark.parametrize("n", range(0, 11))
def test_cumulative_kernels_at_every_length(n):
    x = torch.randn(3, n, 2, dtype=F64)
    for fn, ref in ((torch.add, torch.cumsum), (torch.mul, torch.cumprod)):
        torch.testing.assert_close(lax.associative_scan(fn, x, axis=1), ref(x, 1))
        torch.testing.assert_close(
            lax.associative_scan(fn, x, axis=-2, reverse=True), ref(x.flip(1), 1).flip(1)
        )
    torch.testing.assert_close(
        lax.associative_scan(torch.maximum, x, axis=1), torch.cummax(x, 1).values
    )


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_a_non_commutative_pytree_operation_matches_a_loop(n, reverse):
    g = torch.Generator().manual_seed(n)
    m = torch.randn(n, 3, 3, generator=g, dtype=F64) / 2
    c = torch.randn(n, 3, generator=g, dtype=F64)
    got = lax.associative_scan(affine, (m, c), reverse=reverse)
    want = loop_scan(affine, [(m[i], c[i]) for i in range(n)], reverse)
    torch.testing.assert_close(got[0], torch.stack([w[0] for w in want]))
    torch.testing.assert_close(got[1], torch.stack([w[1] for w in want]))


def linear_recurrence(a, b):
    """h_t = a_t h_{t-1} + b_t as a scan of (a, b) pairs: the parallel form of a linear RNN."""
    return lax.associative_scan(lambda p, q: (q[0] * p[0], q[0] * p[1] + q[1]), (a, b), axis=-1)[1]


def recurrence_loop(a, b):
    h, out = torch.zeros_like(b[..., 0]), []
    for t in range(b.shape[-1]):
        h = a[..., t] * h + b[..., t]
        out.append(h)
    return torch.stack(out, -1)


def test_transforms_of_a_linear_recurrence_match_torch_func_on_the_loop():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(4, 9, generator=g, dtype=F64)
    b = torch.randn(4, 9, generator=g, dtype=F64)

    def loss(f):
        return lambda a, b: (f(a, b) ** 2).sum()

    torch.testing.assert_close(linear_recurrence(a, b), recurrence_loop(a, b))
    torch.testing.assert_close(tx.jit(linear_recurrence)(a, b), recurrence_loop(a, b))
    got = tx.grad(loss(linear_recurrence), argnums=(0, 1))(a, b)
    want = tf.grad(loss(recurrence_loop), argnums=(0, 1))(a, b)
    torch.testing.assert_close(got, want)
    got = tx.jit(tx.vmap(tx.grad(loss(linear_recurrence))))(a, b)
    torch.testing.assert_close(got, tf.vmap(tf.grad(loss(recurrence_loop)))(a, b))
    a1, b1 = a[0, :5], b[0, :5]
    torch.testing.assert_close(
        tx.jacfwd(linear_recurrence)(a1, b1), tf.jacrev(recurrence_loop)(a1, b1)
    )
    torch.testing.assert_close(
        tx.hessian(loss(linear_recurrence))(a1, b1), tf.hessian(loss(recurrence_loop))(a1, b1)
    )
    # under vmap the scanned axis is the example's own
    torch.testing.assert_close(
        tx.vmap(linear_recurrence, in_axes=(1, 1), out_axes=1)(a.T.contiguous(), b.T.contiguous()),
        recurrence_loop(a, b).T,
    )


def test_agrees_with_jax():
    jax = pytest.importorskip("jax", reason="JAX not installed: the test extra installs it")
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    g = torch.Generator().manual_seed(1)
    m = torch.randn(7, 2, 2, generator=g, dtype=F64)
    c = torch.randn(7, 2, generator=g, dtype=F64)
    x = torch.randn(3, 6, 4, generator=g, dtype=F64)

    def jaffine(a, b):
        (m1, c1), (m2, c2) = a, b
        return m2 @ m1, (m2 @ c1[..., None])[..., 0] + c2

    for reverse in (False, True):
        got = lax.associative_scan(affine, (m, c), reverse=reverse)
        want = jax.lax.associative_scan(jaffine, (m.numpy(), c.numpy()), reverse=reverse)
        np.testing.assert_allclose(got[0].numpy(), np.asarray(want[0]), rtol=1e-12)
        np.testing.assert_allclose(got[1].numpy(), np.asarray(want[1]), rtol=1e-12)
        for axis in (0, 1, -1):
            got = lax.associative_scan(torch.mul, x, reverse=reverse, axis=axis)
            # (JAX's reverse scan refuses a negative axis: its own `rev` does)
            want = jax.lax.associative_scan(jax.numpy.multiply, x.numpy(), reverse, axis % 3)
            np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-12)
    # the gradient through the scan, against jax.grad of JAX's scan
    tloss = lambda v: (lax.associative_scan(torch.mul, v, axis=1) ** 2).sum()  # noqa: E731
    jloss = lambda v: (jax.lax.associative_scan(jax.numpy.multiply, v, axis=1) ** 2).sum()  # noqa: E731
    np.testing.assert_allclose(
        tx.grad(tloss)(x).numpy(), np.asarray(jax.grad(jloss)(x.numpy())), rtol=1e-10
    )


def test_bad_input_is_a_clear_error():
    x = torch.randn(4)
    with pytest.raises(ValueError, match="different lengths along axis 0"):
        lax.associative_scan(lambda a, b: a, (x, torch.randn(3)))
    with pytest.raises(ValueError, match="need an axis"):
        lax.associative_scan(torch.add, torch.tensor(1.0))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        lax.associative_scan(torch.add, x, axis=2)
    with pytest.raises(TypeError, match=r"fn returned \(\) for operands of shape \(2,\)"):
        lax.associative_scan(lambda a, b: (a * b).sum(), x)
    with pytest.raises(TypeError, match="fn returned the structure"):
        lax.associative_scan(lambda a, b: (a, b), x)
    with pytest.raises(TypeError, match="leaves must be tensors"):
        lax.associative_scan(torch.add, [1.0, 2.0])
    # the error names the user's line, and tracing state is left as it was
    with pytest.raises(ValueError, match="test_associative_scan.py"):
        tx.jit(lambda v: lax.associative_scan(torch.add, v, axis=3))(x)
    torch.testing.assert_close(tx.jit(lambda v: lax.associative_scan(torch.add, v))(x), x.cumsum(0))
