"""GPU side by side: eager, jit with nvFuser (when it imports), jit with inductor, torch.compile
and jit with torch codegen on memory-bound chains, with bandwidth against a plain copy.
`dry=True` rehearses the same code on tiny CPU tensors (no GPU needed)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from cases import _check, _row
from fusion_cases import gelu_gate_chain
from harness import compare, first_call, timed

import thunderx as tx
from thunderx.executors.inductor_exec import inductor_unavailable_reason
from thunderx.executors.nvfuser_exec import nvfuser_available, nvfuser_import_error


def _sync(dev):
    return torch.cuda.synchronize if dev == "cuda" else (lambda: None)


def gpu_cases(rounds, dry: bool = False):
    if not dry and not torch.cuda.is_available():
        return []
    dev = "cpu" if dry else "cuda"
    sync = _sync(dev)
    rows = []
    n = 1 << (12 if dry else 24)
    src = torch.randn(n, device=dev)
    dst = torch.empty_like(src)

    def copy():
        dst.copy_(src)
        sync()

    t_copy = min(timed(copy) for _ in range(10))
    copy_gbs = 2 * n * 4 / t_copy / 1e9
    rows_, cols = (64, 32) if dry else (8192, 4096)
    x = torch.randn(rows_, cols, device=dev)
    b = torch.randn(cols, device=dev)
    w = torch.randn(cols, device=dev)
    chains = {
        "bias+gelu": (lambda x, b: F.gelu(x + b), (x, b), 3),
        "gelu-gate chain (12 ops)": (gelu_gate_chain, (x, b), 3),
        "layer_norm": (lambda x, w: F.layer_norm(x, (cols,), w, w), (x, w), 2),
        "softmax": (lambda x: torch.softmax(x, -1), (x,), 2),
        "rmsnorm backward": (tx.grad(lambda x, w: F.rms_norm(x, (cols,), w).sum()), (x, w), 3),
    }
    inductor_why = inductor_unavailable_reason()
    for name, (f, args, passes) in chains.items():

        def timed_call(fn, args=args):
            def run():
                fn(*args)
                sync()

            return run

        want = f(*args)
        cands, firsts = {}, {}
        executors = {"jit (torch)": "torch"}
        if nvfuser_available():
            executors["jit (nvFuser)"] = "nvfuser"
        if inductor_why is None:
            executors["jit (inductor)"] = "inductor"
        for label, ex in executors.items():
            j = tx.jit(f, executor=ex)
            firsts[label] = first_call(j, *args) if ex == "inductor" else timed(lambda: j(*args))
            _check(j(*args), want, 1e-3)
            cands[label] = timed_call(j)
        if name != "rmsnorm backward":  # tx.grad is not a torch function to compile
            comp = torch.compile(f)
            firsts["torch.compile"] = first_call(comp, *args)
            _check(comp(*args), want, 1e-3)
            cands["torch.compile"] = timed_call(comp)
        res = compare(timed_call(f), cands, rounds)
        bytes_moved = passes * x.numel() * 4
        for label in cands:
            gbs = bytes_moved / res[label][1] / 1e9
            note = (
                f"{gbs:.0f} GB/s = {gbs / copy_gbs:.0%} of copy; first call {firsts[label]:.2f} s"
            )
            rows.append(_row(f"GPU {name}", label, "torch eager", res, label, note))
        if "torch.compile" in cands and "jit (inductor)" in cands:
            rows.append(
                {
                    "case": f"GPU {name}",
                    "candidate": "jit (inductor)",
                    "baseline": "torch.compile",
                    "ratio": res["jit (inductor)"][0] / res["torch.compile"][0],
                    "ms": res["jit (inductor)"][1] * 1e3,
                    "baseline_ms": res["torch.compile"][1] * 1e3,
                    "note": f"first call ratio "
                    f"{firsts['jit (inductor)'] / firsts['torch.compile']:.2f}",
                }
            )
    rows += _transformer(dev, sync, rounds, dry, inductor_why)
    why = []
    if not nvfuser_available():
        why.append(f"nvFuser unavailable: {nvfuser_import_error()}")
    if inductor_why is not None:
        why.append(f"inductor unavailable: {inductor_why}")
    if why:
        rows.append(
            {
                "case": "GPU executors",
                "candidate": "-",
                "baseline": "-",
                "ratio": math.nan,
                "ms": math.nan,
                "baseline_ms": math.nan,
                "note": "; ".join(why),
            }
        )
    return rows


def _transformer(dev, sync, rounds, dry, inductor_why):
    """TransformerEncoderLayer forward + backward under jit(grad) with each executor, beside
    torch.compile(torch.func.grad) and torch.func eager (float32, no TF32)."""
    import torch.func as tf

    d, heads, batch, seq = (32, 2, 2, 8) if dry else (1024, 16, 16, 512)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
    layer = layer.to(dev)
    params = {k: v.detach() for k, v in layer.named_parameters()}
    x = torch.randn(batch, seq, d, device=dev)

    def loss(p, x, call):
        return call(layer, p, (x,)).square().mean()

    ref = tf.grad(lambda p, x: loss(p, x, tf.functional_call))
    ours = tx.grad(lambda p, x: loss(p, x, tx.functional_call))
    want = ref(params, x)
    executors = {"jit (torch)": "torch"}
    if nvfuser_available():
        executors["jit (nvFuser)"] = "nvfuser"
    if inductor_why is None:
        executors["jit (inductor)"] = "inductor"
    cands, firsts = {}, {}

    def timed_call(fn):
        def run():
            fn(params, x)
            sync()

        return run

    for label, ex in executors.items():
        j = tx.jit(ours, executor=ex)
        firsts[label] = timed(lambda j=j: (j(params, x), sync()))
        _check(j(params, x), want, 1e-3)
        cands[label] = timed_call(j)
    comp = torch.compile(ref)
    firsts["torch.compile"] = timed(lambda: (comp(params, x), sync()))
    _check(comp(params, x), want, 1e-3)
    cands["torch.compile"] = timed_call(comp)
    res = compare(timed_call(ref), cands, rounds)
    case = f"GPU TransformerEncoderLayer fwd+bwd d={d} heads={heads}, {batch}x{seq}"
    rows = []
    for label in cands:
        note = f"first call {firsts[label]:.2f} s"
        rows.append(_row(case, label, "torch.func eager", res, label, note))
        if label != "torch.compile":
            ratio = res[label][0] / res["torch.compile"][0]
            rows.append(
                {
                    "case": case,
                    "candidate": label,
                    "baseline": "torch.compile",
                    "ratio": ratio,
                    "ms": res[label][1] * 1e3,
                    "baseline_ms": res["torch.compile"][1] * 1e3,
                    "note": f"first call ratio {firsts[label] / firsts['torch.compile']:.2f}",
                }
            )
    return rows
