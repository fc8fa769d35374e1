"""custom_jvp / custom_vjp with JAX's semantics: only the rule runs under differentiation, defjvps,
nondiff_argnums, and the rules' outputs checked against the primal."""

import functools

import pytest
import torch

import thunderx as tx

F64 = torch.float64


def close(a, b, **kw):
    torch.testing.assert_close(a, b, **kw)


def test_custom_jvp_function_is_not_traced_under_grad():
    calls = {"f": 0, "rule": 0}

    @tx.custom_jvp
    def f(x):
        calls["f"] += 1
        if x > 0:  # a Python branch on the value: fine, the function is not traced
            return x.sin()
        return x

    @f.defjvp
    def f_jvp(primals, tangents):
        calls["rule"] += 1
        (x,), (t,) = primals, tangents
        return x.sin(), 10.0 * t  # deliberately not the true derivative

    x = torch.tensor(0.5, dtype=F64)
    assert tx.grad(f)(x).item() == 10.0  # the rule's answer, as jax.grad returns
    assert calls == {"f": 0, "rule": 1}
    y, t = tx.jvp(f, (x,), (torch.tensor(2.0, dtype=F64),))
    close(y, x.sin())
    assert t.item() == 20.0
    assert calls["f"] == 0
    # without differentiation the function itself runs
    assert f(x).item() == pytest.approx(x.sin().item())
    assert calls["f"] == 1


def test_custom_vjp_runs_fwd_once_and_not_the_function():
    calls = {"f": 0, "fwd": 0, "bwd": 0}

    @tx.custom_vjp
    def f(x):
        calls["f"] += 1
        return x**3

    def fwd(x):
        calls["fwd"] += 1
        if x.sum() > 0:  # a value-dependent branch in fwd works under grad
            return x**3, x
        return x**3, -x

    def bwd(x, ct):
        calls["bwd"] += 1
        return (3 * x**2 * ct,)

    f.defvjp(fwd, bwd)
    x = torch.tensor([1.0, 2.0], dtype=F64)
    close(tx.grad(lambda v: f(v).sum())(x), 3 * x**2)
    assert calls == {"f": 0, "fwd": 1, "bwd": 1}


def test_custom_rules_compose_with_jit_vmap_and_higher_order():
    @tx.custom_jvp
    def softplus(x):
        return torch.log1p(torch.exp(x))

    @softplus.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return softplus(x), torch.sigmoid(x) * t

    x = torch.tensor([-2.0, 0.0, 3.0, 200.0], dtype=F64)
    want = torch.sigmoid(x)
    close(tx.grad(lambda v: softplus(v).sum())(x), want)
    close(tx.jit(tx.grad(lambda v: softplus(v).sum()))(x), want)
    close(tx.vmap(tx.grad(softplus))(x), want)
    close(tx.grad(lambda v: tx.vmap(softplus)(v).sum())(x), want)
    # second derivative differentiates the rule itself: sigmoid'(x)
    h = tx.vmap(tx.grad(tx.grad(softplus)))(x)
    close(h, want * (1 - want))
    assert "custom_jvp_call" in str(tx.make_jaxpr(softplus)(x))


def test_custom_jvp_closing_over_a_tensor_under_jit():
    scale = torch.tensor(3.0, dtype=F64)

    @tx.custom_jvp
    def f(x):
        return x * scale

    @f.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return x * scale, t * scale

    x = torch.randn(4, dtype=F64)
    g = tx.jit(lambda v: f(v) + f(2 * v))
    close(g(x), 3 * x * scale)
    close(tx.jit(tx.grad(lambda v: f(v).sum()))(x), torch.full_like(x, 3.0))


def test_defjvps_matches_closed_form_and_skips_zero_tangents():
    seen = []

    @tx.custom_jvp
    def f(x, y):
        return torch.sin(x) * y

    def jx(tx_, ans, x, y):
        seen.append("x")
        return torch.cos(x) * y * tx_

    def jy(ty, ans, x, y):
        seen.append("y")
        return torch.sin(x) * ty

    f.defjvps(jx, jy)
    x, y = torch.tensor([0.3, 1.2], dtype=F64), torch.tensor([2.0, -1.0], dtype=F64)
    gx, gy = tx.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))(x, y)
    close(gx, torch.cos(x) * y)
    close(gy, torch.sin(x))
    seen.clear()
    tx.grad(lambda a, b: f(a, b).sum(), argnums=0)(x, y)
    assert seen == ["x"]  # y's tangent is a symbolic zero: its rule is not called
    _, t = tx.jvp(f, (x, y), (torch.ones_like(x), torch.ones_like(y)))
    close(t, torch.cos(x) * y + torch.sin(x))


def test_custom_jvp_nondiff_argnums_as_in_jax_docs():
    @functools.partial(tx.custom_jvp, nondiff_argnums=(0,))
    def app(g, x):
        return g(x)

    @app.defjvp
    def app_jvp(g, primals, tangents):
        (x,), (t,) = primals, tangents
        return app(g, x), 3.0 * t

    x = torch.tensor(2.0, dtype=F64)
    assert tx.grad(lambda v: app(lambda u: u**2, v))(x).item() == 3.0
    assert app(lambda u: u**2, x).item() == 4.0


def test_custom_vjp_nondiff_argnums_clip_gradient():
    def clip_gradient(lo, hi, x):
        return x

    clip = tx.custom_vjp(clip_gradient, nondiff_argnums=(0, 1))

    def fwd(lo, hi, x):
        return x, None

    def bwd(lo, hi, _, g):
        return (g.clamp(lo, hi),)

    clip.defvjp(fwd, bwd)
    x = torch.tensor([1.0, 2.0], dtype=F64)
    g = tx.grad(lambda v: (clip(-0.5, 0.5, v) * torch.tensor([3.0, -0.2], dtype=F64)).sum())(x)
    close(g, torch.tensor([0.5, -0.2], dtype=F64))
    close(tx.jit(tx.grad(lambda v: (clip(-0.5, 0.5, v) * 3.0).sum()))(x), torch.full_like(x, 0.5))


@pytest.mark.parametrize(
    "bad_tangent, match",
    [
        (lambda x, t: t.sum(), "tangent output leaf 0 is f64\\[\\]"),
        (lambda x, t: t.float(), "f32\\[3\\]"),
        (lambda x, t: (t, t), "structure"),
    ],
)
def test_custom_jvp_rule_outputs_checked(bad_tangent, match):
    @tx.custom_jvp
    def f(x):
        return x * 2

    @f.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return x * 2, bad_tangent(x, t)

    x = torch.ones(3, dtype=F64)
    with pytest.raises(TypeError, match=match):
        tx.jvp(f, (x,), (x,))
    with pytest.raises(TypeError, match=match):
        tx.grad(lambda v: f(v).sum())(x)
    close(tx.grad(lambda v: (v * 2).sum())(x), 2 * x)  # the next valid call works


@pytest.mark.parametrize(
    "bad_bwd, match",
    [
        (lambda res, g: (g.sum(),), "cotangent leaf 0 is f64\\[\\]"),
        (lambda res, g: (g, g), "one cotangent per differentiable argument"),
        (lambda res, g: g, "one cotangent per differentiable argument"),
        (lambda res, g: (g.float(),), "f32\\[3\\]"),
    ],
)
def test_custom_vjp_bwd_outputs_checked(bad_bwd, match):
    f = tx.custom_vjp(lambda x: x * 2)
    f.defvjp(lambda x: (x * 2, None), bad_bwd)
    x = torch.ones(3, dtype=F64)
    with pytest.raises(TypeError, match=match):
        tx.grad(lambda v: f(v).sum())(x)


def test_custom_vjp_none_cotangent_means_zero():
    f = tx.custom_vjp(lambda x, y: x * y)
    f.defvjp(lambda x, y: (x * y, (x, y)), lambda res, g: (g * res[1], None))
    x, y = torch.tensor([1.0, 2.0], dtype=F64), torch.tensor([3.0, 4.0], dtype=F64)
    gx, gy = tx.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))(x, y)
    close(gx, y)
    close(gy, torch.zeros_like(y))
