"""Reverse mode on concrete values: outside jit and vmap, grad / vjp / linearize / jacrev /
hessian run the primal computation on values, so Python control flow on them works as in JAX and
torch.func. Oracles: torch.func, torch.autograd running the same Python code, closed forms."""

import contextlib
import io
import math

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx
from thunderx.errors import ConcretizationError

F64 = torch.float64


def close(a, b, **kw):
    torch.testing.assert_close(a, b, **kw)


def jax_doc_f(x):
    # the example from JAX's autodiff documentation
    if x < 3:
        return 3.0 * x**2
    return -4 * x


@pytest.mark.parametrize("x0", [2.0, 4.0])
def test_jax_doc_example_under_every_reverse_transform(x0):
    x = torch.tensor(x0, dtype=F64)
    t = torch.tensor(1.0, dtype=F64)
    want_g = tf.grad(jax_doc_f)(x)
    close(tx.grad(jax_doc_f)(x), want_g)
    v, g = tx.value_and_grad(jax_doc_f)(x)
    close(v, jax_doc_f(x))
    close(g, want_g)
    out, f_vjp = tx.vjp(jax_doc_f, x)
    close(out, jax_doc_f(x))
    close(f_vjp(t)[0], tf.vjp(jax_doc_f, x)[1](t)[0])
    out, f_jvp = tx.linearize(jax_doc_f, x)
    close(out, jax_doc_f(x))
    close(f_jvp(t), tf.jvp(jax_doc_f, (x,), (t,))[1])
    close(tx.jacrev(jax_doc_f)(x), tf.jacrev(jax_doc_f)(x))
    close(tx.hessian(jax_doc_f)(x), tf.hessian(jax_doc_f)(x))
    close(tx.grad(tx.grad(jax_doc_f))(x), tf.grad(tf.grad(jax_doc_f))(x))
    close(tx.jacrev(tx.jacfwd(jax_doc_f))(x), tf.jacrev(tf.jacfwd(jax_doc_f))(x))
    close(tx.jvp(jax_doc_f, (x,), (t,))[1], tf.jvp(jax_doc_f, (x,), (t,))[1])


def newton_sqrt(a):
    x = a
    while (x * x - a).abs() > 1e-12 * a:  # the trip count depends on the value
        x = 0.5 * (x + a / x)
    return x


@pytest.mark.parametrize("a0", [0.01, 2.0, 1e4])
def test_newton_sqrt_gradient_is_closed_form(a0):
    a = torch.tensor(a0, dtype=F64)
    close(tx.grad(newton_sqrt)(a), 1 / (2 * a.sqrt()), rtol=1e-9, atol=0)
    close(tx.hessian(newton_sqrt)(a), -0.25 * a ** (-1.5), rtol=1e-7, atol=0)


def adaptive_ode(theta, y0, t_end=2.0):
    """dy/dt = -theta * y + sin(t), Heun-Euler pair with error-controlled step size: the number
    of steps and each step size are decided from values (.item(), float())."""
    t, h, y = 0.0, 0.1, y0
    steps = 0
    while t < t_end - 1e-12:
        h = min(h, t_end - t)
        k1 = -theta * y + math.sin(t)
        y_euler = y + h * k1
        k2 = -theta * y_euler + math.sin(t + h)
        y_heun = y + 0.5 * h * (k1 + k2)
        err = (y_heun - y_euler).abs().max().item()
        if err > 1e-5:
            h = 0.5 * h
            continue
        y, t = y_heun, t + h
        steps += 1
        if err < 1e-7:
            h = 2.0 * h
    return (y**2).sum(), steps


def test_adaptive_step_ode_gradient_matches_autograd():
    theta = torch.tensor(1.3, dtype=F64)
    y0 = torch.tensor([1.0, -0.5, 2.0], dtype=F64)
    (g_theta, g_y0), steps = tx.grad(adaptive_ode, argnums=(0, 1), has_aux=True)(theta, y0)
    th, y = theta.clone().requires_grad_(), y0.clone().requires_grad_()
    loss, steps_ref = adaptive_ode(th, y)
    want = torch.autograd.grad(loss, (th, y))
    assert steps == steps_ref and steps > 5
    close(g_theta, want[0])
    close(g_y0, want[1])
    # vjp and jacrev see the same values
    close(tx.jacrev(lambda p: adaptive_ode(p, y0)[0])(theta), want[0])


def test_concrete_conversions_under_reverse_mode():
    seen = {}

    def f(x):
        seen["item"] = x.sum().item()
        seen["float"] = float(x[0])
        seen["int"] = int(x[1])
        seen["list"] = x.tolist()
        seen["bool"] = bool(x[0] > 0)
        seen["fmt"] = f"{x[0]:.2f}"
        return (x**2).sum()

    x = torch.tensor([1.5, 2.0], dtype=F64)
    close(tx.grad(f)(x), 2 * x)
    assert seen == {
        "item": 3.5,
        "float": 1.5,
        "int": 2,
        "list": [1.5, 2.0],
        "bool": True,
        "fmt": "1.50",
    }
    seen.clear()
    close(tx.hessian(f)(x), 2 * torch.eye(2, dtype=F64))
    assert seen["list"] == [1.5, 2.0]


def test_print_shows_the_value_under_grad_and_the_type_under_jit():
    def f(x):
        print(x)
        return (x * x).sum()

    x = torch.tensor([1.25, -3.5])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        tx.grad(f)(x)
    assert "1.2500" in buf.getvalue() and "-3.5000" in buf.getvalue()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        tx.jit(tx.grad(f))(x)
    assert "f32[2]" in buf.getvalue() and "1.25" not in buf.getvalue()


@pytest.mark.parametrize(
    "transform",
    [
        lambda f: tx.jit(tx.grad(f)),
        lambda f: tx.vmap(tx.grad(f)),
        lambda f: tx.grad(tx.jit(f)),
        lambda f: tx.jit(tx.hessian(f)),
    ],
    ids=["jit(grad)", "vmap(grad)", "grad(jit)", "jit(hessian)"],
)
def test_values_stay_abstract_under_jit_and_vmap(transform):
    x = torch.tensor([2.0], dtype=F64)
    with pytest.raises(ConcretizationError, match=r"bool\(\).*test_concrete_reverse\.py:\d+"):
        transform(lambda v: jax_doc_f(v.sum()))(x)
    # the message names the control-flow primitives as the way out
    with pytest.raises(ConcretizationError, match=r"thunderx\.lax\.cond"):
        transform(lambda v: jax_doc_f(v.sum()))(x)
    close(tx.grad(lambda v: (v**2).sum())(x), 2 * x)  # trace state restored


def test_jit_of_grad_is_one_minimal_program():
    f = lambda x: (torch.sin(x) * 3.0).sum()  # noqa: E731
    lowered = tx.jit(tx.grad(f)).lower(torch.ones(4))
    prims = [e.prim.name for e in lowered.optimized.eqns]
    assert "sin" not in prims, prims  # the primal value is dead in the gradient program
    assert prims.count("cos") == 1, prims
    assert len(prims) <= 4, prims  # cos, the seed cotangent (full, mul 3), mul
    close(tx.jit(tx.grad(f))(torch.ones(4)), 3 * torch.cos(torch.ones(4)))


def test_primal_runs_once_and_eagerly_under_grad():
    calls = []

    def f(x):
        calls.append(type(x).__name__)
        return (x.exp() * 2).sum()

    x = torch.randn(3, dtype=F64)
    close(tx.grad(f)(x), 2 * x.exp())
    assert len(calls) == 1
    _, f_vjp = tx.vjp(f, x)
    assert len(calls) == 2
    close(f_vjp(torch.tensor(1.0, dtype=F64))[0], 2 * x.exp())
    close(f_vjp(torch.tensor(2.0, dtype=F64))[0], 4 * x.exp())  # the linear map is reusable
    assert len(calls) == 2


def test_data_dependent_shapes_work_under_grad():
    # torch.func supports boolean-mask indexing under grad (not under vmap); so do we
    def f(x):
        return (x[x > 0] ** 2).sum()

    x = torch.tensor([1.0, -2.0, 3.0], dtype=F64)
    close(tx.grad(f)(x), tf.grad(f)(x))


def test_grad_of_jit_runs_the_compiled_primal_and_compiles_once(monkeypatch):
    import thunderx.transforms.jaxpr_cache as J

    compiles = []
    real = J._compile
    monkeypatch.setattr(J, "_compile", lambda *a, **k: compiles.append(1) or real(*a, **k))
    f = tx.jit(lambda x: (x.sin() * x).sum())
    g = tx.grad(f)
    for _ in range(3):
        x = torch.randn(5, dtype=F64)
        close(g(x), x.cos() * x + x.sin())
    # the known (primal) half of the jvp is one compiled program, reused by later calls
    assert len(compiles) == 1, compiles


def test_a_zero_derivative_value_can_receive_an_in_place_write_of_a_differentiated_one():
    # sign(x) has derivative 0, yet it is computed from x: under grad it stays traced, so a
    # differentiated value written into it is recorded (found by a long differential run)
    def f(x, v, i):
        y = torch.sign(x) * 1
        y[i] = v * 2
        return torch.nansum(y * x)

    x, v, i = torch.randn(4, 3, dtype=F64), torch.randn(3, dtype=F64), torch.tensor(1)
    close(tx.grad(f, argnums=(0, 1))(x, v, i), tf.grad(f, argnums=(0, 1))(x, v, i))
    close(tx.jit(tx.grad(f, argnums=(0, 1)))(x, v, i), tf.grad(f, argnums=(0, 1))(x, v, i))


def test_tensor_split_with_tensor_indices_sees_their_values_under_grad():
    x = torch.randn(5, 5, dtype=F64)

    def f(x, idx):
        return torch.stack([p.sum() ** 2 for p in torch.tensor_split(x, idx, -1)]).sum()

    for idx in (torch.tensor([1, 3]), torch.tensor(2)):  # 1-d: indices; 0-d: sections
        xr = x.clone().requires_grad_()
        (want,) = torch.autograd.grad(f(xr, idx), xr)  # torch.func.grad fails on this one
        close(tx.grad(f)(x, idx), want)
        close(tx.vmap(f, in_axes=(0, None))(x, idx), torch.stack([f(r, idx) for r in x]))
    with pytest.raises(ConcretizationError, match="tensor_split's indices_or_sections"):
        tx.jit(f)(x, torch.tensor([2]))


def test_masked_select_and_nonzero_under_grad_use_the_known_values():
    # masked_select used to return a constant under grad: a silently zero gradient
    x, m = torch.randn(3, 4, dtype=F64), torch.rand(4) > 0.3
    for f in (
        lambda x: x.masked_select(m).pow(2).sum(),
        lambda x: torch.masked_select(x, x > 0).pow(2).sum(),  # the mask from the value itself
        lambda x: x.flatten()[torch.nonzero(x.flatten() > 0).squeeze(1)].exp().sum(),
        lambda x: x[tuple(torch.argwhere(x < 0).T)].sin().sum(),
    ):
        close(tx.grad(f)(x), tf.grad(f)(x))
    close(tx.jit(lambda x: torch.masked_select(x, m))(x), torch.masked_select(x, m))
    with pytest.raises(ConcretizationError):
        tx.jit(lambda x: torch.masked_select(x, x > 0))(x)


def test_unique_of_a_differentiated_value_raises_and_of_a_detached_one_works():
    x = torch.tensor([1.0, 2.0, 2.0, 3.0], dtype=F64)
    with pytest.raises(NotImplementedError, match="derivative of torch.unique"):
        tx.grad(lambda x: x.unique().sum())(x)

    def g(x):
        return (x * len(x.detach().unique())).sum()

    close(tx.grad(g)(x), tf.grad(g)(x))


def test_batch_norm_running_statistics_are_updated_or_refused_never_left_stale():
    x = torch.randn(4, 3, 5, dtype=F64)
    w, b = torch.randn(3, dtype=F64), torch.randn(3, dtype=F64)
    bufs = {k: (torch.zeros(3, dtype=F64), torch.ones(3, dtype=F64)) for k in ("tx", "tf")}

    def loss(key):
        rm, rv = bufs[key]
        return lambda x: F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3).pow(2).sum()

    close(tx.grad(loss("tx"))(x), tf.grad(loss("tf"))(x))
    for got, want in zip(bufs["tx"], bufs["tf"]):
        close(got, want)  # updated in place, as torch.func does
    # jit writes the buffers back after each call (tests/test_jit_buffer_mutation.py)
    torch.testing.assert_close(tx.jit(loss("tx"))(x), loss("tf")(x))
    for got, want in zip(bufs["tx"], bufs["tf"]):
        close(got, want)
    close(
        tx.jit(lambda x: F.instance_norm(x, weight=w, bias=b))(x),
        F.instance_norm(x, weight=w, bias=b),
    )
