"""Differentially private SGD, data-parallel over processes with thunderx.shard_map.

Launch (CPU, gloo):  torchrun --nproc-per-node 4 examples/dp_sgd.py
Debug on one process, same program:  python examples/dp_sgd.py --vmap 4

Each process takes its shard of the batch, computes per-example gradients (`vmap(grad)`), clips
each to norm `--clip`, and the clipped sums are `psum`'d over the mesh axis "dp"; Gaussian noise
(the same draw on every process) is added once, so every process applies the same update.
"""

from __future__ import annotations

import argparse
import gc

import torch

import thunderx
from thunderx import P, lax


def mlp(p, x):
    return torch.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def init_params(d_in, hidden, d_out, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "w1": torch.randn(d_in, hidden, generator=g) / d_in**0.5,
        "b1": torch.zeros(hidden),
        "w2": torch.randn(hidden, d_out, generator=g) / hidden**0.5,
        "b2": torch.zeros(d_out),
    }


def make_step(axis: str, batch: int, clip: float, lr: float, sigma: float):
    def loss_one(p, xi, yi):
        return torch.nn.functional.cross_entropy(mlp(p, xi[None]), yi[None])

    def step(p, x, y, noise_seed):
        """One DP-SGD step on this process's shard (x, y); the same program under vmap."""
        grads = thunderx.vmap(thunderx.grad(loss_one), in_axes=(None, 0, 0))(p, x, y)
        norms = torch.sqrt(sum((g.reshape(g.shape[0], -1) ** 2).sum(1) for g in grads.values()))
        scale = torch.clamp(clip / (norms + 1e-6), max=1.0)
        clipped = {
            k: (g * scale.reshape((-1,) + (1,) * (g.ndim - 1))).sum(0) for k, g in grads.items()
        }
        total = lax.psum(clipped, axis)  # one all_reduce for all leaves
        return {k: p[k] - lr * (total[k] + sigma * clip * noise_seed[k]) / batch for k in p}

    return step


def data(n, d_in, classes, seed=1):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, d_in, generator=g) * 2
    y = torch.randint(0, classes, (n,), generator=g)
    return centers[y] + torch.randn(n, d_in, generator=g), y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64, help="global batch (split over processes)")
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--sigma", type=float, default=0.5, help="noise multiplier")
    ap.add_argument("--vmap", type=int, default=0, help="simulate N processes with vmap instead")
    args = ap.parse_args()
    d_in, hidden, classes = 10, 32, 4
    p = init_params(d_in, hidden, classes)
    x_all, y_all = data(args.batch * args.steps, d_in, classes)
    step = make_step("dp", args.batch, args.clip, args.lr, args.sigma)

    if args.vmap:  # one process: the same SPMD program, the mesh axis as a vmap axis
        n = args.vmap
        run = thunderx.jit(
            thunderx.vmap(step, in_axes=(None, 0, 0, None), out_axes=None, axis_name="dp")
        )

        def shard(t):
            return t.reshape(n, -1, *t.shape[1:])

        rank, world, call = 0, 1, lambda p, x, y, z: run(p, shard(x), shard(y), z)
    else:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        call = thunderx.jit(
            thunderx.shard_map(step, mesh, in_specs=(P(), P("dp"), P("dp"), P()), out_specs=P())
        )

    noise_gen = torch.Generator().manual_seed(1234)  # same draws on every process
    for i in range(args.steps):
        x = x_all[i * args.batch : (i + 1) * args.batch]
        y = y_all[i * args.batch : (i + 1) * args.batch]
        noise = {k: torch.randn(v.shape, generator=noise_gen) for k, v in p.items()}
        p = call(p, x, y, noise)
        if rank == 0 and (i % 10 == 0 or i == args.steps - 1):
            loss = torch.nn.functional.cross_entropy(mlp(p, x_all), y_all)
            acc = (mlp(p, x_all).argmax(1) == y_all).float().mean()
            print(f"step {i:3d}  loss {loss.item():.4f}  accuracy {acc.item():.3f}", flush=True)

    if not args.vmap:
        import torch.distributed as dist

        # every process applied the same updates: their parameters agree
        flat = torch.cat([v.reshape(-1) for v in p.values()])
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        spread = max((g - flat).abs().max().item() for g in gathered)
        if rank == 0:
            print(f"{world} processes; max parameter difference across them: {spread:.1e}")
        dist.barrier()  # nobody tears down its connections while a peer still uses them
        dist.destroy_process_group()
        # The compiled step holds the mesh, which holds the process group's C++ objects: free
        # them now, not while the interpreter shuts down (gloo's threads then abort the process).
        del call, mesh
        gc.collect()


if __name__ == "__main__":
    main()
