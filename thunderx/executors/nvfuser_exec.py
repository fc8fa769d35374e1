"""The nvFuser executor: partition a jaxpr into maximal fusible regions (never creating a cycle),
record each region as a FusionDefinition program through the primitives' nvFuser rules, and run
it with nvFuser on CUDA, or with the reference interpreter (torch ops) anywhere else. Everything
outside the regions (matmul, gathers, ...) runs through torch.

The recording is the single source of truth: it prints as nvFuser Python (`fd.define_tensor`,
`fd.ops.<op>`, `fd.add_output`), replays into a real FusionDefinition, and runs on CPU."""

from __future__ import annotations

import threading

import torch

from thunderx.core import impl_rules, nvfuser_checks, nvfuser_rules
from thunderx.executors.fusion_record import FusionRecord, record_region
from thunderx.ir import Jaxpr, Literal, Var

# ------------------------------------------------------------------------ nvFuser availability

_nvf_state: dict = {}
_lock = threading.Lock()


def nvfuser_module():
    """The imported nvFuser module (`nvfuser_direct`, else legacy `nvfuser`), or None; the import
    error is kept in `nvfuser_import_error()`."""
    if "module" not in _nvf_state:
        with _lock:
            if "module" not in _nvf_state:
                mod, errors = None, []
                if torch.cuda.is_available():
                    for name in ("nvfuser_direct", "nvfuser"):
                        try:
                            mod = __import__(name)
                            break
                        except Exception as e:  # noqa: BLE001 - recorded for the user
                            errors.append(f"import {name}: {type(e).__name__}: {e}")
                else:
                    errors.append("CUDA is not available")
                _nvf_state["module"] = mod
                _nvf_state["error"] = "; ".join(errors) if mod is None else None
    return _nvf_state["module"]


def nvfuser_available() -> bool:
    return nvfuser_module() is not None


def nvfuser_import_error() -> str | None:
    nvfuser_module()
    return _nvf_state.get("error")


# ------------------------------------------------------------------------------ partitioning


def fusible(eqn) -> bool:
    if eqn.prim not in nvfuser_rules:
        return False
    check = nvfuser_checks.get(eqn.prim)
    return check is None or check(eqn)


def partition(jaxpr: Jaxpr) -> list[int | None]:
    """Region id for each equation (None: runs through torch).

    A fusible equation joins a producer's region unless another of its producers already depends
    on that region (the region would then both feed and follow that producer: a cycle). Checked
    on the graph of units as it grows, so regions stay schedulable.
    """
    producer: dict[int, int] = {}
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
        if fusible(e):
            for r in sorted(u for u in pred_units if u[0] == "r"):
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
        for v in e.outputs:
            producer[id(v)] = i
    return region


class Unit:
    """One step of the program: a fusion region or a single torch equation."""

    __slots__ = ("eqns", "inputs", "outputs", "record", "region", "cache")

    def __init__(self, eqns, region):
        self.eqns = eqns
        self.region = region
        self.inputs: list[Var] = []
        self.outputs: list[Var] = []
        self.record: FusionRecord | None = None
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


# ------------------------------------------------------------------------------- the program


class NvFuserProgram:
    """The partitioned program: units in order; runs with nvFuser or the reference interpreter."""

    def __init__(self, jaxpr: Jaxpr):
        self.jaxpr = jaxpr
        self.units = schedule(jaxpr, partition(jaxpr))
        for u in self.units:
            if u.region is not None:
                u.record = record_region(u.eqns, u.inputs, u.outputs, name=f"fusion{u.region}")

    @property
    def regions(self) -> list[Unit]:
        return [u for u in self.units if u.region is not None]

    def as_text(self) -> str:
        from thunderx.printing import Namer, pp_eqn

        namer = Namer()
        for v in self.jaxpr.constvars + self.jaxpr.invars:
            namer(v)
        for e in self.jaxpr.eqns:  # the same names as the printed jaxpr
            for v in e.outputs:
                namer(v)
        lines = []
        for u in self.units:
            if u.region is None:
                lines.append("torch: " + pp_eqn(u.eqns[0], namer, 0))
            else:
                ins = ", ".join(namer(v) for v in u.inputs)
                outs = ", ".join(namer(v) for v in u.outputs)
                lines.append(f"{outs} = {u.record.name}({ins})  # {len(u.eqns)} equations")
        lines.append("")
        for u in self.regions:
            lines.append(u.record.as_python())
        for u in self.units:  # control flow: the host runs the loop, each body is fused
            if u.region is None:
                lines += _sub_programs(u.eqns[0], namer)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from thunderx.html import code_html

        return code_html(f"nvFuser program: {len(self.regions)} fusion regions", self.as_text())

    def __call__(self, *args):
        from thunderx.primitives._subjaxpr import current_executor

        # bodies of control flow run by this program are fused too (the loop runs on the host)
        token = current_executor.set("nvfuser")
        try:
            return self._run(args)
        finally:
            current_executor.reset(token)

    def _run(self, args):
        env: dict[int, object] = {}
        for v, a in zip(self.jaxpr.constvars + self.jaxpr.invars, args):
            env[id(v)] = a

        def read(x):
            return x.val if isinstance(x, Literal) else env[id(x)]

        for u in self.units:
            if u.region is None:
                e = u.eqns[0]
                out = impl_rules[e.prim](*[read(x) for x in e.inputs], **e.params)
                outs = out if e.prim.multiple_results else [out]
                for v, o in zip(e.outputs, outs):
                    env[id(v)] = o
            else:
                ins = [read(x) for x in u.inputs]
                outs = self._run_region(u, ins)
                for v, o in zip(u.outputs, outs):
                    env[id(v)] = o
        return tuple(read(x) for x in self.jaxpr.outvars)

    def _run_region(self, u: Unit, ins):
        tensors = [x for x in ins if isinstance(x, torch.Tensor)]
        if tensors and all(t.is_cuda for t in tensors) and nvfuser_available():
            return _run_nvfuser(u, ins)
        return u.record.interpret(ins)


def _sub_programs(eqn, namer) -> list[str]:
    from thunderx.passes import optimize

    lines = []
    for k, v in eqn.params.items():
        subs = v if isinstance(v, tuple) else (v,)
        for i, sub in enumerate(subs):
            if isinstance(sub, Jaxpr):
                name = f"{k}[{i}]" if isinstance(v, tuple) else k
                outs = ", ".join(namer(o) for o in eqn.outputs)
                lines.append(f"# {eqn.prim.name} -> {outs}: {name}, run by the host per step")
                text = NvFuserProgram(optimize(sub)).as_text()
                lines += ["#   " + ln if ln else "#" for ln in text.splitlines()]
    return lines


def _descriptor(x):
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.dtype, tuple(x.stride()))
    return type(x)


def _run_nvfuser(u: Unit, ins):
    key = tuple(_descriptor(x) for x in ins)
    fd = u.cache.get(key)
    if fd is None:
        fd = u.record.to_nvfuser(nvfuser_module(), ins)
        u.cache[key] = fd
    return fd.execute([x for x in ins])


def compile_nvfuser(jaxpr: Jaxpr) -> NvFuserProgram:
    prog = NvFuserProgram(jaxpr)
    # jit calls `fn` / `fn_plain`; both are the program itself.
    prog.fn = prog  # type: ignore[attr-defined]
    prog.fn_plain = prog  # type: ignore[attr-defined]
    prog.fn_single = prog.fn_single_plain = None  # type: ignore[attr-defined]
    return prog


def plan_nvfuser(jaxpr: Jaxpr) -> NvFuserProgram:
    return NvFuserProgram(jaxpr)
