"""The inductor executor's whole-program mode: a straight-line program (no control flow, no
effects) goes to inductor as one graph. Inductor then plans every buffer, fuses the elementwise
work around torch's kernels (a residual add into the layer norm that follows, a bias gradient's
sum into the ReLU backward) and calls torch's GEMM, attention and convolution kernels as extern
kernels, as `torch.compile` does for the same computation; thunderx's trace takes the place of
dynamo and AOT autograd, so a cached call pays no guard evaluation.

The program is the torch executor's generated function (no in-place reuse: inductor plans
buffers itself), traced on fake tensors to an FX graph of aten calls (`make_fx`) and compiled by
`compile_fx` on its first call, once per input layout. A program inductor cannot compile runs as
the torch executor's program, and the reason is shown in `as_text()`."""

from __future__ import annotations

import torch

from thunderx.core import split_phase_rules, statement_rules
from thunderx.executors.inductor_cache import PerLayout
from thunderx.executors.inductor_tail import REALIZE_NAMESPACE, recycled_outputs, stored_operands
from thunderx.executors.recycle import OutputPool
from thunderx.executors.sources import exec_source
from thunderx.executors.torch_codegen import CompiledProgram, base_namespace, generate_source
from thunderx.ir import Jaxpr
from thunderx.passes import has_effects

# False: the inductor executor compiles fusion regions only (the mode of programs with control
# flow or effects), e.g. to compare the two modes.
WHOLE_PROGRAM = [True]


def whole_program_reason(jaxpr: Jaxpr) -> str | None:
    """None when `jaxpr` can go to inductor as one graph, else why not."""
    if not WHOLE_PROGRAM[0]:
        return "whole-program compilation is switched off (inductor_whole.WHOLE_PROGRAM)"
    for e in jaxpr.eqns:
        if e.prim in statement_rules:
            return f"control flow ({e.prim.name}) runs in the host program"
        if has_effects(e.prim):
            return f"{e.prim.name} has effects that run on every call"
        if e.prim in split_phase_rules:
            return f"collective {e.prim.name} overlaps computation in the host program"
        if e.prim.props.runs_autograd:
            return f"{e.prim.name} runs torch autograd, which one traced graph cannot hold"
    return None


class WholeProgram(PerLayout):
    """One inductor graph for the whole program, compiled on the first call per input layout;
    the torch executor's program `eager` serves torch autograd and any program inductor
    refuses."""

    def __init__(self, jaxpr: Jaxpr, name: str, eager: CompiledProgram):
        super().__init__()
        self.n_args = len(jaxpr.constvars) + len(jaxpr.invars)
        # large outputs written into buffers recycled across calls (inductor_tail.py), each
        # passed in as one more argument; the small values they broadcast stored first
        positions = recycled_outputs(jaxpr)
        jaxpr = stored_operands(jaxpr)
        # (large CPU products as oneDNN's, where it beats MKL: inductor calls it as an extern
        # kernel, as for a frozen model)
        namespace = base_namespace() | REALIZE_NAMESPACE
        self.source, namespace = generate_source(
            jaxpr, name, reuse_buffers=False, onednn=True, namespace=namespace
        )
        self.pools = [OutputPool(jaxpr.outvars[k].aval) for k in positions]
        traced = exec_source(self.source, namespace, name)
        self.traced = _writing_into(traced, self.n_args, positions) if positions else traced
        self.eager = eager
        self.failure: str | None = None
        shares = not any(k.startswith("_param_") for k in namespace)  # params are all literal
        avals = [v.aval for v in jaxpr.constvars + jaxpr.invars]
        desc = tuple((a.shape, a.dtype, str(a.device)) for a in avals)
        key = ("whole", self.source, desc, tuple(positions))
        self.key = key if shares else (id(self), desc)

    def __call__(self, *args):
        if not self.pools:
            return super().__call__(*args)
        buffers = []
        for pool in self.pools:
            b = pool.take()  # None where nothing is recycled (inference mode, a torch mode)
            if b is None:
                b = torch.empty(pool.shape, dtype=pool.dtype, device=pool.device)
            buffers.append(b)
        return super().__call__(*args, *buffers)

    def single(self, *args):
        """The one output itself (jit's fast path for single-output programs)."""
        return self(*args)[0]

    def _build(self, args):
        import torch
        from torch._inductor.compile_fx import compile_fx
        from torch.fx.experimental.proxy_tensor import make_fx

        try:
            with torch.no_grad():
                graph = make_fx(self.traced, tracing_mode="fake")(*args)
                return compile_fx(graph, list(args))
        except Exception as e:  # noqa: BLE001 - reported by as_text; the torch program runs
            self.failure = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            return self.unseen

    def unseen(self, *args):
        """The torch executor's program (without the recycled buffers passed after the
        arguments)."""
        return self.eager.fn(*args[: self.n_args])

    def as_text(self) -> str:
        if self.failure is not None:
            how = f"inductor refused the program ({self.failure}); the torch executor's runs"
        else:
            how = (
                "the whole program is one inductor graph, compiled on first call (per input "
                "layout); torch autograd runs the torch executor's program"
            )
            if self.pools:
                how += (
                    f"; {len(self.pools)} large output(s) stored by the graph's kernels into "
                    "buffers recycled across calls"
                )
        return f"# {how}\n{self.source}"


def _writing_into(traced, n_args: int, positions: list[int]):
    """`traced` taking one buffer more per output at `positions`, which it copies that output
    into and returns in its place (inductor stores the value into the buffer directly)."""

    def run(*args):
        outs = list(traced(*args[:n_args]))
        for k, buffer in zip(positions, args[n_args:]):
            buffer.copy_(outs[k])
            outs[k] = buffer
        return tuple(outs)

    return run
