"""Weak scaling of a data-parallel training step on CPU (gloo), 1, 2 and 4 processes.

Each process holds a fixed per-process batch; both sides run the same step on the same MLP:
forward, mean squared error, gradients averaged across processes, SGD update.

- thunderx: `jit(shard_map(step))`, the gradient averaged with one `lax.pmean` of the gradient
  pytree: one psum, which the generated code sends in ~1 MiB buckets, each started as soon as
  its gradients exist, so communication overlaps the rest of the backward pass.
- torch:    `DistributedDataParallel(model)`, `loss.backward()` (bucketed all-reduce), `SGD.step`.

Also the DP-SGD step (per-example gradients `vmap(grad)`, clipped, `psum`'d) against the same
computation in torch.func with `dist.all_reduce`, since DDP has no per-example clipping.

Run: `python benchmarks/distributed.py [--steps N]`; writes benchmarks/results/distributed.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import statistics
import time

import torch
import torch.multiprocessing as mp

D_IN, HIDDEN, D_OUT, BATCH = 256, 512, 16, 64
LR, CLIP = 0.05, 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _params():
    g = torch.Generator().manual_seed(0)
    return {
        "w1": torch.randn(D_IN, HIDDEN, generator=g) / D_IN**0.5,
        "b1": torch.zeros(HIDDEN),
        "w2": torch.randn(HIDDEN, HIDDEN, generator=g) / HIDDEN**0.5,
        "b2": torch.zeros(HIDDEN),
        "w3": torch.randn(HIDDEN, D_OUT, generator=g) / HIDDEN**0.5,
        "b3": torch.zeros(D_OUT),
    }


def _mlp(p, x):
    h = torch.relu(x @ p["w1"] + p["b1"])
    h = torch.relu(h @ p["w2"] + p["b2"])
    return h @ p["w3"] + p["b3"]


def _thunderx_steps(mesh, world):
    import thunderx
    from thunderx import P, lax

    def dp_step(p, x, y):
        g = thunderx.grad(lambda p: ((_mlp(p, x) - y) ** 2).mean())(p)
        g = lax.pmean(g, "dp")
        return {k: p[k] - LR * g[k] for k in p}

    def dp_sgd_step(p, x, y):
        def loss_one(p, xi, yi):
            return ((_mlp(p, xi[None]) - yi[None]) ** 2).sum()

        grads = thunderx.vmap(thunderx.grad(loss_one), in_axes=(None, 0, 0))(p, x, y)
        norms = torch.sqrt(sum((g.reshape(g.shape[0], -1) ** 2).sum(1) for g in grads.values()))
        scale = torch.clamp(CLIP / (norms + 1e-6), max=1.0)
        n = x.shape[0] * lax.axis_size("dp")
        return {
            k: p[k]
            - LR * lax.psum((g * scale.reshape((-1,) + (1,) * (g.ndim - 1))).sum(0), "dp") / n
            for k, g in grads.items()
        }

    specs = dict(in_specs=(P(), P("dp"), P("dp")), out_specs=P())
    return (
        thunderx.jit(thunderx.shard_map(dp_step, mesh, **specs)),
        thunderx.jit(thunderx.shard_map(dp_sgd_step, mesh, **specs)),
    )


class _MLP(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = torch.nn.ParameterDict({k: torch.nn.Parameter(v.clone()) for k, v in p.items()})

    def forward(self, x):
        return _mlp(self.p, x)


def _torch_steps(world):
    import torch.distributed as dist
    from torch.func import grad, vmap
    from torch.nn.parallel import DistributedDataParallel

    model = _MLP(_params())
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)

    def ddp_step(x, y):
        opt.zero_grad(set_to_none=True)
        ((ddp(x) - y) ** 2).mean().backward()
        opt.step()

    def loss_one(p, xi, yi):
        return ((_mlp(p, xi[None]) - yi[None]) ** 2).sum()

    per_example = vmap(grad(loss_one), in_dims=(None, 0, 0))

    def func_dp_sgd_step(p, x, y):
        grads = per_example(p, x, y)
        norms = torch.sqrt(sum((g.reshape(g.shape[0], -1) ** 2).sum(1) for g in grads.values()))
        scale = torch.clamp(CLIP / (norms + 1e-6), max=1.0)
        out = {}
        for k, g in grads.items():
            s = (g * scale.reshape((-1,) + (1,) * (g.ndim - 1))).sum(0)
            dist.all_reduce(s)
            out[k] = p[k] - LR * s / (x.shape[0] * world)
        return out

    return ddp_step, func_dp_sgd_step


def _paired(fns: dict, steps: int) -> dict:
    """Median seconds per step of each function, timed in alternation after a warm-up."""
    import torch.distributed as dist

    for fn in fns.values():
        for _ in range(3):
            fn()
    times = {k: [] for k in fns}
    for _ in range(steps):
        for k, fn in fns.items():
            dist.barrier()
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def _worker(rank, world, port, steps, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(60))
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH * world, D_IN, generator=g)
    y = torch.randn(BATCH * world, D_OUT, generator=g)
    local = slice(rank * BATCH, (rank + 1) * BATCH)
    tx_dp, tx_dpsgd = _thunderx_steps(mesh, world)
    ddp_step, func_dpsgd = _torch_steps(world)
    p = _params()

    # The DP pair runs before any DP-SGD step: the DP-SGD steps' large per-example buffers leave
    # the allocator in a state that slows later small allocations (both sides, unequally).
    new = tx_dp(p, x, y)  # correctness first: one step each, compared
    ddp_step(x[local], y[local])
    model_p = {k: v.detach() for k, v in _model_of(ddp_step).p.items()}
    err = max((new[k] - model_p[k]).abs().max().item() for k in p)
    # Each pair is timed step by step in alternation (A B A B ...), so both sides see the same
    # machine state.
    # Both sides train: thunderx's step returns new parameters, fed to the next step; DDP's
    # optimizer updates its parameters in place.
    state = {"p": p}

    def tx_train():
        state["p"] = tx_dp(state["p"], x, y)

    times = _paired(
        {"thunderx dp": tx_train, "ddp dp": lambda: ddp_step(x[local], y[local])}, steps
    )
    err_sgd = max(
        (tx_dpsgd(p, x, y)[k] - func_dpsgd(p, x[local], y[local])[k]).abs().max().item() for k in p
    )
    times.update(
        _paired(
            {
                "thunderx dp-sgd": lambda: tx_dpsgd(p, x, y),
                "torch.func dp-sgd": lambda: func_dpsgd(p, x[local], y[local]),
            },
            max(3, steps // 10),
        )
    )
    if rank == 0:
        results.put((times, err, err_sgd))
    dist.destroy_process_group()


def _model_of(ddp_step):
    for cell in ddp_step.__closure__:
        obj = cell.cell_contents
        if isinstance(obj, torch.nn.parallel.DistributedDataParallel):
            return obj.module
    raise RuntimeError("no DDP model in the step's closure")


def run(world: int, steps: int):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_worker, args=(r, world, port, steps, results)) for r in range(world)
    ]
    for p in procs:
        p.start()
    try:
        out = results.get(timeout=900)
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--worlds", default="1,2,4")
    args = ap.parse_args()
    rows = []
    for world in [int(w) for w in args.worlds.split(",")]:
        times, err, err_sgd = run(world, args.steps)
        rows.append((world, times, err, err_sgd))
        print(world, {k: f"{v * 1e3:.2f} ms" for k, v in times.items()}, err, err_sgd, flush=True)
    lines = [
        "# Data-parallel step, weak scaling on CPU (gloo)",
        "",
        f"MLP {D_IN}-{HIDDEN}-{HIDDEN}-{D_OUT}, batch {BATCH} per process, float32, one thread "
        f"per process; median step time over {args.steps} DP steps and "
        f"{max(3, args.steps // 10)} DP-SGD steps, each pair timed in alternation, step by step. "
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs "
        f"(shared with other jobs while measured), torch {torch.__version__}, "
        f"{datetime.date.today()}.",
        "",
        f"Load average when measured: {os.getloadavg()[0]:.1f} (1 min). With 4 processes on "
        f"{os.cpu_count()} cores the processes oversubscribe the machine, so that row measures "
        "scheduling as much as either implementation.",
        "",
        "Throughput = examples per second over all processes. Ratio = thunderx throughput / "
        "torch throughput (>= 1.0: thunderx is as fast or faster). With 1 process the "
        "collectives drop out (a one-member axis), so that row compares the single-process "
        "step: thunderx's generated program against torch's eager autograd.",
        "",
        "| processes | thunderx DP (ex/s) | DDP (ex/s) | ratio | thunderx DP-SGD (ex/s) "
        "| torch.func DP-SGD (ex/s) | ratio | max diff DP / DP-SGD |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for world, t, err, err_sgd in rows:
        ex = BATCH * world
        tx, dd = ex / t["thunderx dp"], ex / t["ddp dp"]
        ts, fs = ex / t["thunderx dp-sgd"], ex / t["torch.func dp-sgd"]
        lines.append(
            f"| {world} | {tx:,.0f} | {dd:,.0f} | {tx / dd:.2f} | {ts:,.0f} | {fs:,.0f} | "
            f"{ts / fs:.2f} | {err:.1e} / {err_sgd:.1e} |"
        )
    base = rows[0]
    lines += [
        "",
        "Weak-scaling efficiency (per-process throughput relative to 1 process): "
        + ", ".join(
            f"{w} processes: thunderx {base[1]['thunderx dp'] / t['thunderx dp']:.2f}, "
            f"DDP {base[1]['ddp dp'] / t['ddp dp']:.2f}"
            for w, t, _, _ in rows[1:]
        )
        + ".",
        "",
    ]
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "distributed.md")
    with open(out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
