"""Long-run hygiene: generated sources leave linecache with their programs, memory stays flat
over many compiles, and the jit cache survives many threads evicting each other's entries."""

import collections
import gc
import linecache
import threading
import time
import traceback
import tracemalloc

import torch

import thunderx as tx


def _generated_files() -> set:
    return {k for k in linecache.cache if k.startswith("<thunderx-generated-")}


def _compile_and_drop(n: int, x) -> None:
    for _ in range(n):
        f = tx.jit(lambda v: torch.sin(v) * 2)
        f(x)


def test_generated_source_lives_as_long_as_its_program():
    f = tx.jit(lambda v: torch.sin(v) * 2)
    x = torch.ones(3)
    f(x)
    prog = f.jit_function._cache[next(iter(f.jit_function._cache))].program
    filename = prog.fn.__code__.co_filename
    assert filename in linecache.cache, "a live program's source must stay for tracebacks"
    assert "torch.sin" in "".join(linecache.getlines(filename))
    del f, prog
    gc.collect()
    assert filename not in linecache.cache, "a collected program's source must leave linecache"


def test_traceback_through_generated_code_shows_its_lines():
    # an index out of range fails inside the generated code; its traceback quotes that line
    f = tx.jit(lambda v, i: torch.index_select(v, 0, i))
    try:
        f(torch.ones(3), torch.tensor([10]))
    except (IndexError, RuntimeError) as e:
        frames = traceback.extract_tb(e.__traceback__)
    else:
        raise AssertionError("index_select out of range should raise")
    generated = [fr for fr in frames if fr.filename.startswith("<thunderx-generated-")]
    assert generated, "the failing call should run in generated code"
    assert "index_select" in generated[-1].line, generated[-1]


def test_memory_stays_flat_over_ten_thousand_compiled_programs():
    x = torch.ones(3)
    _compile_and_drop(50, x)  # warm caches (imports, interned names)
    gc.collect()
    files_before = len(_generated_files())
    objects_before = len(gc.get_objects())
    # 2,500 jitted functions compile 10,000 programs (the program and its variants)
    _compile_and_drop(2500, x)
    gc.collect()
    assert len(_generated_files()) - files_before <= 8, (
        f"{len(_generated_files()) - files_before} generated sources stayed in linecache"
    )
    grown = len(gc.get_objects()) - objects_before
    assert grown < 500, f"{grown} objects survived 2,500 dropped jitted functions"
    # bytes, measured by tracemalloc (slower, so over fewer compiles) after a warm-up window
    # (tables growing to their steady size): a leak of one filename string per program (about
    # 60 bytes) would grow it by ~70 kB here
    # The least growth of three windows: a table that doubles its size (weakref.finalize's
    # registry: 18 kB at once, when it happens to fill up inside a window, which depends on what
    # earlier tests left alive) grows one window; a leak grows every one.
    tracemalloc.start()
    try:
        _compile_and_drop(300, x)
        gc.collect()
        growths = []
        for _ in range(3):
            before = tracemalloc.get_traced_memory()[0]
            _compile_and_drop(300, x)
            gc.collect()
            growths.append(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()
    growth = min(growths)
    assert growth < 25_000, f"memory grew by {growths} bytes over 300 dropped jitted functions"


class _SlowHits(collections.OrderedDict):
    """A cache dict that pauses after each hit, widening the window in which another thread
    could evict the entry before it is reordered (as a preempted thread would)."""

    def get(self, key, default=None):
        value = super().get(key, default)
        if value is not None:
            time.sleep(0.0005)
        return value


def test_jit_cache_is_thread_safe_with_a_tiny_cache():
    # kwargs take the general path (lookup, reorder, evict) on every call
    f = tx.jit(lambda x, *, scale: x * scale + 1, cache_size=2)
    f.jit_function._cache = _SlowHits()
    hot, cold = torch.randn(2), [torch.randn(3), torch.randn(4), torch.randn(2, 2)]
    errors: list = []
    wrong: list = []
    start = threading.Barrier(8)

    def worker(k):
        start.wait()
        for i in range(60):
            x = hot if i % 2 else cold[(i + k) % len(cold)]
            try:
                out = f(x, scale=2.0)
            except Exception as e:  # noqa: BLE001 - collected and reported below
                errors.append(repr(e))
                return
            if not torch.equal(out, x * 2.0 + 1):
                wrong.append(tuple(x.shape))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, f"jit raised under 8 threads: {errors[:3]}"
    assert not wrong, f"wrong results for shapes {wrong[:3]}"
    assert f.cache_info()["size"] <= 2


def test_a_program_collected_inside_linecache_checkcache_does_not_break_it(monkeypatch, tmp_path):
    # linecache.checkcache loops over the keys it listed; a generated program collected during
    # that loop (a GC run inside its os.stat) must not remove its entry under the loop (KeyError)
    real = tmp_path / "real_module.py"
    real.write_text("x = 1\n")
    others = _generated_files()
    holder = {"f": tx.jit(lambda a: torch.cos(a) * 2.0)}
    holder["f"](torch.ones(2))
    ours = {k: linecache.cache[k][2] for k in _generated_files() - others}
    assert ours
    # a stale entry of a real file first, so that checkcache stats it before reaching ours
    entries = list(linecache.cache.items())
    linecache.cache.clear()
    linecache.cache[str(real)] = (6, 0.0, ["x = 1\n"], str(real))
    linecache.cache.update(entries)
    real_stat = linecache.os.stat

    def stat_and_collect(path, *a, **k):
        if holder.pop("f", None) is not None:  # once: a collection per entry took a minute
            gc.collect()
        return real_stat(path, *a, **k)

    monkeypatch.setattr(linecache.os, "stat", stat_and_collect)
    linecache.checkcache()  # raised KeyError when an entry was removed under its loop
    monkeypatch.setattr(linecache.os, "stat", real_stat)
    assert "f" not in holder
    tx.jit(lambda a: torch.sin(a) + 1.0)(torch.ones(2))  # the next compile removes what waited
    # the numbers of collected files are reused: what must be gone is their source
    left = {
        k for k, lines in ours.items() if k in linecache.cache and linecache.cache[k][2] == lines
    }
    assert not left, "a collected program's source must leave linecache"
