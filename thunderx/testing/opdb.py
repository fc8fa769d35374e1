"""All of torch's op_db: every OpInfo that supports autograd in float64 on CPU (540 in torch 2.13)
through jit (vs torch), vjp (vs torch.autograd) and vmap (vs a loop), each op in its own forked
process with a time limit, so a hanging or crashing op is reported rather than stalling the run.

    python -m thunderx.testing.opinfo --all [--max-samples N] [--jobs J] [--timeout S]
                                            [--report docs/opdb.md] [--json docs/opdb.json]

The report gives, per OpInfo, pass/fail per transform and for each failure a reason category
(the unsupported torch function, the missing rule, a wrong value, a timeout, ...).
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import time
import warnings

import torch

from thunderx import errors
from thunderx.testing import opinfo

CHECKS = ("jit", "vjp", "vmap")
_FIELD = {"jit": "fwd", "vjp": "vjp", "vmap": "vmap"}


def differentiable_ops() -> list:
    """The OpInfos of torch's op_db that support autograd in float64 on CPU, by id."""
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [o for o in op_db if o.supports_autograd and torch.float64 in o.supported_dtypes("cpu")]
    return sorted(ops, key=opinfo.op_id)


def ci_slice(ops: list, count: int) -> list:
    """`count` ops spread evenly over the sorted list (deterministic)."""
    if count >= len(ops):
        return list(ops)
    step = len(ops) / count
    return [ops[int(i * step)] for i in range(count)]


_UNSUPPORTED = re.compile(r"^(.{1,80}?) is not supported")
_MISSING_RULE = re.compile(r"(no \w+ rule for '?[\w.]+'?|'?[\w.]+'? has no \w+ rule)", re.I)


def classify(exc: BaseException) -> str:
    """A short reason category for a failing check: what thunderx needs for it to pass."""
    msg = (str(exc).strip().splitlines() or [""])[0]
    if isinstance(exc, opinfo.Mismatch):
        return f"wrong {exc.kind}"
    if isinstance(exc, errors.UnsupportedOperationError):
        m = _UNSUPPORTED.match(msg)
        return f"unsupported: {m.group(1)}" if m else "unsupported operation"
    if isinstance(exc, errors.MissingRuleError):
        m = _MISSING_RULE.search(msg)
        return f"missing rule: {m.group(1)}" if m else "missing rule"
    if isinstance(exc, errors.ConcretizationError):
        return "data-dependent value (ConcretizationError)"
    if isinstance(exc, TypeError) and "descriptor" in msg:
        return "torch C method taken before the transform, called on a traced value"
    if isinstance(exc, errors.ThunderxError):
        return type(exc).__name__
    return f"error: {type(exc).__name__}"


def summarize(res: opinfo.OpResult) -> dict:
    """Per transform "pass", "fail" or "n/a" (vjp: no sample torch can differentiate), with the
    first failure's category and message per failing transform."""
    out = {"op": res.name, "samples": res.samples, "status": {}, "reasons": {}}
    if not res.samples:
        why = "; ".join(res.known) or "no sample ran: torch rejects every sample"
        for check in CHECKS:
            out["status"][check] = "fail"
            out["reasons"][check] = ["not run", why]
        return out
    first = {}
    for check, exc in res.failures:
        name = "jit" if check == "fwd" else check
        first.setdefault(name, exc)
    for check in CHECKS:
        if check == "vjp" and res.vjp_checked == 0 and "vjp" not in first:
            out["status"][check] = "n/a"
        elif res.passed(_FIELD[check]):
            out["status"][check] = "pass"
        else:
            out["status"][check] = "fail"
            exc = first.get(check)
            if exc is None:
                out["reasons"][check] = ["no result", "the check neither passed nor raised"]
            else:
                detail = (str(exc).strip().splitlines() or [""])[0]
                detail = re.sub(r" \(called at [^)]*\)", "", detail)[:200]
                out["reasons"][check] = [classify(exc), f"{type(exc).__name__}: {detail}"]
    return out


def passes_all(entry: dict) -> bool:
    s = entry["status"]
    return s["jit"] == "pass" and s["vmap"] == "pass" and s["vjp"] in ("pass", "n/a")


def _child(op, max_samples, conn):
    warnings.simplefilter("ignore")  # deprecations of the ops themselves, once per sample
    torch.set_num_threads(1)
    torch.manual_seed(0)
    try:
        conn.send(summarize(opinfo.check_op(op, max_samples)))
    except BaseException as e:  # noqa: BLE001 - sample generation itself failed: report it
        conn.send(
            {
                "op": opinfo.op_id(op),
                "samples": 0,
                "status": dict.fromkeys(CHECKS, "fail"),
                "reasons": dict.fromkeys(
                    CHECKS, [f"error: {type(e).__name__}", f"running the op: {str(e)[:200]}"]
                ),
            }
        )
    finally:
        conn.close()


def _dead(op, category: str, detail: str) -> dict:
    return {
        "op": opinfo.op_id(op),
        "samples": 0,
        "status": dict.fromkeys(CHECKS, "fail"),
        "reasons": dict.fromkeys(CHECKS, [category, detail]),
    }


def run(
    ops: list,
    max_samples: int | None = None,
    jobs: int | None = None,
    timeout: float = 120.0,
    progress: bool = False,
) -> list[dict]:
    """Check each OpInfo in a forked process, `jobs` at a time; an op running longer than
    `timeout` seconds is killed and reported as a timeout, one whose process dies as a crash."""
    ctx = multiprocessing.get_context("fork")
    jobs = jobs or os.cpu_count() or 1
    results: dict[int, dict] = {}
    pending = list(range(len(ops)))
    running: dict = {}  # connection -> (index, process, start time)
    while pending or running:
        while pending and len(running) < jobs:
            i = pending.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(ops[i], max_samples, send), daemon=True)
            p.start()
            send.close()
            running[recv] = (i, p, time.monotonic())
        for conn in multiprocessing.connection.wait(list(running), timeout=0.2):
            i, p, t0 = running.pop(conn)
            try:
                results[i] = conn.recv()
            except EOFError:
                p.join(5)
                results[i] = _dead(ops[i], "crash", f"worker exited with code {p.exitcode}")
            conn.close()
            p.join(5)
            results[i]["seconds"] = round(time.monotonic() - t0, 2)
            if progress:
                _progress(len(results), len(ops), results[i])
        now = time.monotonic()
        for conn, (i, p, t0) in list(running.items()):
            if now - t0 > timeout:
                p.kill()
                p.join(5)
                conn.close()
                del running[conn]
                results[i] = _dead(ops[i], "timeout", f"killed after {timeout:g} s")
                results[i]["seconds"] = round(now - t0, 2)
                if progress:
                    _progress(len(results), len(ops), results[i])
    return [results[i] for i in range(len(ops))]


def _progress(done, total, entry):
    mark = "ok" if passes_all(entry) else "FAIL"
    print(f"[{done}/{total}] {entry['op']}: {mark} ({entry.get('seconds', 0)} s)", flush=True)


def counts(entries: list[dict]) -> dict:
    c = collections.Counter(total=len(entries))
    for e in entries:
        for check in CHECKS:
            c[check] += e["status"][check] in ("pass", "n/a")
        c["vjp n/a"] += e["status"]["vjp"] == "n/a"
        c["all three"] += passes_all(e)
    return dict(c)


def reason_counts(entries: list[dict]) -> list[tuple[str, int, list[str]]]:
    """Failure categories ("unsupported", "wrong value", ...) by the number of OpInfos they affect
    (an op counts once per category), with the details (the unsupported functions)."""
    c = collections.Counter()
    details = collections.defaultdict(collections.Counter)
    for e in entries:
        cats = {}
        for reason in e["reasons"].values():
            cat, _, detail = reason[0].partition(": ")
            cats.setdefault(cat, set()).add(detail)
        c.update(cats.keys())
        for cat, ds in cats.items():
            details[cat].update(d for d in ds if d)
    return [(cat, n, [d for d, _ in details[cat].most_common()]) for cat, n in c.most_common()]


def render(entries: list[dict], max_samples: int | None) -> str:
    c = counts(entries)
    samples = "all samples" if max_samples is None else f"at most {max_samples} samples per op"
    lines = [
        "# op_db conformance",
        "",
        f"Every OpInfo of torch's op_db that supports autograd in float64 on CPU ({c['total']} in "
        f"torch {torch.__version__.split('+')[0]}), {samples}: `jit` against torch eager, `vjp` "
        "against torch.autograd, `vmap` against a Python loop. Produced by "
        "`python -m thunderx.testing.opinfo --all --report docs/opdb.md --json docs/opdb.json`.",
        "",
        "| OpInfos | jit | vjp | vmap | all three |",
        "|---|---|---|---|---|",
        f"| {c['total']} | {c['jit']} | {c['vjp']} ({c['vjp n/a']} n/a) | {c['vmap']} | "
        f"**{c['all three']}** |",
        "",
        "vjp is n/a where torch.autograd differentiates none of the op's samples (integer outputs).",
        "",
        "## Failure reasons (OpInfos affected)",
        "",
        "| reason | OpInfos | what |",
        "|---|---|---|",
    ]
    lines += [f"| {r} | {n} | {', '.join(ds)} |" for r, n, ds in reason_counts(entries)]
    lines += ["", "## Failing OpInfos", "", "| OpInfo | jit | vjp | vmap | first reason |"]
    lines += ["|---|---|---|---|---|"]
    for e in entries:
        if passes_all(e):
            continue
        s = e["status"]
        check = next(k for k in CHECKS if s[k] == "fail")
        detail = e["reasons"][check][1].replace("|", "\\|").replace("\n", " ")[:140]
        lines.append(
            f"| {e['op']} | {s['jit']} | {s['vjp']} | {s['vmap']} | {check}: "
            f"{e['reasons'][check][0]} — {detail} |"
        )
    return "\n".join(lines) + "\n"


def expectations(entries: list[dict]) -> dict[str, list]:
    """The compact form kept in docs/opdb.json: op id -> [jit, vjp, vmap, first reason]."""
    out = {}
    for e in entries:
        reasons = [e["reasons"][k][0] for k in CHECKS if k in e["reasons"]]
        out[e["op"]] = [e["status"][k] for k in CHECKS] + [reasons[0] if reasons else ""]
    return out


def main(args) -> None:
    ops = differentiable_ops()
    if args.ops:
        wanted = set(args.ops.split(","))
        ops = [o for o in ops if opinfo.op_id(o) in wanted or o.name in wanted]
    if args.slice:
        ops = ci_slice(ops, args.slice)
    t0 = time.monotonic()
    entries = run(ops, args.max_samples, args.jobs, args.timeout, progress=args.progress)
    text = render(entries, args.max_samples)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(expectations(entries), f, indent=0, sort_keys=True)
            f.write("\n")
    c = counts(entries)
    print(text if not args.report else "")
    print(
        f"{c['all three']} of {c['total']} OpInfos pass jit, vjp and vmap "
        f"(jit {c['jit']}, vjp {c['vjp']}, vmap {c['vmap']}) in {time.monotonic() - t0:.0f} s"
    )
