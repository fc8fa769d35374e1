"""Programs from the JAX and torch.func tutorials: `jit` must never make them slower than running
the same transforms without it (issue #20)."""

from __future__ import annotations

import torch
import torch.func as tf
from cases import _check, _row
from harness import compare, timed

import thunderx as tx


def convolve(x, w):
    """JAX's vectorization tutorial: a Python loop of window dot products."""
    return torch.stack([torch.dot(x[i - 1 : i + 2], w) for i in range(1, len(x) - 1)])


def vmap_convolve(rounds):
    xs, ws = torch.randn(8, 64), torch.randn(8, 3)
    ours, plain = tx.jit(tx.vmap(convolve)), tx.vmap(convolve)
    theirs = tf.vmap(convolve)
    compile_s = timed(lambda: ours(xs, ws))
    _check(ours(xs, ws), theirs(xs, ws))
    res = compare(
        lambda: theirs(xs, ws),
        {"t": lambda: ours(xs, ws), "plain": lambda: plain(xs, ws)},
        rounds,
    )
    case = "JAX tutorial vmap(convolve), 62 windows, batch 8"
    note = f"trace+compile {compile_s * 1e3:.0f} ms"
    return [
        _row(case, "jit(vmap)", "torch.func vmap", res, "t", note),
        _row(case, "vmap (no jit)", "torch.func vmap", res, "plain"),
        _jax_convolve_row(case, ours, xs, ws, rounds),
    ]


def _jax_convolve_row(case, ours, xs, ws, rounds):
    """The same program written in JAX as its tutorial does, under `jax.jit(jax.vmap(...))`
    (issue #20's target: thunderx's jit(vmap) at most 2x jax.jit). JAX dispatches
    asynchronously, so its timed call blocks until the result is ready."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        nan = float("nan")
        return {
            "case": case,
            "candidate": "jit(vmap)",
            "baseline": "jax.jit(vmap) (not installed)",
            "ratio": nan,
            "ms": nan,
            "baseline_ms": nan,
            "note": "pip install jax to compare",
        }

    def jconvolve(x, w):
        return jnp.array([jnp.dot(x[i - 1 : i + 2], w) for i in range(1, len(x) - 1)])

    theirs = jax.jit(jax.vmap(jconvolve))
    jxs, jws = jnp.asarray(xs.numpy()), jnp.asarray(ws.numpy())
    _check(ours(xs, ws), torch.from_numpy(jax.device_get(theirs(jxs, jws)).copy()))
    res = compare(lambda: theirs(jxs, jws).block_until_ready(), {"t": lambda: ours(xs, ws)}, rounds)
    return _row(case, "jit(vmap)", "jax.jit(vmap)", res, "t")


class _NtkCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 32, (3, 3))
        self.conv2 = torch.nn.Conv2d(32, 32, (3, 3))
        self.conv3 = torch.nn.Conv2d(32, 32, (3, 3))
        self.fc = torch.nn.Linear(21632, 10)

    def forward(self, x):
        x = self.conv2(self.conv1(x).relu()).relu()
        return self.fc(self.conv3(x).flatten(1))


def _ntk_vps(net, params, x1, x2):
    """The torch.func NTK tutorial's `empirical_ntk_ntk_vps` (vjp then jvp per basis vector)."""

    def func(p, x):
        return tx.functional_call(net, p, (x.unsqueeze(0),)).squeeze(0)

    def get_ntk(a, b):
        out, vjp_fn = tx.vjp(lambda p: func(p, a), params)

        def ntk_slice(vec):
            return tx.jvp(lambda p: func(p, b), (params,), vjp_fn(vec))[1]

        basis = torch.eye(out.numel(), dtype=out.dtype).view(out.numel(), -1)
        return tx.vmap(ntk_slice)(basis)

    return tx.vmap(tx.vmap(get_ntk, (None, 0)), (0, None))(x1, x2)


def ntk_vjp_jvp(rounds):
    torch.manual_seed(0)
    net = _NtkCNN()
    params = {k: v.detach() for k, v in net.named_parameters()}
    x_train, x_test = torch.randn(20, 3, 32, 32), torch.randn(5, 3, 32, 32)

    def f(a, b):
        return _ntk_vps(net, params, a, b)

    jf = tx.jit(f)
    compile_s = timed(lambda: jf(x_test, x_train))
    _check(jf(x_test, x_train), f(x_test, x_train), 1e-3)
    res = compare(
        lambda: f(x_test, x_train), {"t": lambda: jf(x_test, x_train)}, max(3, rounds // 3)
    )
    case = "torch.func NTK tutorial, vjp/jvp method, 5x20 CIFAR CNN"
    return [_row(case, "jit", "thunderx without jit", res, "t", f"trace+compile {compile_s:.1f} s")]
