"""Differential testing: random programs over every differentiable op (the table in
`thunderx.testing.diff_ops`) through every transform (`thunderx.testing.diff_checks`: jit, vmap
with several in_axes, grad, jvp, vjp, linearize, jacfwd, jacrev, hessian, and nested forms)
against torch.func and torch.autograd, with edge inputs; float64 finite differences decide which
side is wrong when they disagree; against JAX too where it is installed.

    python -m thunderx.testing.differential --minutes 10      # the long run (add --jax)
    python -m thunderx.testing.differential                   # the bounded CI profile

Open disagreements are listed in `KNOWN_FAILURES` with the reason and the owner, deliberate ones
in `DELIBERATE` (each a documented row of docs/conventions.md); the CI test fails on any finding
outside the tables and on any entry whose reproducer no longer shows it (a stale entry).

>>> report = run(ops=["sin"], checks=["jit", "grad"], programs=0)
>>> report.unexpected()
[]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import random
import time
import warnings

import torch

from thunderx.testing import diff_checks as dc
from thunderx.testing.diff_known import DELIBERATE, KNOWN_FAILURES, KNOWN_REPROS, ROUNDING_BY_CPU
from thunderx.testing.diff_ops import (
    EDGES,
    OPS,
    PROGRAM_OPS,
    Case,
    draw_shape,
    fill,
    make_case,
)

# jax(grad) compiles per case (slow): the JAX test and the long run (--jax) ask for it.
DEFAULT_CHECKS = tuple(k for k in dc.CHECKS if k != "jax(grad)")


def known(key: tuple) -> tuple | None:
    """The table entry covering a finding's (op, check, category), or None."""
    op, check, category = key
    for k in ((op, check, category), (op, "*", category)):
        if k in KNOWN_FAILURES or k in DELIBERATE:
            return k
    return None


def reproduce(op: str, edge: str, seed: int, check: str) -> list:
    """The findings of one check on the case (op, edge, seed)."""
    case = make_case(OPS[op], edge, random.Random(seed))
    if case is None:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check_case(case, [check], Report(), seed, program="reproduce")


def reproduce_program(
    chain: tuple | None, edge: str, seed: int, check: str, length: int | None = None
) -> set:
    """The failure keys of one check on the program of ops `chain` (edge, seed), or with
    `chain` None on the random program of `length` ops a long run drew at `seed`."""
    prog, steps = make_program(random.Random(seed), edge, length or len(chain), chain)
    report = Report()
    if prog is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_program(prog, steps, [check], report, seed)
    return set(report.failures)


def find_reproducer(op: str, category: str, check: str, edges=EDGES, seeds=range(40)):
    """(edge, seed, check) showing `category` for op under check, for a new table entry."""
    for edge in edges:
        for seed in seeds:
            if any(f.category == category for f in reproduce(op, edge, seed, check)):
                return (edge, seed, check)
    return None


# the key of a composition's finding in a program with an input or a step's value of no elements
# (an empty tensor or index, `narrow` to length 0), where no single op is to blame: derivatives
# through values of no elements
NO_ELEMENTS = "<with no elements>"

NOTES = ("torch-wrong", "jax-differs", "overflow")  # reported, never a thunderx failure


@dataclasses.dataclass
class Failure:
    key: tuple  # (op, check, category)
    case: str
    detail: str
    program: str = ""
    replay: str = ""  # a call that shows the finding again


@dataclasses.dataclass
class Report:
    cases: int = 0
    programs: int = 0
    checks_run: int = 0
    skipped: int = 0
    seconds: float = 0.0
    per_check: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    failures: dict = dataclasses.field(default_factory=dict)  # key -> first Failure
    notes: list = dataclasses.field(default_factory=list)  # torch-wrong, jax-differs, overflow
    jax: str = ""

    def add(self, failure: Failure) -> None:
        self.failures.setdefault(failure.key, failure)

    def unexpected(self) -> list[Failure]:
        return [f for k, f in self.failures.items() if known(k) is None]

    def summary(self, verbose: bool = True) -> str:
        lines = [
            f"differential: {self.cases} single-op cases and {self.programs} programs, "
            f"{self.checks_run} checks ({self.skipped} skipped: no torch reference) in "
            f"{self.seconds:.1f} s; {self.jax}",
            "checks run: " + ", ".join(f"{k} {v}" for k, v in sorted(self.per_check.items())),
        ]
        seen = [f for k, f in self.failures.items() if known(k) is not None]
        if seen:
            lines.append(f"known failures seen: {len(seen)} (op, check) pairs")
            if verbose:
                lines += [f"  {f.key}: {_reason(known(f.key))}" for f in seen]
        if self.notes:
            lines.append(
                f"oracle notes ({len(self.notes)}): torch disagrees with finite differences "
                "(thunderx agrees with them), or JAX differs from thunderx without finite "
                "differences siding with JAX:"
            )
            lines += [f"  {t[:300]}" for t in self.notes[: 12 if verbose else 3]]
        bad = self.unexpected()
        lines.append(f"unexpected failures: {len(bad)}")
        for f in bad:
            lines.append(f"  {f.key}: {f.detail}\n    {f.case}{f.program}")
            if f.replay:
                lines.append(f"    replay: {f.replay}")
        return "\n".join(lines)


def check_case(
    case: Case, names, report: Report, seed: int, program: str = "", replay: str = ""
) -> list:
    """Run the checks on one case; findings go to the report (failures of a single-op case under
    its own key; a program's are keyed by `check_program`). Returns every finding, notes too."""
    try:
        ctx = dc.Ctx(case, seed)
    except Exception:  # noqa: BLE001 - eager torch rejects these inputs: not a valid case
        return []
    found = []
    for name in names:
        res = dc.run_check(name, ctx)
        report.checks_run += 1
        if res == "skip":
            report.skipped += 1
            continue
        report.per_check[name] += 1
        if res is None:
            continue
        found.append(res)
        if res.category in NOTES:
            if program != "localize":
                report.notes.append(f"{res.category}: {case!r} {name}: {res.detail}")
            continue
        if not program:
            report.add(
                Failure(
                    (case.op, name, res.category),
                    repr(case),
                    res.detail,
                    "",
                    replay.replace("CHECK", repr(name)),
                )
            )
    return found


# ------------------------------------------------------------------------------ programs


@dataclasses.dataclass
class Step:
    op: str
    floats: list  # positions in the program's float inputs (the chain value first: -1)
    ints: list
    params: dict


def make_program(rng: random.Random, edge: str, length: int, chain=None):
    """A chain of `length` ops (or the ops named in `chain`): each takes the previous value
    first, plus fresh inputs. Returns (program case, steps), or (None, []) where none fits."""
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    floats = [fill(draw_shape(rng, edge), edge, g)]
    ints, steps = [], []
    v = floats[0]
    scale = dc.max_finite(v)
    names = PROGRAM_OPS
    for k in range(length):
        for _attempt in range(12):
            op = OPS[chain[k] if chain else rng.choice(names)]
            drawn = op.shapes(rng, tuple(v.shape))
            if drawn is None or tuple(drawn[0][0]) != tuple(v.shape):
                continue
            shapes, mk_ints, params = drawn
            extra = [fill(s, edge, g) for s in shapes[1:]]
            new_ints = mk_ints() if mk_ints else []
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = op.fn(v, *extra, *new_ints, **params)
            except Exception:  # noqa: BLE001 - torch rejects this combination
                continue
            if not (isinstance(out, torch.Tensor) and out.is_floating_point()):
                continue
            fpos = list(range(len(floats), len(floats) + len(extra)))
            ipos = list(range(len(ints), len(ints) + len(new_ints)))
            floats += extra
            ints += new_ints
            steps.append(Step(op.name, [-1] + fpos, ipos, params))
            v = out
            scale = max(scale, dc.max_finite(out), *[dc.max_finite(e) for e in extra])
            break
    if not steps or (chain and len(steps) != len(chain)):
        return None, []
    nf = len(floats)

    def program(*args):
        for step in run_steps(steps, args, nf):
            val = step[-1]
        return val  # the last step's

    name = ">".join(st.op for st in steps)
    return Case(f"program:{name}", edge, program, floats + ints, nf, {}, scale), steps


def run_steps(steps: list, args, ndiff: int):
    """A program's steps on `args` (its float inputs first, `ndiff` of them): yields each step
    with its float operands, its integer operands and its value."""
    fs, ks = args[:ndiff], args[ndiff:]
    val = fs[0]
    for st in steps:
        xs = [val if p == -1 else fs[p] for p in st.floats]
        its = [ks[p] for p in st.ints]
        val = OPS[st.op].fn(*xs, *its, **st.params)
        yield st, xs, its, val


# A second derivative of a composition inherits each step's first-derivative convention.
_ALSO_FIRST_ORDER = {"hessian": ("grad", "jvp")}


def localize(prog: Case, steps: list, check: str, seed: int) -> tuple | None:
    """The first step whose own checks fail at its actual inputs: (its op, its finding); None
    when every step passes alone (a composition bug). A batched check also ran the program on a
    second batch row: its intermediate values are tried too."""
    rows = [prog.args]
    if check in dc.BATCHED_CHECKS:
        ctx = dc.Ctx(prog, seed)
        rows.append([b[1] for b in ctx.batch] + list(prog.args[prog.ndiff :]))
    names = (check,) + _ALSO_FIRST_ORDER.get(check, ())
    for args in rows:
        for st, xs, its, _ in run_steps(steps, args, prog.ndiff):
            fn = (lambda o, p: lambda *a: o.fn(*a, **p))(OPS[st.op], st.params)
            single = Case(st.op, prog.edge, fn, [x.detach() for x in xs] + its, len(xs), st.params)
            found = check_case(single, names, Report(), seed, program="localize")
            if found:
                return st.op, found[0]
    return None


def _has_no_elements(prog: Case, steps) -> bool:
    """Whether an input of the program, or a value one of its steps makes (`narrow` to length
    0), has no elements."""
    if any(isinstance(a, torch.Tensor) and a.numel() == 0 for a in prog.args):
        return True
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return any(val.numel() == 0 for *_, val in run_steps(steps, prog.args, prog.ndiff))


def check_program(prog: Case, steps, names, report: Report, seed: int, replay: str = "") -> None:
    """Findings of a program are blamed on the first step that fails alone; a step whose own
    finding is a note (torch wrong) turns the program's finding into a note. A composition bug
    is keyed `("<with OP>", check, category)` when the table lists one for an op of the program;
    else, for a program with an input or a step's value of no elements, `(NO_ELEMENTS, check,
    category)` when the table lists that; else `("<composition>", check, category)`, which is
    never known. Of several ops the table lists, one whose row covers every check comes first."""
    for f in check_case(prog, names, report, seed, program=prog.op):
        if f.category in NOTES:
            continue
        blamed = localize(prog, steps, f.check, seed)
        if blamed is not None and blamed[1].category in NOTES:
            report.notes.append(
                f"{blamed[1].category} ({blamed[0]}): {prog!r} {f.check}: {f.detail}"
            )
            continue
        if blamed is not None:
            key = (blamed[0], f.check, blamed[1].category)
        else:
            with_op = [(f"<with {st.op}>", f.check, f.category) for st in steps]
            if _has_no_elements(prog, steps):
                with_op.append((NO_ELEMENTS, f.check, f.category))
            # a row covering every check (an op's own convention) before a one-check row
            ranked = sorted((k for k in with_op if known(k)), key=lambda k: known(k)[1] != "*")
            key = ranked[0] if ranked else ("<composition>", f.check, f.category)
        report.add(
            Failure(
                key, repr(prog), f.detail, f" in {prog.op}", replay.replace("CHECK", repr(f.check))
            )
        )


# ------------------------------------------------------------------------------- running


def run(
    seconds: float | None = None,
    seed: int = 0,
    ops=None,
    checks=None,
    programs: int = 12,
) -> Report:
    """The bounded profile when `seconds` is None: every op once (at an edge chosen by rotation,
    so successive seeds cover every edge) through every check, then `programs` random programs.
    With `seconds`: random ops, edges and programs until the time is spent."""
    names = list(checks or DEFAULT_CHECKS)
    rng = random.Random(seed)
    report = Report()
    report.jax = _jax_note()
    start = time.perf_counter()
    op_names = list(ops or OPS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if seconds is None:
            for i, name in enumerate(op_names):
                for k in range(len(EDGES)):
                    edge = EDGES[(i + seed + k) % len(EDGES)]
                    if _one_case(name, edge, names, report, seed + i):
                        break
            for j in range(programs):
                _one_program(rng, names, report, seed + 10_000 + j)
        else:
            j = 0
            while time.perf_counter() - start < seconds:
                j += 1
                if j % 3:
                    _one_case(rng.choice(op_names), rng.choice(EDGES), names, report, seed + j)
                else:
                    _one_program(rng, names, report, seed + j)
    report.seconds = time.perf_counter() - start
    return report


def _one_case(name, edge, names, report, seed) -> bool:
    """Check the case (name, edge, seed), which `reproduce` makes again; False: none fits."""
    case = make_case(OPS[name], edge, random.Random(seed))
    if case is None:
        return False
    report.cases += 1
    check_case(case, names, report, seed, replay=f"reproduce({name!r}, {edge!r}, {seed}, CHECK)")
    return True


def _one_program(rng, names, report, seed):
    edge, length = rng.choice(EDGES), rng.randint(2, 4)
    prog, steps = make_program(random.Random(seed), edge, length)
    if prog is not None:
        report.programs += 1
        replay = f"reproduce_program(None, {edge!r}, {seed}, CHECK, length={length})"
        check_program(prog, steps, names, report, seed, replay)


def _reason(key: tuple) -> str:
    if key in DELIBERATE:
        return f"deliberate: docs/conventions.md, row {DELIBERATE[key]}"
    return KNOWN_FAILURES[key][1]


def stale_entries() -> list[str]:
    """Table entries whose reproducer no longer fails with that category (except rows whose
    reproduction depends on the CPU: `ROUNDING_BY_CPU`)."""
    stale = []
    for key in [*KNOWN_FAILURES, *DELIBERATE]:
        op, _, category = key
        edge, seed, check, *chain = KNOWN_REPROS[key]
        if chain:
            keys = reproduce_program(chain[0], edge, seed, check, *chain[1:])
            fails = any(known(k) == key for k in keys)
        else:
            fails = any(f.category == category for f in reproduce(op, edge, seed, check))
        if not fails and DELIBERATE.get(key) not in ROUNDING_BY_CPU:
            stale.append(f"{key}: reproducer {KNOWN_REPROS[key]} no longer fails")
    return stale


def _jax_note() -> str:
    try:
        import jax  # noqa: F401
    except ImportError:
        return "JAX not installed: the JAX oracle is skipped (pip install 'thunderx[jax]')"
    return "JAX installed: the jax(grad) check compares gradients with jax.grad"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=None, help="run random cases this long")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--programs", type=int, default=12, help="programs in the bounded profile")
    ap.add_argument("--op", action="append", help="only these ops (repeatable)")
    ap.add_argument("--check", action="append", help="only these checks (repeatable)")
    ap.add_argument("--jax", action="store_true", help="add the jax(grad) check (JAX installed)")
    args = ap.parse_args(argv)
    seconds = None if args.minutes is None else args.minutes * 60
    names = args.check or list(DEFAULT_CHECKS) + (["jax(grad)"] if args.jax else [])
    report = run(seconds, args.seed, args.op, programs=args.programs, checks=names)
    print(report.summary())
    stale = stale_entries()
    if stale:
        print("stale known-failure entries:\n  " + "\n  ".join(stale))
    return 1 if report.unexpected() or stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
