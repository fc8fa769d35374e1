"""The inductor executor (TorchInductor: C++/OpenMP on CPU, Triton on CUDA). A straight-line
program goes to inductor whole (inductor_whole.py). A program with control flow or effects keeps
the torch executor's program, in which each fusion region of the shared partition worth
compiling becomes one call of its compiled kernel; matmuls, convolutions and everything else
outside the regions stay the torch executor's calls.

A region is compiled on its first call and cached by its structure (its generated source) and
its input descriptors, so two programs holding the same region share one compiled kernel."""

from __future__ import annotations

import math
import shutil

from thunderx.core import Primitive
from thunderx.executors.base import Executor, register_executor
from thunderx.executors.inductor_cache import PerLayout, clear_kernel_cache  # noqa: F401
from thunderx.executors.inductor_tail import split_tail, tail_equations
from thunderx.executors.inductor_whole import WholeProgram, whole_program_reason
from thunderx.executors.kernel_groups import kernel_groups
from thunderx.executors.patterns import fresh_index_adds, gemm_patterns
from thunderx.executors.regions import fusible, partition, refine, schedule
from thunderx.executors.torch_codegen import (
    TorchAutogradProgram,
    compile_jaxpr,
    exec_source,
    generate_source,
)
from thunderx.ir import Eqn, Jaxpr
from thunderx.properties import ALL_OPERANDS, Properties

_state: dict = {}
# torch.compile settings: the region's shapes are fixed by jit's cache key, so specialize.
COMPILE_OPTIONS = {"dynamic": False, "fullgraph": False}
# On CPU a region reading and writing fewer elements than this runs as its plain generated torch
# function: a compiled kernel's fixed cost per call (guards, OpenMP wake-up) exceeds what fusion
# saves on small tensors (measured: a d=64 transformer layer ran 4x slower compiled).
CPU_MIN_ELEMENTS = 1 << 17
# Regions go to inductor as FX graphs (see _compile_region); False: through torch.compile.
DIRECT_INDUCTOR = [True]


def inductor_unavailable_reason(cheap: bool = False) -> str | None:
    """None when torch.compile with inductor can run here, else why not (checked once).
    `cheap`: without importing torch._dynamo (a second) when that is not done yet, so the
    answer may be None where the full check is not."""
    if "reason" not in _state:
        if cheap:
            return _check_cheap()
        _state["reason"] = _check_cheap() or _check_dynamo()
    return _state["reason"]


def _check_cheap() -> str | None:
    import torch

    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    if "cheap" not in _state:
        _state["cheap"] = torch.cuda.is_available() or any(
            shutil.which(c) for c in ("g++", "c++", "clang++", "cl")
        )
    if not _state["cheap"]:
        return "no C++ compiler on PATH (inductor's CPU backend needs one)"
    return None


def _check_dynamo() -> str | None:
    try:
        import torch._dynamo as dynamo
    except Exception as e:  # noqa: BLE001 - reported to the user
        return f"torch._dynamo does not import: {type(e).__name__}: {e}"
    if not dynamo.is_dynamo_supported():
        return "torch.compile does not support this Python version"
    return None


def _elements(unit) -> tuple[int, bool]:
    """(elements a region reads and writes, whether all of them live on the CPU)."""
    avals = [v.aval for v in list(unit.inputs) + list(unit.outputs)]
    return sum(math.prod(a.shape) for a in avals), all(a.device.type == "cpu" for a in avals)


class RegionKernel(PerLayout):
    """One fusion region worth compiling (of `elements` read and written): its generated torch
    function, compiled by inductor when first called with these input descriptors."""

    def __init__(self, unit, name: str, elements: int):
        super().__init__()
        sub = Jaxpr([], unit.inputs, unit.eqns, unit.outputs, check=False)
        self.name = name
        self.region = unit.region
        self.n_eqns = len(unit.eqns)
        self.source, namespace = generate_source(sub, name, reuse_buffers=False)
        self.eager = exec_source(self.source, namespace, name)
        shares = not any(k.startswith("_param_") for k in namespace)  # params are all literal
        desc = tuple((v.aval.shape, v.aval.dtype, str(v.aval.device)) for v in unit.inputs)
        self.key = (self.source, desc) if shares else (id(self), desc)
        self.elements = elements
        # The host program's view of the call: fresh outputs (inductor allocates every computed
        # result), unless an output is a view or an expanded tensor, which inductor may return
        # as a view of an input; then the host assumes it aliases any input.
        made = {id(v): e.prim.props for e in unit.eqns for v in e.outputs}
        fresh = all(
            not made[id(v)].alias_positions(1) and not made[id(v)].overlapping for v in unit.outputs
        )
        self.prim = Primitive(name, multiple_results=True)
        self.prim.props = Properties() if fresh else Properties(aliases=ALL_OPERANDS)

    def _build(self, args):
        return _compile_region(self.eager, args)


def _compile_region(fn, args):
    """Inductor's kernel for a region's generated torch function. The function is traced to an
    FX graph and handed to inductor directly (`compile_fx`): the region is straight-line torch
    code with fixed shapes, so dynamo's bytecode analysis and guards (what `torch.compile` adds)
    only cost first-call time (about 10% of the elementwise-chain benchmark's). Where that path
    fails (a torch without it, an untraceable call), `torch.compile` does it."""
    import torch

    if DIRECT_INDUCTOR[0] and not any(a.requires_grad for a in args):
        try:
            import torch.fx
            from torch._inductor.compile_fx import compile_fx

            with torch.no_grad():
                return compile_fx(torch.fx.symbolic_trace(fn), list(args))
        except Exception:  # noqa: BLE001 - the documented fallback below
            pass
    return torch.compile(fn, **COMPILE_OPTIONS)


class InductorProgram:
    """A straight-line program: one inductor graph (inductor_whole.WholeProgram). Otherwise the
    torch executor's program (its gemm epilogues, fused norms, in-place buffer reuse, hoisted
    constants) in which each fusion region worth compiling is one call of its inductor kernel;
    equations the torch executor already fuses into one torch call stay out of regions, and a
    region too small to gain from a compiled kernel runs as the torch executor's code."""

    def __init__(self, jaxpr: Jaxpr, name: str = "inductor_program"):
        self.jaxpr = jaxpr
        self.whole = None
        self.whole_reason = whole_program_reason(jaxpr)
        self.host = None
        if self.whole_reason is None:
            eager = compile_jaxpr(jaxpr, name)
            self.kernels, self.uncompiled, self.units = [], [], []
            self.fn_plain, self.fn_single_plain = eager.fn_plain, eager.fn_single_plain
            tail = tail_equations(jaxpr)
            if tail:  # large outputs written by torch into recycled buffers (inductor_tail.py)
                graph, host, prim = split_tail(jaxpr, tail)
                self.whole = WholeProgram(graph, name, compile_jaxpr(graph, name))
                self.host = compile_jaxpr(host, name, {f"_impl_{prim.name}": self.whole})
                self.source = self.host.source
                self.fn, self.fn_single = self.host.fn, self.host.fn_single
                return
            self.whole = WholeProgram(jaxpr, name, eager)
            self.source = self.whole.source
            self.fn = self.whole
            self.fn_single = self.whole.single if eager.fn_single is not None else None
            return
        regions, compiled, self.uncompiled = _region_plan(jaxpr)
        self.kernels = [RegionKernel(u, f"region{u.region}", n) for u, n in compiled]
        self.units = schedule(jaxpr, regions)
        by_region = {k.region: k for k in self.kernels}
        eqns, namespace = [], {}
        for u in self.units:
            if u.region is None:
                eqns.extend(u.eqns)
            elif u.outputs:
                k = by_region[u.region]
                namespace[f"_impl_{k.name}"] = k
                eqns.append(Eqn(k.prim, list(u.inputs), list(u.outputs), {}))
        host = Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars, check=False)
        prog = compile_jaxpr(host, name, namespace)
        self.source = prog.source
        self.fn, self.fn_single = prog.fn, prog.fn_single
        # torch autograd cannot see through a compiled region: under it, the torch program runs
        self.fn_plain = TorchAutogradProgram(jaxpr, name)
        single = prog.fn_single is not None
        self.fn_single_plain = TorchAutogradProgram(jaxpr, name, single=True) if single else None

    def __call__(self, *args):
        return self.fn(*args)

    def as_text(self) -> str:
        if self.host is not None:
            how = "the graph's call, then large outputs written by torch into recycled buffers"
            return f"{self.whole.as_text()}\n# host program: {how}\n{self.host.source}"
        if self.whole is not None:
            return self.whole.as_text()
        parts = [f"# fusion regions compiled by inductor: {self.whole_reason}", self.source]
        for n_eqns, elements in self.uncompiled:
            parts.append(
                f"# a region of {n_eqns} equations runs uncompiled, as torch calls in the host: "
                f"{elements} elements < {CPU_MIN_ELEMENTS} on CPU"
            )
        for k in self.kernels:
            how = "compiled by inductor on first call (per input layout)"
            parts.append(f"# _impl_{k.name}: {how}; {k.n_eqns} equations\n{k.source}")
        return "\n".join(parts)

    def __repr__(self) -> str:
        return self.as_text()


def host_fused(jaxpr: Jaxpr) -> set[int]:
    """Indices of the equations the torch executor runs as part of one torch call (a gemm with
    its bias or SGD update, the kernel groups of `kernel_groups`, a fresh index_add): left out
    of fusion regions, they cost no kernel of their own."""
    found = set()
    for i, (_, _, absorbed) in gemm_patterns(jaxpr, {}).items():
        found |= {i, *absorbed}
    for patterns, skipped in (kernel_groups(jaxpr), fresh_index_adds(jaxpr)):
        found |= set(patterns) | skipped
    return found


def _region_plan(jaxpr: Jaxpr) -> tuple[list, list, list]:
    """(region id of each equation, None where it runs as a torch call; (unit, elements) of
    each region to compile; (equations, elements) of each region left uncompiled for its
    size)."""
    fused = host_fused(jaxpr)
    index = {id(e): i for i, e in enumerate(jaxpr.eqns)}
    regions = refine(jaxpr, partition(jaxpr, lambda e: fusible(e) and index[id(e)] not in fused))
    compiled, uncompiled = [], []
    for u in schedule(jaxpr, regions):
        if u.region is None or not u.outputs:
            continue
        elements, on_cpu = _elements(u)
        if on_cpu and elements < CPU_MIN_ELEMENTS:
            uncompiled.append((len(u.eqns), elements))
        else:
            compiled.append((u, elements))
    kept = {u.region for u, _ in compiled}
    return [r if r in kept else None for r in regions], compiled, uncompiled


class InductorExecutor(Executor):
    """Fusion regions compiled by torch.compile; torch calls for the rest. Opt-in: compiling
    costs seconds on the first call of each new region."""

    name = "inductor"
    title = "inductor"

    def unavailable_reason(self) -> str | None:
        return inductor_unavailable_reason()

    def claims(self, eqn) -> bool:
        return fusible(eqn)

    def partition(self, jaxpr: Jaxpr) -> list[int | None]:
        if whole_program_reason(jaxpr) is None:
            tail = set(tail_equations(jaxpr))  # computed by torch after the graph
            return [None if i in tail else 0 for i in range(len(jaxpr.eqns))]
        return _region_plan(jaxpr)[0]

    def lower(self, jaxpr: Jaxpr) -> InductorProgram:
        reason = self.unavailable_reason()
        if reason is not None:
            raise RuntimeError(f"executor='inductor' cannot run here: {reason}")
        return InductorProgram(jaxpr)


register_executor(InductorExecutor())
