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

from thunderx.executors import cpu_gemm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
import fusion_cases  # noqa: E402
import gpu_cases  # noqa: E402
import harness  # noqa: E402
import readme_table  # noqa: E402
import tutorial_cases  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# (case prefix, peer substring, candidate substring) -> target ratio (thunderx / peer)
TARGETS = {
    ("per-example grads, MLP", "torch.func", ""): 1.0,
    ("per-example grads, MLP", "torch.compile", ""): 1.0,
    ("per-example grads, tutorial CNN", "torch.func", ""): 1.0,
    ("batched Hessian", "torch.func", ""): 1.0,
    ("cached jit dispatch", "eager", ""): 1.1,
    ("make_jaxpr(vmap(grad(mlp))), depth 64", "jax", ""): 1.0,
    ("per-layer trace cost", "thunderx", ""): 1.5,
    ("elementwise chain", "torch.compile", "inductor"): 1.0,
    ("MLP training step", "torch.compile", "jit (tiered)"): 1.0,
    ("MLP training step", "torch.compile", "jit (inductor)"): 1.0,
    ("TransformerEncoderLayer", "torch.compile", "jit (tiered)"): 1.0,
    ("TransformerEncoderLayer", "torch.compile", "jit (inductor)"): 1.0,
    ("GPT block", "torch.compile", "jit (tiered)"): 1.0,
    ("GPT block", "torch.compile", "jit (inductor)"): 1.0,
    ("torch.func NTK tutorial", "without jit", "jit"): 1.0,
    ("JAX tutorial vmap(convolve)", "jax.jit", "jit(vmap)"): 2.0,
}
# peers shown beside thunderx, never held to a target
_PEERS = ("eager", "eager loop", "torch.compile", "thunder.jit", "vmap (no jit)")
# thunderx's torch executor alone (`jit(f, executor="torch")`): the first tier of jit's default,
# shown for reference; the targets hold jit's default (tiered) and the inductor executor
_REFERENCE = ("jit (torch)", "jit(vmap(grad)), torch executor")


def target_for(case, candidate, baseline=""):
    if candidate in _PEERS or candidate in _REFERENCE:
        return None
    for (prefix, peer, cand), v in TARGETS.items():
        if case.startswith(prefix) and peer in baseline and cand in candidate:
            return v
    return None


def table(rows) -> str:
    lines = [
        "| case | thunderx | peer | ratio | spread | target | ms | peer ms | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = target_for(r["case"], r["candidate"], r["baseline"])
        ok = "" if t is None or math.isnan(r["ratio"]) else (" ✓" if r["ratio"] <= t else " ✗")
        fmt = lambda v: "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"  # noqa: E731
        lo_hi = r.get("spread")
        spread = f"{lo_hi[0]:.3g}–{lo_hi[1]:.3g}" if lo_hi else "-"
        lines.append(
            f"| {r['case']} | {r['candidate']} | {r['baseline']} | {fmt(r['ratio'])}{ok} | "
            f"{spread} | {'≤ ' + str(t) if t else '-'} | {fmt(r['ms'])} | "
            f"{fmt(r['baseline_ms'])} | {r['note']} |"
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


def machine() -> str:
    """CPU model, cores and load: the facts that decide how far these ratios travel."""
    model = cpu_gemm.cpu_model() or platform.processor() or platform.machine()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{model}, {os.cpu_count()} cores, {platform.system()}, load {load:.1f} at start"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
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
    ap.add_argument(
        "--quick",
        action="store_true",
        help="3 short rounds per case (a few minutes on 2 cores); the spread column says how much "
        "less to trust it",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cases.COMPILE_PEERS[0] = not args.no_compile
    harness.QUICK[0] = args.quick
    rounds = min(args.rounds, 3) if args.quick else args.rounds
    torch.manual_seed(0)
    header = (
        f"machine: {machine()}; torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"python {platform.python_version()}, float32; median (and min–max spread) of "
        f"{rounds} interleaved rounds, each the fastest of {harness.REPEATS} interleaved "
        "timings, all rows from one process"
        + (" (--quick: first calls may hit torch's compile caches)" if args.quick else "")
        # torch reads it once, at its first allocation: huge pages for CPU tensors
        + ("; THP_MEM_ALLOC_ENABLE=1" if os.environ.get("THP_MEM_ALLOC_ENABLE") == "1" else "")
    )
    print(header)
    suite = [
        cases.per_example_mlp,
        cases.autocast_per_example,
        cases.per_example_cnn,
        cases.ensembling,
        cases.jacobians,
        cases.pinn_hessian,
        cases.hvp,
        cases.recurrent_grads,
        cases.jit_dispatch,
        cases.trace_scaling,
        cases.jax_trace,
        gpu_cases.gpu_cases,
        fusion_cases.elementwise_chain,
        fusion_cases.mlp_training_step,
        fusion_cases.transformer_layer,
        fusion_cases.gpt_block_step,
        tutorial_cases.vmap_convolve,
        tutorial_cases.ntk_vjp_jvp,
    ]
    rows = []
    for fn in suite:
        name = fn.__name__
        if args.only and args.only not in name:
            continue
        new = fn(rounds, dry=True) if fn is gpu_cases.gpu_cases and args.gpu_dry_run else fn(rounds)
        for r in new:
            print(f"  {r['case']:<58} {r['candidate']:<22} ratio {r['ratio']:.3f}  {r['note']}")
        rows += new
    # the kernel thunderx's torch executor called for large float32 products (decided, with its
    # calibration, inside the first case that had one: first calls include it)
    header += (
        f"; thunderx's CPU GEMM: {'oneDNN' if cpu_gemm.chosen() else 'MKL'} "
        f"(THUNDERX_CPU_GEMM={cpu_gemm.mode})"
    )
    md = f"{header}\n\n{table(rows)}\n"
    print("\n" + md)
    os.makedirs(args.out, exist_ok=True)
    kind = "gpu" if torch.cuda.is_available() else "cpu"
    if args.gpu_dry_run:
        kind = "gpu-dry-run"
    if args.only:
        # a partial run never overwrites the full results the README is generated from
        kind += f"-only-{args.only}"
    with open(os.path.join(args.out, f"{kind}.md"), "w") as f:
        f.write(md)
    plot(rows, os.path.join(args.out, f"{kind}.png"))
    if kind == "cpu" and os.path.abspath(args.out) == os.path.join(HERE, "results"):
        readme_table.write_readme()
        print("README.md performance table regenerated from results/cpu.md")


if __name__ == "__main__":
    main()
