"""Parts of JAX's transform API beside the core transforms: lax.map's batch_size, linearize's
has_aux, checkpoint_name with the name-based checkpoint policies; against an unbatched loop,
torch.func, and JAX itself when it is installed."""

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx import lax

F64 = torch.float64
P = tx.checkpoint_policies


def f(x):
    return x.sin() * x.sum(), x.max()


@pytest.mark.parametrize("batch_size", [1, 2, 3, 7, 10])
def test_map_with_a_batch_size_matches_the_loop(batch_size):
    xs = torch.randn(7, 3, dtype=F64)
    got = lax.map(f, xs, batch_size=batch_size)
    loop = [torch.stack(v) for v in zip(*[f(x) for x in xs])]
    torch.testing.assert_close(got[0], loop[0])
    torch.testing.assert_close(got[1], loop[1])
    torch.testing.assert_close(tx.jit(lambda v: lax.map(f, v, batch_size=batch_size))(xs), got)
    loss = lambda v: lax.map(f, v, batch_size=batch_size)[0].square().sum()  # noqa: E731
    ref = lambda v: torch.stack([f(x)[0] for x in v]).square().sum()  # noqa: E731
    torch.testing.assert_close(tx.grad(loss)(xs), tf.grad(ref)(xs))
    batch = torch.randn(2, 7, 3, dtype=F64)
    torch.testing.assert_close(tx.vmap(tx.grad(loss))(batch), tf.vmap(tf.grad(ref))(batch))


def test_map_batch_size_errors():
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        lax.map(f, torch.ones(3, 2), batch_size=0)
    with pytest.raises(ValueError, match="one common leading axis"):
        lax.map(lambda a: a[0] + a[1], (torch.ones(3), torch.ones(4)), batch_size=2)


def test_linearize_with_aux():
    x = torch.tensor([0.3, -1.2], dtype=F64)
    y, f_jvp, aux = tx.linearize(
        lambda v: (v.sin().sum(), {"cos": v.cos(), "step": 3}), x, has_aux=True
    )
    torch.testing.assert_close(y, x.sin().sum())
    torch.testing.assert_close(f_jvp(torch.ones(2, dtype=F64)), x.cos().sum())
    assert aux["step"] == 3
    torch.testing.assert_close(aux["cos"], x.cos())
    with pytest.raises(TypeError, match=r"must return a pair \(output, aux\)"):
        tx.linearize(lambda v: v.sin(), x, has_aux=True)


def named_body(x):
    e = tx.checkpoint_name(x.exp(), "e")
    s = tx.checkpoint_name(e.sin(), "s")
    return (s * e).cos().sum()


def ref_body(x):
    return (x.exp().sin() * x.exp()).cos().sum()


def _forward_outputs(policy, x):
    """How many values the forward checkpoint hands to the backward one (its outputs beyond the
    primal)."""
    closed = tx.make_jaxpr(tx.grad(tx.checkpoint(named_body, policy=policy)))(x)
    fwd = [e for e in closed.jaxpr.eqns if e.prim.name == "checkpoint"]
    return len(fwd[0].outputs) - 1 if len(fwd) == 2 else 0


def test_checkpoint_policies_by_name():
    x = torch.randn(4, dtype=F64)
    want = tf.grad(ref_body)(x)
    policies = {
        "none": None,
        "e": P.save_only_these_names("e"),
        "e and s": P.save_only_these_names("e", "s"),
        "all but e": P.save_any_names_but_these("e"),
        "e or dots": P.save_from_both_policies(P.save_only_these_names("e"), P.dots_saveable),
    }
    for pol in policies.values():
        g = tx.checkpoint(named_body, policy=pol)
        torch.testing.assert_close(tx.grad(g)(x), want)
        torch.testing.assert_close(tx.jit(tx.grad(g))(x), want)
        xs = torch.randn(3, 4, dtype=F64)
        torch.testing.assert_close(tx.vmap(tx.grad(g))(xs), tf.vmap(tf.grad(ref_body))(xs))
    # what is saved follows the names: e alone, e and s, s alone (all but e), nothing
    assert _forward_outputs(policies["none"], x) == 0
    assert _forward_outputs(policies["e"], x) == 1
    assert _forward_outputs(policies["e and s"], x) == 2
    assert _forward_outputs(policies["all but e"], x) == 1
    # the tag is the identity everywhere else
    torch.testing.assert_close(tx.jit(named_body)(x), ref_body(x))
    torch.testing.assert_close(tx.hessian(named_body)(x), tf.hessian(ref_body)(x))
    with pytest.raises(TypeError, match="name must be a str"):
        tx.checkpoint_name(x, 3)


def test_dots_with_no_batch_dims():
    w = torch.randn(3, 3, dtype=F64)
    policy = P.dots_with_no_batch_dims_saveable

    def mm(x):
        return (x @ w).tanh().sum()

    def bmm(x):
        return torch.bmm(x, x).tanh().sum()

    x, xb = torch.randn(2, 3, dtype=F64), torch.randn(2, 3, 3, dtype=F64)
    for fn, arg in ((mm, x), (bmm, xb)):
        torch.testing.assert_close(tx.grad(tx.checkpoint(fn, policy=policy))(arg), tf.grad(fn)(arg))
    from thunderx.primitives.linalg import dot_general_p

    assert policy(dot_general_p, dimension_numbers=(((1,), (0,)), ((), ())))
    assert not policy(dot_general_p, dimension_numbers=(((2,), (1,)), ((0,), (0,))))


def test_agrees_with_jax():
    jax = pytest.importorskip("jax", reason="JAX not installed: the test extra installs it")
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    xs = np.random.default_rng(0).standard_normal((7, 3))

    def jf(x):
        return jnp.sin(x) * x.sum()

    got = lax.map(lambda x: x.sin() * x.sum(), torch.from_numpy(xs), batch_size=3)
    np.testing.assert_allclose(got.numpy(), np.asarray(jax.lax.map(jf, xs, batch_size=3)))

    def jbody(x):
        from jax.ad_checkpoint import checkpoint_name as name

        e = name(jnp.exp(x), "e")
        s = name(jnp.sin(e), "s")
        return jnp.cos(s * e).sum()

    x = xs[0]
    jpol = jax.checkpoint_policies.save_only_these_names("e")
    want = jax.grad(jax.checkpoint(jbody, policy=jpol))(x)
    got = tx.grad(tx.checkpoint(named_body, policy=P.save_only_these_names("e")))(
        torch.from_numpy(x)
    )
    np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-12)
    y, f_jvp, aux = jax.linearize(lambda v: (jnp.sin(v).sum(), jnp.cos(v)), x, has_aux=True)
    ty, tf_jvp, taux = tx.linearize(
        lambda v: (v.sin().sum(), v.cos()), torch.from_numpy(x), has_aux=True
    )
    t = np.ones(3)
    np.testing.assert_allclose(tf_jvp(torch.from_numpy(t)).numpy(), np.asarray(f_jvp(t)))
    np.testing.assert_allclose(taux.numpy(), np.asarray(aux))


def test_checkpoint_with_static_arguments():
    """Python values the function branches on, at static_argnums / static_argnames."""

    def power(x, n):
        return x**n if n > 1 else x * 2

    f = tx.checkpoint(power, static_argnums=1)
    x = torch.tensor(2.0, dtype=F64)
    for n in (1, 3):
        want = tf.grad(power)(x, n)
        torch.testing.assert_close(tx.grad(f)(x, n), want)
        torch.testing.assert_close(tx.jit(tx.grad(f), static_argnums=1)(x, n), want)
    xs = torch.tensor([1.0, 2.0], dtype=F64)
    torch.testing.assert_close(tx.vmap(tx.grad(f), in_axes=(0, None))(xs, 3), 3 * xs**2)
    g = tx.checkpoint(
        lambda x, *, mode: x.sin() if mode == "sin" else x.cos(), static_argnames="mode"
    )
    torch.testing.assert_close(tx.grad(lambda v: g(v, mode="sin"))(x), x.cos())
    torch.testing.assert_close(tx.grad(lambda v: g(v, mode="cos"))(x), -x.sin())
    with pytest.raises(ValueError, match="static_argnums 1 is out of range for a call with 1"):
        tx.grad(f)(x)
    with pytest.raises(TypeError, match="static_argnums must be an int or a tuple of ints"):
        tx.checkpoint(power, static_argnums="n")
    jax = pytest.importorskip("jax", reason="JAX not installed: the test extra installs it")
    jax.config.update("jax_enable_x64", True)
    jf = jax.checkpoint(lambda x, n: x**n if n > 1 else x * 2, static_argnums=1)
    assert float(jax.grad(jf)(2.0, 3)) == float(tx.grad(f)(x, 3)) == 12.0
