"""The inductor executor: the nvFuser executor's partition, with each fusion region compiled by
`torch.compile` (TorchInductor: C++/OpenMP on CPU, Triton on CUDA) from the region's generated
torch function. Matmuls, convolutions and everything else outside the regions stay direct torch
calls in a generated host function.

A region is compiled on its first call and cached by its structure (its generated source) and
its input descriptors, so two programs holding the same region share one compiled kernel."""

from __future__ import annotations

import collections
import math
import shutil
import threading

from thunderx.executors.base import Executor, register_executor
from thunderx.executors.patterns import gemm_patterns
from thunderx.executors.regions import fusible, partition, refine, schedule
from thunderx.executors.torch_codegen import (
    base_namespace,
    eqn_source,
    exec_source,
    generate_source,
    new_namer,
)
from thunderx.ir import Jaxpr

_CACHE_SIZE = 512
_kernels: collections.OrderedDict = collections.OrderedDict()
_lock = threading.Lock()
_state: dict = {}
# torch.compile settings: the region's shapes are fixed by jit's cache key, so specialize.
COMPILE_OPTIONS = {"dynamic": False, "fullgraph": False}
# On CPU a region reading and writing fewer elements than this runs as its plain generated torch
# function: a compiled kernel's fixed cost per call (guards, OpenMP wake-up) exceeds what fusion
# saves on small tensors (measured: a d=64 transformer layer ran 4x slower compiled).
CPU_MIN_ELEMENTS = 1 << 17
# Regions go to inductor as FX graphs (see _compile_region); False: through torch.compile.
DIRECT_INDUCTOR = [True]


def clear_kernel_cache() -> None:
    """Forget compiled regions (programs holding one keep it): the next new program compiles
    afresh, e.g. to measure a first call."""
    with _lock:
        _kernels.clear()


def inductor_unavailable_reason() -> str | None:
    """None when torch.compile with inductor can run here, else why not (checked once)."""
    if "reason" not in _state:
        _state["reason"] = _check()
    return _state["reason"]


def _check() -> str | None:
    import torch

    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    try:
        import torch._dynamo as dynamo
    except Exception as e:  # noqa: BLE001 - reported to the user
        return f"torch._dynamo does not import: {type(e).__name__}: {e}"
    if not dynamo.is_dynamo_supported():
        return "torch.compile does not support this Python version"
    if not torch.cuda.is_available() and not any(
        shutil.which(c) for c in ("g++", "c++", "clang++", "cl")
    ):
        return "no C++ compiler on PATH (inductor's CPU backend needs one)"
    return None


class RegionKernel:
    """One fusion region: its generated torch function, compiled by torch.compile when first
    called with these input descriptors."""

    def __init__(self, unit, name: str):
        sub = Jaxpr([], unit.inputs, unit.eqns, unit.outputs, check=False)
        self.name = name
        self.n_eqns = len(unit.eqns)
        self.source, namespace = generate_source(sub, name, reuse_buffers=False)
        self.eager = exec_source(self.source, namespace, name)
        shares = not any(k.startswith("_param_") for k in namespace)  # params are all literal
        desc = tuple((v.aval.shape, v.aval.dtype, str(v.aval.device)) for v in unit.inputs)
        self.key = (self.source, desc) if shares else (id(self), desc)
        self._by_layout: dict = {}
        avals = [v.aval for v in list(unit.inputs) + list(unit.outputs)]
        self.elements = sum(math.prod(a.shape) for a in avals)
        on_cpu = all(a.device.type == "cpu" for a in avals)
        self.compiles = not (on_cpu and self.elements < CPU_MIN_ELEMENTS)

    def __call__(self, *args):
        if not self.compiles:
            return self.eager(*args)
        # a kernel is specialized to its inputs' strides (inductor asserts them): one per layout
        layout = tuple(a.stride() for a in args)
        fn = self._by_layout.get(layout)
        if fn is None:
            fn = self._compile(layout, args)
        return fn(*args)

    def _compile(self, layout, args):
        key = (self.key, layout)
        with _lock:
            fn = _kernels.get(key)
            if fn is None:
                fn = _compile_region(self.eager, args)
                _kernels[key] = fn
                while len(_kernels) > _CACHE_SIZE:
                    _kernels.popitem(last=False)
            else:
                _kernels.move_to_end(key)
            self._by_layout[layout] = fn
        return fn


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
    """A generated host function: torch calls for unclaimed equations, a compiled kernel call
    per fusion region."""

    def __init__(self, jaxpr: Jaxpr, name: str = "inductor_program"):
        self.jaxpr = jaxpr
        self.units = schedule(jaxpr, refine(jaxpr, partition(jaxpr)))
        namer, namespace, prelude = new_namer(), base_namespace(), []
        params = [namer(v) for v in jaxpr.constvars + jaxpr.invars]
        lines = [f"def {name}({', '.join(params)}):"]
        self.kernels: list[RegionKernel] = []
        index, gemms = _host_gemm_patterns(jaxpr, self.units)
        for u in self.units:
            if u.region is None:
                i = index[id(u.eqns[0])]
                if i not in gemms:
                    lines.extend(eqn_source(u.eqns[0], namer, namespace, prelude))
                    continue
                if gemms[i] is None:  # absorbed by a fused call
                    continue
                operands, template, _ = gemms[i]
                expr = template.format(*(namer(x) for x in operands))
                lines.append(f"    {namer(u.eqns[0].outputs[0])} = {expr}")
                continue
            if not u.outputs:
                continue
            kernel = RegionKernel(u, f"region{u.region}")
            self.kernels.append(kernel)
            namespace[f"_{kernel.name}"] = kernel
            lhs = ", ".join(namer(v) for v in u.outputs) + ("," if len(u.outputs) == 1 else "")
            ins = ", ".join(namer(x) for x in u.inputs)
            lines.append(f"    {lhs} = _{kernel.name}({ins})")
        outs = ", ".join(namer(x) for x in jaxpr.outvars)
        lines.append(f"    return ({outs}{',' if len(jaxpr.outvars) == 1 else ''})")
        self.source = "\n".join(prelude + lines) + "\n"  # control-flow bodies first
        self.fn = self.fn_plain = exec_source(self.source, namespace, name)
        self.fn_single = self.fn_single_plain = None

    def __call__(self, *args):
        return self.fn(*args)

    def as_text(self) -> str:
        parts = [self.source]
        for k in self.kernels:
            how = (
                "compiled by inductor on first call (per input layout)"
                if k.compiles
                else f"runs uncompiled: {k.elements} elements < {CPU_MIN_ELEMENTS} on CPU"
            )
            parts.append(f"# _{k.name}: {how}; {k.n_eqns} equations\n{k.source}")
        return "\n".join(parts)

    def __repr__(self) -> str:
        return self.as_text()


def _host_gemm_patterns(jaxpr: Jaxpr, units) -> tuple[dict, dict]:
    """The torch executor's gemm patterns (addmm, F.linear) among the host function's own
    equations: ({id(eqn): index} of every equation, {index of a fused update: pattern, index of
    an equation it absorbs: None})."""
    index = {id(e): i for i, e in enumerate(jaxpr.eqns)}
    region = {index[id(e)]: u.region for u in units for e in u.eqns}
    patterns = {
        i: f
        for i, f in gemm_patterns(jaxpr, {}).items()
        if region.get(i) is None and all(region.get(j) is None for j in f[2])
    }
    table: dict = dict(patterns)
    for f in patterns.values():
        table.update(dict.fromkeys(f[2]))
    return index, table


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
        return refine(jaxpr, partition(jaxpr))

    def lower(self, jaxpr: Jaxpr) -> InductorProgram:
        reason = self.unavailable_reason()
        if reason is not None:
            raise RuntimeError(f"executor='inductor' cannot run here: {reason}")
        return InductorProgram(jaxpr)


register_executor(InductorExecutor())
