"""Control flow (thunderx.lax): laws against independent oracles. The per-primitive rule checks
(jvp vs finite differences, vjp vs jvp, vmap vs a loop, jit vs eager) run in test_primitives.py
from the samples in samples_control_flow.py."""

import time

import pytest
import torch

import thunderx
from thunderx import lax
from thunderx.errors import ConcretizationError
from thunderx.testing import check_grads

F64 = torch.float64


def _close(a, b, tol=1e-9):
    for x, y in zip(thunderx.tree.leaves(a), thunderx.tree.leaves(b)):
        torch.testing.assert_close(torch.as_tensor(x), torch.as_tensor(y), rtol=tol, atol=tol)


# ------------------------------------------------------------------------------------- scan


def _rk4_step(w, h=0.1):
    f = lambda y: torch.tanh(y @ w)  # noqa: E731

    def step(y, _):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), y.sum()

    return step


def test_grad_of_scan_equals_grad_of_the_unrolled_loop():
    gen = torch.Generator().manual_seed(0)
    y0 = torch.randn(3, 4, dtype=F64, generator=gen)
    w = torch.randn(4, 4, dtype=F64, generator=gen) * 0.5

    def loss(y0, w):
        y, ys = lax.scan(_rk4_step(w), y0, None, length=7)
        return (y**2).sum() + ys.sin().sum()

    def unrolled(y0, w):
        y, acc = y0, 0
        for _ in range(7):
            y, s = _rk4_step(w)(y, None)
            acc = acc + s.sin()
        return (y**2).sum() + acc

    y0r, wr = y0.clone().requires_grad_(), w.clone().requires_grad_()
    unrolled(y0r, wr).backward()
    for g in (thunderx.grad(loss, (0, 1)), thunderx.jit(thunderx.grad(loss, (0, 1)))):
        gy, gw = g(y0, w)
        _close((gy, gw), (y0r.grad, wr.grad))


def test_scan_reverse_pytrees_and_eager_equal_jit():
    xs = {"a": torch.arange(4.0, dtype=F64), "b": (torch.ones(4, 2, dtype=F64),)}

    def f(init):
        def body(c, x):
            s, t = c["s"], c["t"]
            return {"s": s * 0.5 + x["a"], "t": (t[0] + x["b"][0] * s,)}, (s, {"y": x["a"] * 2})

        return lax.scan(body, init, xs, reverse=True)

    init = {"s": torch.tensor(1.0, dtype=F64), "t": (torch.zeros(2, dtype=F64),)}
    eager = f(init)  # concrete values: runs as a Python loop
    s, t, ys = 1.0, torch.zeros(2, dtype=F64), []
    for i in reversed(range(4)):
        ys.append((s, 2 * xs["a"][i]))
        t = t + xs["b"][0][i] * s
        s = s * 0.5 + xs["a"][i]
    ys.reverse()
    assert abs(eager[0]["s"].item() - s) < 1e-12
    _close(eager[0]["t"][0], t)
    _close(eager[1][0], torch.tensor([y[0] for y in ys], dtype=F64))
    _close(thunderx.jit(f)(init), eager)
    check_grads(
        lambda s: f({"s": s, "t": (torch.zeros(2, dtype=F64),)})[0]["t"][0],
        [torch.tensor(1.0, dtype=F64)],
    )


def test_vmap_of_scan_batches_the_carry_by_fixpoint():
    # the carry enters unbatched and becomes batched through the batched xs
    def f(xs):
        return lax.scan(lambda c, x: (c * 0.9 + x, c), torch.zeros(2, dtype=F64), xs)

    xs = torch.randn(5, 3, 2, dtype=F64)
    got = thunderx.vmap(f)(xs)
    want = [f(xs[i]) for i in range(5)]
    _close(got[0], torch.stack([w[0] for w in want]))
    _close(got[1], torch.stack([w[1] for w in want]))


def test_map_and_fori_loop():
    xs = torch.randn(4, 3, dtype=F64)
    _close(thunderx.jit(lambda xs: lax.map(lambda x: x.sin().sum(), xs))(xs), xs.sin().sum(1))
    f = lambda x: lax.fori_loop(1, 5, lambda i, v: v * i + 1.0, x)  # noqa: E731
    want = torch.tensor(2.0, dtype=F64)
    for i in range(1, 5):
        want = want * i + 1
    _close(thunderx.jit(f)(torch.tensor(2.0, dtype=F64)), want)
    # dynamic bounds: a while loop
    g = lambda x, n: lax.fori_loop(0, n, lambda i, v: v + i, x)  # noqa: E731
    _close(thunderx.jit(g)(torch.tensor(0), torch.tensor(5)), torch.tensor(10))


def test_hessian_through_fori_loop():
    def f(x):
        return lax.fori_loop(0, 3, lambda i, v: torch.sin(v) * v + v * i * 0.1, x).sum()

    def ref(x):
        v = x
        for i in range(3):
            v = torch.sin(v) * v + v * i * 0.1
        return v.sum()

    x = torch.tensor([0.3, 0.8, -0.4], dtype=F64)
    _close(thunderx.hessian(f)(x), torch.autograd.functional.hessian(ref, x))


def test_trace_of_jit_grad_of_scan_does_not_grow_with_the_step_count():
    w = torch.randn(8, 8, dtype=F64) * 0.3
    y0 = torch.randn(2, 8, dtype=F64)

    def loss(w, n):
        return (lax.scan(_rk4_step(w), y0, None, length=n)[0] ** 2).sum()

    sizes = {}
    for n in (10, 1000):
        jaxpr = thunderx.make_jaxpr(thunderx.grad(loss), static_argnums=(1,))(w, n)
        sizes[n] = str(jaxpr).count("\n")
    assert sizes[10] == sizes[1000], sizes


# ------------------------------------------------------------------------------- while_loop


def _newton_sqrt(a):
    def cond(c):
        x, _ = c
        return (x * x - a).abs().max() > 1e-12

    def body(c):
        x, it = c
        return x - (x * x - a) / (2 * x), it + 1

    return lax.while_loop(cond, body, (a + 1.0, torch.tensor(0)))


def test_reverse_mode_through_a_while_loop_with_a_value_dependent_trip_count():
    a = torch.tensor([2.0, 9.0, 30.0], dtype=F64)

    def loss(a):
        x, _ = _newton_sqrt(a)
        return (x * torch.arange(1.0, 4.0, dtype=F64)).sum()

    def unrolled(a):  # the same iterations as a Python loop, differentiated by torch
        x = a + 1.0
        while (x * x - a).abs().max() > 1e-12:
            x = x - (x * x - a) / (2 * x)
        return (x * torch.arange(1.0, 4.0, dtype=F64)).sum()

    ar = a.clone().requires_grad_()
    unrolled(ar).backward()
    for g in (thunderx.grad(loss), thunderx.jit(thunderx.grad(loss))):
        _close(g(a), ar.grad)
    _close(thunderx.jacrev(lambda a: _newton_sqrt(a)[0])(a), torch.diag(0.5 / a.sqrt()))
    # a different trip count on the second call of the same compiled program
    _close(
        thunderx.jit(thunderx.grad(loss))(a * 100),
        0.5 / (a * 100).sqrt() * torch.arange(1.0, 4.0, dtype=F64),
    )
    _, t = thunderx.jvp(lambda a: _newton_sqrt(a)[0], (a,), (torch.ones(3, dtype=F64),))
    _close(t, 0.5 / a.sqrt())


def test_reverse_mode_through_a_while_loop_that_runs_zero_times():
    def f(x, limit):
        return lax.while_loop(lambda v: v.sum() < limit, lambda v: v * 3.0, x).sum()

    x = torch.tensor([1.0, 2.0], dtype=F64)
    g = thunderx.jit(thunderx.grad(f))
    _close(g(x, torch.tensor(0.0, dtype=F64)), torch.ones(2, dtype=F64))  # zero trips
    _close(g(x, torch.tensor(20.0, dtype=F64)), torch.full((2,), 9.0, dtype=F64))  # two trips


def test_reverse_mode_through_while_loops_nested_in_scan_cond_and_while():
    # the inner loop's residual stacks differ in length per outer iteration: it is recomputed
    def sqrt(v):
        return _newton_sqrt(v)[0]

    def in_scan(a):
        return lax.scan(lambda c, x: (c + sqrt(x * c), c), torch.ones(2, dtype=F64), a)[0].sum()

    def in_cond(a):
        return lax.cond(a.sum() > 0, lambda v: sqrt(v[0]) * v[1], lambda v: v[0], a).sum()

    def in_while(a):
        def body(c):
            i, v = c
            row = (a * (torch.arange(3) == i).unsqueeze(1)).sum(0)  # a[i]
            return i + 1, v + sqrt(row * v)

        return lax.while_loop(
            lambda c: c[0] < 3, body, (torch.tensor(0), torch.ones(2, dtype=F64))
        )[1].sum()

    def ref_scan(a):
        c = torch.ones(2, dtype=F64)
        for x in a:
            c = c + (x * c).sqrt()
        return c.sum()

    def ref_cond(a):
        return (a[0].sqrt() * a[1]).sum()

    a = torch.tensor([[2.0, 3.0], [5.0, 7.0], [1.0, 30.0]], dtype=F64)
    for f, ref in ((in_scan, ref_scan), (in_cond, ref_cond), (in_while, ref_scan)):
        ar = a.clone().requires_grad_()
        ref(ar).backward()
        _close(thunderx.grad(f)(a), ar.grad, 1e-7)
        _close(thunderx.jit(thunderx.grad(f))(a), ar.grad, 1e-7)


def test_forward_mode_and_second_order_through_a_while_loop():
    a = torch.tensor([2.0, 9.0, 30.0], dtype=F64)
    sqrt = lambda a: _newton_sqrt(a)[0]  # noqa: E731
    _close(thunderx.jacfwd(sqrt)(a), torch.diag(0.5 / a.sqrt()))
    _close(thunderx.linearize(sqrt, a)[1](torch.ones(3, dtype=F64)), 0.5 / a.sqrt())
    # forward over reverse: the residual-recording loop is differentiated again
    _close(thunderx.hessian(lambda a: sqrt(a).sum())(a), torch.diag(-0.25 * a**-1.5))
    _close(thunderx.jit(thunderx.hessian(lambda a: sqrt(a).sum()))(a), torch.diag(-0.25 * a**-1.5))


def test_vmap_of_while_loop_equals_a_python_loop_of_while_loops():
    a = torch.tensor([[2.0, 9.0], [4.0, 1e4], [0.5, 3.0]], dtype=F64)
    got = thunderx.vmap(_newton_sqrt)(a)
    want = [_newton_sqrt(a[i]) for i in range(3)]
    _close(got[0], torch.stack([w[0] for w in want]))
    assert got[1].tolist() == [w[1].item() for w in want]  # each element keeps its trip count
    # per-example gradients: finished elements stay frozen in the linear loop too
    g = thunderx.vmap(thunderx.grad(lambda a: _newton_sqrt(a)[0].sum()))(a)
    _close(g, 0.5 / a.sqrt())
    _close(thunderx.jit(thunderx.vmap(_newton_sqrt))(a)[0], got[0])


def test_while_loop_pytree_carry_and_unbatched_predicate():
    def f(x, n):
        def body(c):
            return {"i": c["i"] + 1, "v": (c["v"][0].cos() + x,)}

        return lax.while_loop(lambda c: c["i"] < n, body, {"i": torch.tensor(0), "v": (x,)})

    xs = torch.randn(4, 3, dtype=F64)
    got = thunderx.vmap(f, in_axes=(0, None))(xs, torch.tensor(3))
    for i in range(4):
        _close(got["v"][0][i], f(xs[i], torch.tensor(3))["v"][0])
    check_grads(lambda x: f(x, torch.tensor(3))["v"][0], [xs[0]], modes=("fwd", "rev"))


# ------------------------------------------------------------------------------------- cond


def test_cond_grad_takes_the_branch_and_vmap_selects():
    f = lambda x: lax.cond(x.sum() > 0, lambda v: v.sin() * v, lambda v: v.exp(), x)  # noqa: E731
    for x in (torch.tensor([0.3, 0.5], dtype=F64), torch.tensor([-0.3, -0.5], dtype=F64)):
        xr = x.clone().requires_grad_()
        (xr.sin() * xr if x.sum() > 0 else xr.exp()).sum().backward()
        _close(thunderx.grad(lambda v: f(v).sum())(x), xr.grad)
        _close(thunderx.jit(thunderx.grad(lambda v: f(v).sum()))(x), xr.grad)
    xs = torch.tensor([[0.3, 0.5], [-0.3, -0.5], [1.0, -2.0]], dtype=F64)
    assert "select" in str(thunderx.make_jaxpr(thunderx.vmap(f))(xs))
    _close(thunderx.vmap(f)(xs), torch.stack([f(x) for x in xs]))
    # an unbatched predicate stays a cond
    g = lambda p, x: lax.cond(p > 0, lambda v: v.sin(), lambda v: v.cos(), x)  # noqa: E731
    p = torch.tensor(1.0, dtype=F64)
    jaxpr = str(thunderx.make_jaxpr(thunderx.vmap(g, in_axes=(None, 0)))(p, xs))
    assert "cond[" in jaxpr and "select" not in jaxpr
    _close(thunderx.vmap(g, in_axes=(None, 0))(p, xs), xs.sin())
    _close(thunderx.jit(thunderx.vmap(f))(xs), torch.stack([f(x) for x in xs]))


def test_pytrees_through_cond_fori_loop_and_checkpoint():
    ops = {"a": torch.tensor([0.3, -0.2], dtype=F64), "b": (torch.tensor(2.0, dtype=F64),)}

    def f(ops):
        def yes(o):
            return {"s": o["a"].sin() * o["b"][0], "t": [o["b"][0] ** 2]}

        def no(o):
            return {"s": o["a"] * 3.0, "t": [o["b"][0] + 1.0]}

        out = lax.cond(ops["b"][0] > 1, yes, no, ops)
        i, acc = lax.fori_loop(0, 3, lambda i, c: (c[0] + 1, c[1] * 1.5 + out["s"]), (0, out["s"]))
        step = thunderx.checkpoint(lambda x, scale=1.0: {"y": x["y"].tanh() * scale})
        return step({"y": acc}, scale=out["t"][0])["y"].sum() + i

    def ref(a, b):
        s = a.sin() * b if b > 1 else a * 3.0
        t = b**2 if b > 1 else b + 1.0
        acc = s
        for _ in range(3):
            acc = acc * 1.5 + s
        return (acc.tanh() * t).sum() + 3

    a, b = ops["a"].clone().requires_grad_(), ops["b"][0].clone().requires_grad_()
    ref(a, b).backward()
    _close(f(ops), ref(ops["a"], ops["b"][0]))
    _close(thunderx.jit(f)(ops), ref(ops["a"], ops["b"][0]))
    g = thunderx.grad(f)(ops)
    _close((g["a"], g["b"][0]), (a.grad, b.grad))


def test_branch_structure_mismatch_is_an_error():
    with pytest.raises(TypeError, match=r"structure.*test_control_flow.py:\d+"):
        thunderx.jit(lambda x: lax.cond(x.sum() > 0, lambda v: (v, v), lambda v: v, x))(
            torch.ones(2)
        )
    with pytest.raises(TypeError, match="structure"):
        thunderx.jit(lambda x: lax.scan(lambda c, v: ((c, c), v), x[0], x))(torch.ones(2))


def test_switch_clamps_its_index():
    branches = [lambda x: x + 1, lambda x: x * 2, lambda x: x - 3]
    x = torch.tensor([1.0, 2.0])
    for i in (-2, 0, 1, 2, 7):
        want = branches[min(max(i, 0), 2)](x)
        _close(lax.switch(torch.tensor(i), branches, x), want)
        _close(thunderx.jit(lambda i, x: lax.switch(i, branches, x))(torch.tensor(i), x), want)


def test_nested_scan_in_cond_in_while():
    def f(x):
        def body(c):
            i, v = c
            inner = lambda v: lax.scan(lambda a, b: (a * 0.9 + b.sin(), a), v, torch.stack([v, v]))[
                0
            ]  # noqa: E731,E501
            return i + 1, lax.cond(i % 2 == 0, inner, lambda v: v * 1.1, v)

        return lax.while_loop(lambda c: c[0] < 4, body, (torch.tensor(0), x))[1].sum()

    def ref(x):
        v = x
        for i in range(4):
            if i % 2 == 0:
                a = v
                for b in (v, v):
                    a = a * 0.9 + b.sin()
                v = a
            else:
                v = v * 1.1
        return v.sum()

    x = torch.tensor([0.3, 0.8], dtype=F64)
    xr = x.clone().requires_grad_()
    ref(xr).backward()
    _close(thunderx.jit(f)(x), ref(x))
    _close(thunderx.grad(f)(x), xr.grad)
    _close(thunderx.jit(thunderx.grad(f))(x), xr.grad)


# -------------------------------------------------------------------------------- checkpoint


def _residual_bytes(fun, *args):
    from thunderx.transforms.ad import linearize_flat

    lin = linearize_flat(lambda *a: fun(*a), list(args))
    return sum(r.numel() * r.element_size() for r in lin.residuals if isinstance(r, torch.Tensor))


def test_checkpoint_in_a_scan_body_recomputes_and_saves_less():
    w = torch.randn(8, 8, dtype=F64) * 0.3
    y0 = torch.randn(4, 8, dtype=F64)

    def loss(w, policy=None, ckpt=True):
        step = _rk4_step(w)
        if ckpt:
            step = thunderx.checkpoint(step, policy=policy)
        return (lax.scan(step, y0, None, length=20)[0] ** 2).sum()

    wr = w.clone().requires_grad_()
    loss(wr, ckpt=False).backward()
    P = thunderx.checkpoint_policies
    for policy in (None, P.dots_saveable, P.everything_saveable):
        _close(thunderx.grad(loss)(w, policy), wr.grad)
        _close(thunderx.jit(thunderx.grad(loss), static_argnums=(1,))(w, policy), wr.grad)
    full = _residual_bytes(lambda w: loss(w, ckpt=False), w)
    remat = _residual_bytes(lambda w: loss(w, None), w)
    dots = _residual_bytes(lambda w: loss(w, P.dots_saveable), w)
    assert remat < dots < full, (remat, dots, full)


# ------------------------------------------------------------------ codegen, nvFuser, torch


def test_generated_code_has_real_loops_and_branches():
    def f(x, n):
        y = lax.cond(x.sum() > 0, torch.sin, torch.cos, x)
        y = lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2), (0, y))[1]
        return lax.scan(lambda c, v: (c + v, c), y[0], y)

    src = thunderx.jit(f).lower(torch.ones(3), torch.tensor(2)).as_text()
    assert "\n    if " in src and "\n    while " in src and "\n    for " in src, src
    x = torch.tensor([1.0, -2.0, 0.5])
    _close(thunderx.jit(f)(x, torch.tensor(2)), f(x, torch.tensor(2)))


def test_nested_jaxprs_print_in_text_html_and_the_explorer():
    def f(a):
        inner = lambda v: lax.scan(lambda c, x: (c * x, c), v, torch.stack([v, v]))[1]  # noqa: E731
        return lax.cond(a.sum() > 0, inner, lambda v: torch.stack([v, v]), a)

    a = torch.tensor([1.0, 2.0])
    jaxpr = thunderx.make_jaxpr(f)(a)
    text = str(jaxpr)
    assert "cond[branches=(" in text and "scan[jaxpr={ lambda" in text and "mul" in text
    html = jaxpr._repr_html_()
    assert "branches[0]" in html and "branches[1]" in html and "jaxpr: " in html
    ex = thunderx.explain(thunderx.jit(thunderx.grad(lambda a: f(a).sum())))(a)
    assert "cond" in ex._repr_html_()


def test_nvfuser_executor_fuses_inside_loop_bodies():
    from thunderx.primitives._subjaxpr import current_executor
    from thunderx.transforms.jaxpr_cache import compiled_for

    def f(x, w):
        def step(c, _):
            return torch.tanh(c @ w) * 0.5 + c.sin(), (c * c).sum()

        return lax.scan(step, x, None, length=4)

    x, w = torch.randn(3, 4), torch.randn(4, 4)
    got = thunderx.jit(f, executor="nvfuser")(x, w)  # regions run by the reference interpreter
    _close(got, f(x, w), 1e-5)
    jaxpr = thunderx.make_jaxpr(f)(x, w).jaxpr
    (scan_eqn,) = [e for e in jaxpr.eqns if e.prim.name == "scan"]
    token = current_executor.set("nvfuser")
    try:
        body_prog = compiled_for(scan_eqn.params["jaxpr"], "nvfuser")
    finally:
        current_executor.reset(token)
    assert body_prog.regions, "the loop body should be lowered to fusion regions"
    assert "fd.ops.tanh" in body_prog.as_text()
    plan = thunderx.jit(f, executor="nvfuser").lower(x, w).program_text()
    assert "run by the host per step" in plan and "fd.ops.tanh" in plan, plan


def test_torch_cond_while_loop_and_scan_trace_onto_the_primitives():
    from torch._higher_order_ops import scan as torch_scan
    from torch._higher_order_ops import while_loop as torch_while_loop

    def f(x):
        y = torch.cond(x.sum() > 0, lambda v: v.sin(), lambda v: v.cos(), (x,))
        i, y = torch_while_loop(
            lambda i, v: i < 3, lambda i, v: (i + 1, v * 2), (torch.tensor(0), y)
        )
        c, ys = torch_scan(lambda c, v: (c + v, c * 1.0), torch.zeros(()), y)
        return c, ys

    x = torch.tensor([0.5, -0.2, 0.3])
    jaxpr = str(thunderx.make_jaxpr(f)(x))
    assert "cond[" in jaxpr and "while[" in jaxpr and "scan[" in jaxpr
    _close(thunderx.jit(f)(x), f(x), 1e-6)


# ------------------------------------------------------------------------------------ errors


def test_branch_and_body_type_mismatches_name_both_types_and_the_line():
    x = torch.ones(3)
    with pytest.raises(TypeError, match=r"f64\[3\].*f32\[3\].*test_control_flow.py:\d+"):
        thunderx.jit(lambda x: lax.cond(x.sum() > 0, lambda v: v, lambda v: v.double(), x))(x)
    with pytest.raises(TypeError, match=r"f32\[3\].*f32\[2\].*test_control_flow.py:\d+"):
        thunderx.jit(lambda x: lax.while_loop(lambda v: v.sum() < 9, lambda v: v[:2], x))(x)
    with pytest.raises(TypeError, match=r"f32\[\].*f64\[\].*test_control_flow.py:\d+"):
        thunderx.jit(lambda x: lax.scan(lambda c, v: (c.double(), v), x[0], x))(x)
    with pytest.raises(TypeError, match="bool scalar"):
        thunderx.jit(lambda x: lax.while_loop(lambda v: v, lambda v: v, x))(x)


def test_concretization_error_names_thunderx_lax():
    def f(x):
        return x * 2 if x.sum() > 0 else x

    with pytest.raises(ConcretizationError, match="thunderx.lax.cond.*thunderx.lax.while_loop"):
        thunderx.jit(f)(torch.ones(2))
    _close(thunderx.grad(lambda x: f(x).sum())(torch.ones(2)), torch.full((2,), 2.0))


def test_first_call_time_of_jit_grad_of_scan_is_flat_in_the_step_count():
    w = torch.randn(4, 4) * 0.3
    y0 = torch.randn(2, 4)

    def loss(w, n):
        return (lax.scan(_rk4_step(w), y0, None, length=n)[0] ** 2).sum()

    times = {}
    for n in (10, 400):
        g = thunderx.jit(thunderx.grad(loss), static_argnums=(1,))
        t0 = time.perf_counter()
        thunderx.make_jaxpr(thunderx.grad(loss), static_argnums=(1,))(w, n)
        times[n] = time.perf_counter() - t0
        g(w, n)
    assert times[400] < 3 * times[10] + 0.05, times


@pytest.mark.parametrize("module", ["thunderx.control_flow", "thunderx.lax"])
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(
        importlib.import_module(module),
        extraglobs={"torch": torch, "thunderx": thunderx, "lax": lax},
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0 and result.failed == 0


def test_random_draws_in_a_body_are_fresh_per_iteration_or_refused():
    def f(x):
        return lax.scan(lambda c, _: (c, torch.randn(2) + c), x, None, length=3)[1]

    ys = thunderx.jit(f)(torch.zeros(()))
    assert not torch.equal(ys[0], ys[1])  # each iteration draws anew
    same = thunderx.vmap(f, randomness="same")(torch.zeros(2))
    assert torch.equal(same[0], same[1]) and not torch.equal(same[0, 0], same[0, 1])
    with pytest.raises(NotImplementedError, match="randomness='different'"):
        thunderx.vmap(f, randomness="different")(torch.zeros(2))
    with pytest.raises(ValueError, match="random ops need"):
        thunderx.vmap(f)(torch.zeros(2))


def test_transposes_of_linear_control_flow_satisfy_the_dot_product_identity():
    from thunderx.testing import check_transpose

    w = torch.randn(3, 3, dtype=F64)

    def scan_lin(c, xs):
        return lax.scan(lambda c, x: (c @ w + x, c * 2.0 - x), c, xs, reverse=True)

    def cond_lin(a, b):
        return lax.cond(w.sum() > 0, lambda u, v: u @ w - v, lambda u, v: v * 3.0, a, b)

    def while_lin(c):
        k = torch.tensor(0)
        return lax.while_loop(lambda s: s[0] < 4, lambda s: (s[0] + 1, s[1] @ w), (k, c))[1]

    check_transpose(scan_lin, [torch.randn(2, 3, dtype=F64), torch.randn(5, 2, 3, dtype=F64)])
    check_transpose(cond_lin, [torch.randn(2, 3, dtype=F64), torch.randn(2, 3, dtype=F64)])
    check_transpose(while_lin, [torch.randn(2, 3, dtype=F64)])
