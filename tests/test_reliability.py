"""Threads and memory: concurrent tracing is isolated per thread; repeated jitted calls do not
grow memory or leave reference cycles."""

import gc
import os
import threading
import weakref

import torch
import torch.func as tf

import thunderx as tx

from .research_fns import data, mlp_loss, mlp_params


def test_concurrent_tracing_and_running_has_no_cross_talk():
    errors = []
    fns = [
        lambda x: (torch.sin(x) * x).sum(),
        lambda x: (torch.tanh(x) ** 2).sum(),
        lambda x: torch.logsumexp(x, 0),
        lambda x: (x.exp() / (1 + x * x)).mean(),
    ]

    def worker(k):
        try:
            f = fns[k % len(fns)]
            for _ in range(20):
                x = torch.randn(5, dtype=torch.float64) + k
                g = tx.grad(f)(x)  # eager transform: traces every call
                torch.testing.assert_close(g, tf.grad(f)(x))
                v = tx.vmap(tx.grad(f))(x.expand(3, 5))
                torch.testing.assert_close(v, tf.vmap(tf.grad(f))(x.expand(3, 5)))
                j = tx.jit(tx.grad(f))(x)
                torch.testing.assert_close(j, g)
        except Exception as e:  # noqa: BLE001 - reported below with the thread
            errors.append((k, repr(e)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_shared_jit_function_across_threads():
    j = tx.jit(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0)))
    params = mlp_params()
    x, y = data(n=4)
    want = tf.vmap(tf.grad(mlp_loss), in_dims=(None, 0, 0))(params, x[:, None], y[:, None])
    errors = []

    def worker():
        try:
            for _ in range(10):
                got = j(params, x[:, None], y[:, None])
                for a, b in zip(tx.tree.leaves(got), tx.tree.leaves(want)):
                    torch.testing.assert_close(a, b)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert j.cache_info()["misses"] == 1


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_repeated_jitted_calls_stay_flat_in_memory():
    params = mlp_params(din=32, dh=64, dout=10)
    x, _ = data(n=64, din=32)
    y = torch.randint(0, 10, (64,))
    f = tx.jit(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0)))
    for _ in range(200):  # warm up allocator and caches
        f(params, x[:, None], y[:, None])
    gc.collect()
    before = _rss_mb()
    for _ in range(2000):
        f(params, x[:, None], y[:, None])
    gc.collect()
    growth = _rss_mb() - before
    assert growth < 20, f"RSS grew by {growth:.1f} MB over 2000 calls"


def test_cached_calls_create_no_reference_cycles():
    f = tx.jit(lambda a, b: torch.tanh(a @ b).sum(0))
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    f(a, b)
    gc.collect()
    gc.disable()
    try:
        for _ in range(100):
            f(a, b)
        found = gc.collect()
    finally:
        gc.enable()
    assert found == 0, f"{found} objects in reference cycles after cached calls"


def test_jitted_functions_and_their_caches_are_freed():
    def make():
        big = torch.randn(256, 256)
        return tx.jit(lambda x: x @ big), weakref.ref(big)

    f, big_ref = make()
    f(torch.randn(3, 256))
    del f
    gc.collect()
    assert big_ref() is None, "a captured tensor outlived its jitted function"


def test_eager_transform_calls_do_not_leak_tracers():
    x = torch.randn(16, dtype=torch.float64)
    f = lambda v: (torch.sin(v) * v).sum()  # noqa: E731
    for _ in range(50):
        tx.grad(f)(x)
    gc.collect()
    from thunderx.core import Tracer

    alive = sum(1 for o in gc.get_objects() if isinstance(o, Tracer))
    assert alive < 50, f"{alive} tracers still alive after transforms returned"
