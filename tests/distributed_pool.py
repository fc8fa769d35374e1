"""Process pools for the multi-process tests (CPU, gloo) and the data they share.

A pool is `world` spawned processes in one gloo group with a 1-d mesh ('dp',), on a free port of
127.0.0.1, started by the test module that asks for it and stopped at its end (`close_pools`);
every wait has a deadline, so a hang fails the test. Each rank compares against a single-process
oracle (torch eager, torch.autograd, torch.func) computed from the same seeded data, which every
rank can rebuild.
"""

from __future__ import annotations

import datetime
import os
import queue
import socket
import time
import traceback

import torch
import torch.multiprocessing as mp

RUN_TIMEOUT = 60.0  # seconds for one check on all ranks (startup included)


# ---------------------------------------------------------------------------- process pools


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, jobs, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    try:
        dist.init_process_group(
            "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30)
        )
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
        return
    results.put((rank, "ready", None))
    while True:
        job = jobs.get()
        if job is None:
            break
        fn, args = job
        try:
            results.put((rank, "ok", fn(rank, world, mesh, *args)))
        except BaseException:
            results.put((rank, "error", traceback.format_exc()))
            results.close()
            results.join_thread()
            os._exit(1)  # as an uncaught exception ends a script: peers see this rank go
    os._exit(0)  # every rank got the stop signal and none is in a collective: no teardown


class Pool:
    """`world` spawned processes in one gloo group with a 1-d mesh ('dp',)."""

    def __init__(self, world: int):
        ctx = mp.get_context("spawn")
        self.world = world
        self.results = ctx.Queue()
        self.jobs = [ctx.Queue() for _ in range(world)]
        port = _free_port()
        self.procs = [
            ctx.Process(target=_worker, args=(r, world, port, self.jobs[r], self.results))
            for r in range(world)
        ]
        for p in self.procs:
            p.start()
        self.broken = False
        self._collect("ready")

    def _collect(self, expect):
        deadline = time.monotonic() + RUN_TIMEOUT
        out = {}
        while len(out) < self.world:
            try:
                rank, status, value = self.results.get(timeout=0.2)
            except queue.Empty:
                dead = [r for r, p in enumerate(self.procs) if p.exitcode is not None]
                dead = [r for r in dead if r not in out]
                if dead or time.monotonic() > deadline:
                    self.close()
                    why = f"ranks {dead} exited" if dead else f"timed out after {RUN_TIMEOUT}s"
                    raise AssertionError(
                        f"process pool: {why} (answers so far: {sorted(out)})"
                    ) from None
                continue
            out[rank] = (status, value)
        errors = {r: v for r, (s, v) in out.items() if s == "error"}
        if errors:
            self.close()
            report = "\n".join(f"--- rank {r}:\n{v}" for r, v in sorted(errors.items()))
            raise AssertionError(f"failed on ranks {sorted(errors)}:\n{report}")
        return [out[r][1] for r in range(self.world)]

    def run(self, fn, *args):
        """Run `fn(rank, world, mesh, *args)` on every rank; returns the per-rank results."""
        for q in self.jobs:
            q.put((fn, args))
        return self._collect("ok")

    def run_raw(self, fn, *args, timeout=RUN_TIMEOUT):
        """Like run, but returns {rank: (status, value)} and the exit codes, failures included."""
        for q in self.jobs:
            q.put((fn, args))
        deadline = time.monotonic() + timeout
        out = {}
        while len(out) < self.world and time.monotonic() < deadline:
            try:
                rank, status, value = self.results.get(timeout=0.2)
                out[rank] = (status, value)
            except queue.Empty:
                if all(p.exitcode is not None for r, p in enumerate(self.procs) if r not in out):
                    break  # every rank that has not answered is gone
        return out, time.monotonic() - (deadline - timeout)

    def close(self):
        if self.broken:
            return
        self.broken = True
        for q in self.jobs:
            try:
                q.put(None)
            except Exception:  # a queue whose reader is gone
                pass
        deadline = time.monotonic() + 10
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(5)


_pools: dict[int, Pool] = {}


def pool(world: int) -> Pool:
    p = _pools.get(world)
    if p is None or p.broken:
        p = _pools[world] = Pool(world)
    return p


def close_pools() -> None:
    """Stop every pool: signal all first, so they stop together."""
    for p in _pools.values():
        for q in p.jobs:
            q.put(None)
    for p in _pools.values():
        p.close()
    _pools.clear()


# ------------------------------------------------------------------------------- shared data


def _data(seed, *shape):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _mlp_params(d=6, h=8, o=3):
    return {
        "w1": _data(1, d, h) / 2,
        "b1": _data(2, h),
        "w2": _data(3, h, o) / 3,
        "b2": _data(4, o),
    }


def _mlp(p, x):
    return torch.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def _close(a, b, what, tol=1e-10):
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != expected {tuple(b.shape)}"
    err = (a - b).abs().max().item() if a.numel() else 0.0
    assert err <= tol * (1 + b.abs().max().item()), f"{what}: max error {err} (expected ~0)"


def _tree_close(a, b, what, tol=1e-10):
    for k in b:
        _close(a[k], b[k], f"{what}[{k}]", tol)


def _per_rank(world, *shape, seed=20):
    """Every rank's block of a device-varying value, rebuildable on any rank: [world, *shape]."""
    return _data(seed, world, *shape)
