"""Side-by-side timing: candidates run interleaved in one process, several rounds, and each
round's ratio to the baseline is taken; the report is the median ratio (absolute times on a shared
machine are noise, ratios measured in the same second are not)."""

from __future__ import annotations

import contextlib
import math
import statistics
import time

from thunderx.executors import tiered


def _time(fn, inner: int) -> float:
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def calibrate(fn, target_s: float = 0.02) -> int:
    fn()
    n = 1
    while True:
        t = _time(fn, n)
        if t * n >= target_s or n >= 1 << 16:
            return max(1, n)
        n *= 2


# `run.py --quick` shortens every measurement (fewer, shorter rounds)
QUICK = [False]


# Each round times every callable this many times, interleaved, and keeps its fastest: the
# machine's noise (other tenants, page-fault storms) only ever adds time, so the minimum of
# back-to-back measurements is the estimate least disturbed by it (as `timeit` advises).
REPEATS = 3


def compare(baseline, candidates: dict, rounds: int = 15, target_s: float = 0.02) -> dict:
    """`baseline` and each candidate are zero-argument callables (already warmed up by the
    caller or here). Returns {name: (median ratio candidate/baseline, median seconds)}, and
    under "__rounds__" each candidate's per-round ratios (the spread of the median). A round
    measures every callable REPEATS times, interleaved, each over about target_s / REPEATS
    seconds, and takes each one's fastest."""
    if QUICK[0]:
        rounds, target_s = min(rounds, 3), min(target_s, 0.01)
    fns = {"__baseline__": baseline, **candidates}
    # a thunderx candidate's tiered programs (jit's default on CPU) settle on their tier first:
    # what is timed is the steady state, as torch.compile's peer is timed after its compile
    settled = {k: tiered.settle(f) for k, f in candidates.items()}
    inner = {k: calibrate(f, target_s / REPEATS) for k, f in fns.items()}
    times = {k: [] for k in fns}
    ratios = {k: [] for k in candidates}
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(list(fns)))
        this = {k: math.inf for k in fns}
        for _ in range(REPEATS):
            for k in order:
                this[k] = min(this[k], _time(fns[k], inner[k]))
        for k in order:
            times[k].append(this[k])
        for k in candidates:
            ratios[k].append(this[k] / this["__baseline__"])
    out = {k: (statistics.median(ratios[k]), statistics.median(times[k])) for k in candidates}
    out["__baseline__"] = (1.0, statistics.median(times["__baseline__"]))
    out["__rounds__"] = ratios
    out["__tiers__"] = {k: tier_note(v) for k, v in settled.items()}
    return out


def tier_note(report: dict) -> str:
    """What a row's note says of how its tiered programs settled ('' for none)."""
    parts = []
    for p in report["programs"]:
        if p["tier"] == "inductor":
            parts.append(
                f"tiered: inductor after {p['calls']} calls ({p['spent_s']:.2g} s), "
                f"compile {p['compile_s']:.2g} s"
            )
        elif p["decision"] is not None:
            parts.append(f"tiered: stays torch ({p['decision']})")
        else:
            parts.append(f"tiered: not settled after {report['seconds']:.0f} s")
    return "; ".join(parts)


def spread(res: dict, key: str, over: str | None = None) -> tuple[float, float] | None:
    """(min, max) over rounds of `key`'s ratio to the baseline, or to candidate `over` when
    given (each round's two ratios were measured in the same second)."""
    rounds = res.get("__rounds__", {})
    if key not in rounds or (over is not None and over not in rounds):
        return None
    r = rounds[key] if over is None else [a / b for a, b in zip(rounds[key], rounds[over])]
    return min(r), max(r)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


_warm: list = []


def warm_compiler() -> None:
    """Import and start dynamo/inductor once on an unrelated function, so a first-call time
    measures compiling the case, not starting the compiler."""
    if not _warm:
        import torch

        torch.compile(lambda z: z.sin() + 1)(torch.randn(3))
        _warm.append(True)


@contextlib.contextmanager
def cold_compile_caches():
    """No compiled graph reused from disk or memory (torch's and thunderx's): a call compiles."""
    import torch
    import torch._inductor.config as cfg

    from thunderx.executors.inductor_exec import clear_kernel_cache

    torch._dynamo.reset()
    clear_kernel_cache()
    old = cfg.force_disable_caches
    cfg.force_disable_caches = True
    try:
        yield
    finally:
        cfg.force_disable_caches = old


def first_call(fn, *args) -> float:
    """Seconds of fn's first call with cold compile caches (a warm compiler; warm caches under
    --quick)."""
    warm_compiler()
    if QUICK[0]:
        # --quick: torch's on-disk compile caches stay on (a cold compile costs 10-60 s a case)
        return timed(lambda: fn(*args))
    with cold_compile_caches():
        return timed(lambda: fn(*args))


def first_calls(makers: dict, args: tuple, rounds: int = 3) -> dict:
    """First-call seconds of several compilers, measured like `compare`: `makers` maps a label
    to a zero-argument function returning a fresh, never-called callable; each round makes one
    of each and times its first call with cold compile caches, interleaved (the order flips
    every round). A cold compile is one long sample at the mercy of the machine (the same code
    measured 0.9-1.8 s), so the report is the median over rounds. Returns {label: (median
    seconds, per-round seconds)}; one round under --quick."""
    rounds = 1 if QUICK[0] else rounds
    times = {k: [] for k in makers}
    for r in range(rounds):
        order = list(makers) if r % 2 == 0 else list(reversed(list(makers)))
        for k in order:
            times[k].append(first_call(makers[k](), *args))
    return {k: (statistics.median(t), t) for k, t in times.items()}
