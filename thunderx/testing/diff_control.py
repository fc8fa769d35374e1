"""Differential testing of control flow: random programs whose loops and branches are
thunderx.lax's (`scan` forward and reversed, `fori_loop`, `while_loop` with a fixed or a
value-dependent trip count, `cond` on a value or an integer argument, `switch`, `map`), nested up
to two deep, with random smooth bodies that close over the program's other inputs; each program
through jit, vmap, grad, jvp, vjp, linearize, jacfwd, jacrev, hessian and their nested forms.

The oracle is the same program run as Python: `thunderx.lax` on concrete tensors runs the Python
loop or the taken branch, so torch autograd (`torch.autograd.grad` and
`torch.autograd.functional`, which loop instead of vmapping and so follow value-dependent
branches) and a Python loop over the batch give every reference without thunderx's transforms.
Inputs are drawn away from every value-dependent decision (a branch's predicate, a while loop's
condition; `margin` below), so that no reference straddles a branch; all in float64.

    python -m thunderx.testing.diff_control --minutes 5      # the long run
    python -m thunderx.testing.diff_control                  # the bounded CI profile

>>> report = run(programs=2, seed=1)
>>> report.findings
[]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Callable

import torch

import thunderx as tx
from thunderx.errors import UnsupportedOperationError
from thunderx.testing.control_programs import (  # noqa: F401 - re-exported for the tests
    _APPLY,
    F64,
    Margins,
    Node,
    Program,
    draw_inputs,
    make_program,
)

RTOL, ATOL = 1e-7, 1e-9
MARGIN = 1e-3  # the least distance of a value-dependent decision's value from its threshold

# ---------------------------------------------------------------------------------- checks


def batched_args(prog: Program, args: list, batch: list) -> list:
    """vmap's arguments: the batch where the program's in_axes batch, else the one example's."""
    return [b if ax == 0 else a for a, b, ax in zip(args, batch, prog.in_axes)]


def example(prog: Program, args: list, batch: list, i: int) -> list:
    """Example `i` of vmap's arguments, as the Python loop over the batch passes it."""
    return [b[i] if ax == 0 else a for a, b, ax in zip(args, batch, prog.in_axes)]


@dataclasses.dataclass
class Finding:
    seed: int
    program: str
    check: str
    detail: str

    def __str__(self) -> str:
        return f"seed {self.seed} [{self.program}] {self.check}: {self.detail}"


def _close(got, want) -> str | None:
    got, want = list(_leaves(got)), list(_leaves(want))
    if len(got) != len(want):
        return f"{len(got)} outputs against {len(want)}"
    for i, (a, b) in enumerate(zip(got, want)):
        if tuple(a.shape) != tuple(b.shape):
            return f"output {i}: shape {tuple(a.shape)} against {tuple(b.shape)}"
        if not torch.allclose(a.to(F64), b.to(F64), rtol=RTOL, atol=ATOL, equal_nan=True):
            err = (a.to(F64) - b.to(F64)).abs().max().item()
            shown = a.flatten()[:4].tolist(), b.flatten()[:4].tolist()
            return f"output {i}: max |difference| {err:.3g} (thunderx {shown[0]}, torch {shown[1]})"
    return None


def _leaves(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _leaves(y)
    else:
        raise TypeError(type(x))


def _autograd_grad(f, args, weight, create_graph=False):
    xs = [a.detach().requires_grad_(True) for a in args[:3]]
    out = (f(*xs, args[3]) * weight).sum()
    return torch.autograd.grad(out, xs, allow_unused=True, create_graph=create_graph)


def _grads(gs, args):
    return [torch.zeros_like(a) if g is None else g for g, a in zip(gs, args[:3])]


def checks(prog: Program, args: list, batch: list, weight, tangents) -> dict[str, Callable]:
    """check name -> zero-argument callable returning (thunderx's answer, the reference)."""
    f = prog.fn()
    h, w, X, k = args

    def s(h, w, X, k):
        return (f(h, w, X, k) * weight).sum()

    def ref_grad():
        return _grads(_autograd_grad(f, args, weight), args)

    def jac(fn, xs):
        return torch.autograd.functional.jacobian(fn, tuple(xs))

    def loop(fn):
        return torch.stack([fn(i) for i in range(batch[0].shape[0])])

    axes = prog.in_axes
    vargs = batched_args(prog, args, batch)

    def per_example(i):
        return example(prog, args, batch, i)

    def per_example_grads():
        """torch autograd's gradients in h and w, one example at a time, stacked."""
        rows = [
            _grads(_autograd_grad(f, per_example(i), weight), per_example(i))[:2]
            for i in range(batch[0].shape[0])
        ]
        return [torch.stack([r[j] for r in rows]) for j in range(2)]

    out = {
        "jit": lambda: (tx.jit(f)(*args), f(*args)),
        "vmap": lambda: (
            tx.vmap(f, in_axes=axes)(*vargs),
            loop(lambda i: f(*per_example(i))),
        ),
        "jit(vmap)": lambda: (
            tx.jit(tx.vmap(f, in_axes=axes))(*vargs),
            loop(lambda i: f(*per_example(i))),
        ),
        "grad": lambda: (tx.grad(s, argnums=(0, 1, 2))(*args), ref_grad()),
        "jit(grad)": lambda: (tx.jit(tx.grad(s, argnums=(0, 1, 2)))(*args), ref_grad()),
        # torch autograd through jit's program (a jitted model's loss.backward())
        "autograd(jit)": lambda: (
            _grads(_autograd_grad(tx.jit(f), args, weight), args),
            ref_grad(),
        ),
        "jvp": lambda: (
            tx.jvp(lambda h, w, X: f(h, w, X, k), (h, w, X), tangents)[1],
            torch.autograd.functional.jvp(lambda h, w, X: f(h, w, X, k), (h, w, X), tangents)[1],
        ),
        "linearize": lambda: (
            tx.linearize(lambda h, w, X: f(h, w, X, k), h, w, X)[1](*tangents),
            torch.autograd.functional.jvp(lambda h, w, X: f(h, w, X, k), (h, w, X), tangents)[1],
        ),
        "vjp": lambda: (
            tx.vjp(lambda h, w, X: f(h, w, X, k), h, w, X)[1](weight),
            ref_grad(),
        ),
        "jacrev": lambda: (
            tx.jacrev(lambda h, w: f(h, w, X, k), argnums=(0, 1))(h, w),
            jac(lambda h, w: f(h, w, X, k), (h, w)),
        ),
        "jacfwd": lambda: (
            tx.jacfwd(lambda h, w: f(h, w, X, k), argnums=(0, 1))(h, w),
            jac(lambda h, w: f(h, w, X, k), (h, w)),
        ),
        "hessian": lambda: (
            _flat_hessian(tx.hessian(lambda h, w: s(h, w, X, k), argnums=(0, 1))(h, w)),
            _flat_hessian(torch.autograd.functional.hessian(lambda h, w: s(h, w, X, k), (h, w))),
        ),
        "jvp(grad)": lambda: (
            tx.jvp(tx.grad(lambda h: s(h, w, X, k)), (h,), (tangents[0],))[1],
            torch.autograd.functional.hvp(lambda h: s(h, w, X, k), h, tangents[0])[1],
        ),
        "vmap(jvp)": lambda: (
            tx.vmap(
                lambda *a: tx.jvp(lambda h: f(h, *a[1:]), (a[0],), (tangents[0],))[1], in_axes=axes
            )(*vargs),
            loop(
                lambda i: torch.autograd.functional.jvp(
                    lambda h: f(h, *per_example(i)[1:]), per_example(i)[0], tangents[0]
                )[1]
            ),
        ),
        # the nvFuser executor's lowering (fusions in loop bodies), through its reference
        # interpreter on CPU
        "jit[nvfuser]": lambda: (tx.jit(f, executor="nvfuser")(*args), f(*args)),
        "jit[nvfuser](vmap(grad))": lambda: (
            tx.jit(tx.vmap(tx.grad(s, argnums=(0, 1)), in_axes=axes), executor="nvfuser")(*vargs),
            per_example_grads(),
        ),
        "jit(vmap(grad))": lambda: (
            tx.jit(tx.vmap(tx.grad(s, argnums=(0, 1)), in_axes=axes))(*vargs),
            per_example_grads(),
        ),
    }
    return out


def _flat_hessian(hs):
    return [b for row in hs for b in row]


# ---------------------------------------------------------------------------------- runner


@dataclasses.dataclass
class Report:
    programs: int = 0
    checks: int = 0
    refused: dict = dataclasses.field(default_factory=dict)
    skipped_near_decisions: int = 0
    findings: list = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"control-flow differential: {self.programs} programs, {self.checks} checks, "
            f"{self.skipped_near_decisions} input draws redrawn near a decision"
        ]
        for k, v in sorted(self.refused.items()):
            lines.append(f"  refused (UnsupportedOperationError) {k}: {v}")
        lines.append(f"findings: {len(self.findings)}")
        lines += [f"  {f}" for f in self.findings]
        return "\n".join(lines)


def _inputs_away_from_decisions(prog: Program, g: torch.Generator, report: Report):
    """Inputs (one example and a batch of 3) whose every value-dependent decision, in the
    program and in each batch example, is at least MARGIN from its threshold."""
    for _ in range(20):
        args = draw_inputs(prog, g)
        batch = draw_inputs(prog, g, batch=3)
        margins = Margins()
        f = prog.fn(margins)
        f(*args)
        for i in range(3):
            f(*example(prog, args, batch, i))
        if not margins.values or min(margins.values) >= MARGIN:
            return args, batch
        report.skipped_near_decisions += 1
    return None


def run_program(seed: int, report: Report, only: tuple | None = None) -> None:
    prog = make_program(seed)
    g = torch.Generator().manual_seed(seed)
    try:
        drawn = _inputs_away_from_decisions(prog, g, report)
    except Exception as e:  # noqa: BLE001 - the program run as Python failed: a finding
        report.findings.append(
            Finding(seed, prog.text(), "eager", f"raised {type(e).__name__}: {str(e)[:300]}")
        )
        return
    if drawn is None:
        return
    args, batch = drawn
    weight = torch.randn(prog.shape, dtype=F64, generator=g)
    tangents = tuple(torch.randn(a.shape, dtype=F64, generator=g) for a in args[:3])
    report.programs += 1
    for name, check in checks(prog, args, batch, weight, tangents).items():
        if only and name not in only:
            continue
        report.checks += 1
        try:
            got, want = check()
        except UnsupportedOperationError:
            report.refused[name] = report.refused.get(name, 0) + 1
            continue
        except Exception as e:  # noqa: BLE001 - any other error is a finding
            report.findings.append(
                Finding(seed, prog.text(), name, f"raised {type(e).__name__}: {str(e)[:300]}")
            )
            continue
        bad = _close(got, want)
        if bad is not None:
            report.findings.append(Finding(seed, prog.text(), name, bad))


def run(programs: int = 40, seed: int = 0, minutes: float | None = None, only=None) -> Report:
    """`programs` programs from `seed` on (or as many as fit in `minutes`)."""
    report = Report()
    start = time.monotonic()
    s = seed
    while True:
        if minutes is None and s - seed >= programs:
            break
        if minutes is not None and time.monotonic() - start > 60 * minutes:
            break
        run_program(s, report, only)
        s += 1
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--programs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    report = run(args.programs, args.seed, args.minutes)
    print(report.summary())
    return 1 if report.findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
