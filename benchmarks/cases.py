"""The benchmark cases: each returns rows (case, candidate, baseline, ratio, ms, note)."""

from __future__ import annotations

import torch
import torch.func as tf
import torch.nn.functional as F
from harness import compare, first_call, spread, timed

import thunderx as tx
from thunderx.executors.inductor_exec import inductor_unavailable_reason


def _check(a, b, tol=1e-4):
    for x, y in zip(tx.tree.leaves(a), tx.tree.leaves(b)):
        if not torch.allclose(x, y, rtol=tol, atol=tol):
            raise AssertionError("benchmark candidates disagree")


def _with_tier(note, res, key):
    tier = res.get("__tiers__", {}).get(key, "")
    return "; ".join(n for n in (note, tier) if n)


def _row(case, cand, base, res, key, note=""):
    ratio, secs = res[key]
    note = _with_tier(note, res, key)
    return {
        "case": case,
        "candidate": cand,
        "baseline": base,
        "ratio": ratio,
        "ms": secs * 1e3,
        "baseline_ms": res["__baseline__"][1] * 1e3,
        "spread": spread(res, key),
        "note": note,
    }


# `run.py --no-compile` turns the torch.compile peers off (they cost most of the suite's time:
# a cold compile of a functorch transform takes 10-60 s on 2 threads).
COMPILE_PEERS = [True]


def compile_peer(fn, *args):
    """(torch.compile(fn), its cold first call in seconds, None), or (None, None, why not)."""
    if not COMPILE_PEERS[0]:
        return None, None, "torch.compile peer skipped (--no-compile)"
    try:
        comp = torch.compile(fn)
        return comp, first_call(comp, *args), None
    except Exception as e:  # noqa: BLE001 - the reason goes into the results
        return None, None, f"torch.compile failed: {type(e).__name__}: {str(e)[:100]}"


def compile_row(case, cand, peer, res, key, comp_first, ours_first=None, why=None):
    """`key` against the "tc" candidate (torch.compile of the peer), both timed against the same
    baseline in the same rounds: the ratio of their median ratios."""
    if why is not None:
        nan = float("nan")
        return {
            "case": case,
            "candidate": cand,
            "baseline": f"torch.compile({peer})",
            "ratio": nan,
            "ms": nan,
            "baseline_ms": nan,
            "note": why,
        }
    note = f"first call: torch.compile {comp_first * 1e3:.0f} ms"
    if ours_first is not None:
        note += f", ours {ours_first * 1e3:.0f} ms"
    return {
        "case": case,
        "candidate": cand,
        "baseline": f"torch.compile({peer})",
        "ratio": res[key][0] / res["tc"][0],
        "ms": res[key][1] * 1e3,
        "baseline_ms": res["tc"][1] * 1e3,
        "spread": spread(res, key, over="tc"),
        "note": _with_tier(note, res, key),
    }


def with_compile(cands, comp):
    return {**cands, "tc": comp} if comp is not None else cands


def mlp_init(dims, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(a, b, generator=g) / a**0.5, torch.zeros(b))
        for a, b in zip(dims[:-1], dims[1:])
    ]


def mlp_apply(params, x):
    for i, (w, b) in enumerate(params):
        x = x @ w + b
        if i < len(params) - 1:
            x = torch.relu(x)
    return x


def mlp_loss(params, x, y):
    return F.cross_entropy(mlp_apply(params, x), y)


# (layer sizes, batch): the README's size and the size issue #20 measured
PER_EXAMPLE_MLP_SIZES = [([128, 128, 128, 10], 256), ([256, 256, 256, 10], 128)]


def _vmap_grad_rows(case, res, compile_s, comp_first, why):
    """thunderx's jit(vmap(grad)) ("t") against torch.func's vmap(grad) and torch.compile's."""
    return [
        _row(
            case,
            "jit(vmap(grad))",
            "torch.func vmap(grad)",
            res,
            "t",
            f"trace+compile {compile_s * 1e3:.0f} ms",
        ),
        compile_row(case, "jit(vmap(grad))", "vmap(grad)", res, "t", comp_first, compile_s, why),
    ]


def per_example_mlp(rounds):
    """Per-example gradients of a ReLU MLP with cross-entropy (DP-SGD style), two sizes."""
    rows = []
    for dims, batch in PER_EXAMPLE_MLP_SIZES:
        params = mlp_init(dims)
        x, y = torch.randn(batch, 1, dims[0]), torch.randint(0, dims[-1], (batch, 1))
        ours = tx.jit(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0)))
        theirs = tf.vmap(tf.grad(mlp_loss), in_dims=(None, 0, 0))
        compile_s = timed(lambda: ours(params, x, y))
        _check(ours(params, x, y), theirs(params, x, y))
        comp, comp_first, why = compile_peer(theirs, params, x, y)
        # the torch executor alone (the default's first tier)
        pinned = tx.jit(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0)), executor="torch")
        cands = {"t": lambda: ours(params, x, y), "tt": lambda: pinned(params, x, y)}
        if comp is not None and inductor_unavailable_reason() is None:
            # the executor a user comparing with torch.compile would pick: inductor
            ind = tx.jit(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0)), executor="inductor")
            ind_first = first_call(ind, params, x, y)
            _check(ind(params, x, y), theirs(params, x, y))
            cands["ti"] = lambda: ind(params, x, y)
        # rounds of at least 0.1 s: the outputs (up to 35 MB) make single calls swing with
        # page faults
        res = compare(
            lambda: theirs(params, x, y),
            with_compile(cands, comp and (lambda: comp(params, x, y))),
            rounds,
            target_s=0.1,
        )
        case = f"per-example grads, MLP {'-'.join(map(str, dims))}, batch {batch}"
        rows += _vmap_grad_rows(case, res, compile_s, comp_first, why)
        if why is None:
            cand = "jit(vmap(grad)), torch executor"
            rows.append(compile_row(case, cand, "vmap(grad)", res, "tt", comp_first))
        if "ti" in res:
            cand = "jit(vmap(grad)), inductor"
            rows.append(compile_row(case, cand, "vmap(grad)", res, "ti", comp_first, ind_first))
    return rows


def autocast_per_example(rounds):
    """Per-example gradients of the ReLU MLP (issue #20's size) under
    torch.autocast("cpu", dtype=torch.bfloat16): each side computes its matrix products in
    bfloat16 and returns float32 gradients (thunderx: the casts are equations of its program)."""
    dims, batch = PER_EXAMPLE_MLP_SIZES[1]
    params = mlp_init(dims)
    x, y = torch.randn(batch, 1, dims[0]), torch.randint(0, dims[-1], (batch, 1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = tx.jit(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0)))
        theirs = tf.vmap(tf.grad(mlp_loss), in_dims=(None, 0, 0))
        compile_s = timed(lambda: ours(params, x, y))
        _check(ours(params, x, y), theirs(params, x, y), tol=2e-2)
        comp, comp_first, why = compile_peer(theirs, params, x, y)
        res = compare(
            lambda: theirs(params, x, y),
            with_compile({"t": lambda: ours(params, x, y)}, comp and (lambda: comp(params, x, y))),
            rounds,
            target_s=0.1,
        )
    case = (
        f"per-example grads under bfloat16 autocast, MLP {'-'.join(map(str, dims))}, batch {batch}"
    )
    return _vmap_grad_rows(case, res, compile_s, comp_first, why)


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, 1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, 1)
        self.fc1 = torch.nn.Linear(9216, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def per_example_cnn(rounds):
    torch.manual_seed(0)
    model = SmallCNN()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = torch.randn(64, 1, 1, 28, 28), torch.randint(0, 10, (64, 1))

    def loss(p, xb, yb):
        return F.nll_loss(tx.functional_call(model, p, (xb,)), yb)

    def loss_ref(p, xb, yb):
        return F.nll_loss(tf.functional_call(model, p, (xb,)), yb)

    ours = tx.jit(tx.vmap(tx.grad(loss), in_axes=(None, 0, 0)))
    theirs = tf.vmap(tf.grad(loss_ref), in_dims=(None, 0, 0))
    compile_s = timed(lambda: ours(params, x, y))
    _check(ours(params, x, y), theirs(params, x, y), 1e-3)
    comp, comp_first, why = compile_peer(theirs, params, x, y)
    res = compare(
        lambda: theirs(params, x, y),
        with_compile({"t": lambda: ours(params, x, y)}, comp and (lambda: comp(params, x, y))),
        max(3, rounds // 3),
    )
    case = "per-example grads, tutorial CNN, batch 64"
    return _vmap_grad_rows(case, res, compile_s, comp_first, why)


def ensembling(rounds):
    models = [mlp_init([784, 128, 128, 10], seed=s) for s in range(10)]
    stacked = tx.tree.map(lambda *xs: torch.stack(xs), *models)
    x = torch.randn(64, 784)
    ours = tx.jit(tx.vmap(mlp_apply, in_axes=(0, None)))
    theirs = tf.vmap(mlp_apply, in_dims=(0, None))
    _check(ours(stacked, x), theirs(stacked, x))
    comp, comp_first, why = compile_peer(theirs, stacked, x)
    res = compare(
        lambda: theirs(stacked, x),
        with_compile(
            {"t": lambda: ours(stacked, x), "eager": lambda: [mlp_apply(m, x) for m in models]},
            comp and (lambda: comp(stacked, x)),
        ),
        rounds,
    )
    return [
        compile_row(
            "ensembling, 10 MLPs 784-128-128-10, batch 64",
            "jit(vmap(f))",
            "vmap",
            res,
            "t",
            comp_first,
            why=why,
        ),
        _row(
            "ensembling, 10 MLPs 784-128-128-10, batch 64",
            "jit(vmap(f))",
            "torch.func vmap",
            res,
            "t",
        ),
        _row(
            "ensembling, 10 MLPs 784-128-128-10, batch 64",
            "eager loop",
            "torch.func vmap",
            res,
            "eager",
        ),
    ]


def jacobians(rounds):
    rows = []
    for din, dout in ((32, 2048), (2048, 32)):
        g = torch.Generator().manual_seed(0)
        w, b = torch.randn(dout, din, generator=g) / din**0.5, torch.randn(dout, generator=g)
        x = torch.randn(din, generator=g)
        f = lambda v: torch.tanh(F.linear(v, w, b))  # noqa: E731
        for name, ours, theirs in (
            ("jacfwd", tx.jit(tx.jacfwd(f)), tf.jacfwd(f)),
            ("jacrev", tx.jit(tx.jacrev(f)), tf.jacrev(f)),
        ):
            _check(ours(x), theirs(x))
            comp, comp_first, why = compile_peer(theirs, x)
            res = compare(
                lambda: theirs(x),
                with_compile({"t": lambda: ours(x)}, comp and (lambda: comp(x))),
                rounds,
            )
            case = f"{name}, tanh(linear) Din={din} Dout={dout}"
            rows.append(_row(case, f"jit({name})", f"torch.func {name}", res, "t"))
            rows.append(compile_row(case, f"jit({name})", name, res, "t", comp_first, why=why))
    return rows


def pinn_hessian(rounds):
    g = torch.Generator().manual_seed(0)
    w1, b1 = torch.randn(2, 64, generator=g) / 2**0.5, torch.zeros(64)
    w2, b2 = torch.randn(64, 64, generator=g) / 8, torch.zeros(64)
    w3 = torch.randn(64, 1, generator=g) / 8

    def u(xy):
        h = torch.tanh(xy @ w1 + b1)
        h = torch.tanh(h @ w2 + b2)
        return (h @ w3).sum()

    pts = torch.randn(256, 2)
    ours = tx.jit(tx.vmap(tx.hessian(u)))
    theirs = tf.vmap(tf.hessian(u))
    compile_s = timed(lambda: ours(pts))
    _check(ours(pts), theirs(pts))
    comp, comp_first, why = compile_peer(theirs, pts)
    res = compare(
        lambda: theirs(pts),
        with_compile({"t": lambda: ours(pts)}, comp and (lambda: comp(pts))),
        rounds,
    )
    case = "batched Hessian, PINN MLP 2-64-64-1 tanh, batch 256"
    return [
        _row(
            case,
            "jit(vmap(hessian))",
            "torch.func vmap(hessian)",
            res,
            "t",
            f"trace+compile {compile_s * 1e3:.0f} ms",
        ),
        compile_row(
            case, "jit(vmap(hessian))", "vmap(hessian)", res, "t", comp_first, compile_s, why
        ),
    ]


def hvp(rounds):
    params = mlp_init([64, 64, 1])
    x = torch.randn(32, 64)
    flat = lambda p: mlp_apply(p, x).pow(2).mean()  # noqa: E731
    v = tx.tree.map(torch.randn_like, params)
    ours = tx.jit(lambda p, v: tx.jvp(tx.grad(flat), (p,), (v,))[1])
    theirs = lambda p, v: tf.jvp(tf.grad(flat), (p,), (v,))[1]  # noqa: E731
    _check(ours(params, v), theirs(params, v))
    comp, comp_first, why = compile_peer(theirs, params, v)
    res = compare(
        lambda: theirs(params, v),
        with_compile({"t": lambda: ours(params, v)}, comp and (lambda: comp(params, v))),
        rounds,
    )
    case = "Hessian-vector product (fwd-over-rev), MLP 64-64-1"
    return [
        _row(case, "jit(jvp(grad))", "torch.func jvp(grad)", res, "t"),
        compile_row(case, "jit(jvp(grad))", "jvp(grad)", res, "t", comp_first, why=why),
    ]


def jit_dispatch(rounds):
    x = torch.randn(8)
    f = lambda x: torch.sin(x) * 2 + 1  # noqa: E731
    j = tx.jit(f)
    j(x)
    res = compare(lambda: f(x), {"t": lambda: j(x)}, rounds, target_s=0.05)
    return [_row("cached jit dispatch, 3 ops on f32[8]", "jit(f)", "torch eager", res, "t")]


def trace_scaling(rounds):
    """Trace + transform time of vmap(grad(mlp)) by depth; the per-layer cost of depth 256 over
    depth 16 is measured interleaved (median of round ratios), like every other ratio here."""
    rows, calls = [], {}
    for depth in (4, 16, 64, 256):
        params = mlp_init([16] * (depth + 1))
        x, y = torch.randn(8, 16), torch.randint(0, 16, (8,))
        f = tx.make_jaxpr(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0)))
        calls[depth] = lambda f=f, p=params, x=x, y=y: f(p, x, y)
        calls[depth]()
        best = min(timed(calls[depth]) for _ in range(3))
        rows.append(
            {
                "case": f"make_jaxpr(vmap(grad(mlp))), depth {depth}",
                "candidate": "thunderx",
                "baseline": "-",
                "ratio": float("nan"),
                "ms": best * 1e3,
                "baseline_ms": float("nan"),
                "note": f"{best / depth * 1e6:.0f} us/layer",
            }
        )
    res = compare(calls[16], {"t": calls[256]}, max(3, rounds), target_s=0.05)
    ratio = res["t"][0] * 16 / 256
    rows.append(
        {
            "case": "per-layer trace cost, depth 256 / depth 16",
            "candidate": "thunderx",
            "baseline": "thunderx depth 16",
            "ratio": ratio,
            "ms": res["t"][1] * 1e3,
            "baseline_ms": res["__baseline__"][1] * 1e3,
            "note": "linear scaling is 1.0",
        }
    )
    return rows


def jax_trace(rounds):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return [
            {
                "case": "make_jaxpr(vmap(grad(mlp))) depth 64 vs JAX",
                "candidate": "thunderx",
                "baseline": "jax (not installed)",
                "ratio": float("nan"),
                "ms": float("nan"),
                "baseline_ms": float("nan"),
                "note": "pip install jax to compare",
            }
        ]
    depth = 64
    params = mlp_init([16] * (depth + 1))
    x, y = torch.randn(8, 16), torch.randint(0, 16, (8,))
    jparams = [(jnp.asarray(w.numpy()), jnp.asarray(b.numpy())) for w, b in params]
    jx, jy = jnp.asarray(x.numpy()), jnp.asarray(y.numpy())

    def jloss(p, xx, yy):
        h = xx
        for i, (w, b) in enumerate(p):
            h = h @ w + b
            if i < len(p) - 1:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -logp[yy]

    ours = lambda: tx.make_jaxpr(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0)))(params, x, y)  # noqa: E731
    theirs = lambda: jax.make_jaxpr(jax.vmap(jax.grad(jloss), in_axes=(None, 0, 0)))(
        jparams, jx, jy
    )  # noqa: E731
    res = compare(theirs, {"t": ours}, max(3, rounds // 3), target_s=0.05)
    return [
        _row(
            "make_jaxpr(vmap(grad(mlp))), depth 64",
            "thunderx.make_jaxpr",
            "jax.make_jaxpr",
            res,
            "t",
        )
    ]


def recurrent_grads(rounds):
    """Gradients of a recurrent layer's loss with respect to its parameters (a training step's
    backward): an LSTM (reverse mode through torch's backward of its sequence kernel) and a GRU
    (through the cells unrolled over time), against torch.func.grad."""
    rows = []
    for cls, kw in ((torch.nn.LSTM, {"num_layers": 2}), (torch.nn.GRU, {"bidirectional": True})):
        torch.manual_seed(0)
        layer = cls(64, 128, batch_first=True, **kw)
        params = {k: v.detach() for k, v in layer.named_parameters()}
        seq = torch.randn(16, 50, 64, generator=torch.Generator().manual_seed(1))

        def loss(p, call, layer=layer, seq=seq):
            return call(layer, p, (seq,))[0].square().mean()

        def autograd(p=params, loss=loss):
            leaves = {k: v.clone().requires_grad_() for k, v in p.items()}
            return torch.autograd.grad(loss(leaves, tf.functional_call), list(leaves.values()))

        ours = tx.jit(tx.grad(lambda p: loss(p, tx.functional_call)))
        theirs = tf.grad(lambda p: loss(p, tf.functional_call))
        compile_s = timed(lambda: ours(params))
        _check(ours(params), theirs(params))
        _check(list(ours(params).values()), autograd())
        cands = {"t": lambda: ours(params), "tf": lambda: theirs(params)}
        res = compare(autograd, cands, rounds, target_s=0.1)
        shape = ", bidirectional" if kw.get("bidirectional") else f", {kw['num_layers']} layers"
        case = f"{cls.__name__} grad{shape}, 64->128, batch 16 x 50 steps"
        note = f"trace+compile {compile_s * 1e3:.0f} ms"
        rows.append(_row(case, "jit(grad)", "torch autograd", res, "t", note))
        vs_func = _row(case, "jit(grad)", "torch.func grad", res, "t")
        vs_func.update(
            ratio=res["t"][0] / res["tf"][0],
            baseline_ms=res["tf"][1] * 1e3,
            spread=spread(res, "t", over="tf"),
        )
        rows.append(vs_func)
    return rows
