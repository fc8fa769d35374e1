"""`python -m thunderx` (or the `thunderx` command): what to paste into a bug report.

Prints the versions, the platform, the devices, which executors this machine can run (and why
not), then runs a self-check of the transforms against torch in a few seconds. The exit status is
0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import sys
import time
import traceback
from typing import Callable


def _versions() -> list[str]:
    import torch

    import thunderx

    lines = [
        f"thunderx {thunderx.__version__} ({os.path.dirname(thunderx.__file__)})",
        f"python   {platform.python_version()} ({platform.python_implementation()}) "
        f"on {platform.platform()}",
        f"torch    {torch.__version__} (CUDA build: {torch.version.cuda or 'none'})",
    ]
    for name in ("optree", "numpy"):
        try:
            mod = __import__(name)
            lines.append(f"{name:<8} {getattr(mod, '__version__', '?')}")
        except ImportError as e:
            lines.append(f"{name:<8} missing ({e})")
    return lines


def _devices() -> list[str]:
    import torch

    lines = [f"cpu: {os.cpu_count()} cores, torch uses {torch.get_num_threads()} threads"]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            lines.append(
                f"cuda:{i}: {p.name}, compute capability {p.major}.{p.minor}, "
                f"{p.total_memory / 2**30:.0f} GiB"
            )
    else:
        lines.append(f"cuda: not available ({_cuda_reason()})")
    return lines


def _cuda_reason() -> str:
    import torch

    if torch.version.cuda is None:
        return "this torch is a CPU-only build"
    return "no CUDA device or driver found"


def _executors() -> list[str]:
    import torch

    from thunderx.executors.nvfuser_exec import nvfuser_available, nvfuser_import_error

    lines = ["torch codegen: available (generated torch code, any device)"]
    if nvfuser_available():
        from thunderx.executors.nvfuser_exec import nvfuser_module

        mod = nvfuser_module()
        lines.append(f"nvFuser: available ({mod.__name__} {getattr(mod, '__version__', '')})")
    else:
        lines.append(f"nvFuser: not available ({nvfuser_import_error()})")
    lines.append(f"inductor: {_inductor_status(torch)}")
    return lines


def _inductor_status(torch) -> str:
    if not hasattr(torch, "compile"):
        return "not available (this torch has no torch.compile)"
    try:
        import torch._dynamo as dynamo

        if hasattr(dynamo, "is_dynamo_supported") and not dynamo.is_dynamo_supported():
            return f"not available (torch.compile does not support Python {sys.version.split()[0]})"
        importlib.import_module("torch._inductor")
    except Exception as e:  # noqa: BLE001 - reported to the user
        return f"not available ({type(e).__name__}: {e})"
    backends = []
    cxx = os.environ.get("CXX") or next(
        (c for c in ("g++", "c++", "clang++") if shutil.which(c)), None
    )
    backends.append(f"CPU via {cxx}" if cxx else "no C++ compiler for CPU")
    if torch.cuda.is_available():
        has_triton = importlib.util.find_spec("triton") is not None
        backends.append("CUDA via Triton" if has_triton else "no Triton for CUDA")
    return f"torch.compile available ({', '.join(backends)}; not exercised here)"


# ---------------------------------------------------------------------------------- self-check


def _checks(device) -> list[tuple[str, Callable[[], None]]]:
    import torch

    import thunderx

    gen = torch.Generator().manual_seed(0)
    w = torch.randn(4, 3, generator=gen, dtype=torch.float64).to(device)
    xs = torch.randn(5, 4, generator=gen, dtype=torch.float64).to(device)

    def loss(w, x):
        return torch.tanh(x @ w).pow(2).sum()

    def autograd_grad(w, x):
        w = w.detach().requires_grad_()
        return torch.autograd.grad(loss(w, x), w)[0]

    def close(name, got, want):
        if not torch.allclose(got, want, rtol=1e-9, atol=1e-12):
            err = (got - want).abs().max().item()
            raise AssertionError(f"{name}: max abs difference {err:.3g} from torch")

    def check_grad():
        close("grad", thunderx.grad(loss)(w, xs), autograd_grad(w, xs))

    def check_vmap():
        got = thunderx.vmap(loss, in_axes=(None, 0))(w, xs)
        close("vmap", got, torch.stack([loss(w, x) for x in xs]))

    def check_jit():
        f = thunderx.jit(loss)
        close("jit", f(w, xs), loss(w, xs))
        close("jit (cached call)", f(w * 2, xs), loss(w * 2, xs))

    def check_composed():
        got = thunderx.jit(thunderx.vmap(thunderx.grad(loss), in_axes=(None, 0)))(w, xs)
        close("jit(vmap(grad))", got, torch.stack([autograd_grad(w, x) for x in xs]))

    def check_jvp():
        v = torch.ones_like(w)
        _, got = thunderx.jvp(lambda w: loss(w, xs), (w,), (v,))
        _, want = torch.func.jvp(lambda w: loss(w, xs), (w,), (v,))
        close("jvp", got, want)

    return [
        ("grad vs torch.autograd", check_grad),
        ("vmap vs a Python loop", check_vmap),
        ("jit vs eager torch", check_jit),
        ("jvp vs torch.func.jvp", check_jvp),
        ("jit(vmap(grad)) vs per-example autograd", check_composed),
    ]


def self_check(out=print) -> bool:
    """Run the checks on the CPU (and the first CUDA device, if any); True when all pass."""
    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    ok = True
    for device in devices:
        for name, check in _checks(device):
            start = time.perf_counter()
            try:
                check()
            except Exception as e:  # noqa: BLE001 - every failure is reported, then the exit status
                ok = False
                out(f"  FAIL {device:<4} {name}: {type(e).__name__}: {e}")
                out("".join("       " + line for line in traceback.format_exc().splitlines(True)))
            else:
                out(f"  ok   {device:<4} {name} ({(time.perf_counter() - start) * 1e3:.0f} ms)")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="thunderx", description="Versions, devices, executors and a self-check."
    )
    parser.add_argument("--no-check", action="store_true", help="skip the self-check")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    print("\n".join(_versions()))
    print("devices:")
    print("\n".join("  " + line for line in _devices()))
    print("executors:")
    print("\n".join("  " + line for line in _executors()))
    if args.no_check:
        return 0
    print("self-check:")
    ok = self_check()
    took = time.perf_counter() - start
    print(f"self-check {'passed' if ok else 'FAILED'} in {took:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
