"""The nvFuser executor: partition a jaxpr into maximal fusible regions (never creating a cycle),
record each region as a FusionDefinition program through the primitives' nvFuser rules, and run
it with nvFuser on CUDA, or with the reference interpreter (torch ops) anywhere else. Everything
outside the regions (matmul, gathers, ...) runs through torch.

The recording is the single source of truth: it prints as nvFuser Python (`fd.define_tensor`,
`fd.ops.<op>`, `fd.add_output`), replays into a real FusionDefinition, and runs on CPU."""

from __future__ import annotations

import threading

import torch

from thunderx.core import impl_rules, nvfuser_rules
from thunderx.executors.base import Executor, register_executor
from thunderx.executors.decompose import expand_composites
from thunderx.executors.fusion_record import record_region
from thunderx.executors.regions import (  # noqa: F401  (re-exported for tests and users)
    Unit,
    fusible,
    partition,
    refine,
    schedule,
)
from thunderx.executors.torch_codegen import TorchAutogradProgram
from thunderx.ir import Jaxpr, Literal

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


# ------------------------------------------------------------------------------- the program


class NvFuserProgram:
    """The partitioned program: units in order; runs with nvFuser or the reference interpreter."""

    def __init__(self, jaxpr: Jaxpr, refined: bool = False):
        # composites nvFuser has no rule for (relu, gelu, softmax, ...) fuse as their
        # decompositions
        jaxpr = expand_composites(jaxpr, keep=lambda prim: prim in nvfuser_rules)
        self.jaxpr = jaxpr
        regions = partition(jaxpr)
        # refined: the partition as executed (no single-op regions, views peeled); unrefined,
        # every fusible equation sits in a region, which is what the rule tests exercise.
        self.units = schedule(jaxpr, refine(jaxpr, regions) if refined else regions)
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
    prog = NvFuserProgram(jaxpr, refined=True)
    # jit calls `fn`; torch autograd cannot see through a fusion, so under it (`fn_plain`) the
    # torch executor's program runs
    prog.fn = prog  # type: ignore[attr-defined]
    prog.fn_plain = TorchAutogradProgram(jaxpr, "nvfuser_program")  # type: ignore[attr-defined]
    prog.fn_single = prog.fn_single_plain = None  # type: ignore[attr-defined]
    return prog


class NvFuserExecutor(Executor):
    """Fusion regions as nvFuser FusionDefinitions on CUDA; the reference interpreter elsewhere."""

    name = "nvfuser"
    title = "nvFuser"
    default_priority = 10

    def unavailable_reason(self) -> str | None:
        if nvfuser_available():
            return None
        return f"nvFuser not importable: {nvfuser_import_error()}; regions run by the reference interpreter"

    def claims(self, eqn) -> bool:
        return fusible(eqn)

    def partition(self, jaxpr: Jaxpr) -> list[int | None]:
        return refine(jaxpr, partition(jaxpr))

    def is_default_for(self, device_types: set[str]) -> bool:
        return "cuda" in device_types and nvfuser_available()

    def lower(self, jaxpr: Jaxpr) -> NvFuserProgram:
        return compile_nvfuser(jaxpr)


register_executor(NvFuserExecutor())
