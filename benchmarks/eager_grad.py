"""Reverse mode outside jit: thunderx's grad / vjp / hessian called eagerly, against torch.func on
the same functions (interleaved, median of rounds; see harness.py).

Since online partial evaluation (transforms/partial_eval.py) the primal runs eagerly while only
the tangent equations are staged. Run on two checkouts to compare before/after: the ratio to
torch.func cancels the machine's speed.

    python benchmarks/eager_grad.py [--rounds 15] [--out benchmarks/results/eager_grad.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

import torch
import torch.func as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import compare  # noqa: E402

import thunderx as tx  # noqa: E402


def _mlp(width, depth, batch, seed=0):
    g = torch.Generator().manual_seed(seed)
    params = [
        (torch.randn(width, width, generator=g) / width**0.5, torch.zeros(width))
        for _ in range(depth)
    ]
    x = torch.randn(batch, width, generator=g)
    y = torch.randn(batch, width, generator=g)

    def loss(params, x, y):
        h = x
        for w, b in params:
            h = torch.tanh(h @ w + b)
        return ((h - y) ** 2).mean()

    return loss, params, x, y


def _many_small_ops(n=16, ops=60):
    x = torch.randn(n)

    def f(x):
        h = x
        for i in range(ops):
            h = torch.sin(h) * 0.9 + 0.1 * h if i % 2 else torch.exp(-h * h) + h
        return h.sum()

    return f, x


def cases():
    loss, params, x, y = _mlp(64, 3, 32)
    yield (
        "grad, MLP 64x3, batch 32",
        lambda: tx.grad(loss)(params, x, y),
        lambda: tf.grad(loss)(params, x, y),
    )
    loss2, params2, x2, y2 = _mlp(256, 4, 128)
    yield (
        "grad, MLP 256x4, batch 128",
        lambda: tx.grad(loss2)(params2, x2, y2),
        lambda: tf.grad(loss2)(params2, x2, y2),
    )
    f, v = _many_small_ops()
    yield "grad, 60 small elementwise ops on f32[16]", lambda: tx.grad(f)(v), lambda: tf.grad(f)(v)
    yield (
        "vjp + 2 pullbacks, 60 small ops",
        lambda: [tx.vjp(f, v)[1](torch.tensor(s)) for s in (1.0, 2.0)],
        lambda: [tf.vjp(f, v)[1](torch.tensor(s)) for s in (1.0, 2.0)],
    )
    g = lambda z: (torch.tanh(z) ** 3).sum()  # noqa: E731
    z = torch.randn(8)
    yield "hessian, f32[8]", lambda: tx.hessian(g)(z), lambda: tf.hessian(g)(z)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for name, ours, theirs in cases():
        res = compare(theirs, {"thunderx": ours}, rounds=args.rounds)
        ratio, t = res["thunderx"]
        rows.append(
            f"| {name} | {ratio:.2f} | {t * 1e3:.3f} | {res['__baseline__'][1] * 1e3:.3f} |"
        )
        print(rows[-1], flush=True)
    head = [
        f"# grad outside jit vs torch.func {args.label}",
        "",
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()}, "
        f"median of {args.rounds} interleaved rounds",
        "",
        "| case | thunderx / torch.func | thunderx ms | torch.func ms |",
        "|---|---|---|---|",
    ]
    text = "\n".join(head + rows) + "\n"
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
