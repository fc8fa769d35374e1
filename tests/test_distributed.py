"""shard_map and collectives on several processes (CPU, gloo), and named axes under vmap.

Each multi-process test runs its check on every rank of a pool of spawned processes (started by
the test module, on a free port of 127.0.0.1, stopped at the end); every wait has a deadline, so
a hang fails the test. Each rank compares against a single-process oracle (torch eager,
torch.autograd, torch.func) computed from the same seeded data, which every rank can rebuild.
"""

from __future__ import annotations

import datetime
import os
import queue
import socket
import time
import traceback

import pytest
import torch
import torch.multiprocessing as mp

import thunderx
from thunderx import P, lax

RUN_TIMEOUT = 60.0  # seconds for one check on all ranks (startup included)
HERE = os.path.basename(__file__)


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


@pytest.fixture(scope="module", autouse=True)
def _close_pools():
    yield
    for p in _pools.values():  # signal all pools first, so they stop together
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


# ------------------------------------------------------------------------------- collectives


def _per_rank(world, *shape, seed=20):
    """Every rank's block of a device-varying value, rebuildable on any rank: [world, *shape]."""
    return _data(seed, world, *shape)


def _collective_cases(world):
    """(name, spmd function, reference on the stacked per-rank values [world, ...] -> stacked)."""
    shift = [(i, (i + 1) % world) for i in range(world)]
    partial = [(0, world - 1)]  # only the last member receives; the others get zeros
    return [
        ("psum", lambda x: lax.psum(x, "dp"), lambda xs: xs.sum(0).expand_as(xs)),
        ("pmean", lambda x: lax.pmean(x, "dp"), lambda xs: xs.mean(0).expand_as(xs)),
        ("pmax", lambda x: lax.pmax(x, "dp"), lambda xs: xs.amax(0).expand_as(xs)),
        ("pmin", lambda x: lax.pmin(x, "dp"), lambda xs: xs.amin(0).expand_as(xs)),
        (
            "all_gather",
            lambda x: lax.all_gather(x, "dp", axis=1),
            lambda xs: torch.stack([xs.movedim(0, 1)] * world),
        ),
        (
            "all_gather_tiled",
            lambda x: lax.all_gather(x, "dp", axis=0, tiled=True),
            lambda xs: torch.stack([torch.cat(list(xs), 0)] * world),
        ),
        (
            "psum_scatter",
            lambda x: lax.psum_scatter(x, "dp", scatter_dimension=0, tiled=True),
            lambda xs: torch.stack(xs.sum(0).chunk(world, 0)),
        ),
        (
            "ppermute",
            lambda x: lax.ppermute(x, "dp", perm=shift),
            lambda xs: torch.roll(xs, 1, 0),
        ),
        (
            "ppermute_partial",
            lambda x: lax.ppermute(x, "dp", perm=partial),
            lambda xs: torch.cat([torch.zeros_like(xs[1:]), xs[:1]]),
        ),
        (
            "all_to_all",
            lambda x: lax.all_to_all(x, "dp", 0, 1, tiled=True),
            lambda xs: torch.stack(
                [
                    torch.cat([xs[i].chunk(world, 0)[j] for i in range(world)], 1)
                    for j in range(world)
                ]
            ),
        ),
        (
            "axis_index",
            lambda x: x * lax.axis_index("dp") + lax.axis_size("dp"),
            lambda xs: xs * torch.arange(world).reshape(-1, 1, 1) + world,
        ),
    ]


def _check_collectives(rank, world, mesh):
    xs = _per_rank(world, 2 * world, 3)  # block shape (2*world, 3): divisible for the tiled ops
    cts_seed = 30
    for name, fn, ref in _collective_cases(world):
        expected = ref(xs)
        sm = thunderx.shard_map(fn, mesh, in_specs=P("dp"), out_specs=P("dp"))
        glob = xs.reshape(world * 2 * world, 3)
        out = sm(glob)
        got = out.reshape((world,) + tuple(expected.shape[1:]))
        _close(got, expected, f"{name} on {world} processes")
        _close(thunderx.jit(sm)(glob), out, f"jit({name})")
        # vmap with the same axis name runs the same program on one process
        _close(thunderx.vmap(fn, axis_name="dp")(xs), expected, f"vmap({name})")
        if name == "axis_index":
            continue
        # transpose: <ct, A x> = <A^T ct, x> summed over members, with A^T from vjp
        cts = _per_rank(world, *expected.shape[1:], seed=cts_seed)

        def both(x, ct):
            y, pullback = thunderx.vjp(fn, x)
            (xt,) = pullback(ct)
            return lax.psum((ct * y).sum(), "dp"), lax.psum((xt * x).sum(), "dp"), xt

        lhs, rhs, xt = thunderx.shard_map(both, mesh, in_specs=P("dp"), out_specs=P())(
            glob, cts.reshape((-1,) + tuple(cts.shape[2:]))
        )
        if name not in ("pmax", "pmin"):  # not linear
            _close(lhs, rhs, f"transpose of {name} (dot-product test)")
        # and against the same vjp under vmap
        _, pullback = thunderx.vjp(thunderx.vmap(fn, axis_name="dp"), xs)
        _close(xt, pullback(cts)[0][rank], f"vjp({name}) vs vmap")
    return True


def test_collectives_and_transposes_match_references_on_4_processes():
    assert pool(4).run(_check_collectives) == [True] * 4


def _check_pmax_grad(rank, world, mesh):
    xs = torch.tensor([[1.0, 5.0], [3.0, 5.0]] * (world // 2), dtype=torch.float64)
    f = lambda x: (lax.pmax(x, "dp") * torch.tensor([1.0, 2.0], dtype=x.dtype)).sum()
    g = thunderx.shard_map(thunderx.grad(f), mesh, in_specs=P("dp"), out_specs=P("dp"))(xs)
    # member grads of the summed program: the argmax takes all world cotangents; ties share them
    expected = torch.zeros_like(xs)
    for j in range(2):
        col = xs[:, j]
        tie = (col == col.max()).double()
        expected[:, j] = tie / tie.sum() * world * (j + 1)
    _close(g, expected, "grad of pmax")
    _close(thunderx.vmap(thunderx.grad(f), axis_name="dp")(xs), expected, "vmap grad of pmax")
    return True


def test_pmax_derivative_shares_ties():
    assert pool(2).run(_check_pmax_grad) == [True, True]


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


# ----------------------------------------------------------------------------------- errors


def _check_errors(rank, world, mesh):
    x = torch.ones(3, 4)
    messages = {}

    def expect(key, fn, exc):
        try:
            fn()
        except exc as e:
            messages[key] = str(e)
        else:
            raise AssertionError(f"{key}: expected {exc.__name__}")

    expect(
        "divides",
        lambda: thunderx.shard_map(lambda b: b, mesh, in_specs=P("dp"), out_specs=P("dp"))(x),
        ValueError,
    )
    expect(
        "unknown_mesh_dim",
        lambda: thunderx.shard_map(lambda b: b, mesh, in_specs=P(None, "tp"), out_specs=P())(x),
        ValueError,
    )
    expect(
        "unbound_name",
        lambda: thunderx.shard_map(lambda b: lax.psum(b, "tp"), mesh, in_specs=P(), out_specs=P())(
            x
        ),
        NameError,
    )
    expect(
        "out_specs_structure",
        lambda: thunderx.shard_map(lambda b: (b, b), mesh, in_specs=P(), out_specs=(P(), P(), P()))(
            x
        ),
        ValueError,
    )
    expect(
        "out_specs_rank",
        lambda: thunderx.shard_map(lambda b: b.sum(), mesh, in_specs=P(), out_specs=P("dp"))(x),
        ValueError,
    )
    return messages


def test_errors_name_the_problem_and_the_users_line():
    messages = pool(2).run(_check_errors)[0]
    assert "does not divide" in messages["divides"] and "size 3" in messages["divides"]
    assert "'tp'" in messages["unknown_mesh_dim"] and "('dp',)" in messages["unknown_mesh_dim"]
    assert "unbound axis name 'tp'" in messages["unbound_name"]
    assert "out_specs" in messages["out_specs_structure"]
    assert "rank 0" in messages["out_specs_rank"]
    for key, msg in messages.items():
        assert HERE in msg, f"{key}: the message should name the user's line: {msg}"


# ----------------------------------------------------------------------------------- faults


def _step_or_fail(rank, world, mesh, mode, out_dir):
    p = _mlp_params()
    x, y = _data(80, 4 * world, 6), _data(81, 4 * world, 3)

    def local_loss(p, x, y):
        if rank == 1:
            if mode == "raise":
                raise ValueError("bad batch on this rank")
            os._exit(3)
        return lax.psum(((_mlp(p, x) - y) ** 2).sum(), "dp")

    step = thunderx.shard_map(
        thunderx.grad(local_loss), mesh, in_specs=(P(), P("dp"), P("dp")), out_specs=P()
    )
    try:
        new = step(p, x, y)
    except thunderx.collectives.PeerFailedError as e:
        return str(e)
    torch.save(new, os.path.join(out_dir, f"step-{rank}.pt"))  # must not happen
    return "no error"


@pytest.mark.parametrize("mode", ["raise", "exit"])
def test_a_failing_rank_makes_the_others_fail_naming_it(mode, tmp_path):
    world = 2
    p = Pool(world)
    try:
        out, elapsed = p.run_raw(_step_or_fail, mode, str(tmp_path), timeout=40)
    finally:
        p.close()
    assert 0 in out, f"rank 0 did not answer within the timeout ({elapsed:.1f}s): {out}"
    status, msg = out[0]
    assert status == "ok" and "rank 1" in msg, f"rank 0 should name rank 1: {status} {msg}"
    if mode == "raise":
        assert "bad batch on this rank" in msg and "ValueError" in msg, msg
    else:
        assert "exited" in msg, msg
    assert "rank 0" in msg and HERE in msg, msg
    assert not list(tmp_path.iterdir()), "a failed step wrote its result"
    assert elapsed < 30, f"the failure took {elapsed:.1f}s to surface"


# ------------------------------------------------------------- named axes on one process


def test_vmap_collectives_equal_loop_references():
    xs = _data(90, 4, 8, 3)
    n = xs.shape[0]
    for name, fn, ref in _collective_cases(n):
        _close(thunderx.vmap(fn, axis_name="dp")(xs), ref(xs), f"vmap({name})")
        _close(thunderx.jit(thunderx.vmap(fn, axis_name="dp"))(xs), ref(xs), f"jit(vmap({name}))")
        _close(thunderx.vmap(thunderx.jit(fn), axis_name="dp")(xs), ref(xs), f"vmap(jit({name}))")


def test_vmap_axis_name_nests_and_passes_other_names_through():
    xs = _data(91, 2, 3, 4)
    f = lambda x: lax.psum(x, "i") - lax.psum(x, "j")
    out = thunderx.vmap(thunderx.vmap(f, axis_name="j"), axis_name="i")(xs)
    _close(
        out,
        xs.sum(0, keepdim=True).expand_as(xs) - xs.sum(1, keepdim=True).expand_as(xs),
        "nested named vmaps",
    )
    both = thunderx.vmap(
        thunderx.vmap(lambda x: lax.psum(x, ("i", "j")), axis_name="j"), axis_name="i"
    )(xs)
    _close(both, xs.sum((0, 1), keepdim=True).expand_as(xs), "psum over two names")
    idx = thunderx.vmap(
        thunderx.vmap(lambda x: lax.axis_index(("i", "j")), axis_name="j"), axis_name="i"
    )(xs)
    _close(idx, torch.arange(6, dtype=torch.int32).reshape(2, 3), "axis_index over two names")
    # a value that does not depend on the vmapped input: psum multiplies by the axis size
    c = thunderx.vmap(lambda x: lax.psum(torch.ones(()), "i"), axis_name="i")(xs)
    _close(c, torch.full((2,), 2.0), "psum of an unbatched value")


def test_unbound_axis_name_is_a_clear_error():
    with pytest.raises(NameError, match=r"unbound axis name 'k'.*" + HERE):
        thunderx.vmap(lambda x: lax.psum(x, "k"), axis_name="i")(torch.ones(3))
    with pytest.raises(NameError, match="unbound axis name 'i'"):
        lax.psum(torch.ones(3), "i")
    with pytest.raises(ValueError, match="must equal the size 3"):
        thunderx.vmap(lambda x: lax.psum_scatter(x, "i"), axis_name="i")(torch.ones(3, 2))


def test_jit_cache_keys_on_the_axis_env():
    f = thunderx.jit(lambda x: x * lax.axis_size("i"))
    a = thunderx.vmap(f, axis_name="i")(torch.ones(2, 3))
    b = thunderx.vmap(f, axis_name="i")(torch.ones(4, 3))
    _close(a, torch.full((2, 3), 2.0), "size 2")
    _close(b, torch.full((4, 3), 4.0), "size 4")
