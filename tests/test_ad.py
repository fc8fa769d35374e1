"""Autodiff: nesting, higher order, agreement with torch.autograd / torch.func, custom rules,
errors, and the shape of the jaxprs it produces."""

import math

import pytest
import torch
import torch.func as tf

import thunderx as tx

from .research_fns import RESEARCH, research_case

F64 = torch.float64


def close(a, b, tol=1e-6):
    for x, y in zip(tx.tree.leaves(a), tx.tree.leaves(b)):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol)


def test_no_perturbation_confusion():
    g = tx.grad
    assert g(lambda x: x * g(lambda y: x * y)(2.0))(3.0).item() == 6.0
    assert g(lambda x: x * g(lambda y: x + y)(1.0))(1.0).item() == 1.0


def test_six_nested_grads_of_reciprocal():
    f = lambda x: 1 / x  # noqa: E731
    for _ in range(6):
        f = tx.grad(f)
    assert math.isclose(f(torch.tensor(4.0, dtype=F64)).item(), 720 / 4**7, rel_tol=1e-12)


def test_hessian_of_pow_is_symmetric_at_zero_exponent():
    h = tx.hessian(lambda v: v[0] ** v[1])(torch.tensor([4.0, 0.0], dtype=F64))
    want = torch.tensor([[0.0, 0.25], [0.25, math.log(4) ** 2]], dtype=F64)
    torch.testing.assert_close(h, want)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("name", RESEARCH)
def test_research_functions_match_torch(name, dtype):
    tol = 1e-4 if dtype == torch.float32 else 1e-8
    f, args = research_case(name, dtype)
    close(tx.grad(f)(*args), tf.grad(f)(*args), tol)
    close(tx.grad(f, argnums=(0, 1))(*args), tf.grad(f, argnums=(0, 1))(*args), tol)
    g0 = lambda p: f(p, *args[1:])  # noqa: E731
    out, vjp_fn = tx.vjp(g0, args[0])
    _, want_vjp = tf.vjp(g0, args[0])
    ct = torch.tensor(1.7, dtype=dtype)
    close(out, g0(args[0]), tol)
    close(vjp_fn(ct), want_vjp(ct), tol)
    close(tx.jacrev(g0)(args[0]), tf.jacrev(g0)(args[0]), tol)
    close(tx.jacfwd(g0)(args[0]), tf.jacfwd(g0)(args[0]), tol)
    if name == "attention":
        close(tx.hessian(g0)(args[0]), tf.hessian(g0)(args[0]), tol * 10)


def test_grad_matches_autograd_through_vjp_cotangent():
    x = torch.randn(3, 4, dtype=F64)
    f = lambda x: torch.sin(x) @ x.T  # noqa: E731
    out, vjp_fn = tx.vjp(f, x)
    ct = torch.randn_like(out)
    xr = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(f(xr), xr, ct)
    close(vjp_fn(ct)[0], want)


def test_jvp_and_linearize_agree():
    x, t = torch.randn(4, dtype=F64), torch.randn(4, dtype=F64)
    f = lambda x: torch.tanh(x).cumsum(0) * x  # noqa: E731
    y, jt = tx.jvp(f, (x,), (t,))
    y2, f_jvp = tx.linearize(f, x)
    close(y, y2)
    close(jt, f_jvp(t))
    close(jt, tf.jvp(f, (x,), (t,))[1])


def test_value_and_grad_with_aux_and_pytrees():
    params = {"w": torch.randn(3, dtype=F64), "b": (torch.tensor(0.5, dtype=F64),)}

    def loss(p, x):
        out = (p["w"] * x).sum() + p["b"][0]
        return out**2, {"out": out}

    (val, aux), g = tx.value_and_grad(loss, has_aux=True)(params, torch.ones(3, dtype=F64))
    assert set(g) == {"w", "b"}
    close(g["w"], 2 * aux["out"] * torch.ones(3, dtype=F64))
    close(g["b"][0], 2 * aux["out"])
    close(val, aux["out"] ** 2)


def test_negative_argnums_and_tuple():
    f = lambda a, b: (a * b**2).sum()  # noqa: E731
    a, b = torch.randn(3, dtype=F64), torch.randn(3, dtype=F64)
    close(tx.grad(f, argnums=-1)(a, b), 2 * a * b)
    ga, gb = tx.grad(f, argnums=(0, 1))(a, b)
    close(ga, b**2)
    close(gb, 2 * a * b)


def test_jacobians_of_pytrees_and_has_aux():
    f = lambda d: {"s": d["x"].sin(), "p": d["x"] * d["y"]}  # noqa: E731
    d = {"x": torch.randn(3, dtype=F64), "y": torch.randn(3, dtype=F64)}
    for ours, theirs in ((tx.jacrev, tf.jacrev), (tx.jacfwd, tf.jacfwd)):
        close(ours(f)(d), theirs(f)(d))
    jac, aux = tx.jacrev(lambda x: (x.exp(), x.sum()), has_aux=True)(torch.ones(2, dtype=F64))
    close(aux, torch.tensor(2.0, dtype=F64))
    close(jac, torch.diag(torch.exp(torch.ones(2, dtype=F64))))


def test_stop_gradient_and_detach():
    f = lambda x: (x * x.detach()).sum() + (x * tx.stop_gradient(x)).sum()  # noqa: E731
    x = torch.randn(3, dtype=F64)
    close(tx.grad(f)(x), 2 * x)


def test_integer_outputs_carry_no_tangent():
    f = lambda x: x * torch.argmax(x).to(x.dtype)  # noqa: E731
    x = torch.tensor([1.0, 3.0, 2.0], dtype=F64)
    close(tx.grad(lambda x: f(x).sum())(x), torch.full((3,), 1.0, dtype=F64))


def test_custom_jvp_is_used_and_composes():
    @tx.custom_jvp
    def safe_log1pexp(x):
        return torch.log1p(torch.exp(x))

    @safe_log1pexp.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return safe_log1pexp(x), torch.sigmoid(x) * t

    x = torch.tensor([1.0, 200.0, -3.0], dtype=F64)
    g = tx.grad(lambda x: safe_log1pexp(x).sum())(x)
    close(g, torch.sigmoid(x))
    close(tx.jit(tx.grad(lambda x: safe_log1pexp(x).sum()))(x), torch.sigmoid(x))
    close(tx.vmap(tx.grad(lambda x: safe_log1pexp(x)))(x), torch.sigmoid(x))
    close(tx.grad(lambda x: tx.vmap(safe_log1pexp)(x).sum())(x), torch.sigmoid(x))


def test_custom_vjp_is_used_and_composes():
    @tx.custom_vjp
    def clip_grad(x):
        return x

    def fwd(x):
        return x, None

    def bwd(res, ct):
        return (torch.clamp(ct, -1.0, 1.0),)

    clip_grad.defvjp(fwd, bwd)
    x = torch.tensor([1.0, 2.0], dtype=F64)
    f = lambda x: (clip_grad(x) * 5.0).sum()  # noqa: E731
    close(tx.grad(f)(x), torch.ones(2, dtype=F64))
    close(tx.jit(tx.grad(f))(x), torch.ones(2, dtype=F64))
    close(tx.vmap(tx.grad(lambda v: clip_grad(v) * 5.0))(x), torch.ones(2, dtype=F64))
    close(tx.grad(lambda v: tx.vmap(clip_grad)(v).mul(5.0).sum())(x), torch.ones(2, dtype=F64))
    with pytest.raises(TypeError, match="forward-mode"):
        tx.jvp(f, (x,), (x,))


def test_grad_jaxpr_has_no_dead_equations_or_zeros_for_unrelated_inputs():
    f = lambda x, y: (torch.sin(x) * 2).sum()  # noqa: E731
    closed = tx.make_jaxpr(tx.grad(f))(torch.ones(3), torch.ones(3))
    text = str(closed)
    assert "sin" not in text, text  # the primal output is not needed for the gradient
    assert "cos" in text
    live = {id(v) for e in closed.jaxpr.eqns for v in e.inputs} | {
        id(v) for v in closed.jaxpr.outvars
    }
    for e in closed.jaxpr.eqns:
        assert any(id(v) in live for v in e.outputs), f"dead equation {e}"
    # the gradient w.r.t. x only: y's cotangent is never built
    assert text.count("full") <= 1


def test_grad_errors():
    x = torch.randn(3)
    with pytest.raises(TypeError, match=r"scalar.*f32\[3\].*jacrev"):
        tx.grad(torch.sin)(x)
    with pytest.raises(TypeError, match="floating-point inputs.*int64"):
        tx.grad(lambda i: i.sum())(torch.arange(3))
    with pytest.raises(ValueError, match="out of range"):
        tx.grad(lambda a: a.sum(), argnums=2)(x)
    with pytest.raises(ValueError, match="duplicates"):
        tx.grad(lambda a, b: a.sum(), argnums=(0, 0))(x, x)
    with pytest.raises(TypeError, match="pair"):
        tx.grad(lambda a: a.sum(), has_aux=True)(x)
    _, vjp_fn = tx.vjp(torch.sin, x)
    with pytest.raises(ValueError, match="cotangent"):
        vjp_fn(torch.ones(4))
    with pytest.raises(ValueError, match="tree"):
        vjp_fn((torch.ones(3), torch.ones(3)))
    # the context is clean afterwards
    close(tx.grad(lambda v: v.sum())(x), torch.ones(3))
