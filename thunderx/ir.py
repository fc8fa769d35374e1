"""The IR: variables, literals, equations and jaxprs; a JAX-style printer and `eval_jaxpr`."""

from __future__ import annotations

import os
from typing import Any

from thunderx.avals import ShapedArray, aval_of_concrete
from thunderx.core import Primitive, abstract_eval, bind


class Var:
    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    def __repr__(self) -> str:
        return f"Var({self.aval.str_short()})"


class Literal:
    """A Python scalar in an equation (a weak-typed rank-0 value)."""

    __slots__ = ("val", "aval")

    def __init__(self, val):
        self.val = val
        self.aval = aval_of_concrete(val)

    def __repr__(self) -> str:
        return repr(self.val)


Atom = Var | Literal


class Eqn:
    __slots__ = ("prim", "inputs", "outputs", "params")

    def __init__(self, prim: Primitive, inputs: list, outputs: list, params: dict):
        self.prim = prim
        self.inputs = inputs
        self.outputs = outputs
        self.params = params

    def __repr__(self) -> str:
        return f"Eqn({self.prim.name}, {len(self.inputs)} in, {len(self.outputs)} out)"


class JaxprTypeError(TypeError):
    pass


class Jaxpr:
    """`{ lambda constvars ; invars . let eqns in outvars }`. Checked when built."""

    __slots__ = ("constvars", "invars", "eqns", "outvars", "__weakref__", "_cache")

    def __init__(
        self, constvars, invars, eqns, outvars, check: bool | None = None, walk: bool = True
    ):
        """`check`: also rerun abstract evaluation (default: THUNDERX_CHECK_TYPES). `walk=False`:
        a jaxpr a trace built, each variable defined once by construction (the linear map of
        every eager `grad` call), is not walked again unless THUNDERX_CHECK_TYPES asks."""
        self.constvars = list(constvars)
        self.invars = list(invars)
        self.eqns = list(eqns)
        self.outvars = list(outvars)
        self._cache: dict = {}
        if check is None:
            check = _CHECK_TYPES
        if walk or check:
            check_jaxpr(self, full=check)

    @property
    def in_avals(self):
        return [v.aval for v in self.invars]

    @property
    def out_avals(self):
        return [v.aval for v in self.outvars]

    # __str__/__repr__ come from thunderx.printing and _repr_html_ from thunderx.html, which
    # attach them: presentation sits above the IR, never imported by it.


class ClosedJaxpr:
    """A jaxpr with values for its constvars (torch tensors or outer tracers).

    `writes`: in-place writes to captured tensors, one `(const index, grad mode)` per trailing
    output: after each run that output is copied into that const (see thunderx/lang/captured.py).
    `value_reads`: `(tensor, version)` of each captured tensor whose value the trace read while
    tracing (a Python value, `.item()`, or a computation run then on tensors that need no
    derivative): the program holds that value, so it is stale once the tensor's version counter
    moves (jit traces again then).
    `reads_arg_grad`: whether the trace asked which values require grad (`torch.autograd.grad`
    or `.requires_grad` on a staged value), whose answer depends on which arguments required
    grad: jit then keys its programs by those flags too."""

    __slots__ = ("jaxpr", "consts", "writes", "value_reads", "reads_arg_grad", "__weakref__")

    def __init__(
        self,
        jaxpr: Jaxpr,
        consts: list,
        writes: tuple = (),
        value_reads: tuple = (),
        reads_arg_grad: bool = False,
    ):
        assert len(consts) == len(jaxpr.constvars)
        self.jaxpr = jaxpr
        self.consts = list(consts)
        self.writes = tuple(writes)
        self.value_reads = tuple(value_reads)
        self.reads_arg_grad = reads_arg_grad

    @property
    def in_avals(self):
        return self.jaxpr.in_avals

    @property
    def out_avals(self):
        return self.jaxpr.out_avals

    @property
    def eqns(self):
        return self.jaxpr.eqns

    def __str__(self) -> str:
        return str(self.jaxpr)

    __repr__ = __str__


def closure_convert(jaxpr: Jaxpr) -> Jaxpr:
    """Constvars become leading invars, so the jaxpr can sit in params and take consts as inputs."""
    if not jaxpr.constvars:
        return jaxpr
    return Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.eqns, jaxpr.outvars)


_CHECK_TYPES = os.environ.get("THUNDERX_CHECK_TYPES", "") not in ("", "0")


def check_jaxpr(jaxpr: Jaxpr, full: bool = False) -> None:
    """Every variable defined once before use; with `full`, rerun abstract eval on each equation."""
    defined: set[int] = set()

    def define(v, where):
        if not isinstance(v, Var):
            raise JaxprTypeError(f"{where}: expected a Var, got {v!r}")
        if id(v) in defined:
            raise JaxprTypeError(f"{where}: variable defined twice")
        defined.add(id(v))

    def use(x, where):
        if isinstance(x, Literal):
            return
        if not isinstance(x, Var) or id(x) not in defined:
            raise JaxprTypeError(f"{where}: {x!r} used before it is defined")

    for v in jaxpr.constvars:
        define(v, "constvars")
    for v in jaxpr.invars:
        define(v, "invars")
    for i, eqn in enumerate(jaxpr.eqns):
        where = f"equation {i} ({eqn.prim.name})"
        for x in eqn.inputs:
            use(x, where)
        if full:
            out = abstract_eval(eqn.prim, [x.aval for x in eqn.inputs], eqn.params)
            outs = out if eqn.prim.multiple_results else [out]
            if len(outs) != len(eqn.outputs):
                raise JaxprTypeError(f"{where}: {len(outs)} outputs, expected {len(eqn.outputs)}")
            for a, v in zip(outs, eqn.outputs):
                if a != v.aval:
                    raise JaxprTypeError(f"{where}: output {v.aval} but rule says {a}")
        for v in eqn.outputs:
            define(v, where)
    for x in jaxpr.outvars:
        use(x, "outvars")


def _arity_error(jaxpr: Jaxpr, consts, args) -> Exception:
    from thunderx.errors import ArgumentValueError, user_frame

    return ArgumentValueError(
        f"eval_jaxpr: the jaxpr takes {len(jaxpr.constvars)} consts and {len(jaxpr.invars)} "
        f"arguments, got {len(consts)} and {len(args)} (at {user_frame()})"
    )


def eval_jaxpr(jaxpr: Jaxpr, consts, *args) -> list:
    """Evaluate by binding each equation's primitive: works in any trace context."""
    if len(args) != len(jaxpr.invars) or len(consts) != len(jaxpr.constvars):
        raise _arity_error(jaxpr, consts, args)
    env: dict[int, Any] = {}
    for v, x in zip(jaxpr.constvars, consts):
        env[id(v)] = x
    for v, x in zip(jaxpr.invars, args):
        env[id(v)] = x

    def read(x):
        return x.val if type(x) is Literal else env[id(x)]

    for eqn in jaxpr.eqns:
        out = bind(eqn.prim, *[read(x) for x in eqn.inputs], **eqn.params)
        if eqn.prim.multiple_results:
            for v, o in zip(eqn.outputs, out):
                env[id(v)] = o
        else:
            env[id(eqn.outputs[0])] = out
    return [read(x) for x in jaxpr.outvars]
