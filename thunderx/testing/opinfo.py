"""OpInfo conformance: torch's own sample inputs (float64, CPU) for every torch function the
language layer supports, through jit (vs torch), vjp (vs torch.autograd) and vmap (vs a loop).

    python -m thunderx.testing.opinfo [--all-samples]    prints per-category counts
    python -m thunderx.testing.opinfo --all              all of torch's op_db (thunderx.testing.opdb)
"""

from __future__ import annotations

import argparse
import collections
import dataclasses

import torch

import thunderx as tx
from thunderx import tree
from thunderx.core import is_tensor_like
from thunderx.errors import RandomnessError

# The functions research code uses (OpInfo names), by category (the torch coverage issue's list).
CATEGORIES = {
    "unary": "abs neg sign exp exp2 expm1 log log1p log2 log10 sqrt rsqrt reciprocal square sin cos "
    "tan sinh cosh tanh asin acos atan asinh acosh atanh sigmoid erf erfc erfinv lgamma "
    "digamma floor ceil round trunc frac logit sinc",
    "binary": "add sub mul div true_divide pow float_power atan2 maximum minimum fmax fmin remainder "
    "fmod hypot xlogy logaddexp copysign clamp clamp_min clamp_max where lerp addcmul "
    "addcdiv eq ne lt le gt ge",
    "reduction": "sum mean prod amax amin max min argmax argmin var std var_mean logsumexp cumsum "
    "cumprod norm linalg.vector_norm all any",
    "matmul": "matmul mm bmm mv dot outer addmm baddbmm einsum tensordot nn.functional.linear",
    "shape": "reshape view flatten unflatten squeeze unsqueeze permute transpose t mT expand "
    "broadcast_to cat stack split chunk unbind narrow select __getitem__ flip roll repeat "
    "tile movedim diagonal tril triu gather index_select scatter take_along_dim "
    "nn.functional.pad",
    "nn": "nn.functional.relu nn.functional.gelu nn.functional.silu nn.functional.elu "
    "nn.functional.leaky_relu nn.functional.softplus nn.functional.hardtanh "
    "nn.functional.mish nn.functional.logsigmoid softmax log_softmax "
    "nn.functional.layer_norm nn.functional.rms_norm nn.functional.group_norm "
    "nn.functional.normalize nn.functional.conv1d nn.functional.conv2d "
    "nn.functional.max_pool2d nn.functional.avg_pool2d nn.functional.embedding "
    "nn.functional.scaled_dot_product_attention nn.functional.mse_loss "
    "nn.functional.l1_loss nn.functional.smooth_l1_loss nn.functional.huber_loss "
    "nn.functional.cross_entropy nn.functional.nll_loss nn.functional.binary_cross_entropy "
    "nn.functional.binary_cross_entropy_with_logits nn.functional.kl_div "
    "nn.functional.cosine_similarity",
    "linalg": "linalg.cholesky cholesky linalg.eigh linalg.eigvalsh linalg.svd svd linalg.svdvals "
    "linalg.qr qr linalg.lu linalg.lu_factor linalg.solve linalg.solve_triangular "
    "triangular_solve linalg.inv linalg.det linalg.slogdet logdet linalg.lstsq linalg.pinv "
    "pinverse linalg.matrix_norm linalg.norm matrix_exp cholesky_solve cholesky_inverse "
    "linalg.matrix_rank linalg.cond linalg.matrix_power linalg.multi_dot linalg.lu_solve lu_solve "
    "lu_unpack",
    "sorting": "sort argsort msort topk kthvalue median nanmedian quantile nanquantile cummax cummin "
    "logcumsumexp searchsorted bucketize",
}

# What thunderx does not support, with the reason: whole variants by (name, variant), and single
# samples by a predicate. Their samples are not run; the report lists them.
KNOWN_FAILURES: dict[tuple, str] = {}
SAMPLE_XFAIL = [
    (
        "scatter",
        lambda s: s.kwargs.get("reduce") == "multiply",
        "scatter(reduce='multiply') is deprecated in torch; products by index are not supported",
    ),
    (
        "nn.functional.scaled_dot_product_attention",
        lambda s: s.kwargs.get("dropout_p", 0) > 0,
        "randomness: attention dropout draws a mask",
    ),
    # Deliberate differences from torch's derivatives, each a row of docs/conventions.md's table
    # (tests/test_conventions_table.py runs its reproducer).
    *[
        (
            name,
            lambda s: bool(torch.isnan(s.input).any()),
            "a nan input: the gradient of a max/min that selects no entry is 0 (conventions: "
            "symbolic-zero-derivative), torch's 0/1 mask gives nan",
        )
        for name in ("masked.amax", "masked.amin")
    ],
    (
        "nn.functional.linear_cross_entropy",
        lambda s: s.kwargs.get("weight") is not None and "options" in s.kwargs,
        "a class-weight tensor: torch's chunked kernel gives it no gradient (its unchunked "
        "path refuses to differentiate it); thunderx gives the derivative",
    ),
    (
        "masked.prod",
        lambda s: not bool(torch.isfinite(s.input).all()),
        "an infinite or nan input: thunderx's prod gradient (exact products of the others) "
        "equals torch.func.grad's there; torch.autograd's prod backward divides by the input "
        "and gives nan",
    ),
]


@dataclasses.dataclass
class OpResult:
    name: str
    samples: int = 0
    fwd: int = 0
    vjp: int = 0
    vjp_checked: int = 0
    vmap: int = 0
    errors: list = dataclasses.field(default_factory=list)
    known: list = dataclasses.field(default_factory=list)
    # (check, exception) for every failing sample, in order: the op_db report classifies them
    failures: list = dataclasses.field(default_factory=list)
    random: bool = False  # eager torch gives other values under another seed

    def passed(self, check: str) -> bool:
        total = self.vjp_checked if check == "vjp" else self.samples
        return self.samples > 0 and getattr(self, check) == total


class Mismatch(AssertionError):
    """thunderx's result differs from the oracle's; `kind` is "value", "shape/dtype" or
    "structure" (number of outputs)."""

    def __init__(self, kind: str, msg: str):
        super().__init__(msg)
        self.kind = kind


def _close(got, want, tol):
    # torch.autograd gives sparse gradients for embedding(sparse=True): compare the values
    want = tree.map(
        lambda w: w.to_dense() if isinstance(w, torch.Tensor) and w.is_sparse else w, want
    )
    gl, wl = tree.leaves(got), tree.leaves(want)
    if len(gl) != len(wl):
        raise Mismatch("structure", f"{len(gl)} outputs, expected {len(wl)}")
    for g, w in zip(gl, wl):
        if not isinstance(w, torch.Tensor):
            if g != w and not (isinstance(g, torch.Tensor) and torch.equal(g, torch.as_tensor(w))):
                raise Mismatch("value", f"value {g} vs {w}")
            continue
        if not isinstance(g, torch.Tensor):
            raise Mismatch("structure", f"{type(g).__name__} where a tensor was expected")
        if tuple(g.shape) != tuple(w.shape) or g.dtype != w.dtype:
            raise Mismatch("shape/dtype", f"{g.dtype}{tuple(g.shape)} vs {w.dtype}{tuple(w.shape)}")
        try:
            torch.testing.assert_close(g, w, rtol=tol, atol=tol, equal_nan=True)
        except AssertionError as e:
            raise Mismatch("value", str(e).strip().splitlines()[0]) from None


def _split(sample):
    args = (sample.input, *sample.args)
    leaves, treedef = tree.flatten((args, dict(sample.kwargs)))
    pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def f(*ts):
        full = list(leaves)
        for i, t in zip(pos, ts):
            full[i] = t
        a, k = tree.unflatten(treedef, full)
        return fn(*a, **k)

    return f, [leaves[i] for i in pos]


fn = None  # set per op (closure-free so the sampled function stays picklable)
_seed = 42  # each evaluation starts from it: op_db's wrapper_set_seed seeds 42 inside the op,
# which under jit happens at trace time only, so the staged draws start from this same state


def op_id(op) -> str:
    """`name` or `name.variant`: unique within op_db."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def check_op(op, max_samples: int | None) -> OpResult:
    global fn
    res = OpResult(op_id(op))
    reason = KNOWN_FAILURES.get((op.name, op.variant_test_name))
    if reason is not None:
        res.known.append(reason)
        return res
    samples = list(op.sample_inputs("cpu", torch.float64, requires_grad=False))
    if max_samples is not None:
        samples = samples[:max_samples]
    kept = []
    for s in samples:
        why = next((r for n, pred, r in SAMPLE_XFAIL if n == op.name and pred(s)), None)
        if why is None:
            kept.append(s)
        elif why not in res.known:
            res.known.append(why)
    samples = kept
    for sample in samples:
        fn = op.op
        f, tensors = _split(sample)
        fn_now = op.op

        def g(*ts, _f=f, _op=fn_now):
            global fn
            fn = _op
            # One seed per evaluation: a random op (dropout, normal, bernoulli) then draws the
            # same numbers in eager torch, under jit and vjp, and in every row of
            # vmap(randomness="same") and of the loop it is compared with.
            torch.manual_seed(_seed)
            return _f(*ts)

        res.samples += 1
        try:
            want = g(*tensors)
        except Exception:  # noqa: BLE001 - torch itself rejects this sample
            res.samples -= 1
            continue
        if not res.random:
            res.random = _draws_random(op, g, tensors)
        for check in ("fwd", "vjp", "vmap"):
            try:
                if globals()[f"_check_{check}"](g, tensors, want, res):
                    setattr(res, check, getattr(res, check) + 1)
            except Exception as e:  # noqa: BLE001 - recorded in the report
                if isinstance(e, Mismatch) and e.kind == "value" and res.random:
                    e.kind = "value of a random op (another random stream than torch's)"
                first = (str(e).strip().splitlines() or [""])[0][:160]
                res.errors.append(f"{check}: {type(e).__name__}: {first}")
                res.failures.append((check, e))
    return res


def _draws_random(op, g, tensors) -> bool:
    """Whether the sample draws from torch's global generator (op_db runs some random ops
    under `wrapper_set_seed`, which restores the generator's state afterwards)."""
    if "wrapper_set_seed" in getattr(getattr(op.op, "__code__", None), "co_names", ()):
        return True
    torch.manual_seed(_seed)
    fresh = torch.get_rng_state()
    g(*tensors)
    return not torch.equal(torch.get_rng_state(), fresh)


def _check_fwd(g, tensors, want, res):
    _close(tx.jit(g)(*tensors), want, 1e-6)
    return True


def _check_vjp(g, tensors, want, res):
    diff = [i for i, t in enumerate(tensors) if t.dtype.is_floating_point]
    outs = [o for o in tree.leaves(want) if isinstance(o, torch.Tensor)]
    if not diff or not any(o.dtype.is_floating_point for o in outs):
        return False
    leaves = [t.clone().requires_grad_(i in diff) for i, t in enumerate(tensors)]
    try:
        ref = [o for o in tree.leaves(g(*leaves)) if isinstance(o, torch.Tensor)]
        ref_f = [o for o in ref if o.requires_grad]
        if not ref_f:
            return False
        gen = torch.Generator().manual_seed(0)
        cts = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in ref_f]
        want_g = torch.autograd.grad(ref_f, [leaves[i] for i in diff], cts, allow_unused=True)
    except Exception:  # noqa: BLE001 - torch cannot differentiate this sample: skipped
        return False
    res.vjp_checked += 1

    def h(*xs):
        full = list(tensors)
        for i, x in zip(diff, xs):
            full[i] = x
        return [o for o in tree.leaves(g(*full)) if is_tensor_like(o) and o.dtype.is_floating_point]

    out, vjp_fn = tx.vjp(h, *[tensors[i] for i in diff])
    ct_full, it = [], iter(cts)
    ref_flags = [o.requires_grad for o in ref if o.dtype.is_floating_point]
    for o, flag in zip(out, ref_flags):
        ct_full.append(next(it) if flag else torch.zeros_like(o))
    got = vjp_fn(ct_full)
    want_g = [torch.zeros_like(tensors[i]) if w is None else w for i, w in zip(diff, want_g)]
    _close(list(got), want_g, 1e-5)
    return True


def _check_vmap(g, tensors, want, res):
    if not tensors:
        return True
    batched = [torch.stack([t, t * 0.999 if t.dtype.is_floating_point else t]) for t in tensors]
    try:
        got = tx.vmap(g, randomness="same")(*batched)
    except RandomnessError as e:
        if not (res.random and "same randomness" in str(e)):
            raise
        # torch.func refuses randomness="same" with a batched tensor argument; "different" is
        # defined as the op called once with the batch in front, under the same seed
        _close(tx.vmap(g, randomness="different")(*batched), g(*batched), 1e-6)
        return True
    # each row a tensor of its own, as vmap's examples are (as_strided reads its argument's storage)
    rows = [g(*[b[k].clone() for b in batched]) for k in range(2)]
    expect = tree.map(lambda *xs: torch.stack([torch.as_tensor(x) for x in xs]), *rows)
    _close(got, expect, 1e-6)
    return True


def supported_ops():
    """(category, OpInfo) for every listed function that has an OpInfo entry."""
    from torch.testing._internal.common_methods_invocations import op_db

    by_name = collections.defaultdict(list)
    for op in op_db:
        by_name[op.name].append(op)
    out = []
    for cat, names in CATEGORIES.items():
        for name in names.split():
            for op in by_name.get(name, []):
                out.append((cat, name, op))
    return out


def report(max_samples: int | None = 8, verbose: bool = True):
    per_name: dict[str, list[OpResult]] = collections.defaultdict(list)
    cats = {}
    for cat, name, op in supported_ops():
        per_name[name].append(check_op(op, max_samples))
        cats[name] = cat
    listed = [n for names in CATEGORIES.values() for n in names.split()]
    lines = ["category    listed  with-OpInfo  fwd  vjp  vmap  all-three"]
    totals = collections.Counter()
    failures, known = [], []
    for cat, names in CATEGORIES.items():
        c = collections.Counter()
        for name in names.split():
            c["listed"] += 1
            rs = per_name.get(name)
            if not rs:
                continue
            c["opinfo"] += 1
            rs_run = [r for r in rs if r.samples]
            fwd = bool(rs_run) and all(r.passed("fwd") for r in rs_run)
            vjp = bool(rs_run) and all(r.passed("vjp") or r.vjp_checked == 0 for r in rs_run)
            vmap = bool(rs_run) and all(r.passed("vmap") for r in rs_run)
            if any(r.known and not r.samples for r in rs):
                fwd = vjp = vmap = False  # a whole variant is unsupported
            c["fwd"] += fwd
            c["vjp"] += vjp
            c["vmap"] += vmap
            c["all"] += fwd and vjp and vmap
            for r in rs:
                failures += [f"{r.name}: {e}" for e in r.errors[:2]]
                known += [f"{r.name}: {k}" for k in r.known]
        totals.update(c)
        lines.append(
            f"{cat:<11} {c['listed']:>6} {c['opinfo']:>12} {c['fwd']:>4} {c['vjp']:>4} "
            f"{c['vmap']:>5} {c['all']:>10}"
        )
    lines.append(
        f"{'total':<11} {totals['listed']:>6} {totals['opinfo']:>12} {totals['fwd']:>4} "
        f"{totals['vjp']:>4} {totals['vmap']:>5} {totals['all']:>10}"
    )
    missing = [n for n in listed if n not in per_name]
    text = "\n".join(lines)
    if verbose:
        print(text)
        if missing:
            print(f"no OpInfo entry: {' '.join(missing)}")
        if known:
            print("known failures (not run, not counted as passing unless other samples cover it):")
            for k in known:
                print("  " + k)
        if failures:
            print("failures:")
            for f in failures:
                print("  " + f)
    return totals, per_name, failures, missing


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m thunderx.testing.opinfo")
    ap.add_argument("--all-samples", action="store_true", help="listed functions: every sample")
    ap.add_argument("--all", action="store_true", help="all of op_db (see thunderx.testing.opdb)")
    ap.add_argument("--max-samples", type=int, default=None, help="--all: samples per OpInfo")
    ap.add_argument("--jobs", type=int, default=None, help="--all: processes (default: cpus)")
    ap.add_argument("--timeout", type=float, default=300.0, help="--all: seconds per OpInfo")
    ap.add_argument("--slice", type=int, default=None, help="--all: this many ops, evenly spread")
    ap.add_argument("--ops", default=None, help="--all: comma-separated OpInfo names or ids")
    ap.add_argument("--report", default=None, help="--all: write the markdown report here")
    ap.add_argument("--json", default=None, help="--all: write per-op statuses here")
    ap.add_argument("--progress", action="store_true", help="--all: a line per finished op")
    args = ap.parse_args(argv)
    if args.all:
        from thunderx.testing import opdb

        opdb.main(args)
    else:
        report(None if args.all_samples else 8)


if __name__ == "__main__":
    main()
