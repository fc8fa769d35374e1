"""shard_map on several processes (CPU, gloo): an MLP's forward, loss and grad, DP-SGD, tensor
parallelism, 2-d meshes and DTensors, each against a single-process oracle; transforms
composed with shard_map in every order. Pools: tests/distributed_pool.py.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import pytest
import torch

import thunderx
from thunderx import P, lax

from .distributed_pool import (
    _close,
    _data,
    _mlp,
    _mlp_params,
    _tree_close,
    close_pools,
    pool,
)

HERE = os.path.basename(__file__)


@pytest.fixture(scope="module", autouse=True)
def _close_pools():
    yield
    close_pools()


# ------------------------------------------------------ MLP forward, loss and grad, compositions


def _check_mlp(rank, world, mesh):
    p = _mlp_params()
    n = 4 * world
    x, y = _data(10, n, 6), _data(11, n, 3)

    fwd = thunderx.shard_map(_mlp, mesh, in_specs=(P(), P("dp")), out_specs=P("dp"))
    _close(fwd(p, x), _mlp(p, x), "forward")

    def local_loss(p, x, y):
        return lax.psum(((_mlp(p, x) - y) ** 2).sum(), "dp") / n

    loss = thunderx.shard_map(local_loss, mesh, in_specs=(P(), P("dp"), P("dp")), out_specs=P())
    pt = {k: v.clone().requires_grad_() for k, v in p.items()}
    ref = ((_mlp(pt, x) - y) ** 2).sum() / n
    ref_grads = dict(zip(pt, torch.autograd.grad(ref, list(pt.values()))))
    _close(loss(p, x, y), ref.detach(), "loss")
    _tree_close(thunderx.grad(loss)(p, x, y), ref_grads, "grad(shard_map)")
    _tree_close(thunderx.jit(thunderx.grad(loss))(p, x, y), ref_grads, "jit(grad(shard_map))")
    _close(thunderx.jit(loss)(p, x, y), ref.detach(), "jit(shard_map)")
    # shard_map of grad: each shard's gradient, summed over the mesh
    g_local = thunderx.shard_map(
        lambda p, x, y: lax.psum(thunderx.grad(local_loss)(p, x, y), "dp"),
        mesh,
        in_specs=(P(), P("dp"), P("dp")),
        out_specs=P(),
    )
    # inside the body psum's cotangent reaches every member: the per-shard grads of the global
    # loss, summed, are world times the gradient
    _tree_close({k: v / world for k, v in g_local(p, x, y).items()}, ref_grads, "shard_map(grad)")
    inner_jit = thunderx.shard_map(
        thunderx.jit(local_loss), mesh, in_specs=(P(), P("dp"), P("dp")), out_specs=P()
    )
    _close(inner_jit(p, x, y), ref.detach(), "shard_map(jit)")
    _tree_close(thunderx.grad(inner_jit)(p, x, y), ref_grads, "grad(shard_map(jit))")
    # vmap outside: a batch of inputs; vmap inside: per-example outputs
    xs = torch.stack([x, 2 * x])
    _close(
        thunderx.vmap(fwd, in_axes=(None, 0))(p, xs),
        torch.stack([_mlp(p, x), _mlp(p, 2 * x)]),
        "vmap(shard_map)",
    )
    # three deep, both ways round: a batch of targets through grad of the sharded loss, and
    # per-target grads inside the shard_map
    ys = torch.stack([y, y + 1, 2 * y])
    refs = []
    for yk in ys:
        lk = ((_mlp(pt, x) - yk) ** 2).sum() / n
        refs.append(dict(zip(pt, torch.autograd.grad(lk, list(pt.values())))))
    stacked = {k: torch.stack([r[k] for r in refs]) for k in pt}
    batched = thunderx.vmap(thunderx.grad(loss), in_axes=(None, None, 0))
    _tree_close(batched(p, x, ys), stacked, "vmap(grad(shard_map))")
    _tree_close(thunderx.jit(batched)(p, x, ys), stacked, "jit(vmap(grad(shard_map)))")
    # each member's per-target gradient of the global loss; summed over members as above
    summed = thunderx.shard_map(
        lambda p, x, ys: lax.psum(
            thunderx.jit(thunderx.vmap(thunderx.grad(local_loss), in_axes=(None, None, 0)))(
                p, x, ys
            ),
            "dp",
        ),
        mesh,
        in_specs=(P(), P("dp"), P(None, "dp")),
        out_specs=P(),
    )
    _tree_close(
        {k: v / world for k, v in summed(p, x, ys).items()}, stacked, "shard_map(jit(vmap(grad)))"
    )
    per_example = thunderx.shard_map(
        thunderx.vmap(lambda p, xi: _mlp(p, xi[None])[0], in_axes=(None, 0)),
        mesh,
        in_specs=(P(), P("dp")),
        out_specs=P("dp"),
    )
    _close(per_example(p, x), _mlp(p, x), "shard_map(vmap)")
    # jit of a shard_map body emits the collective calls
    src = thunderx.jit(loss).lower(p, x, y).as_text()
    assert "psum" in src, f"the lowered program should call psum:\n{src}"
    return True


@pytest.mark.parametrize("world", [2, 4])
def test_mlp_forward_loss_and_grad_equal_single_process(world):
    assert pool(world).run(_check_mlp) == [True] * world


# ----------------------------------------------------------------------------------- DP-SGD


def _dp_sgd_step(p, x, y, noise, *, clip=1.0, lr=0.1, n=None, axis="dp"):
    """One DP-SGD step on a shard: per-example grads, clipped, summed over the mesh."""

    def loss_one(p, xi, yi):
        return ((_mlp(p, xi[None]) - yi[None]) ** 2).sum()

    grads = thunderx.vmap(thunderx.grad(loss_one), in_axes=(None, 0, 0))(p, x, y)
    norms = torch.sqrt(sum((g.reshape(g.shape[0], -1) ** 2).sum(1) for g in grads.values()))
    scale = torch.clamp(clip / (norms + 1e-12), max=1.0)
    total = {
        k: lax.psum((g * scale.reshape((-1,) + (1,) * (g.ndim - 1))).sum(0), axis)
        for k, g in grads.items()
    }
    return {k: p[k] - lr * (total[k] + noise[k]) / n for k in p}


def _reference_dp_sgd(p, x, y, noise, clip=1.0, lr=0.1):
    from torch.func import functional_call, grad, vmap  # noqa: F401

    def loss_one(p, xi, yi):
        return ((_mlp(p, xi[None]) - yi[None]) ** 2).sum()

    grads = vmap(grad(loss_one), in_dims=(None, 0, 0))(p, x, y)
    norms = torch.sqrt(sum((g.reshape(g.shape[0], -1) ** 2).sum(1) for g in grads.values()))
    scale = torch.clamp(clip / (norms + 1e-12), max=1.0)
    n = x.shape[0]
    return {
        k: p[k] - lr * ((g * scale.reshape((-1,) + (1,) * (g.ndim - 1))).sum(0) + noise[k]) / n
        for k, g in grads.items()
    }


def _check_dp_sgd(rank, world, mesh):
    import functools

    p = _mlp_params()
    n = 3 * world
    x, y = _data(40, n, 6), _data(41, n, 3)
    noise = {k: _data(50 + i, *v.shape) for i, (k, v) in enumerate(p.items())}
    step = thunderx.shard_map(
        functools.partial(_dp_sgd_step, n=n),
        mesh,
        in_specs=(P(), P("dp"), P("dp"), P()),
        out_specs=P(),
    )
    expected = _reference_dp_sgd(p, x, y, noise)
    _tree_close(step(p, x, y, noise), expected, "DP-SGD step")
    _tree_close(thunderx.jit(step)(p, x, y, noise), expected, "jit DP-SGD step")
    # the same step under vmap with the axis name, shards stacked
    shards = lambda t: t.reshape(world, -1, *t.shape[1:])
    vm = thunderx.vmap(
        functools.partial(_dp_sgd_step, n=n), in_axes=(None, 0, 0, None), axis_name="dp"
    )(p, shards(x), shards(y), noise)
    _tree_close({k: v[rank] for k, v in vm.items()}, expected, "vmap(axis_name) DP-SGD step")
    return True


def test_dp_sgd_step_on_4_processes_equals_single_process():
    assert pool(4).run(_check_dp_sgd) == [True] * 4


# ------------------------------------------------------------------------- tensor parallelism


def _check_tensor_parallel(rank, world, mesh):
    p = _mlp_params(d=5, h=4 * world, o=3)
    x, y = _data(60, 7, 5), _data(61, 7, 3)

    def tp_mlp(p, x):  # w1's columns, b1 and w2's rows sharded over the hidden dim
        h = torch.tanh(x @ p["w1"] + p["b1"])
        return lax.psum(h @ p["w2"], "dp") + p["b2"]

    specs = ({"w1": P(None, "dp"), "b1": P("dp"), "w2": P("dp", None), "b2": P()}, P())
    fwd = thunderx.shard_map(tp_mlp, mesh, in_specs=specs, out_specs=P())
    _close(fwd(p, x), _mlp(p, x), "tensor-parallel forward")
    loss = lambda p, x, y: ((fwd(p, x) - y) ** 2).mean()
    pt = {k: v.clone().requires_grad_() for k, v in p.items()}
    ref = ((_mlp(pt, x) - y) ** 2).mean()
    ref_grads = dict(zip(pt, torch.autograd.grad(ref, list(pt.values()))))
    _tree_close(thunderx.grad(loss)(p, x, y), ref_grads, "tensor-parallel grad")
    _tree_close(thunderx.jit(thunderx.grad(loss))(p, x, y), ref_grads, "jit tensor-parallel grad")
    return True


@pytest.mark.parametrize("world", [2, 4])
def test_tensor_parallel_mlp_equals_unsharded(world):
    assert pool(world).run(_check_tensor_parallel) == [True] * world


# ----------------------------------------------------------------------------- 2-d meshes


def _check_2d_mesh(rank, world, mesh):
    from torch.distributed.device_mesh import init_device_mesh

    mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    x, w = _data(100, 6, 8), _data(101, 6, 4)
    # blocks summed over the tp columns: rows stay sharded over dp, replicated over tp
    f = thunderx.shard_map(
        lambda b: lax.psum(b, "tp"), mesh2, in_specs=P("dp", "tp"), out_specs=P("dp", None)
    )
    expected = x.reshape(6, 2, 4).sum(1)
    _close(f(x), expected, "psum over tp on a 2x2 mesh")
    xt = x.clone().requires_grad_()
    (ref,) = torch.autograd.grad((xt.reshape(6, 2, 4).sum(1) * w).sum(), xt)
    _close(thunderx.grad(lambda x: (f(x) * w).sum())(x), ref, "grad on a 2x2 mesh")
    # one tensor dim over both mesh dims (dp major), and axis_index over both names
    g = thunderx.shard_map(
        lambda b: b * (lax.axis_index(("dp", "tp")) + 1),
        mesh2,
        in_specs=P(("dp", "tp")),
        out_specs=P(("dp", "tp")),
    )
    scale = torch.arange(1, 5, dtype=x.dtype).repeat_interleave(2).reshape(8, 1)
    _close(g(_data(102, 8, 3)), _data(102, 8, 3) * scale, "dim over (dp, tp)")
    # an input replicated over tp: its cotangent is the psum over tp; an output replicated over
    # tp (by pmean): its cotangent is shared among the tp members
    h = thunderx.shard_map(
        lambda b: lax.pmean(b * (lax.axis_index("tp") + 1), "tp"),
        mesh2,
        in_specs=P("dp"),
        out_specs=P("dp"),
    )
    _close(h(x), 1.5 * x, "replicated over tp")
    _close(thunderx.grad(lambda x: (h(x) * x).sum())(x), 3.0 * x, "grad replicated over tp")
    _close(thunderx.jit(thunderx.grad(lambda x: (h(x) * x).sum()))(x), 3.0 * x, "jit grad, 2-d")
    return True


def test_two_dimensional_mesh():
    assert pool(4).run(_check_2d_mesh) == [True] * 4


# ------------------------------------------------------------------------- DTensor in and out


def _check_dtensor(rank, world, mesh):
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    x = _data(70, 4 * world, 3)
    dx = distribute_tensor(x, mesh, [Shard(0)])
    double = thunderx.shard_map(lambda b: 2 * b, mesh, in_specs=(None,), out_specs=P("dp"))
    _close(double(dx), 2 * x, "DTensor in (spec from placements)")
    out = thunderx.shard_map(
        lambda b: 2 * b, mesh, in_specs=(None,), out_specs=P("dp"), dtensor_out=True
    )(dx)
    assert isinstance(out, DTensor) and tuple(out.placements) == (Shard(0),), out
    _close(out.full_tensor(), 2 * x, "DTensor out")
    # a replicated DTensor resharded to the spec the function asks for
    rx = distribute_tensor(x, mesh, [Replicate()])
    total = thunderx.shard_map(
        lambda b: lax.psum(b.sum(0), "dp"), mesh, in_specs=(P("dp"),), out_specs=P()
    )
    _close(total(rx), x.sum(0), "replicated DTensor resharded")
    return True


def test_dtensor_inputs_and_outputs():
    assert pool(2).run(_check_dtensor) == [True, True]


# ------------------------------------------------------------------------ the example script

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run_script(args: list[str], timeout: float = 150.0) -> str:
    """Run a command in its own process group; a hang kills the whole group and fails."""
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{' '.join(args)} hung for {timeout}s:\n{out}") from None
    assert proc.returncode == 0, f"{' '.join(args)} exited with {proc.returncode}:\n{out}"
    return out


def test_example_under_torchrun_equals_its_vmap_run():
    bin_dir = pathlib.Path(sys.executable).parent
    # --standalone: torchrun binds a free port itself (no window for another job to take it)
    torchrun = [str(bin_dir / "torchrun"), "--standalone", "--nproc-per-node", "2"]
    torchrun += ["examples/dp_sgd.py", "--steps", "6"]
    spmd = _run_script(torchrun)
    assert "2 processes; max parameter difference across them: 0.0e+00" in spmd, spmd
    one = _run_script([sys.executable, "examples/dp_sgd.py", "--vmap", "2", "--steps", "6"])
    losses = [[ln for ln in out.splitlines() if ln.startswith("step")] for out in (spmd, one)]
    assert losses[0] and losses[0] == losses[1], f"torchrun vs vmap:\n{spmd}\n{one}"
