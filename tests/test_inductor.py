"""Executors behind one protocol, and the inductor executor: fusion regions compiled by
torch.compile, everything else torch calls; numbers against eager torch and torch.func."""

import pytest
import torch
import torch.func as tf
from hypothesis import given

import thunderx as tx
from thunderx.executors import (
    Executor,
    default_executor,
    executor_names,
    get_executor,
    inductor_exec,
    inductor_whole,
    register_executor,
    unregister_executor,
)
from thunderx.executors.inductor_exec import inductor_unavailable_reason
from thunderx.executors.nvfuser_exec import NvFuserProgram
from thunderx.executors.regions import is_layout, partition, refine, schedule
from thunderx.ir import eval_jaxpr
from thunderx.passes import closure_convert, optimize

from .test_nvfuser import _run, programs

needs_inductor = pytest.mark.skipif(
    inductor_unavailable_reason() is not None,
    reason=f"inductor cannot run here: {inductor_unavailable_reason()}",
)


@pytest.fixture
def regions(monkeypatch):
    """The region mode (of programs with control flow or effects) for straight-line programs."""
    monkeypatch.setattr(inductor_whole, "WHOLE_PROGRAM", [False])


@pytest.fixture
def compile_small(monkeypatch, regions):
    """Region mode, compiling regions of any size (on CPU small ones otherwise run uncompiled)."""
    monkeypatch.setattr(inductor_exec, "CPU_MIN_ELEMENTS", 0)


def _gelu_gate(x, w, b):
    h = x @ w + b
    g = 0.5 * h * (1 + torch.tanh(0.7978845608 * (h + 0.044715 * h**3)))
    return (g * torch.sigmoid(h)).sum(-1)


def _args(dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(6, 5, generator=g, dtype=dtype),
        torch.randn(5, 7, generator=g, dtype=dtype),
        torch.randn(7, generator=g, dtype=dtype),
    )


def _opt(f, *args):
    return optimize(closure_convert(tx.make_jaxpr(f)(*args).jaxpr))


# ------------------------------------------------------------------------------- the protocol


def test_registry_names_every_executor_and_refuses_unknown_names():
    assert {"torch", "nvfuser", "inductor"} <= set(executor_names())
    with pytest.raises(ValueError, match="registered executors are .*'inductor'"):
        get_executor("tvm")
    with pytest.raises(ValueError, match="executor must be one of .*'torch'.*not 'tvm'"):
        tx.jit(lambda x: x, executor="tvm")


def test_default_on_cpu_is_tiered_where_inductor_runs_and_named_in_lower_text(monkeypatch):
    from thunderx.executors import tiered

    want = "tiered" if inductor_unavailable_reason(cheap=True) is None else "torch"
    assert default_executor({"cpu"}).name == want
    text = tx.jit(lambda x: torch.sin(x) * 2).lower(torch.ones(3)).as_text()
    assert f"# execution program: {get_executor(want).title} executor" in text
    monkeypatch.setattr(tiered, "TIER_UP", [False])  # THUNDERX_TIER_UP=0
    text = tx.jit(lambda x: torch.sin(x) * 3).lower(torch.ones(3)).as_text()
    assert "# execution program: torch codegen executor" in text


def test_a_new_executor_plugs_in_through_the_registry():
    calls = []

    class Interpreter(Executor):
        name, title = "test-interpreter", "reference interpreter"

        def lower(self, jaxpr):
            class Prog:
                fn_single = fn_single_plain = None

                def __call__(self, *args):
                    calls.append(len(args))
                    return tuple(eval_jaxpr(jaxpr, [], *args))

                def as_text(self):
                    return f"eval_jaxpr over {len(jaxpr.eqns)} equations"

            prog = Prog()
            prog.fn = prog.fn_plain = prog
            return prog

    register_executor(Interpreter())
    try:
        f = lambda x: torch.exp(x) + 1  # noqa: E731
        j = tx.jit(f, executor="test-interpreter")
        x = torch.randn(4)
        torch.testing.assert_close(j(x), f(x))
        assert calls, "the registered executor's program did not run"
        text = j.lower(x).as_text()
        assert "reference interpreter executor" in text and "eval_jaxpr over 2" in text
        ex = tx.explain(j)(x)
        assert ex.executor == "test-interpreter" and "test-interpreter" in ex.programs
    finally:
        unregister_executor("test-interpreter")
    assert "test-interpreter" not in executor_names()


# -------------------------------------------------------------------------- the partition policy


def test_single_op_regions_run_as_torch_calls():
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    opt = _opt(lambda x, w: torch.tanh(x @ w), x, w)
    assert any(r is not None for r in partition(opt))  # maximal partition: tanh alone
    assert all(r is None for r in refine(opt, partition(opt)))
    assert "_region" not in get_executor("inductor").lower(opt).as_text()


def test_trailing_layout_ops_leave_the_region_as_views():
    f = lambda x: (torch.exp(x) * 2).t().reshape(-1)  # noqa: E731
    opt = _opt(f, torch.randn(3, 4))
    names = [e.prim.name for e in opt.eqns]
    regions = refine(opt, partition(opt))
    by_name = dict(zip(names, regions))
    assert by_name["exp"] is not None and by_name["mul"] == by_name["exp"]
    assert by_name["transpose"] is None and by_name["reshape"] is None, (names, regions)


def test_layout_ops_feeding_the_region_stay_inside():
    f = lambda x, b: torch.exp(x + b) * 3  # noqa: E731  (b broadcasts inside the region)
    opt = _opt(f, torch.randn(3, 4), torch.randn(4))
    regions = refine(opt, partition(opt))
    assert len({r for r in regions}) == 1 and regions[0] is not None, regions


@given(programs())
def test_refined_partition_of_random_programs_is_schedulable_and_exact(steps):
    x = torch.randn(3, 3, dtype=torch.float64)
    closed = tx.make_jaxpr(lambda v: _run(steps, v))(x)
    jaxpr = optimize(closure_convert(closed.jaxpr))
    regions = refine(jaxpr, partition(jaxpr))
    available = {id(v) for v in jaxpr.invars}
    for u in schedule(jaxpr, regions):
        assert all(id(v) in available for v in u.inputs), "a unit runs before its inputs exist"
        available.update(id(v) for e in u.eqns for v in e.outputs)
        if u.region is not None:
            assert sum(not is_layout(e) for e in u.eqns) >= 2, "a single-op region survived"
    got = NvFuserProgram(jaxpr, refined=True)(*closed.consts, x)
    torch.testing.assert_close(got[0], _run(steps, x))


# --------------------------------------------------------------------------------- inductor


@needs_inductor
def test_inductor_matches_eager_and_keeps_matmul_in_torch(compile_small):
    args = _args()
    j = tx.jit(_gelu_gate, executor="inductor")
    torch.testing.assert_close(j(*args), _gelu_gate(*args), rtol=1e-12, atol=1e-12)
    text = j.lower(*args).as_text()
    assert "# execution program: inductor executor" in text
    host = text.split("# _impl_region")[0]
    assert "torch.addmm(" in host  # the matmul and its bias add: one torch call in the host
    assert text.count("def region") == 1 and "torch.tanh" in text
    prog = j.lower(*args).program
    assert len(prog.kernels) == 1 and prog.kernels[0].n_eqns >= 10


@needs_inductor
def test_regions_compile_once_and_are_shared_by_structure(compile_small):
    args = _args(torch.float32)
    j1 = tx.jit(_gelu_gate, executor="inductor")
    j2 = tx.jit(lambda x, w, b: _gelu_gate(x, w, b), executor="inductor")
    j1(*args)
    j1(*args)
    j2(*args)
    k1 = j1.lower(*args).program.kernels[0]
    (entry,) = j1.jit_function._cache.values()
    (entry2,) = j2.jit_function._cache.values()
    (compiled,) = entry.program.kernels[0]._by_layout.values()
    assert list(entry2.program.kernels[0]._by_layout.values()) == [compiled]
    assert k1.key == entry.program.kernels[0].key


@needs_inductor
def test_regions_go_to_inductor_without_dynamo(compile_small, monkeypatch):
    def no_dynamo(*a, **k):
        raise AssertionError("torch.compile called")

    monkeypatch.setattr(torch, "compile", no_dynamo)
    inductor_exec.clear_kernel_cache()
    args = _args()
    j = tx.jit(_gelu_gate, executor="inductor")
    torch.testing.assert_close(j(*args), _gelu_gate(*args), rtol=1e-12, atol=1e-12)


@needs_inductor
def test_an_input_with_other_strides_gets_its_own_kernel(compile_small):
    def f(x):
        return torch.tanh(x) * torch.sigmoid(x) + x * x

    x = torch.randn(6, 5, dtype=torch.float64)
    xt = x.t().contiguous().t()  # x's shape and values, transposed strides
    j = tx.jit(f, executor="inductor")
    for arg in (x, xt, x):
        torch.testing.assert_close(j(arg), f(x), rtol=1e-12, atol=1e-12)
    (entry,) = j.jit_function._cache.values()
    assert len(entry.program.kernels[0]._by_layout) == 2


@needs_inductor
def test_inductor_grad_matches_torch_func_and_torch_autograd_runs_through(compile_small):
    x, w, b = _args()
    loss = lambda w, x, b: _gelu_gate(x, w, b).square().mean()  # noqa: E731
    got = tx.jit(tx.grad(loss), executor="inductor")(w, x, b)
    torch.testing.assert_close(got, tf.grad(loss)(w, x, b), rtol=1e-10, atol=1e-12)
    wr = w.clone().requires_grad_()
    y = tx.jit(loss, executor="inductor")(wr, x, b)
    (g,) = torch.autograd.grad(y, wr)
    torch.testing.assert_close(g, tf.grad(loss)(w, x, b), rtol=1e-10, atol=1e-12)


@needs_inductor
def test_explorer_shows_the_inductor_choice_and_its_regions(compile_small):
    args = _args()
    ex = tx.explain(tx.jit(_gelu_gate, executor="inductor"))(*args)
    assert ex.executor == "inductor"
    assert "inductor regions" in ex.stages[-1].note and "inductor executor" in ex.stages[-1].note
    title, header, text = ex.programs["inductor"]
    assert "used by jit" in header and "def region" in text
    assert "used by jit" not in ex.programs["torch"][1]
    assert "inductor" in ex._repr_html_()
    h = tx.jit(_gelu_gate, executor="inductor").lower(*args)._repr_html_()
    assert "execution program: inductor executor" in h and 'class="region"' in h


@needs_inductor
def test_small_cpu_regions_run_uncompiled_and_large_ones_compile(regions):
    f = lambda x: torch.sigmoid(torch.tanh(x) * 2) + 1  # noqa: E731
    small, large = torch.randn(8, 8), torch.randn(512, 512)
    assert tx.jit(f, executor="inductor").lower(small).program.kernels == []
    (k_large,) = tx.jit(f, executor="inductor").lower(large).program.kernels
    assert k_large.elements >= inductor_exec.CPU_MIN_ELEMENTS
    text = tx.jit(f, executor="inductor").lower(small).as_text()
    assert "runs uncompiled, as torch calls in the host" in text and "_impl_region" not in text
    for x in (small, large):
        torch.testing.assert_close(tx.jit(f, executor="inductor")(x), f(x))


@needs_inductor
def test_control_flow_runs_in_the_host_program():
    from thunderx import lax

    def f(x):
        y = lax.fori_loop(0, 3, lambda i, c: torch.tanh(c * 1.5 + 0.1).sigmoid() * 2, x)
        return lax.cond(y.sum() > 0, lambda a: a.exp() * 2 + 1, lambda a: a.sin() * 3 - 1, y)

    for x in (torch.randn(5, 4, dtype=torch.float64), -torch.rand(5, 4, dtype=torch.float64)):
        torch.testing.assert_close(tx.jit(f, executor="inductor")(x), f(x), rtol=0, atol=0)
    text = tx.jit(f, executor="inductor").lower(x).as_text()
    assert "for " in text and "if " in text


# ----------------------------------------------------------------- inductor: whole programs


def _mlp_step(params, x, y):
    def loss(params):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = torch.relu(h)
        return torch.nn.functional.cross_entropy(h, y)

    grads = tx.grad(loss)(params)
    return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, grads)]


@needs_inductor
def test_a_straight_line_program_is_one_inductor_graph_with_torch_funcs_numbers(monkeypatch):
    # forward, backward and SGD of an MLP: one graph, compiled once per input layout, the
    # numbers of torch.func's gradients
    g = torch.Generator().manual_seed(0)
    params = [
        (torch.randn(6, 8, generator=g, dtype=torch.float64), torch.randn(8, dtype=torch.float64)),
        (torch.randn(8, 3, generator=g, dtype=torch.float64), torch.randn(3, dtype=torch.float64)),
    ]
    x, y = torch.randn(5, 6, generator=g, dtype=torch.float64), torch.tensor([0, 2, 1, 1, 0])
    compiles = []
    real = inductor_whole.WholeProgram._build
    monkeypatch.setattr(
        inductor_whole.WholeProgram,
        "_build",
        lambda self, args: compiles.append(1) or real(self, args),
    )
    inductor_exec.clear_kernel_cache()
    j = tx.jit(_mlp_step, executor="inductor")

    def ref_loss(params):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            h = torch.relu(h) if i < len(params) - 1 else h
        return torch.nn.functional.cross_entropy(h, y)

    want_g = tf.grad(ref_loss)(params)
    for _ in range(3):
        got = j(params, x, y)
        for (w, b), (gw, gb), (nw, nb) in zip(params, want_g, got):
            torch.testing.assert_close(nw, w - 0.1 * gw, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(nb, b - 0.1 * gb, rtol=1e-12, atol=1e-12)
    assert len(compiles) == 1
    prog = j.lower(params, x, y).program
    assert prog.whole is not None and prog.whole.failure is None
    assert "the whole program is one inductor graph" in j.lower(params, x, y).as_text()
    ex = tx.explain(j)(params, x, y)
    assert "1 inductor regions" in ex.stages[-1].note


@needs_inductor
def test_whole_program_recompiles_for_another_layout_and_serves_torch_autograd():
    def f(x, w):
        return torch.tanh(x @ w) * torch.sigmoid(x.sum(-1, keepdim=True))

    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(6, 5, generator=g), torch.randn(5, 4, generator=g)
    xt = x.t().contiguous().t()  # x's values, transposed strides
    j = tx.jit(f, executor="inductor")
    for arg in (x, xt, x):
        torch.testing.assert_close(j(arg, w), f(x, w))
    (entry,) = j.jit_function._cache.values()
    assert len(entry.program.whole._by_layout) == 2
    wr = w.clone().requires_grad_()
    (gw,) = torch.autograd.grad(j(x, wr).sum(), wr)
    torch.testing.assert_close(gw, tf.grad(lambda w: f(x, w).sum())(w))


@needs_inductor
def test_programs_with_effects_or_control_flow_compile_regions_instead():
    from thunderx import lax

    x = torch.randn(4, 4)
    draw = tx.jit(lambda x: torch.rand_like(x) * 0 + torch.tanh(x) * 2 + 1, executor="inductor")
    text = draw.lower(x).as_text()
    assert "fusion regions compiled by inductor: rand" in text and "has effects" in text
    torch.testing.assert_close(draw(x), torch.tanh(x) * 2 + 1)
    loop = tx.jit(lambda x: lax.fori_loop(0, 2, lambda i, c: c * 2, x), executor="inductor")
    assert "control flow (scan) runs in the host program" in loop.lower(x).as_text()
    torch.testing.assert_close(loop(x), x * 4)


@needs_inductor
def test_a_program_inductor_refuses_runs_as_the_torch_program(monkeypatch):
    import torch._inductor.compile_fx as cfx

    def refuse(*a, **k):
        raise RuntimeError("no kernel for this")

    monkeypatch.setattr(cfx, "compile_fx", refuse)
    inductor_exec.clear_kernel_cache()
    f = lambda x: torch.exp(x) * 3 - x  # noqa: E731
    j = tx.jit(f, executor="inductor")
    x = torch.randn(7)
    torch.testing.assert_close(j(x), f(x))
    (entry,) = j.jit_function._cache.values()
    text = entry.program.as_text()
    assert "inductor refused the program (RuntimeError: no kernel for this)" in text


@needs_inductor
@pytest.mark.parametrize("executor", ["inductor", "nvfuser"])
def test_torch_autograd_through_fusing_executors(compile_small, executor):
    # compiled regions and nvFuser fusions are opaque to torch autograd: an input that requires
    # grad gets the torch executor's program, also after the kernels were built without grad
    def f(x, w):
        h = x @ w
        return torch.tanh(h) * torch.sigmoid(h) + h * h

    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(6, 5, generator=g), torch.randn(5, 4, generator=g)
    j = tx.jit(f, executor=executor)
    torch.testing.assert_close(j(x, w), f(x, w))
    wr = w.clone().requires_grad_()
    out = j(x, wr)
    torch.testing.assert_close(out, f(x, w))
    (gw,) = torch.autograd.grad(out.sum(), wr)
    torch.testing.assert_close(gw, tf.grad(lambda w: f(x, w).sum())(w))
    with torch.no_grad():  # no autograd asked for: the fused program
        assert not j(x, wr).requires_grad
