"""Staging: trace a function into a jaxpr (the trace behind make_jaxpr, jit and reverse mode)."""

from __future__ import annotations

import gc
from typing import Callable

import torch

from thunderx.avals import ShapedArray
from thunderx.core import Trace, Tracer, abstract_eval, get_aval, new_trace, stage_rules
from thunderx.errors import ArgumentTypeError, user_frame
from thunderx.ir import ClosedJaxpr, Eqn, Jaxpr, Literal, Var

_SCALARS = (bool, int, float, complex)


class StagingTracer(Tracer):
    __slots__ = ()

    def __init__(self, trace: StagingTrace, var: Var):
        self._trace = trace
        self._var = var

    @property
    def aval(self) -> ShapedArray:
        return self._var.aval


class StagingTrace(Trace):
    """Records each primitive as an equation; values from any other trace become constvars.

    In-place writes to captured tensors (module buffers: consts of this trace) are recorded in
    `writes` by a trace that can write back (`writeback`, jit's and make_jaxpr's): later reads of
    the tensor see the new value, and `finalize` appends the final values as extra outputs that
    the caller copies into the tensors after each run (thunderx/lang/captured.py)."""

    __slots__ = (
        "eqns",
        "constvars",
        "consts",
        "const_index",
        "writes",
        "writeback",
        "arg_vars",
        "written_args",
        "grad_vars",
        "grad_read",
        "value_reads",
    )

    def __init__(self, parent, writeback: bool = False):
        super().__init__(parent)
        self.eqns: list[Eqn] = []
        self.constvars: list[Var] = []
        self.consts: list = []
        self.const_index: dict[int, Var] = {}
        # id(tensor) -> (tensor, its current value as a tracer of this trace, grad mode)
        self.writes: dict[int, tuple] = {}
        self.writeback = writeback
        # the inputs' variables (an input written in place takes a new one) and the ids of the
        # input tracers written in place (under jit: copied back into the arguments)
        self.arg_vars: list[Var] = []
        self.written_args: dict[int, bool] = {}
        # the ids of variables marked by `requires_grad_()` or passed to jit as tensors that
        # require grad, and whether anything asked which values require grad
        # (lang/autograd_staged.py)
        self.grad_vars: set[int] = set()
        self.grad_read = False
        # (captured tensor, its version) whose value the trace read at trace time
        # (lang/captured.py `_guard_values`)
        self.value_reads: list = []

    def new_arg(self, aval: ShapedArray) -> StagingTracer:
        t = StagingTracer(self, Var(aval))
        self.input_ids.add(id(t))
        self.arg_vars.append(t._var)
        return t

    def lift(self, value) -> StagingTracer:
        return StagingTracer(self, self.atom(value))

    def atom(self, x):
        if type(x) is StagingTracer and x._trace is self:
            return x._var
        if type(x) in _SCALARS:
            return Literal(x)
        if _WRITES[0] and not isinstance(x, Tracer):
            # a captured tensor written earlier in this trace or an enclosing one: its value now
            current = written_value(self, x)
            if current is not None:
                if current._trace is self:
                    return current._var
                x = current
        return self.const_var(x)

    def const_var(self, x) -> Var:
        """The constvar standing for x (made on first use). A value of an enclosing staging
        trace is keyed by its variable and held as a copy of its tracer: an in-place update
        of that tracer object later (functionalization) does not change what was read here."""
        staged = type(x) is StagingTracer
        key = id(x._var) if staged else id(x)
        var = self.const_index.get(key)
        if var is None:
            if isinstance(x, Tracer):
                self.check_foreign(x)
            if staged:
                x = StagingTracer(x._trace, x._var)
            var = Var(get_aval(x).strip_weak())
            self.const_index[key] = var
            self.constvars.append(var)
            self.consts.append(x)
        return var

    def record_write(self, target: torch.Tensor, value, grad_enabled: bool, read=None) -> None:
        """`target` (a captured tensor) now holds `value` (a value of this trace); later reads
        of it in the trace see `read` (default `value`): the value with the derivative the
        tensor keeps (lang/captured.py)."""
        self.const_var(target)
        var = self.atom(value)
        if isinstance(var, Literal):
            var = self.atom(torch.tensor(var.val, dtype=target.dtype, device=target.device))
        if not self.writes:
            _WRITES[0] += 1
        tracer = StagingTracer(self, var)
        self.writes[id(target)] = (target, tracer, grad_enabled, tracer if read is None else read)

    def end_writes(self) -> None:
        if self.writes:
            _WRITES[0] -= 1

    def process_primitive(self, prim, args, params):
        stage = stage_rules.get(prim)
        if stage is not None:
            args, params = stage(args, params)
        atoms = [self.atom(a) for a in args]
        out = abstract_eval(prim, [a.aval for a in atoms], params)
        if prim.multiple_results:
            tracers = [StagingTracer(self, Var(a)) for a in out]
            self.eqns.append(Eqn(prim, atoms, [t._var for t in tracers], params))
            return tracers
        tracer = StagingTracer(self, Var(out))
        self.eqns.append(Eqn(prim, atoms, [tracer._var], params))
        return tracer

    def finalize(self, in_tracers, out_values) -> ClosedJaxpr:
        for x in out_values:
            if not isinstance(x, (Tracer, torch.Tensor)) and type(x) not in _SCALARS:
                raise ArgumentTypeError(
                    f"the traced function returned a {type(x).__name__} output ({x!r:.40}); "
                    "outputs of a staged function (jit, make_jaxpr, ...) must be tensors, Python "
                    f"scalars or pytrees of them (at {user_frame()})"
                )
        outvars = [self.atom(x) for x in out_values]
        writes = []  # (operand index, consts first then inputs; grad mode) per trailing output
        for target, value, grad_enabled, _ in self.writes.values():
            outvars.append(value._var)
            writes.append((self.constvars.index(self.const_index[id(target)]), grad_enabled))
        for i, t in enumerate(in_tracers):
            if id(t) in self.written_args:
                outvars.append(self.atom(t))
                writes.append((len(self.constvars) + i, self.written_args[id(t)]))
        jaxpr = Jaxpr(self.constvars, self.arg_vars, self.eqns, outvars)
        return ClosedJaxpr(
            jaxpr, self.consts, tuple(writes), tuple(self.value_reads), self.grad_read
        )


# How many live traces have recorded writes: while none has, `atom` skips the lookup.
_WRITES = [0]


def written_value(trace, x):
    """x's value in `trace` when a trace from `trace` outwards has recorded a write to it."""
    t = trace
    while t is not None:
        writes = getattr(t, "writes", None)
        if writes:
            hit = writes.get(id(x))
            if hit is not None and hit[0] is x:
                return hit[3]
        t = t.parent
    return None


def trace_flat(
    flat_fun: Callable, in_avals, writeback: bool = False, grad_args: tuple = ()
) -> tuple[ClosedJaxpr, object]:
    """Trace `flat_fun(*leaves) -> (out_leaves, extra)` into a closed jaxpr; returns (jaxpr, extra).
    With `writeback`, in-place writes to captured tensors become trailing outputs named by the
    jaxpr's `writes` (jit, make_jaxpr); without, such a write is an error. `grad_args`: per
    input, whether it stands for a tensor that requires grad (torch.autograd.grad inside may
    differentiate with respect to it)."""
    from thunderx.lang.captured import StagingMode

    # Tracing allocates many small objects and makes few cycles: the cyclic collector would rescan
    # the growing heap again and again (superlinear in program size), so it pauses meanwhile.
    pause = gc.isenabled()
    if pause:
        gc.disable()
    try:
        with new_trace(StagingTrace, writeback) as trace:
            try:
                in_tracers = [trace.new_arg(a) for a in in_avals]
                trace.grad_vars.update(id(t._var) for t, g in zip(in_tracers, grad_args) if g)
                # a no_grad block around the transform is not the function's (as in torch.func):
                # only blocks inside the function stop gradients
                with StagingMode(), torch.enable_grad():
                    outs, extra = flat_fun(*in_tracers)
                return trace.finalize(in_tracers, outs), extra
            finally:
                trace.end_writes()
    finally:
        if pause:
            gc.enable()
