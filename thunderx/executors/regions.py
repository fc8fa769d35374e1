"""Fusion regions, shared by the fusing executors (nvFuser, inductor): cut a jaxpr into maximal
fusible regions without cycles, refine the cut for execution, and schedule regions and torch
calls in a valid order."""

from __future__ import annotations

import collections
from typing import Callable

from thunderx.core import nvfuser_checks, nvfuser_rules
from thunderx.ir import Jaxpr, Var
from thunderx.passes import is_view_primitive


def fusible(eqn) -> bool:
    """Whether `eqn` may sit in a fusion region: it has an nvFuser rule whose check accepts it."""
    if eqn.prim not in nvfuser_rules:
        return False
    check = nvfuser_checks.get(eqn.prim)
    return check is None or check(eqn)


def partition(jaxpr: Jaxpr, claims: Callable = fusible) -> list[int | None]:
    """Region id for each equation (None: runs through torch); maximal regions of equations
    that `claims` accepts.

    A fusible equation joins a producer's region unless another of its producers already depends
    on that region (the region would then both feed and follow that producer: a cycle). Checked
    on the graph of units as it grows, so regions stay schedulable. With no producer region to
    join, it joins a region that reads one of its operands (siblings: `sigmoid(h)` beside
    `tanh(h)` read `h` once), under the same check.
    """
    producer: dict[int, int] = {}
    readers: dict[int, list] = {}  # var -> regions reading it, in order of first read
    unit_of: list = []
    unit_preds: dict = {}
    region: list[int | None] = []
    next_id = 0

    def depends_on(u, r) -> bool:
        stack, seen = [u], set()
        while stack:
            x = stack.pop()
            if x == r:
                return True
            if x in seen:
                continue
            seen.add(x)
            stack.extend(unit_preds.get(x, ()))
        return False

    for i, e in enumerate(jaxpr.eqns):
        pred_units = {
            unit_of[producer[id(x)]] for x in e.inputs if isinstance(x, Var) and id(x) in producer
        }
        chosen = None
        if claims(e):
            siblings = [r for x in e.inputs if isinstance(x, Var) for r in readers.get(id(x), ())]
            for r in sorted(u for u in pred_units if u[0] == "r") + siblings:
                if not any(depends_on(q, r) for q in pred_units if q != r):
                    chosen = r
                    break
            if chosen is None:
                chosen = ("r", next_id)
                next_id += 1
            region.append(chosen[1])
            unit = chosen
        else:
            region.append(None)
            unit = ("t", i)
        unit_of.append(unit)
        unit_preds.setdefault(unit, set()).update(pred_units - {unit})
        if unit[0] == "r":
            for x in e.inputs:
                if isinstance(x, Var) and unit not in readers.setdefault(id(x), []):
                    readers[id(x)].append(unit)
        for v in e.outputs:
            producer[id(v)] = i
    return region


def is_layout(eqn) -> bool:
    """A pure layout change that torch performs as a view (no copy, no arithmetic)."""
    x = eqn.inputs[0] if eqn.inputs else None
    return (
        is_view_primitive(eqn.prim)
        and isinstance(x, Var)
        and all(v.aval.dtype == x.aval.dtype for v in eqn.outputs)
    )


def refine(jaxpr: Jaxpr, regions: list[int | None], min_compute: int = 2) -> list[int | None]:
    """The partition as executed: a layout op whose results leave its region without feeding
    anything inside it runs as a torch view after the region (a fused copy would cost a kernel
    and a buffer for nothing), and a region with fewer than `min_compute` equations other than
    layout ops runs as torch calls (one op gains nothing from fusion). Never creates a cycle:
    a peeled equation only feeds units outside its region, so nothing the region depends on can
    follow it.

    >>> refine(jaxpr, partition(jaxpr))  # doctest: +SKIP
    """
    regions = list(regions)
    # var -> region -> how many of the region's equations read it (a peeled reader leaves the
    # others: a value two equations of a region read stays read inside after one is peeled)
    inside_use: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for e, r in zip(jaxpr.eqns, regions):
        if r is not None:
            for x in _var_inputs(e):
                inside_use[id(x)][r] += 1
    # Walking backwards peels chains of trailing layout ops in one pass.
    for i in reversed(range(len(jaxpr.eqns))):
        e, r = jaxpr.eqns[i], regions[i]
        if r is None or not is_layout(e):
            continue
        if not any(inside_use[id(v)][r] for v in e.outputs):
            regions[i] = None
            for x in _var_inputs(e):
                inside_use[id(x)][r] -= 1
    compute = collections.Counter(
        r for e, r in zip(jaxpr.eqns, regions) if r is not None and not is_layout(e)
    )
    return [r if r is not None and compute[r] >= min_compute else None for r in regions]


def _var_inputs(e) -> list[Var]:
    """The distinct variables an equation reads."""
    seen: dict[int, Var] = {}
    for x in e.inputs:
        if isinstance(x, Var):
            seen.setdefault(id(x), x)
    return list(seen.values())


class Unit:
    """One step of the program: a fusion region or a single torch equation."""

    __slots__ = ("eqns", "inputs", "outputs", "record", "region", "cache")

    def __init__(self, eqns, region):
        self.eqns = eqns
        self.region = region
        self.inputs: list[Var] = []
        self.outputs: list[Var] = []
        self.record = None  # the executor's lowering of the region
        self.cache: dict = {}


def schedule(jaxpr: Jaxpr, regions: list[int | None]) -> list[Unit]:
    """Group equations into units and order them topologically (regions run as one step)."""
    units: list[Unit] = []
    by_region: dict[int, Unit] = {}
    unit_of: list[Unit] = []
    for e, r in zip(jaxpr.eqns, regions):
        if r is None:
            u = Unit([e], None)
            units.append(u)
        else:
            u = by_region.get(r)
            if u is None:
                u = by_region[r] = Unit([], r)
                units.append(u)
            u.eqns.append(e)
        unit_of.append(u)
    owner: dict[int, Unit] = {}
    for u, e in zip(unit_of, jaxpr.eqns):
        for v in e.outputs:
            owner[id(v)] = u
    deps: dict[int, set] = {id(u): set() for u in units}
    for u in units:
        defined = {id(v) for e in u.eqns for v in e.outputs}
        seen = set()
        for e in u.eqns:
            for x in e.inputs:
                if isinstance(x, Var) and id(x) not in defined and id(x) not in seen:
                    seen.add(id(x))
                    u.inputs.append(x)
                    if id(x) in owner:
                        deps[id(u)].add(id(owner[id(x)]))
    used_outside: set[int] = {id(x) for x in jaxpr.outvars if isinstance(x, Var)}
    for u in units:
        used_outside.update(id(x) for x in u.inputs)
    for u in units:
        u.outputs = [v for e in u.eqns for v in e.outputs if id(v) in used_outside]
    # Kahn's algorithm, keeping the original order among ready units.
    order, done = [], set()
    pending = list(units)
    while pending:
        for k, u in enumerate(pending):
            if deps[id(u)] <= done:
                order.append(u)
                done.add(id(u))
                del pending[k]
                break
        else:
            raise RuntimeError("fusion partition produced a cycle")
    return order
