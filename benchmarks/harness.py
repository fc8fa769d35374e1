"""Side-by-side timing: candidates run interleaved in one process, several rounds, and each
round's ratio to the baseline is taken; the report is the median ratio (absolute times on a shared
machine are noise, ratios measured in the same second are not)."""

from __future__ import annotations

import contextlib
import statistics
import time


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


def compare(baseline, candidates: dict, rounds: int = 15, target_s: float = 0.02) -> dict:
    """`baseline` and each candidate are zero-argument callables (already warmed up by the
    caller or here). Returns {name: (median ratio candidate/baseline, median seconds)}."""
    fns = {"__baseline__": baseline, **candidates}
    inner = {k: calibrate(f, target_s) for k, f in fns.items()}
    times = {k: [] for k in fns}
    ratios = {k: [] for k in candidates}
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(list(fns)))
        this = {}
        for k in order:
            this[k] = _time(fns[k], inner[k])
            times[k].append(this[k])
        for k in candidates:
            ratios[k].append(this[k] / this["__baseline__"])
    out = {k: (statistics.median(ratios[k]), statistics.median(times[k])) for k in candidates}
    out["__baseline__"] = (1.0, statistics.median(times["__baseline__"]))
    return out


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
    """Seconds of fn's first call with cold compile caches (a warm compiler)."""
    warm_compiler()
    with cold_compile_caches():
        return timed(lambda: fn(*args))
