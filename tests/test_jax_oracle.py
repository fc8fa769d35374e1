"""JAX itself as the oracle for JAX's transform API: each program is written twice, once in
torch under thunderx's transforms and once in jax.numpy under JAX's, and the two results must
agree in float64 (JAX's x64 mode). This covers what torch.func has no counterpart for (lax's
control flow, collectives over named axes, custom rules composed with other transforms, linear
transposition) and the argument conventions (argnums, has_aux, in_axes/out_axes pytrees).

JAX is the optional extra `thunderx[jax]`, installed by the test set-up; without it this module
is skipped with that reason.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import thunderx as tx
import thunderx.lax as tl

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install 'thunderx[jax]')")
jnp = pytest.importorskip("jax.numpy")
jl = jax.lax
jax.config.update("jax_enable_x64", True)

f64 = torch.float64


def _r(*shape, seed=0):
    return np.random.default_rng(seed + 7 * len(shape) + sum(shape)).standard_normal(shape)


def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a), dtype=f64)


def _agree(ours, theirs, tol=1e-10):
    o = jax.tree_util.tree_leaves(
        jax.tree_util.tree_map(
            lambda t: t.detach().numpy(), ours, is_leaf=lambda t: isinstance(t, torch.Tensor)
        )
    )
    t = jax.tree_util.tree_leaves(theirs)
    assert len(o) == len(t), f"{len(o)} outputs, JAX has {len(t)}"
    for a, b in zip(o, t):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# --- control flow under every transform ------------------------------------------------------


def _rnn(w, lib):
    def step(c, x):
        h = lib.tanh(c @ w + x)
        return h, h * 2

    return step


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_values_and_grads(reverse):
    w, xs, c0 = _r(3, 3), _r(5, 3), _r(3)
    so, sj = _rnn(_t(w), torch), _rnn(w, jnp)
    _agree(tl.scan(so, _t(c0), _t(xs), reverse=reverse), jl.scan(sj, c0, xs, reverse=reverse))

    def fo(c, xs):
        return tl.scan(so, c, xs, reverse=reverse)[1].sum()

    def fj(c, xs):
        return jl.scan(sj, c, xs, reverse=reverse)[1].sum()

    _agree(tx.grad(fo, argnums=(0, 1))(_t(c0), _t(xs)), jax.grad(fj, argnums=(0, 1))(c0, xs))


def test_scan_composed_with_vmap_jacrev_hessian_and_jit():
    w, xs = _r(3, 3), _r(4, 6, 3)
    so, sj = _rnn(_t(w), torch), _rnn(w, jnp)

    def fo(xs):
        return tl.scan(so, torch.zeros(3, dtype=f64), xs)[1].sum()

    def fj(xs):
        return jl.scan(sj, jnp.zeros(3), xs)[1].sum()

    _agree(tx.vmap(tx.grad(fo))(_t(xs)), jax.vmap(jax.grad(fj))(xs))
    _agree(tx.jit(tx.vmap(tx.grad(fo)))(_t(xs)), jax.jit(jax.vmap(jax.grad(fj)))(xs))
    _agree(tx.hessian(fo)(_t(xs[0, :3])), jax.hessian(fj)(xs[0, :3]))
    _agree(
        tx.jacrev(lambda x: tl.scan(so, torch.zeros(3, dtype=f64), x)[0])(_t(xs[0])),
        jax.jacrev(lambda x: jl.scan(sj, jnp.zeros(3), x)[0])(xs[0]),
    )
    c0 = _r(5, 3)  # only the carry batched
    _agree(
        tx.vmap(lambda c: tl.scan(so, c, _t(xs[0])))(_t(c0)),
        jax.vmap(lambda c: jl.scan(sj, c, xs[0]))(c0),
    )


def test_scan_without_xs_and_grad_of_grad():
    def st(c, _):
        return c * 0.9 + 1.0, c

    _agree(tl.scan(st, torch.tensor(1.0, dtype=f64), None, length=4), jl.scan(st, 1.0, None, 4))
    arange = torch.arange(3.0, dtype=f64)

    def fo(x):
        return tl.scan(lambda c, a: (c * torch.sin(a + c), None), x, arange)[0]

    def fj(x):
        return jl.scan(lambda c, a: (c * jnp.sin(a + c), None), x, jnp.arange(3.0))[0]

    _agree(tx.grad(tx.grad(fo))(torch.tensor(0.7, dtype=f64)), jax.grad(jax.grad(fj))(0.7))


def test_fori_loop_and_while_loop():
    x0 = _r(4)
    _agree(
        tx.grad(lambda x: tl.fori_loop(0, 5, lambda i, c: torch.sin(c) * (i + 1), x).sum())(_t(x0)),
        jax.grad(lambda x: jl.fori_loop(0, 5, lambda i, c: jnp.sin(c) * (i + 1), x).sum())(x0),
    )

    def wo(x):
        return tl.while_loop(
            lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.1 + torch.sin(c[1])), (0, x)
        )[1]

    def wj(x):
        return jl.while_loop(
            lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.1 + jnp.sin(c[1])), (0, x)
        )[1]

    ones = np.ones(4)
    _agree(tx.jvp(wo, (_t(x0),), (_t(ones),)), jax.jvp(wj, (x0,), (ones,)))
    _agree(tx.jacfwd(wo)(_t(x0)), jax.jacfwd(wj)(x0))


def test_while_loop_under_vmap_with_a_batched_predicate():
    # each example runs its own number of iterations
    x = np.array([0.5, 3.0, 10.0, 0.1])

    def fo(x):
        return tl.while_loop(lambda c: c[1] < 20.0, lambda c: (c[0] + 1, c[1] * 2 + 0.5), (0, x))

    def fj(x):
        return jl.while_loop(lambda c: c[1] < 20.0, lambda c: (c[0] + 1, c[1] * 2 + 0.5), (0, x))

    _agree(tx.vmap(fo)(_t(x)), jax.vmap(fj)(x))
    ones = np.ones(4)
    _agree(
        tx.jvp(tx.vmap(lambda x: fo(x)[1]), (_t(x),), (_t(ones),)),
        jax.jvp(jax.vmap(lambda x: fj(x)[1]), (x,), (ones,)),
    )


def test_cond_and_switch_under_transforms():
    xs = _r(6)
    _agree(
        tx.vmap(tx.grad(lambda x: tl.cond(x > 0, lambda x: x**3, torch.sin, x)))(_t(xs)),
        jax.vmap(jax.grad(lambda x: jl.cond(x > 0, lambda x: x**3, jnp.sin, x)))(xs),
    )
    # out-of-range indices clamp, as in JAX
    idx = np.array([0, 2, 1, 5, -1, 1])
    _agree(
        tx.vmap(lambda i, x: tl.switch(i, [lambda x: x, lambda x: x * 2, torch.exp], x))(
            torch.tensor(idx), _t(xs)
        ),
        jax.vmap(lambda i, x: jl.switch(i, [lambda x: x, lambda x: x * 2, jnp.exp], x))(idx, xs),
    )

    def fo(x):
        return tl.cond(
            x.sum() > 0, lambda x: (x * 2, x.sum()), lambda x: (torch.sin(x), x.prod()), x
        )

    def fj(x):
        return jl.cond(x.sum() > 0, lambda x: (x * 2, x.sum()), lambda x: (jnp.sin(x), x.prod()), x)

    x, xb = _r(5), _r(6, 5)
    _agree(tx.jacrev(fo)(_t(x)), jax.jacrev(fj)(x))
    _agree(tx.jacfwd(fo)(_t(x)), jax.jacfwd(fj)(x))
    _agree(tx.vmap(tx.jacrev(fo))(_t(xb)), jax.vmap(jax.jacrev(fj))(xb))
    _agree(tx.jit(tx.vmap(fo))(_t(xb)), jax.jit(jax.vmap(fj))(xb))


def test_lax_map_and_checkpoint():
    x = _r(3, 4)
    _agree(tl.map(lambda r: r.sum() * r, _t(x)), jl.map(lambda r: r.sum() * r, x))
    fo = tx.checkpoint(lambda x: torch.exp(torch.sin(x)).sum())
    fj = jax.checkpoint(lambda x: jnp.exp(jnp.sin(x)).sum())
    _agree(tx.vmap(tx.grad(fo))(_t(x)), jax.vmap(jax.grad(fj))(x))
    _agree(tx.jit(tx.hessian(fo))(_t(x[0])), jax.jit(jax.hessian(fj))(x[0]))


# --- collectives over a named vmap axis ------------------------------------------------------


def test_collectives_over_a_named_axis():
    x = _r(4, 3)
    cases = [
        (lambda r: r / tl.psum(r, "i"), lambda r: r / jl.psum(r, "i")),
        (lambda r: r * tl.axis_index("i"), lambda r: r * jl.axis_index("i")),
        (lambda r: tl.all_gather(r, "i").sum(0) * r, lambda r: jl.all_gather(r, "i").sum(0) * r),
        (
            lambda r: tl.ppermute(r, "i", [(0, 1), (1, 2), (2, 3), (3, 0)]),
            lambda r: jl.ppermute(r, "i", [(0, 1), (1, 2), (2, 3), (3, 0)]),
        ),
    ]
    for fo, fj in cases:
        _agree(tx.vmap(fo, axis_name="i")(_t(x)), jax.vmap(fj, axis_name="i")(x))

    def lo(x):
        return tx.vmap(lambda r: (r - tl.pmean(r, "i")) ** 2, axis_name="i")(x).sum()

    def lj(x):
        return jax.vmap(lambda r: (r - jl.pmean(r, "i")) ** 2, axis_name="i")(x).sum()

    _agree(tx.grad(lo)(_t(x)), jax.grad(lj)(x))


# --- argument conventions --------------------------------------------------------------------


def test_vmap_axes_specs():
    a = _r(2, 3, 4)
    _agree(
        tx.vmap(lambda x: x.sum(0), in_axes=2, out_axes=-1)(_t(a)),
        jax.vmap(lambda x: x.sum(0), in_axes=2, out_axes=-1)(a),
    )
    d = {"a": _r(5, 2), "b": _r(2, 5)}
    spec = ({"a": 0, "b": 1},)
    _agree(
        tx.vmap(lambda d: d["a"] * d["b"], in_axes=spec)({k: _t(v) for k, v in d.items()}),
        jax.vmap(lambda d: d["a"] * d["b"], in_axes=spec)(d),
    )
    A, B = _r(3, 4), _r(5, 4)
    _agree(
        tx.vmap(lambda a: (a * 2, torch.tensor(3.0, dtype=f64)), out_axes=(0, None))(_t(A)),
        jax.vmap(lambda a: (a * 2, jnp.asarray(3.0)), out_axes=(0, None))(A),
    )

    def dot(a, b):
        return (a * b).sum()

    _agree(
        tx.vmap(tx.vmap(dot, in_axes=(None, 0)), in_axes=(0, None))(_t(A), _t(B)),
        jax.vmap(jax.vmap(dot, in_axes=(None, 0)), in_axes=(0, None))(A, B),
    )


def test_jacobians_with_argnums_has_aux_and_pytree_outputs():
    x, y = _r(3), _r(2)

    def fo(x, y):
        return {"p": torch.sin(x) * y.sum(), "q": (x[:2] * y).exp()}

    def fj(x, y):
        return {"p": jnp.sin(x) * y.sum(), "q": jnp.exp(x[:2] * y)}

    _agree(tx.jacfwd(fo, argnums=(0, 1))(_t(x), _t(y)), jax.jacfwd(fj, argnums=(0, 1))(x, y))
    _agree(tx.jacrev(fo, argnums=(0, 1))(_t(x), _t(y)), jax.jacrev(fj, argnums=(0, 1))(x, y))

    def go(x, y):
        return (torch.sin(x) * y[0]).sum() * torch.cos(y).prod(), x.sum()

    def gj(x, y):
        return (jnp.sin(x) * y[0]).sum() * jnp.cos(y).prod(), x.sum()

    _agree(
        tx.hessian(go, argnums=(0, 1), has_aux=True)(_t(x), _t(y)),
        jax.hessian(gj, argnums=(0, 1), has_aux=True)(x, y),
    )
    _agree(
        tx.value_and_grad(go, has_aux=True, argnums=1)(_t(x), _t(y)),
        jax.value_and_grad(gj, has_aux=True, argnums=1)(x, y),
    )
    A = _r(3, 4)
    _agree(
        tx.jacrev(tx.vmap(lambda a: torch.sin(a).sum()))(_t(A)),
        jax.jacrev(jax.vmap(lambda a: jnp.sin(a).sum()))(A),
    )
    _agree(
        tx.vmap(tx.hessian(lambda a: (torch.sin(a) * a).sum()))(_t(A)),
        jax.vmap(jax.hessian(lambda a: (jnp.sin(a) * a).sum()))(A),
    )


def test_linearize_vjp_and_linear_transpose():
    x, v = _r(4), _r(4, seed=1)
    yo, lo = tx.linearize(lambda x: torch.sin(x) * x, _t(x))
    yj, lj = jax.linearize(lambda x: jnp.sin(x) * x, x)
    _agree((yo, lo(_t(v))), (yj, lj(v)))
    _, po = tx.vjp(lambda x: (x * 2, x.sum()), _t(x))
    _, pj = jax.vjp(lambda x: (x * 2, x.sum()), x)
    _agree(po((_t(v), torch.tensor(3.0, dtype=f64))), pj((v, 3.0)))
    to = tx.linear_transpose(lambda x: (x[:2] * 3, x.cumsum(0)), _t(x))
    tj = jax.linear_transpose(lambda x: (x[:2] * 3, jnp.cumsum(x)), x)
    a2 = _r(2)
    _agree(to((_t(a2), _t(v))), tj((a2, v)))
    _agree(
        tx.jvp(tx.grad(lambda a: (a**3).sum()), (_t(x),), (_t(v),)),
        jax.jvp(jax.grad(lambda a: (a**3).sum()), (x,), (v,)),
    )
    _agree(
        tx.grad(lambda x: (x * tx.stop_gradient(x)).sum())(_t(x)),
        jax.grad(lambda x: (x * jl.stop_gradient(x)).sum())(x),
    )


def test_custom_rules_composed_with_other_transforms():
    @tx.custom_jvp
    def fo(x):
        return torch.log1p(torch.exp(x))

    @fo.defjvp
    def _fo_jvp(primals, tangents):
        (x,), (dx,) = primals, tangents
        return fo(x), torch.sigmoid(x) * dx

    @jax.custom_jvp
    def fj(x):
        return jnp.log1p(jnp.exp(x))

    @fj.defjvp
    def _fj_jvp(primals, tangents):
        (x,), (dx,) = primals, tangents
        return fj(x), jax.nn.sigmoid(x) * dx

    x, y = _r(5), _r(5, seed=2)
    _agree(tx.hessian(lambda x: fo(x).sum())(_t(x)), jax.hessian(lambda x: fj(x).sum())(x))
    _agree(tx.vmap(tx.grad(fo))(_t(x)), jax.vmap(jax.grad(fj))(x))

    # a deliberately "wrong" backward (2x for the first argument): the rule, not the math
    @tx.custom_vjp
    def ho(x, y):
        return x * y

    ho.defvjp(lambda x, y: (x * y, (x, y)), lambda r, g: (g * r[1] * 2, g * r[0]))

    @jax.custom_vjp
    def hj(x, y):
        return x * y

    hj.defvjp(lambda x, y: (x * y, (x, y)), lambda r, g: (g * r[1] * 2, g * r[0]))
    _agree(
        tx.grad(lambda x, y: ho(x, y).sum(), argnums=(0, 1))(_t(x), _t(y)),
        jax.grad(lambda x, y: hj(x, y).sum(), argnums=(0, 1))(x, y),
    )
    _agree(tx.vmap(tx.grad(ho))(_t(x), _t(y)), jax.vmap(jax.grad(hj))(x, y))
