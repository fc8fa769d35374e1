"""The tiered executor: `jit`'s default for CPU programs where inductor runs.

A program starts as the torch executor's generated code, so a first call costs a trace and a
Python `exec`, never a compile. A straight-line program (what inductor takes as one graph) is
then compiled by inductor once it has earned it, as a JIT compiler tiers up a hot method:

- **Rent or buy.** Each call of the torch program is timed. When the calls together have taken as
  long as compiling is estimated to take (`compile_estimate`: seconds per equation, calibrated
  by this process's own compiles), the next call compiles. Whatever the number of calls, the
  total time is then at most about twice that of the better of "never compile" and "compile at
  once", the classic ski-rental bound; a program called a few times never compiles.
- **Measured, not assumed.** The next `TRIAL_CALLS` calls alternate between the compiled and
  the torch program, so both are timed in the same seconds, and the faster by median stays for
  good (a small program's compiled kernels can lose to torch's). Only then do calls stop being
  timed.
- **Never a failure of its own.** A program inductor refuses, or whose compiled call raises,
  stays the torch executor's (the reason is in `as_text()` and `status()`); a call with an input
  layout (strides) the compiled program was not made for runs the torch program rather than
  compiling again.

Values may differ between the tiers by rounding (inductor fuses and reorders float operations,
as `torch.compile` does); `jit(f, executor="torch")` keeps one program, and `THUNDERX_TIER_UP=0`
switches tiering off for a process. Under torch autograd (an input requiring grad) and inside
`torch.compile`, the torch program always runs.

>>> f = thunderx.jit(lambda x: (x.sin() * 2).sum(0))
>>> lowered = f.lower(torch.randn(4, 3))
>>> lowered.executor, lowered.program.status()["tier"]
('tiered', 'torch')
"""

from __future__ import annotations

import collections
import math
import os
import statistics
import sys
import threading
import time
import weakref

import torch

from thunderx.executors.base import Executor, register_executor
from thunderx.executors.inductor_exec import InductorProgram, inductor_unavailable_reason
from thunderx.executors.inductor_whole import whole_program_reason
from thunderx.executors.torch_codegen import compile_jaxpr
from thunderx.ir import Jaxpr

#: False: jit's default on CPU is the torch executor alone (`THUNDERX_TIER_UP=0`).
TIER_UP = [os.environ.get("THUNDERX_TIER_UP", "1") not in ("", "0")]
#: A program whose equations make fewer elements than this stays torch: its calls are too short
#: for the timing to be worth it or for fused kernels to gain.
MIN_ELEMENTS = 1 << 15
#: A program of more equations stays torch: inductor's compile grows faster than linearly with
#: the graph (a GRU's unrolled gradient, 4,211 equations: 160 s), too long a pause for one call.
MAX_EQNS = 1000
#: Calls of the torch program before a compile, however long they take (the first call of a
#: program pays for allocations and caches no later call does).
MIN_CALLS = 3
#: Timed calls on trial, alternating between the compiled and the torch program, before the
#: two are compared; the first `TRIAL_WARMUP` of each left out (fresh output buffers, kernels
#: not yet in cache).
TRIAL_CALLS, TRIAL_WARMUP = 64, 4
#: The torch program's recent call times kept (the compile's own time is told from them).
HISTORY = 24
#: Calls between two refreshes of a program's compile estimate (the one-time import it counts
#: may have been paid by another program since, the calibration may have moved).
REFRESH_CALLS = 256
#: The compile-time model: seconds per program plus seconds per equation (measured on a 2-core
#: CPU: 1.6-2.3 s for per-example gradients of an MLP (32 equations) and a transformer layer's
#: gradient (58)), and the one-time import of inductor, paid by the first compile of a process.
PRIOR_S, PER_EQN_S, IMPORT_S = 1.0, 0.025, 3.0

_calibration = {"scale": 1.0, "compiles": 0}
_unsettled: weakref.WeakSet = weakref.WeakSet()  # programs still renting, compiling or on trial
_calibration_lock = threading.Lock()
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def compile_estimate(n_eqns: int) -> float:
    """Seconds inductor is expected to take to compile a program of `n_eqns` equations here: the
    model above, scaled by how long this process's compiles took against it."""
    est = (PRIOR_S + PER_EQN_S * n_eqns) * _calibration["scale"]
    if "torch._inductor.compile_fx" not in sys.modules:
        est += IMPORT_S
    return est


def _calibrate(n_eqns: int, seconds: float) -> None:
    with _calibration_lock:
        k = _calibration["compiles"] = _calibration["compiles"] + 1
        ratio = seconds / (PRIOR_S + PER_EQN_S * n_eqns)
        weight = max(1 / k, 0.25)  # the mean of the first compiles, then a moving average
        _calibration["scale"] += weight * (ratio - _calibration["scale"])


def run_reason() -> str | None:
    """None when this process may move programs to another tier now, else why not."""
    if not TIER_UP[0]:
        return "tiering is switched off (THUNDERX_TIER_UP=0)"
    if torch.are_deterministic_algorithms_enabled():
        # which tier runs depends on timings, so results could differ from one run to the next
        return "torch.use_deterministic_algorithms is on"
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        # replicas must round alike, and each rank's timings could pick another tier
        return "torch.distributed is initialized"
    return None


def tier_up_reason(jaxpr: Jaxpr) -> str | None:
    """None when `jaxpr`'s program may move to inductor once hot, else why it stays torch."""
    reason = run_reason()
    if reason is not None:
        return reason
    reason = inductor_unavailable_reason(cheap=True)
    if reason is not None:
        return f"inductor cannot run here: {reason}"
    reason = whole_program_reason(jaxpr)
    if reason is not None:
        return f"not one inductor graph: {reason}"
    if len(jaxpr.eqns) > MAX_EQNS:
        return f"too large for one compile pause ({len(jaxpr.eqns)} equations > {MAX_EQNS})"
    made = [v.aval for e in jaxpr.eqns for v in e.outputs]
    avals = [v.aval for v in jaxpr.invars + jaxpr.constvars] + made
    if any(getattr(a, "device", None) is not None and a.device.type != "cpu" for a in avals):
        return "tiering is for CPU programs (nvFuser is the fusing executor on CUDA)"
    elements = sum(math.prod(getattr(a, "shape", ())) for a in made)
    if elements < MIN_ELEMENTS:
        return f"too small to gain from compiled kernels ({elements} elements < {MIN_ELEMENTS})"
    return None


class TieredProgram:
    """The torch executor's program of `jaxpr`, replaced by inductor's once hot and faster (see
    the module's docstring). `status()` tells where it stands."""

    def __init__(self, jaxpr: Jaxpr, name: str = "jitted"):
        self.jaxpr, self.name = jaxpr, name
        self.torch = compile_jaxpr(jaxpr, name)
        self.fn_plain, self.fn_single_plain = self.torch.fn_plain, self.torch.fn_single_plain
        self.source_plain = self.torch.source_plain
        self.reason = tier_up_reason(jaxpr)
        self.compiled: InductorProgram | None = None
        self.decision: str | None = None
        self.calls = 0
        self.spent = self.compile_s = 0.0
        self.budget = math.inf
        self.torch_times: collections.deque = collections.deque(maxlen=HISTORY)
        self.trial_times: list[float] = []  # the compiled program's calls on trial
        self.rival_times: list[float] = []  # the torch program's, interleaved with them
        if self.reason is not None:
            self.tier = "torch"
            self.fn, self.fn_single = self.torch.fn, self.torch.fn_single
            return
        self.tier = "renting"  # -> "compiling" -> "trial" -> "torch" or "inductor"
        self.ticks = 0  # timed calls, trial included
        _unsettled.add(self)
        self.budget = compile_estimate(len(jaxpr.eqns))
        self._lock = threading.Lock()
        self._torch_fns = (self.torch.fn, self.torch.fn_single)
        self._compiled_fns: tuple = (None, None)
        self._final: list = [None, None]  # the chosen program's functions, once chosen
        self.fn = self._entry(0)
        self.fn_single = self._entry(1) if self.torch.fn_single is not None else None

    @property
    def source(self) -> str:
        return self.torch.source

    def __call__(self, *args):
        return self.fn(*args)

    def _entry(self, k: int):
        final, torch_fn, timed, compiling = self._final, self._torch_fns[k], self._timed, _compiling

        def call(*args):
            if compiling():  # torch.compile captures the torch program's calls
                return torch_fn(*args)
            fn = final[k]
            if fn is not None:
                return fn(*args)
            return timed(k, args)

        return call

    def _timed(self, k: int, args):
        tier = self.tier
        if tier == "renting" and self.spent >= self.budget and self.calls >= MIN_CALLS:
            with self._lock:
                buy = self.tier == "renting"
                if buy:
                    self.tier = "compiling"
            if buy:
                return self._buy(k, args)
            tier = self.tier
        # on trial, calls alternate between the programs: both are timed in the same seconds
        # (another tenant's load, the allocator's state), as a benchmark interleaves its rounds
        compiled_turn = tier == "trial" and self.ticks % 2 == 0
        fn = self._compiled_fns[k] if compiled_turn else self._torch_fns[k]
        t0 = time.perf_counter()
        out = fn(*args)
        dt = time.perf_counter() - t0
        self.ticks += 1
        if tier == "renting":
            self.calls += 1
            self.spent += dt
            if self.calls % REFRESH_CALLS == 0:  # inductor imported since, or recalibrated
                self.budget = compile_estimate(len(self.jaxpr.eqns))
            if self.calls > 1:  # a first run allocates and warms caches as no later one does
                self.torch_times.append(dt)
        elif tier == "trial":
            (self.trial_times if compiled_turn else self.rival_times).append(dt)
            if len(self.trial_times) + len(self.rival_times) >= TRIAL_CALLS:
                self._decide()
        return out

    def _buy(self, k: int, args):
        """Compile (on this call, whose outputs the compiled program computes) and start the
        trial; on any failure the torch program stays and computes this call."""
        reason = run_reason()  # the process may have changed since the program was made
        if reason is not None:
            self._settle("torch", reason)
            return self._torch_fns[k](*args)
        try:
            reason = inductor_unavailable_reason()  # the full check, importing torch._dynamo
            if reason is not None:
                raise RuntimeError(reason)
            import torch._inductor.compile_fx  # noqa: F401 - a one-time cost, not the compile's
        except Exception as e:  # noqa: BLE001 - reported by status() and as_text()
            self._settle("torch", f"inductor cannot run here ({type(e).__name__}: {e})")
            return self._torch_fns[k](*args)
        t0 = time.perf_counter()
        try:
            prog = InductorProgram(self.jaxpr, self.name)
            out = (prog.fn, prog.fn_single)[k](*args)
        except Exception as e:  # noqa: BLE001 - reported by status() and as_text()
            first = str(e).splitlines()[0] if str(e) else ""
            self._settle("torch", f"the compiled program failed ({type(e).__name__}: {first})")
            return self._torch_fns[k](*args)
        elapsed = time.perf_counter() - t0
        whole = prog.whole
        if whole is not None and whole.failure is not None:
            self._settle("torch", f"inductor refused the program ({whole.failure})")
            return out
        self.compile_s = max(elapsed - statistics.median(self.torch_times), 0.0)
        _calibrate(len(self.jaxpr.eqns), self.compile_s)
        if whole is not None:
            whole.frozen = True  # another input layout runs the torch program, uncompiled
        self.compiled = prog
        self._compiled_fns = (prog.fn, prog.fn_single)
        self.tier = "trial"
        return out

    def _decide(self) -> None:
        ours = statistics.median(self.trial_times[TRIAL_WARMUP:])
        theirs = statistics.median(self.rival_times[TRIAL_WARMUP:])
        how = f"compiled {ours * 1e3:.3g} ms against torch {theirs * 1e3:.3g} ms a call"
        if ours <= theirs:
            self._settle("inductor", how)
        else:
            self.compiled = None  # its kernels and recycled buffers go
            self._settle("torch", how)

    def _settle(self, tier: str, why: str) -> None:
        _unsettled.discard(self)
        self.decision = why
        fns = self._compiled_fns if tier == "inductor" else self._torch_fns
        self._final[1] = fns[1]
        self._final[0] = fns[0]
        self.tier = tier
        if tier == "inductor":
            # the torch program now runs only for another layout or under autograd (which
            # recycles nothing): the large buffers it kept would double the program's memory
            self.torch.release_buffers()

    def status(self) -> dict:
        """Where the program stands: `tier` ("torch" or "inductor" once settled; "renting",
        "compiling" or "trial" before), `settled`, timed `calls` and the seconds they `spent`,
        the compile `budget` they must reach, `compile_s`, and the `reason` it never tiers or the
        `decision` that settled it."""
        return {
            "tier": self.tier,
            "settled": self.tier in ("torch", "inductor"),
            "calls": self.calls,
            "spent_s": self.spent,
            "budget_s": self.budget,
            "compile_s": self.compile_s,
            "reason": self.reason,
            "decision": self.decision,
        }

    def as_text(self) -> str:
        if self.reason is not None:
            head = f"# stays the torch executor's program: {self.reason}"
        elif self.tier in ("torch", "inductor"):
            head = f"# settled on {self.tier}: {self.decision}"
        else:
            head = (
                f"# {self.tier}: the torch executor's program runs; inductor compiles the "
                f"program once its calls have taken {self.budget:.3g} s (the estimated compile "
                f"time; {self.spent:.3g} s so far), then the faster of the two stays"
            )
        text = f"{head}\n{self.torch.source}"
        if self.compiled is not None:
            text += f"\n# compiled program\n{self.compiled.as_text()}"
        return text

    def __repr__(self) -> str:
        return self.as_text()


def settle(call, timeout_s: float = 300.0) -> dict:
    """Call the zero-argument `call` (e.g. `lambda: f(x)` for a jitted `f`) until every tiered
    program it runs has settled on its tier, as a benchmark's warm-up does, so that what is
    timed next is the program's steady state. Returns the `calls` made, the `seconds` they
    took, the `status()` of each program that was still unsettled, and whether all `settled`
    within `timeout_s`."""
    t0 = time.perf_counter()
    before = {p: p.ticks for p in list(_unsettled)}
    call()
    calls = 1
    mine = [p for p in list(_unsettled) if p.ticks != before.get(p, 0)]
    waiting = list(mine)
    while waiting and time.perf_counter() - t0 < timeout_s:
        call()
        calls += 1
        waiting = [p for p in waiting if p in _unsettled]
    return {
        "calls": calls,
        "seconds": time.perf_counter() - t0,
        "programs": [p.status() for p in mine],
        "settled": not waiting,
    }


class TieredExecutor(Executor):
    """The torch executor's program, then inductor's once the program is hot and faster."""

    name = "tiered"
    title = "tiered (torch codegen, then inductor when hot)"
    default_priority = 5

    def is_default_for(self, device_types: set[str]) -> bool:
        if not TIER_UP[0] or device_types != {"cpu"}:
            return False
        return inductor_unavailable_reason(cheap=True) is None

    def lower(self, jaxpr: Jaxpr) -> TieredProgram:
        return TieredProgram(jaxpr)


register_executor(TieredExecutor())
