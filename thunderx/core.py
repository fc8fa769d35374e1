"""Primitives, the rule registry, and context-based dispatch of `bind`.

There is one current trace per thread. Each transform's trace knows its parent (the trace that was
current when it started); a tracer knows its trace; a value from any other trace is a constant to
this one. Rules run with the parent as the current trace, so nesting needs no levels.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from thunderx.ad_util import Zero, instantiate
from thunderx.avals import ShapedArray, aval_of_concrete
from thunderx.axes import NamedAxis, axis_env, extend_axis_env  # noqa: F401 (re-exported)
from thunderx.errors import MissingRuleError, UnexpectedTracerError, note_torch_func, user_frame
from thunderx.properties import ALL_OPERANDS, UNDECLARED, Properties, check_declaration  # noqa: F401


class Primitive:
    """A named operation. Arrays are positional, params keyword-only and hashable."""

    __slots__ = ("name", "multiple_results", "props")

    def __init__(self, name: str, multiple_results: bool = False):
        self.name = name
        self.multiple_results = multiple_results
        self.props: Properties = UNDECLARED

    def bind(self, *args, **params):
        return _state.trace.process_primitive(self, args, params)

    def __repr__(self) -> str:
        return self.name


# One rule table per interpretation, keyed by primitive. Each is read in exactly one place.
primitives: dict[str, Primitive] = {}
impl_rules: dict[Primitive, Callable] = {}
abstract_eval_rules: dict[Primitive, Callable] = {}
jvp_rules: dict[Primitive, Callable] = {}
# forward-mode levels' jvp rules where they differ (torch's no_grad stops reverse mode only)
forward_jvp_rules: dict[Primitive, Callable] = {}
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
_not_differentiable_table = (
    not_differentiable  # reachable inside `declare`, whose keyword shadows it
)
linear_primitives: set[Primitive] = set()
# Primitives with effects (random draws advance the RNG state, debug callbacks run user code):
# DCE keeps them though nothing reads their outputs, CSE never merges two of them, and each run
# of a compiled program repeats them. Filled by `declare(effects=...)`; read by
# thunderx.passes.has_effects together with the conservative default of undeclared primitives.
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


# Torch codegen rules that emit statements (real `if` / `while` / `for`) rather than an
# expression: called as `rule(args, avals, ctx=CodegenContext, **params)`, they return lines that
# assign `ctx.outs` (declare(..., torch_codegen_statement=True)).
statement_rules: set[Primitive] = set()
# Collectives the torch executor starts early and finishes where the equation stands, so the
# communication overlaps the computation between (DDP's bucketed, asynchronous all_reduce):
# `(start, wait)`, `start(*operands, **params) -> handle` called once the operands exist (on a
# group of the operands: the executor may split them into buckets), `wait(handle) -> outputs`.
split_phase_rules: dict[Primitive, tuple[Callable, Callable]] = {}
# Floating-point operations of one equation, for cost analysis (contractions declare theirs;
# others count 0): `rule(in_avals, out_avals, **params) -> int`.
flops_rules: dict[Primitive, Callable] = {}
# Primitives holding a sub-jaxpr in params["jaxpr"] whose invars match the equation's inputs
# (inlined by thunderx.passes.inline_calls).
call_primitives: set[Primitive] = set()
# Optional: a primitive whose params name what it stands for (the opaque torch call) says so.
describe_rules: dict[Primitive, Callable] = {}
# Composite operations (a torch kernel with its own rules, such as `relu` or `softmax`): the same
# operation written with other primitives, `rule(*arrays, **params) -> out`. Rules a composite
# does not give directly are derived from it (primitives/composite.py), and the tests check that
# it equals the kernel.
decomposition_rules: dict[Primitive, Callable] = {}


def new_primitive(name: str, multiple_results: bool = False) -> Primitive:
    """The low-level registration `declare` builds on: a name with no rules and undeclared
    properties. Prefer `declare`."""
    if name in primitives:
        raise ValueError(f"primitive {name!r} is already registered")
    p = Primitive(name, multiple_results)
    primitives[name] = p
    return p


def declare(
    name: str,
    *,
    abstract_eval: Callable,
    impl: Callable,
    jvp: Callable | None = None,
    forward_jvp: Callable | None = None,
    transpose: Callable | None = None,
    linear: bool = False,
    nonlinear: tuple[int, ...] | Callable[[int], bool] = (),
    batch: Callable | None = None,
    partial_eval: Callable | None = None,
    stage: Callable | None = None,
    flops: Callable | None = None,
    torch_codegen: Callable | None = None,
    torch_codegen_statement: bool = False,
    nvfuser: Callable | None = None,
    nvfuser_check: Callable | None = None,
    not_differentiable: str | None = None,
    describe: Callable | None = None,
    decomposition: Callable | None = None,
    multiple_results: bool = False,
    aliases: tuple[int, ...] | str = (),
    inplace: str | None = None,
    inplace_floating_only: bool = False,
    inplace_out: str | None = None,
    commutative: bool = False,
    effects: tuple[str, ...] = (),
    elementwise: bool = False,
    overlapping: bool = False,
    runs_autograd: bool = False,
    kernel_differentiable: bool = True,
    kernel_constant_outputs: tuple[int, ...] = (),
) -> Primitive:
    """Everything the system knows about one primitive, in one call: its rules (stored in the
    per-interpretation tables each transform reads) and its properties (`prim.props`).

    Rule signatures: `impl(*arrays, **params)`; `abstract_eval(*avals, **params)`;
    `jvp(primals, tangents, **params) -> (out, tangent_out)` (`forward_jvp`: forward mode's);
    `transpose(ct, *args, **params) -> [ct per operand]`; `batch(args, dims, **p) -> (out, dim)`;
    `partial_eval(eqn, unknowns)`, `stage(args, params)` and `flops(in_avals, out_avals,
    **params)` (see their tables above);
    `torch_codegen(arg_sources, avals, **params) -> expression source` (with
    `torch_codegen_statement=True`: `(arg_sources, avals, ctx=..., **params) -> lines`);
    `nvfuser(fd, *operands, **params)`, `nvfuser_check(eqn) -> bool`;
    `decomposition(*arrays, **params)`: the operation in other primitives (a composite's).
    `linear=True` puts it in `linear_primitives`; without a `jvp` its jvp applies it to the
    tangents (operands at `nonlinear` positions, such as indices, pass their primal).
    `kernel_differentiable=False` or `kernel_constant_outputs` (see `Properties`) needs a `jvp`
    (or `linear`): where torch autograd records the call, the derivative it takes is thunderx's
    (`declare_composite` wraps the implementation: primitives/kernel_autograd.py).

    Example: `exp_p` in primitives/unary.py (through the `def_unary` factory); docs/primitives.md
    shows a declaration and the table of all of them.
    """
    # checked before the name is registered, so a corrected retry can register it
    check_declaration(name, aliases, inplace, effects, inplace_out, elementwise)
    bridged = not kernel_differentiable or bool(kernel_constant_outputs)
    if bridged and jvp is None and not linear:
        raise TypeError(
            f"{name}: a kernel torch autograd cannot differentiate (kernel_differentiable=False, "
            "kernel_constant_outputs) needs a jvp rule: torch autograd takes thunderx's derivative"
        )
    prim = declare_properties(
        new_primitive(name, multiple_results),
        aliases=aliases,
        inplace=inplace,
        inplace_floating_only=inplace_floating_only,
        inplace_out=inplace_out,
        commutative=commutative,
        effects=effects,
        elementwise=elementwise,
        overlapping=overlapping,
        runs_autograd=runs_autograd,
        kernel_differentiable=kernel_differentiable,
        kernel_constant_outputs=kernel_constant_outputs,
    )
    impl_rules[prim] = impl
    abstract_eval_rules[prim] = abstract_eval
    if linear:
        linear_primitives.add(prim)
        if jvp is None and not_differentiable is None:
            jvp = linear_jvp(prim, nonlinear)
    rules = (
        (jvp_rules, jvp),
        (forward_jvp_rules, forward_jvp),
        (transpose_rules, transpose),
        (batch_rules, batch),
        (partial_eval_rules, partial_eval),
        (stage_rules, stage),
        (flops_rules, flops),
        (torch_codegen_rules, torch_codegen),
        (nvfuser_rules, nvfuser),
        (nvfuser_checks, nvfuser_check),
        (describe_rules, describe),
        (decomposition_rules, decomposition),
        (_not_differentiable_table, not_differentiable),
    )
    for table, rule in rules:
        if rule is not None:
            table[prim] = rule
    if torch_codegen_statement:
        statement_rules.add(prim)
    return prim


def declare_properties(
    prim: Primitive,
    *,
    aliases: tuple[int, ...] | str = (),
    inplace: str | None = None,
    inplace_floating_only: bool = False,
    inplace_out: str | None = None,
    commutative: bool = False,
    effects: tuple[str, ...] = (),
    elementwise: bool = False,
    overlapping: bool = False,
    runs_autograd: bool = False,
    kernel_differentiable: bool = True,
    kernel_constant_outputs: tuple[int, ...] = (),
) -> Primitive:
    """The properties half of `declare`, for a primitive made with `new_primitive` whose rules
    are registered table by table (see `Properties` for each keyword)."""
    check_declaration(prim.name, aliases, inplace, effects, inplace_out, elementwise)
    prim.props = Properties(
        aliases=aliases if aliases == ALL_OPERANDS else tuple(aliases),
        inplace=inplace,
        inplace_floating_only=inplace_floating_only,
        inplace_out=inplace_out,
        commutative=commutative,
        effects=frozenset(effects),
        elementwise=elementwise,
        overlapping=overlapping,
        runs_autograd=runs_autograd,
        kernel_differentiable=kernel_differentiable,
        kernel_constant_outputs=tuple(kernel_constant_outputs),
    )
    if effects:
        effectful_primitives.add(prim)
    return prim


def linear_jvp(prim: Primitive, nonlinear=()) -> Callable:
    """The jvp of a primitive linear in its array operands except those at `nonlinear`
    positions (a tuple, or a predicate on the position): it applies the primitive to the
    tangents, the nonlinear operands passing their primals."""
    skip = nonlinear if callable(nonlinear) else (lambda i: i in nonlinear)

    def jvp(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        if all(type(t) is Zero for i, t in enumerate(tangents) if not skip(i)):
            if prim.multiple_results:
                return out, [Zero(get_aval(o)) for o in out]
            return out, Zero(get_aval(out))
        args = [p if skip(i) else instantiate(t) for i, (p, t) in enumerate(zip(primals, tangents))]
        return out, prim.bind(*args, **params)

    return jvp


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
    # Whether the transform writes an in-place update of one of its inputs back into the
    # caller's tensor when it ends (as torch.func's vmap, grad and jvp do); where it does not
    # (jit, staging), mutating an input is an error.
    writes_back_inputs = False
    reverse_mode = False  # a reverse-mode differentiation level (transforms/jvp.py)
    # What torch.func says when a value of this trace is written into a tensor it does not
    # track (appended to thunderx's own message).
    foreign_write_hint = ""

    def __init__(self, parent: Trace | None):
        self.parent = parent
        self.alive = True
        # ids of the tracers this trace's transform created for its inputs
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
        if _any_autocast() and torch.is_autocast_enabled("cpu"):
            # a primitive's inputs have the dtypes it computes in: CPU autocast's casts are
            # explicit equations (lang/autocast.py), and torch's would add others
            with cpu_autocast_off():
                return rule(*args, **params)
        return rule(*args, **params)


_any_autocast = torch._C._is_any_autocast_enabled


class cpu_autocast_off:
    """Runs a block with CPU autocast disabled (kernels of primitives, generated programs: their
    casts are explicit), restoring the previous state on any exit."""

    __slots__ = ("prev",)

    def __enter__(self):
        self.prev = torch.is_autocast_enabled("cpu")
        torch.set_autocast_enabled("cpu", False)

    def __exit__(self, *exc):
        torch.set_autocast_enabled("cpu", self.prev)
        return False


class _State(threading.local):
    def __init__(self):
        self.trace: Trace = EvalTrace(None)


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


# (enter, exit) callables run around every transform started from eager code: the language layer
# shadows torch.Tensor's unbound methods meanwhile (lang/unbound.py). Core imports nothing above it.
outermost_hooks: list = []


class new_trace:
    """Start a child trace of the current one; mark it dead on exit so leaks are caught."""

    __slots__ = ("trace", "prev")

    def __init__(self, trace_type, *args):
        self.trace = trace_type(_state.trace, *args)

    def __enter__(self):
        self.prev = _state.trace
        if type(self.prev) is EvalTrace:
            for enter, _ in outermost_hooks:
                enter()
        _state.trace = self.trace
        return self.trace

    def __exit__(self, *exc):
        _state.trace = self.prev
        self.trace.alive = False
        if type(self.prev) is EvalTrace:
            for _, leave in outermost_hooks:
                leave()
            if exc[1] is not None:
                note_torch_func(exc[1])
        return False


def is_top_level() -> bool:
    return type(_state.trace) is EvalTrace


class Tracer:
    """A value inside a transform. Torch calls on it reach the language layer."""

    # One layout for every tracer type (subclasses add no slots), so an in-place update can turn
    # a tracer into one of another trace: `x.__class__` may be reassigned between them. `_alias`,
    # set only on tracers that take part in views, names their shared storage (lang/views.py).
    # `_aval` caches an aval computed from a concrete value (vmap.BatchTracer.aval).
    __slots__ = ("_trace", "_var", "primal", "tangent", "val", "bdim", "_alias", "_aval")
    __slots__ += ("__weakref__",)  # one tuple, split for the line length
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
