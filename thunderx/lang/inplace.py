"""In-place ops on traced values are functionalized: the tracer object takes the new value, and a
write to a view reaches its base and the other views of it (thunderx/lang/views.py).

Mutating an input of the transform (or a view of one) is an error under grad and vjp: reverse mode
is functional, as torch's autograd refuses an in-place update of a leaf that requires grad. vmap
and jvp write their inputs' updates back to the caller's tensors (transforms/input_updates.py);
jit writes its arguments' and captured tensors' updates back after each call, as torch.compile
does (lang/captured.py)."""

from __future__ import annotations

import math

import torch

from thunderx.core import Tracer
from thunderx.errors import ThunderxError, user_frame
from thunderx.lang._base import (
    aval,
    convert,
    method_table,
    register,
    shape,
    torch_dtype_name,
    torch_table,
)
from thunderx.lang.views import assign, keep_unseen, view_of, write
from thunderx.primitives import shape as S


class MutationError(ThunderxError, RuntimeError):
    """An in-place operation that a transform cannot functionalize."""


def mutate(x, new, what: str, detached: bool = False):
    """x takes the value `new` in place. `detached`: a write torch makes through `x.detach()`,
    which no derivative sees, forward or reverse (F.embedding's max_norm renormalization); a
    write in a `no_grad` block is one that reverse mode does not see."""
    if not isinstance(x, Tracer):
        # a captured tensor (or one made from no traced value): written now where the value is
        # known, else written back after each call of the staged program (lang/captured.py)
        from thunderx.lang.captured import write_captured

        new = S.broadcast_to(convert(new, x.dtype), tuple(x.shape))
        write_captured(x, new, what, False if detached else None, detached)
        return x
    if not isinstance(new, Tracer) or not (new._trace is x._trace or _is_inner(new, x)):
        # a value of an enclosing scope (e.g. a constant): make it a value of x's trace
        new = x._trace.lift(new)
    if id(x) in x._trace_inputs() and x._trace.writes_back_inputs:
        # vmap / jvp: written back when the transform ends (transforms/input_updates.py)
        if not (isinstance(new, Tracer) and new._trace is x._trace):
            raise _inner_write(x, new, what)
    elif id(x) in x._trace_inputs() and getattr(x._trace, "writeback", False):
        # an argument of jit: written back into the caller's tensor after each call, as
        # torch.compile does (a write that needs a derivative or a batch dim is refused)
        from thunderx.lang.captured import input_written

        new = input_written(x, new, what)
    elif id(x) in x._trace_inputs() and _unseen(x, detached):
        # grad / vjp (and jacfwd for a detached write): a write in a no_grad block (an
        # optimizer-style update, F.embedding's max_norm) goes to the caller's value, as
        # torch.func writes it; the input keeps its derivative (autograd does not see the write)
        return _write_through(x, _normalized(x, new, what), what)
    elif id(x) in x._trace_inputs():
        raise MutationError(
            f"{what} mutates an input of the transformed function at {user_frame()}; "
            "transforms are functional: clone it first (y = x.clone()) and mutate the copy"
        )
    new = _normalized(x, new, what)
    if view_of(x) is not None:
        return write(x, new, what, detached)
    new = keep_unseen(x, new, detached)
    # x takes new's identity: same trace (or an inner one, when x was constant to it)
    assign(x, new)
    return x


def _normalized(x, new, what: str):
    """`new` with x's shape and dtype (torch's in-place casting rule)."""
    if tuple(new.aval.shape) != tuple(x.aval.shape):
        new = S.broadcast_to(new, tuple(x.aval.shape))
    if new.aval.dtype != x.aval.dtype:
        if not torch.can_cast(new.aval.dtype, x.aval.dtype):
            raise MutationError(
                f"{what} at {user_frame()}: result type {torch_dtype_name(new.aval.dtype)} can't be "
                f"cast to the desired output type {torch_dtype_name(x.aval.dtype)}"
            )
        new = convert(new, x.aval.dtype)
    return new


def _unseen(x, detached: bool) -> bool:
    """Whether a write to input x of a differentiating level is one that level does not see."""
    from thunderx.transforms.jvp import JVPTracer

    if not isinstance(x, JVPTracer):
        return False
    return detached or (x._trace.reverse_mode and not torch.is_grad_enabled())


def _write_through(x, new, what: str):
    """Input `x` of a reverse-mode level takes `new` without a derivative: the value one level
    up (the caller's tensor, or the enclosing transform's value, by that level's own rules) is
    written now, and x keeps its tangent. A derivative that read x's old value earlier keeps
    reading it (the computation as written, lang/captured.py `_keep_earlier_reads`), where
    torch's autograd refuses the write."""
    primal = x._trace.pair(new)[0]
    below = x.primal
    with torch.no_grad():
        if isinstance(below, Tracer):
            mutate(below, primal, what)
        else:
            from thunderx.lang.captured import write_captured

            write_captured(below, primal, what, grad_enabled=False)
    return x


def _inner_write(x, new, what: str) -> MutationError:
    # torch.func's case: the input is not batched (or tracked) at the level the new value is
    return MutationError(
        f"{what} at {user_frame()}: in-place update of an input of a {type(x._trace).__name__} "
        "level with a value of a transform nested inside it is not possible; write out of "
        f"place instead{new._trace.foreign_write_hint}"
    )


def _is_inner(new, x) -> bool:
    """True when new's trace is nested inside x's (x's trace is among its ancestors)."""
    t = new._trace.parent
    while t is not None:
        if t is x._trace:
            return True
        t = t.parent
    return False


def _inplace_method(name):
    base = method_table[name]

    def impl(x, *args, **kwargs):
        return mutate(x, base(x, *args, **kwargs), f"Tensor.{name}_")

    impl.__name__ = name + "_"
    return impl


_INPLACE = [  # torch's `x.name_(...)` is `x.copy_(x.name(...))` for each of these names
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "clamp",
    "clamp_min",
    "clamp_max",
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "floor",
    "ceil",
    "round",
    "trunc",
    "reciprocal",
    "square",
    "lerp",
    "addcmul",
    "addcdiv",
    "fmod",
    "remainder",
    "masked_fill",
    "copysign",
    "atan2",
    "hypot",
    "logit",
    "erf",
    "expm1",
    "log1p",
    "relu",
    "index_add",
    "scatter",
    "scatter_add",
    "tril",
    "triu",
    "absolute",
    "acos",
    "acosh",
    "addbmm",
    "addmm",
    "addmv",
    "addr",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan2",
    "arctan",
    "arctanh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "baddbmm",
    "bitwise_and",
    "bitwise_left_shift",
    "bitwise_not",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "floor_divide",
    "clip",
    "conj_physical",
    "cosh",
    "cumprod",
    "cumsum",
    "deg2rad",
    "digamma",
    "divide",
    "eq",
    "erfc",
    "erfinv",
    "exp2",
    "fix",
    "frac",
    "ge",
    "greater",
    "greater_equal",
    "gt",
    "i0",
    "index_copy",
    "index_fill",
    "index_put",
    "index_reduce",
    "le",
    "less",
    "less_equal",
    "lgamma",
    "log10",
    "log2",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "lt",
    "masked_scatter",
    "multiply",
    "mvlgamma",
    "nan_to_num",
    "ne",
    "negative",
    "nextafter",
    "not_equal",
    "put",
    "rad2deg",
    "renorm",
    "scatter_reduce",
    "sgn",
    "sign",
    "sinc",
    "sinh",
    "subtract",
    "tan",
    "true_divide",
    "xlogy",
]


def _layout_inplace(name):
    """`x.t_()`, `x.unsqueeze_(0)`, ...: x keeps its memory and changes its view of it, so x
    becomes the view (its storage and the other views of it are untouched)."""

    def impl(x, *args, **kwargs):
        if not isinstance(x, Tracer):
            raise MutationError(f"Tensor.{name}_ on a concrete tensor under a transform")
        out = method_table[name](x, *args, **kwargs)
        assign(x, out)
        # x is already a member of the storage (the view call made it one): only its chain changes
        object.__setattr__(x, "_alias", view_of(out))
        return x

    impl.__name__ = name + "_"
    return impl


_LAYOUT_INPLACE = ["t", "transpose", "swapaxes", "swapdims", "squeeze", "unsqueeze"]


@register(methods=("resize_as_",))
def _resize_as_(x, other, memory_format=None):
    if math.prod(shape(x)) != math.prod(shape(other)):
        raise MutationError(
            f"Tensor.resize_as_ from {shape(x)} to {shape(other)} changes the number of elements "
            f"(at {user_frame()}); under a transform only a reshape of the same elements is "
            "supported: build a new tensor instead"
        )
    return _layout_inplace("view")(x, shape(other))


def install_inplace():
    for name in _LAYOUT_INPLACE:
        register(methods=(name + "_",))(_layout_inplace(name))
    for name in _INPLACE:
        if name in method_table and name + "_" not in method_table:
            impl = _inplace_method(name)
            register(methods=(name + "_",))(impl)
    for dunder, name in (
        ("__iadd__", "add"),
        ("__isub__", "sub"),
        ("__imul__", "mul"),
        ("__itruediv__", "div"),
        ("__ipow__", "pow"),
        ("__ifloordiv__", "floor_divide"),
        ("__imod__", "remainder"),
        ("__iand__", "bitwise_and"),
        ("__ior__", "bitwise_or"),
        ("__ixor__", "bitwise_xor"),
        ("__ilshift__", "bitwise_left_shift"),
        ("__irshift__", "bitwise_right_shift"),
    ):
        register(getattr(torch.Tensor, dunder), methods=(dunder,))(_inplace_method(name))
    # torch's function spellings of the in-place methods: torch.clamp_min_(x, 0) is x.clamp_min_(0)
    for name, impl in list(method_table.items()):
        fn = getattr(torch, name, None)
        if name.endswith("_") and not name.startswith("_") and callable(fn):
            if fn not in torch_table:
                register(fn)(impl)


@register(methods=("zero_",))
def _zero_(x):
    from thunderx.primitives import creation as C

    a = aval(x)
    return mutate(x, C.full(a.shape, 0, a.dtype, a.device), "Tensor.zero_")


@register(methods=("fill_",))
def _fill_(x, value):
    from thunderx.primitives import creation as C

    a = aval(x)
    if isinstance(value, (int, float, bool)):
        return mutate(x, C.full(a.shape, value, a.dtype, a.device), "Tensor.fill_")
    return mutate(x, S.broadcast_to(convert(value, a.dtype), a.shape), "Tensor.fill_")


@register(methods=("copy_",))
def _copy_(x, src, non_blocking=False):
    return mutate(x, S.broadcast_to(convert(src, aval(x).dtype), shape(x)), "Tensor.copy_")
