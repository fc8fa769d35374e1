"""Control-flow benchmark: gradient of an RK4 neural ODE integrated for 10 / 100 / 1,000 steps.

- first call of `jit(grad(f))` (trace + compile + one run) with `lax.scan` against the same loop
  written in Python (unrolled into the trace): the scan's trace does not grow with the steps;
- cached run time of the scan version against torch eager + autograd on the same Python loop;
- memory held between the forward and backward pass (the residuals) with `checkpoint` on the
  step against without it (and the CUDA peak, when a GPU is present).

    python benchmarks/control_flow.py [--quick]    # writes benchmarks/results/control_flow.md
"""

from __future__ import annotations

import argparse
import os
import time

import torch

import thunderx
from thunderx import lax

HERE = os.path.dirname(os.path.abspath(__file__))
DIM, BATCH, H = 32, 16, 0.05


def rk4_step(w):
    f = lambda y: torch.tanh(y @ w)  # noqa: E731

    def step(y, _):
        k1 = f(y)
        k2 = f(y + H / 2 * k1)
        k3 = f(y + H / 2 * k2)
        k4 = f(y + H * k3)
        return y + H / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

    return step


def loss_scan(w, y0, steps, policy=None, ckpt=False):
    step = rk4_step(w)
    if ckpt:
        step = thunderx.checkpoint(step, policy=policy)
    y, _ = lax.scan(step, y0, None, length=steps)
    return (y**2).mean()


def loss_python(w, y0, steps):
    step, y = rk4_step(w), y0
    for _ in range(steps):
        y, _ = step(y, None)
    return (y**2).mean()


def first_call(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def median_time(fn, *args, reps=5) -> float:
    fn(*args)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times)  # the least disturbed run: the machine may be shared


def torch_grad(w, y0, steps):
    w = w.detach().requires_grad_()
    loss_python(w, y0, steps).backward()
    return w.grad


def residual_bytes(fun, w) -> int:
    from thunderx.transforms.ad import linearize_flat

    lin = linearize_flat(fun, [w])
    return sum(r.numel() * r.element_size() for r in lin.residuals if isinstance(r, torch.Tensor))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the 1,000-step Python-loop trace")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(DIM, DIM, generator=gen) / DIM**0.5
    y0 = torch.randn(BATCH, DIM, generator=gen)
    lines = [
        "# Control flow: RK4 neural ODE gradient",
        "",
        f"`jit(grad(loss))` w.r.t. a {DIM}x{DIM} weight, batch {BATCH}, torch {torch.__version__}, "
        f"{'CUDA' if torch.cuda.is_available() else 'CPU'}.",
        "",
        "| steps | trace of grad, lax.scan | first call, lax.scan | first call, Python loop | "
        "cached, lax.scan | torch eager + autograd | ratio (scan / torch) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    # warm-up: the process's first trace pays one-time costs (imports, caches)
    thunderx.make_jaxpr(thunderx.grad(loss_scan), static_argnums=(2,))(w, y0, 3)
    for steps in (10, 100, 1000):
        trace = first_call(
            thunderx.make_jaxpr(thunderx.grad(loss_scan), static_argnums=(2,)), w, y0, steps
        )
        g_scan = thunderx.jit(thunderx.grad(loss_scan), static_argnums=(2,))
        t_scan = first_call(g_scan, w, y0, steps)
        if steps < 1000 or not args.quick:
            g_py = thunderx.jit(thunderx.grad(loss_python), static_argnums=(2,))
            t_py = f"{first_call(g_py, w, y0, steps):.3f} s"
        else:
            t_py = "skipped (--quick)"
        cached = median_time(g_scan, w, y0, steps)
        eager = median_time(torch_grad, w, y0, steps)
        # float32 roundoff grows with the steps: both are checked against a float64 reference
        ref = torch_grad(w.double(), y0.double(), steps)
        err = (g_scan(w, y0, steps).double() - ref).abs().max().item()
        err_torch = (torch_grad(w, y0, steps).double() - ref).abs().max().item()
        assert err <= 10 * err_torch + 1e-6, (steps, err, err_torch)
        lines.append(
            f"| {steps} | {trace * 1e3:.1f} ms | {t_scan:.3f} s | {t_py} | {cached * 1e3:.2f} ms | {eager * 1e3:.2f} ms "
            f"| {cached / eager:.2f} |"
        )
    P = thunderx.checkpoint_policies
    steps = 200
    rows = [
        ("no checkpoint", lambda w: loss_scan(w, y0, steps)),
        ("checkpoint, dots_saveable", lambda w: loss_scan(w, y0, steps, P.dots_saveable, True)),
        ("checkpoint, nothing_saveable", lambda w: loss_scan(w, y0, steps, None, True)),
    ]
    lines += [
        "",
        f"Residuals held between forward and backward ({steps} steps):",
        "",
        "| variant | residual bytes |",
        "|---|---:|",
    ]
    for name, fn in rows:
        lines.append(f"| {name} | {residual_bytes(fn, w):,} |")
    lines += [
        "",
        "The first call of the scan version = trace (flat in the step count) + compile + one run "
        "of forward and backward (linear in the steps); the Python loop unrolls into the trace.",
    ]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "control_flow.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
