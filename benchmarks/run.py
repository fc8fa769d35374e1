"""Run the benchmark suite: prints a Markdown table of ratios (thunderx / peer, lower is better),
saves it under benchmarks/results/, and writes a bar chart of the ratios.

    python benchmarks/run.py [--rounds N] [--only substring]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
import fusion_cases  # noqa: E402
import gpu_cases  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# (case prefix, peer substring, candidate substring) -> target ratio (thunderx / peer)
TARGETS = {
    ("per-example grads, MLP", "torch.func", ""): 1.0,
    ("per-example grads, tutorial CNN", "torch.func", ""): 1.0,
    ("batched Hessian", "torch.func", ""): 1.0,
    ("cached jit dispatch", "eager", ""): 1.1,
    ("make_jaxpr(vmap(grad(mlp))), depth 64", "jax", ""): 1.0,
    ("per-layer trace cost", "thunderx", ""): 1.5,
    ("elementwise chain", "torch.compile", "inductor"): 1.0,
    ("MLP training step", "torch.compile", "jit ("): 1.0,
    ("TransformerEncoderLayer", "torch.compile", "jit ("): 1.0,
}
# peers shown beside thunderx, never held to a target
_PEERS = ("eager", "eager loop", "torch.compile", "thunder.jit")


def target_for(case, candidate, baseline=""):
    if candidate in _PEERS:
        return None
    for (prefix, peer, cand), v in TARGETS.items():
        if case.startswith(prefix) and peer in baseline and cand in candidate:
            return v
    return None


def table(rows) -> str:
    lines = [
        "| case | thunderx | peer | ratio | target | ms | peer ms | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = target_for(r["case"], r["candidate"], r["baseline"])
        ok = "" if t is None or math.isnan(r["ratio"]) else (" ✓" if r["ratio"] <= t else " ✗")
        fmt = lambda v: "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"  # noqa: E731
        lines.append(
            f"| {r['case']} | {r['candidate']} | {r['baseline']} | {fmt(r['ratio'])}{ok} | "
            f"{'≤ ' + str(t) if t else '-'} | {fmt(r['ms'])} | {fmt(r['baseline_ms'])} | {r['note']} |"
        )
    return "\n".join(lines)


def plot(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    pts = [r for r in rows if not math.isnan(r["ratio"])]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(pts) + 1.5))
    labels = [f"{r['case']}\n{r['candidate']} vs {r['baseline']}" for r in pts]
    vals = [r["ratio"] for r in pts]
    colors = ["tab:green" if v <= 1.0 else "tab:orange" for v in vals]
    ax.barh(range(len(pts)), vals, color=colors)
    ax.axvline(1.0, color="k", lw=1)
    ax.set_yticks(range(len(pts)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time ratio thunderx / peer (lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--only", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument(
        "--no-compile",
        action="store_true",
        help="skip the torch.compile peers of the transform cases (the slowest part of the run)",
    )
    ap.add_argument(
        "--gpu-dry-run",
        action="store_true",
        help="rehearse the GPU cases on tiny CPU tensors (checks the script without a GPU)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cases.COMPILE_PEERS[0] = not args.no_compile
    torch.manual_seed(0)
    header = (
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"{platform.processor() or platform.machine()}, python {platform.python_version()}, "
        f"float32, median of {args.rounds} interleaved rounds"
    )
    print(header)
    suite = [
        cases.per_example_mlp,
        cases.per_example_cnn,
        cases.ensembling,
        cases.jacobians,
        cases.pinn_hessian,
        cases.hvp,
        cases.jit_dispatch,
        cases.trace_scaling,
        cases.jax_trace,
        gpu_cases.gpu_cases,
        fusion_cases.elementwise_chain,
        fusion_cases.mlp_training_step,
        fusion_cases.transformer_layer,
    ]
    rows = []
    for fn in suite:
        name = fn.__name__
        if args.only and args.only not in name:
            continue
        new = (
            fn(args.rounds, dry=True)
            if fn is gpu_cases.gpu_cases and args.gpu_dry_run
            else fn(args.rounds)
        )
        for r in new:
            print(f"  {r['case']:<58} {r['candidate']:<22} ratio {r['ratio']:.3f}  {r['note']}")
        rows += new
    md = f"{header}\n\n{table(rows)}\n"
    print("\n" + md)
    os.makedirs(args.out, exist_ok=True)
    kind = "gpu" if torch.cuda.is_available() else "cpu"
    if args.gpu_dry_run:
        kind = "gpu-dry-run"
    with open(os.path.join(args.out, f"{kind}.md"), "w") as f:
        f.write(md)
    plot(rows, os.path.join(args.out, f"{kind}.png"))


if __name__ == "__main__":
    main()
