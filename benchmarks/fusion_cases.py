"""Fusion benchmarks: thunderx (torch codegen and inductor executors) beside torch.compile,
Lightning Thunder where it imports, and eager torch; steady state and first call."""

from __future__ import annotations

import math
import statistics

import torch
import torch.func as tf
import torch.nn.functional as F
from cases import _check, _row
from harness import compare, first_calls

import thunderx as tx
from thunderx.executors.inductor_exec import inductor_unavailable_reason


def thunder_jit():
    """(thunder.jit, None) when Lightning Thunder imports beside this torch, else (None, why)."""
    try:
        import thunder

        return thunder.jit, None
    except Exception as e:  # noqa: BLE001 - the reason goes into the results
        return None, f"lightning-thunder unavailable: {type(e).__name__}: {e}"[:160]


def _raw_row(case, cand, base, ours_s, theirs_s, note=""):
    return {
        "case": case,
        "candidate": cand,
        "baseline": base,
        "ratio": ours_s / theirs_s,
        "ms": ours_s * 1e3,
        "baseline_ms": theirs_s * 1e3,
        "note": note,
    }


def _peers(case, f, args, rounds, ours, thunder_ok=True, first=None, tol=1e-4):
    """Rows comparing `ours` (label -> thunderx callable) with torch.compile(f): steady state
    for each, eager and Thunder beside them, and, when `first` maps labels to makers of fresh
    thunderx callables, first calls against torch.compile's (median of interleaved rounds, each
    compiling from cold caches). Each round times every candidate for at least 0.1 s (several
    calls even of the slowest case: a round of one call is at the mercy of one page fault or
    one preemption)."""
    rows = []
    t_first = {}
    if first:
        t_first = first_calls({"torch.compile": lambda: torch.compile(f), **first}, args)
    comp = torch.compile(f)
    want = f(*args)
    cands = {}
    for label, fn in ours.items():
        _check(fn(*args), want, tol)
        cands[label] = lambda fn=fn: fn(*args)
    comp(*args)
    _check(comp(*args), want, tol)
    cands["eager"] = lambda: f(*args)
    thunder_note = ""
    if thunder_ok:
        tj, why = thunder_jit()
        if tj is not None:
            th = tj(f)
            _check(th(*args), want, tol)
            cands["thunder.jit"] = lambda: th(*args)
        else:
            thunder_note = why
    res = compare(lambda: comp(*args), cands, rounds, target_s=0.1)
    for label in cands:
        rows.append(_row(case, label, "torch.compile", res, label))
    if thunder_note:
        rows.append(_raw_row(case, "thunder.jit", "torch.compile", math.nan, 1.0, thunder_note))
        rows[-1]["ms"] = rows[-1]["baseline_ms"] = math.nan
    base_s, base_rounds = t_first.get("torch.compile", (None, None))
    for label, (t, t_rounds) in t_first.items():
        if label != "torch.compile":
            row = _raw_row(f"{case}: first call", label, "torch.compile", t, base_s)
            # the ratio is the median of the rounds' ratios (each pair compiled back to back)
            per_round = [a / b for a, b in zip(t_rounds, base_rounds)]
            row["ratio"] = statistics.median(per_round)
            row["spread"] = (min(per_round), max(per_round))
            rows.append(row)
    return rows


def _inductor_ok():
    return inductor_unavailable_reason() is None


def _ours(f, transform=None):
    g = transform(f) if transform else f
    out = {"jit (tiered)": tx.jit(g), "jit (torch)": tx.jit(g, executor="torch")}
    if _inductor_ok():
        out["jit (inductor)"] = tx.jit(g, executor="inductor")
    return out


# --------------------------------------------------------------------------------- the cases


def gelu_gate_chain(x, b):
    """12 elementwise ops: bias, tanh-GELU, scale, sigmoid gate."""
    h = x + b
    g = 0.5 * h * (1 + torch.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
    return g * 1.5 * torch.sigmoid(h)


def elementwise_chain(rounds):
    rows = []
    for n in (1024, 2048):
        g = torch.Generator().manual_seed(0)
        args = (torch.randn(n, n, generator=g), torch.randn(n, generator=g))
        case = f"elementwise chain (12 ops), f32[{n},{n}]"
        first = None
        if _inductor_ok():
            first = {"jit (inductor)": lambda: tx.jit(gelu_gate_chain, executor="inductor")}
        rows += _peers(case, gelu_gate_chain, args, rounds, _ours(gelu_gate_chain), first=first)
    return rows


def _mlp_params(dims, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(a, b, generator=g) / a**0.5, torch.zeros(b))
        for a, b in zip(dims[:-1], dims[1:])
    ]


def _mlp_loss(params, x, y):
    for i, (w, b) in enumerate(params):
        x = x @ w + b
        if i < len(params) - 1:
            x = torch.relu(x)
    return F.cross_entropy(x, y)


def _sgd(grad):
    def step(params, x, y):
        grads = grad(_mlp_loss)(params, x, y)
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)]

    return step


def mlp_training_step(rounds):
    rows = []
    for dims, batch in (([256, 512, 512, 10], 128), ([784, 1024, 1024, 10], 256)):
        params = _mlp_params(dims)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(batch, dims[0], generator=g), torch.randint(0, 10, (batch,), generator=g)
        case = f"MLP training step (fwd+bwd+SGD) {'-'.join(map(str, dims))}, batch {batch}"
        ours = _ours(_sgd(tx.grad))
        rows += _peers(case, _sgd(tf.grad), (params, x, y), rounds, ours, thunder_ok=False)
    return rows


# (d_model, heads, seq, batch, causal): #16's two sizes, then #20's causal layer
TRANSFORMER_SIZES = ((64, 4, 32, 8, False), (256, 8, 64, 16, False), (256, 4, 128, 8, True))


def transformer_layer(rounds):
    rows = []
    for d, heads, seq, batch, causal in TRANSFORMER_SIZES:
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        params = {k: v.detach() for k, v in layer.named_parameters()}
        x = torch.randn(batch, seq, d)
        # the causal layer as a user writes it: the square mask and the hint that it is causal
        kw = (
            {
                "src_mask": torch.nn.Transformer.generate_square_subsequent_mask(seq),
                "is_causal": True,
            }
            if causal
            else {}
        )

        def loss(p, x, call, kw=kw):
            return call(layer, p, (x,), kw).square().mean()

        ours_f = lambda p, x: loss(p, x, tx.functional_call)  # noqa: E731
        ref_f = lambda p, x: loss(p, x, tf.functional_call)  # noqa: E731
        ours = _ours(ours_f, tx.grad)
        mode = " causal" if causal else ""
        case = f"TransformerEncoderLayer fwd+bwd d={d} heads={heads}{mode}, {batch}x{seq}"
        rows += _peers(case, tf.grad(ref_f), (params, x), rounds, ours, thunder_ok=False, tol=1e-3)
    return rows


def gpt_params(d, seed=0):
    """A GPT-2 style block's parameters (fused q/k/v projection, 4x MLP), GPT-2's init scale."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return 0.02 * torch.randn(*shape, generator=g)

    ones, zeros = torch.ones(d), torch.zeros(d)
    return {
        "ln1": (ones, zeros),
        "attn": (w(3 * d, d), torch.zeros(3 * d)),
        "proj": (w(d, d), zeros),
        "ln2": (ones.clone(), zeros.clone()),
        "fc": (w(4 * d, d), torch.zeros(4 * d)),
        "out": (w(d, 4 * d), zeros.clone()),
    }


def gpt_block(p, x, heads):
    """Pre-norm block: x + attn(ln(x)) with causal scaled-dot-product attention, then
    x + mlp(ln(x)) with tanh-GELU, as in GPT-2 (nanoGPT's Block)."""
    b, t, d = x.shape
    h = F.layer_norm(x, (d,), *p["ln1"])
    q, k, v = F.linear(h, *p["attn"]).split(d, dim=-1)
    q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + F.linear(a.transpose(1, 2).reshape(b, t, d), *p["proj"])
    h = F.gelu(F.linear(F.layer_norm(x, (d,), *p["ln2"]), *p["fc"]), approximate="tanh")
    return x + F.linear(h, *p["out"])


def gpt_block_step(rounds):
    """#20's GPT-style block: forward + backward of a causal pre-norm block, d=256, 4 heads."""
    d, heads, seq, batch = 256, 4, 128, 8
    params = gpt_params(d)
    x = torch.randn(batch, seq, d, generator=torch.Generator().manual_seed(1))

    def loss(p, x):
        return gpt_block(p, x, heads).square().mean()

    case = f"GPT block (causal attention, GELU MLP) fwd+bwd d={d} heads={heads}, {batch}x{seq}"
    ours = _ours(loss, tx.grad)
    return _peers(case, tf.grad(loss), (params, x), rounds, ours, thunder_ok=False, tol=1e-3)
