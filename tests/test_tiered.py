"""The tiered executor (jit's default on CPU): the torch program first, inductor's once the
program's calls have paid for a compile, and only if it measures faster. Every call's value is
checked against eager torch, whatever tier ran it: the tier changes speed, never the answer."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import thunderx as tx
from thunderx.executors import default_executor, tiered
from thunderx.executors.inductor_exec import inductor_unavailable_reason
from thunderx.executors.torch_codegen import compile_jaxpr

needs_inductor = pytest.mark.skipif(
    inductor_unavailable_reason() is not None,
    reason=f"inductor cannot run here: {inductor_unavailable_reason()}",
)


def body(x, w):
    return (torch.tanh(x @ w) * 2 + x.sin()).sum(0)


def eager(x, w):
    return body(x, w)


def args(n=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)


def program(f, *a):
    return f.lower(*a).program


@pytest.fixture
def eager_budget(monkeypatch):
    """Programs made inside the test tier up after MIN_CALLS calls."""
    monkeypatch.setattr(tiered, "compile_estimate", lambda n: 0.0)


def stand_in(monkeypatch, compiled):
    """Inductor, as the tiered executor sees it, replaced by `compiled` (no real compile)."""
    monkeypatch.setattr(tiered, "InductorProgram", compiled)
    monkeypatch.setattr(tiered, "inductor_unavailable_reason", lambda cheap=False: None)


class SlowCompiled:
    """Stands in for inductor's program: the torch program's values, `delay` s slower a call."""

    made = 0

    def __init__(self, jaxpr, name, delay=0.02):
        SlowCompiled.made += 1
        torch_prog = compile_jaxpr(jaxpr, name)
        self.whole = None

        def slow(fn):
            if fn is None:
                return None

            def call(*a):
                time.sleep(delay)
                return fn(*a)

            return call

        self.fn, self.fn_single = slow(torch_prog.fn), slow(torch_prog.fn_single)

    def as_text(self):
        return "# stand-in"


@needs_inductor
def test_default_on_cpu_is_tiered_and_tiering_can_be_switched_off(monkeypatch):
    assert default_executor({"cpu"}).name == "tiered"
    f = tx.jit(body)
    assert f.lower(*args()).executor == "tiered"
    monkeypatch.setattr(tiered, "TIER_UP", [False])
    assert default_executor({"cpu"}).name == "torch"
    # a program lowered by the tiered executor with tiering off stays the torch program
    prog = tiered.TieredProgram(tx.jit(body).lower(*args()).optimized)
    assert prog.status()["tier"] == "torch" and "switched off" in prog.reason


def test_a_small_program_stays_torch_with_no_timing_in_its_calls():
    f = tx.jit(lambda x: x.sin() * 2, executor="tiered")
    x = torch.randn(8)
    torch.testing.assert_close(f(x), x.sin() * 2)
    prog = program(f, x)
    assert prog.status()["tier"] == "torch" and "too small" in prog.reason
    assert prog.fn is prog.torch.fn  # the torch program itself: nothing between
    assert "stays the torch executor's program: too small" in f.lower(x).as_text()


def test_a_slower_compiled_program_is_tried_and_dropped(eager_budget, monkeypatch):
    stand_in(monkeypatch, SlowCompiled)
    f = tx.jit(body, executor="tiered")
    a = args()
    want = eager(*a)
    tiers = []
    for _ in range(tiered.MIN_CALLS + tiered.TRIAL_CALLS + 3):
        torch.testing.assert_close(f(*a), want)
        tiers.append(program(f, *a).status()["tier"])
    assert tiers[0] == "renting" and "trial" in tiers and tiers[-1] == "torch", tiers
    status = program(f, *a).status()
    assert status["settled"] and "against torch" in status["decision"]
    assert program(f, *a).compiled is None  # the losing program is dropped


def test_a_failing_compile_leaves_the_torch_program_and_the_right_value(eager_budget, monkeypatch):
    def refuse(jaxpr, name):
        raise RuntimeError("no kernel for you")

    stand_in(monkeypatch, refuse)
    f = tx.jit(body, executor="tiered")
    a = args()
    for _ in range(tiered.MIN_CALLS + 2):
        torch.testing.assert_close(f(*a), eager(*a))
    status = program(f, *a).status()
    assert status["tier"] == "torch" and "no kernel for you" in status["decision"]


def test_threads_calling_during_the_tier_up_all_get_the_right_values(eager_budget, monkeypatch):
    stand_in(monkeypatch, SlowCompiled)
    SlowCompiled.made = 0
    f = tx.jit(body, executor="tiered")
    inputs = [args(seed=s) for s in range(4)]
    wants = [eager(*a) for a in inputs]
    torch.testing.assert_close(f(*inputs[0]), wants[0])  # traced once, before the threads
    errors = []

    def worker(k):
        try:
            for _ in range(60):  # torch calls made while one thread compiles do not count
                torch.testing.assert_close(f(*inputs[k]), wants[k])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert SlowCompiled.made == 1  # one thread compiled; the others kept calling torch
    prog = program(f, *inputs[0])
    assert prog.status()["settled"], (prog.status(), len(prog.trial_times), prog.ticks)


def test_under_torch_autograd_the_torch_program_runs_and_differentiates(eager_budget, monkeypatch):
    stand_in(monkeypatch, SlowCompiled)
    f = tx.jit(body, executor="tiered")
    x, w = args()
    for _ in range(tiered.MIN_CALLS + tiered.TRIAL_CALLS + 2):
        f(x, w)
    w1 = w.clone().requires_grad_()
    w2 = w.clone().requires_grad_()
    f(x, w1).sum().backward()
    eager(x, w2).sum().backward()
    torch.testing.assert_close(w1.grad, w2.grad)


@needs_inductor
def test_hot_program_moves_to_inductor_with_eager_values_and_keeps_other_layouts(eager_budget):
    f = tx.jit(body, executor="tiered")
    a = args()
    want = eager(*a)
    report = tiered.settle(lambda: torch.testing.assert_close(f(*a), want), timeout_s=240)
    assert report["settled"], report
    prog = program(f, *a)
    status = prog.status()
    assert report["programs"] and report["programs"][0]["calls"] >= tiered.MIN_CALLS
    assert status["compile_s"] > 0 and "against torch" in status["decision"]
    if status["tier"] == "inductor":  # faster here: the compiled kernels serve this layout
        whole = prog.compiled.whole
        compiled_layouts = dict(whole._by_layout)
        x_t = a[0].t().contiguous().t()  # the same values, another layout
        torch.testing.assert_close(f(x_t, a[1]), want)
        assert whole._by_layout == compiled_layouts  # run by the torch program, no compile
        assert "settled on inductor" in prog.as_text() and "# compiled program" in prog.as_text()
    for seed in (1, 2):  # whichever tier stayed: new values, eager's answers
        b = args(seed=seed)
        torch.testing.assert_close(f(*b), eager(*b))


def test_rent_or_buy_budget_is_the_calibrated_compile_estimate(monkeypatch):
    monkeypatch.setattr(tiered, "_calibration", {"scale": 1.0, "compiles": 0})
    base = tiered.PRIOR_S + tiered.PER_EQN_S * 40
    monkeypatch.setitem(__import__("sys").modules, "torch._inductor.compile_fx", object())
    assert tiered.compile_estimate(40) == pytest.approx(base)
    tiered._calibrate(40, 2 * base)  # this machine compiles at half the modelled speed
    assert tiered.compile_estimate(40) == pytest.approx(2 * base)
    tiered._calibrate(40, 2 * base)
    assert tiered.compile_estimate(40) == pytest.approx(2 * base)


def test_torch_compile_around_a_settled_program_captures_the_torch_program(monkeypatch):
    class Marked(SlowCompiled):  # a stand-in whose values tell that it ran
        def __init__(self, jaxpr, name):
            super().__init__(jaxpr, name, delay=0.0)
            inner = self.fn
            self.fn = lambda *a: tuple(o + 1 for o in inner(*a))
            self.fn_single = None

    monkeypatch.setattr(tiered, "compile_estimate", lambda n: 0.0)
    stand_in(monkeypatch, Marked)
    monkeypatch.setattr(tiered.TieredProgram, "_decide", lambda self: self._settle("inductor", "-"))
    f = tx.jit(lambda x, w: (body(x, w), x.sum()), executor="tiered")
    a = args()
    want = eager(*a)
    for _ in range(tiered.MIN_CALLS + tiered.TRIAL_CALLS + 1):
        f(*a)
    assert program(f, *a).status()["tier"] == "inductor"
    torch.testing.assert_close(f(*a)[0], want + 1)  # the settled stand-in runs
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: f(x, w)[0] * 1.0, backend="eager")
    torch.testing.assert_close(compiled(*a), want)  # dynamo traced the torch program


@pytest.mark.parametrize("when", ["before", "after"])
def test_deterministic_algorithms_keep_the_torch_program(eager_budget, monkeypatch, when):
    stand_in(monkeypatch, SlowCompiled)
    before = torch.are_deterministic_algorithms_enabled()
    try:
        if when == "before":
            torch.use_deterministic_algorithms(True)
        f = tx.jit(body, executor="tiered")
        a = args()
        f(*a)
        torch.use_deterministic_algorithms(True)  # set after the program was made
        for _ in range(tiered.MIN_CALLS + 2):
            torch.testing.assert_close(f(*a), eager(*a))
        status = program(f, *a).status()
    finally:
        torch.use_deterministic_algorithms(before)
    assert status["tier"] == "torch"
    assert "deterministic" in (status["reason"] or status["decision"])


def test_settling_on_the_compiled_program_releases_the_torch_programs_buffers(
    eager_budget, monkeypatch
):
    stand_in(monkeypatch, SlowCompiled)
    monkeypatch.setattr(tiered.TieredProgram, "_decide", lambda self: self._settle("inductor", "-"))
    a = torch.randn(2048, 1024), torch.randn(2048, 1024)  # an 8 MiB output: recycled
    f = tx.jit(lambda x, y: x * y + 1, executor="tiered")
    want = a[0] * a[1] + 1
    for _ in range(tiered.MIN_CALLS):
        torch.testing.assert_close(f(*a), want)
    pools = program(f, *a).torch.pools
    assert pools and any(p.storages for p in pools.values())
    for _ in range(tiered.TRIAL_CALLS + 1):
        torch.testing.assert_close(f(*a), want)
    assert program(f, *a).status()["tier"] == "inductor"
    assert not any(p.storages for p in pools.values())


def test_a_program_too_large_for_one_compile_pause_stays_torch(monkeypatch):
    monkeypatch.setattr(tiered, "inductor_unavailable_reason", lambda cheap=False: None)
    monkeypatch.setattr(tiered, "MAX_EQNS", 4)
    f = tx.jit(body, executor="tiered")  # 6 equations
    a = args()
    torch.testing.assert_close(f(*a), eager(*a))
    prog = program(f, *a)
    assert prog.status()["tier"] == "torch" and "too large" in prog.reason
    assert prog.fn is prog.torch.fn


def test_the_compile_budget_is_refreshed_while_renting(monkeypatch):
    stand_in(monkeypatch, SlowCompiled)
    monkeypatch.setattr(tiered, "REFRESH_CALLS", 4)
    estimate = [1e9]  # a compile nothing could pay for, then one that is paid already
    monkeypatch.setattr(tiered, "compile_estimate", lambda n: estimate[0])
    f = tx.jit(body, executor="tiered")
    a = args()
    for _ in range(3):
        f(*a)
    assert program(f, *a).status()["budget_s"] == 1e9
    estimate[0] = 0.0
    for _ in range(3):
        torch.testing.assert_close(f(*a), eager(*a))
    assert program(f, *a).status()["tier"] == "trial"
