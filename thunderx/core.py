"""Primitives, the rule registry, and context-based dispatch of `bind`.

There is one current trace per thread. Each transform's trace knows its parent (the trace that was
current when it started); a tracer knows its trace; a value from any other trace is a constant to
this one. Rules run with the parent as the current trace, so nesting needs no levels.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from thunderx.avals import ShapedArray, aval_of_concrete
from thunderx.errors import MissingRuleError, UnexpectedTracerError, user_frame


class Primitive:
    """A named operation. Arrays are positional, params keyword-only and hashable."""

    __slots__ = ("name", "multiple_results")

    def __init__(self, name: str, multiple_results: bool = False):
        self.name = name
        self.multiple_results = multiple_results

    def bind(self, *args, **params):
        return _state.trace.process_primitive(self, args, params)

    def __repr__(self) -> str:
        return self.name


# One rule table per interpretation, keyed by primitive. Each is read in exactly one place.
primitives: dict[str, Primitive] = {}
impl_rules: dict[Primitive, Callable] = {}
abstract_eval_rules: dict[Primitive, Callable] = {}
jvp_rules: dict[Primitive, Callable] = {}
transpose_rules: dict[Primitive, Callable] = {}
batch_rules: dict[Primitive, Callable] = {}
torch_codegen_rules: dict[Primitive, Callable] = {}
nvfuser_rules: dict[Primitive, Callable] = {}
# Optional per-equation checks for the nvFuser rule (params it cannot express run in torch).
nvfuser_checks: dict[Primitive, Callable] = {}
# Collectives over a vmapped axis name: `rule(axis, vals, dims, **params) -> (out, out_dim)`, used
# by the batch trace that binds `axis` (even for unbatched operands); `batch_rules` covers the
# collective's other names. `axis_names_rules[prim](**params)` says which names a primitive uses.
axis_batch_rules: dict[Primitive, Callable] = {}
axis_names_rules: dict[Primitive, Callable] = {}
# Why a primitive has no jvp / transpose rule: checked by the coverage tests.
not_differentiable: dict[Primitive, str] = {}
linear_primitives: set[Primitive] = set()
# Primitives with effects (random draws advance the RNG state, debug callbacks run user code):
# DCE keeps them though nothing reads their outputs, CSE never merges two of them, and each run
# of a compiled program repeats them.
effectful_primitives: set[Primitive] = set()
# Partial evaluation of one equation whose inputs are partly known, for primitives that can do
# better than "any unknown input makes every output unknown" (higher-order primitives split their
# sub-jaxprs): `rule(eqn, unknowns) -> (known_eqn, unknown_eqn, out_unknowns, residuals)`.
#   known_eqn:   None, or an equation over the known inputs whose outputs are the eqn's known
#                outputs (the same Vars) followed by `residuals` (new Vars);
#   unknown_eqn: None, or an equation over `residuals` + the unknown inputs (and any known input
#                it still reads) whose outputs are the eqn's unknown outputs (the same Vars).
# Both the staged (`partial_eval_jaxpr`) and the online (`PartialEvalTrace`) partial evaluators
# read it.
partial_eval_rules: dict[Primitive, Callable] = {}
# What a primitive becomes when staged into a jaxpr, for primitives whose params start out as
# Python callables (custom_jvp: the function is only traced when a jaxpr must hold it):
# `rule(args, params) -> (args, params)`. Read by the staging trace only.
stage_rules: dict[Primitive, Callable] = {}


def new_primitive(name: str, multiple_results: bool = False) -> Primitive:
    if name in primitives:
        raise ValueError(f"primitive {name!r} is already registered")
    p = Primitive(name, multiple_results)
    primitives[name] = p
    return p


# Optional: a primitive whose params name what it stands for (the opaque torch call) says so.
describe_rules: dict[Primitive, Callable] = {}


def missing_rule(prim: Primitive, transform: str, params: dict | None = None) -> MissingRuleError:
    what = f"primitive '{prim.name}'"
    if params is not None and prim in describe_rules:
        what = describe_rules[prim](**params)
    return MissingRuleError(f"{what} has no {transform} rule (needed at {user_frame()})")


def bind(prim: Primitive, *args, **params):
    return _state.trace.process_primitive(prim, args, params)


# ---------------------------------------------------------------------------- traces and tracers


class Trace:
    __slots__ = ("parent", "alive", "input_ids", "__weakref__")

    def __init__(self, parent: Trace | None):
        self.parent = parent
        self.alive = True
        # ids of the tracers this trace's transform created for its inputs (never mutated)
        self.input_ids: set[int] = set()

    def process_primitive(self, prim: Primitive, args, params):
        raise NotImplementedError

    def lift(self, value) -> Tracer:
        """A value from a parent trace as a tracer of this one (for in-place updates)."""
        raise NotImplementedError

    def lift_created(self, value):
        """A tensor created from one of this trace's values (`zeros_like(x)`): by default it
        stays what it is; a trace that drops constant values (jvp) wraps it back."""
        return value

    def check_foreign(self, x: Tracer) -> None:
        if not x._trace.alive:
            raise escaped_tracer(x)


def escaped_tracer(x: Tracer) -> UnexpectedTracerError:
    return UnexpectedTracerError(
        f"a traced value {x.aval.str_short()} from a {type(x._trace).__name__} that has already "
        f"ended was used at {user_frame()}. A tracer leaked out of a transformed function (stored "
        "in a global, a closure or an object attribute). Return it from the function instead."
    )


class EvalTrace(Trace):
    """The bottom of every chain: primitives run eagerly on torch tensors."""

    __slots__ = ()

    def process_primitive(self, prim, args, params):
        for a in args:
            if isinstance(a, Tracer):
                raise escaped_tracer(a)
        try:
            rule = impl_rules[prim]
        except KeyError:
            raise missing_rule(prim, "impl") from None
        return rule(*args, **params)


class _State(threading.local):
    def __init__(self):
        self.trace: Trace = EvalTrace(None)
        # The named axes in scope (vmap's axis_name, shard_map's mesh dims), innermost last.
        self.axis_env: tuple[NamedAxis, ...] = ()


_state = _State()


def current_trace() -> Trace:
    return _state.trace


class set_trace:
    """Context manager making `trace` current; restores the previous one on any exit."""

    __slots__ = ("trace", "prev")

    def __init__(self, trace: Trace):
        self.trace = trace

    def __enter__(self):
        self.prev = _state.trace
        _state.trace = self.trace
        return self.trace

    def __exit__(self, *exc):
        _state.trace = self.prev
        return False


class new_trace:
    """Start a child trace of the current one; mark it dead on exit so leaks are caught."""

    __slots__ = ("trace", "prev")

    def __init__(self, trace_type, *args):
        self.trace = trace_type(_state.trace, *args)

    def __enter__(self):
        self.prev = _state.trace
        _state.trace = self.trace
        return self.trace

    def __exit__(self, *exc):
        _state.trace = self.prev
        self.trace.alive = False
        return False


class NamedAxis:
    """A named axis in scope: its size and, for a mesh dim, the mesh (None for a vmap axis).

    Collectives hold these in their params, so a staged collective still knows its process group
    after the shard_map that bound the name has returned.
    """

    __slots__ = ("name", "size", "mesh")

    def __init__(self, name: str, size: int, mesh=None):
        self.name = name
        self.size = size
        self.mesh = mesh

    def _key(self):
        return (self.name, self.size, id(self.mesh))

    def __eq__(self, other) -> bool:
        return type(other) is NamedAxis and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return self.name


def axis_env() -> tuple[NamedAxis, ...]:
    return _state.axis_env


class extend_axis_env:
    """Context manager putting named axes in scope (innermost last) for the body of a transform."""

    __slots__ = ("axes", "prev")

    def __init__(self, axes):
        self.axes = tuple(axes)

    def __enter__(self):
        self.prev = _state.axis_env
        _state.axis_env = self.prev + self.axes

    def __exit__(self, *exc):
        _state.axis_env = self.prev
        return False


def is_top_level() -> bool:
    return type(_state.trace) is EvalTrace


class Tracer:
    """A value inside a transform. Torch calls on it reach the language layer."""

    # One layout for every tracer type (subclasses add no slots), so an in-place update can turn
    # a tracer into one of another trace: `x.__class__` may be reassigned between them. `_alias`,
    # set only on tracers that take part in views, names their shared storage (lang/views.py).
    __slots__ = ("_trace", "_var", "primal", "tangent", "val", "bdim", "_alias", "__weakref__")
    # Let torch's binary operators defer to our reflected methods.
    __array_priority__ = 1000

    @property
    def aval(self) -> ShapedArray:
        raise NotImplementedError

    def _trace_inputs(self) -> set:
        return self._trace.input_ids

    def to_concrete(self):
        """The concrete tensor this tracer stands for, or None when its value is not known
        (staged, batched, or a tangent). Under grad, jvp and friends the primal is known."""
        return None

    def __repr__(self) -> str:
        value = self.to_concrete()
        if value is not None:
            # as torch.func prints a wrapped tensor: the value, and the transform around it
            return f"{type(self).__name__}<{self.aval.str_short()}>(value={value!r})"
        return f"{type(self).__name__}<{self.aval.str_short()}>"

    def __format__(self, spec: str) -> str:
        if not spec:
            return repr(self)
        value = self.to_concrete()
        if value is None:
            from thunderx.errors import concretization

            raise concretization(f"format spec {spec!r}", self.aval)
        return format(value, spec)


def get_aval(x) -> ShapedArray:
    if isinstance(x, Tracer):
        return x.aval
    return aval_of_concrete(x)


def is_tensor_like(x) -> bool:
    return isinstance(x, (Tracer, torch.Tensor))


# ----------------------------------------------------------------------- registration helpers


def abstract_eval(prim: Primitive, avals, params) -> Any:
    try:
        rule = abstract_eval_rules[prim]
    except KeyError:
        raise missing_rule(prim, "abstract_eval") from None
    return rule(*avals, **params)
