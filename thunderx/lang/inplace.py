"""In-place ops on traced values are functionalized: the tracer object takes the new value, and a
write to a view reaches its base and the other views of it (thunderx/lang/views.py).

Only values created inside the traced function may be mutated; mutating an input of the
transform (or a view of one) or a captured tensor is an error, because the transform could not
honour it."""

from __future__ import annotations

import math

import torch

from thunderx.core import Tracer
from thunderx.errors import ThunderxError, user_frame
from thunderx.lang._base import aval, convert, method_table, register, shape, torch_table
from thunderx.lang.views import assign, view_of, write
from thunderx.primitives import shape as S


class MutationError(ThunderxError, RuntimeError):
    """An in-place operation that a transform cannot functionalize."""


def mutate(x, new, what: str):
    if not isinstance(x, Tracer):
        hint = new._trace.foreign_write_hint if isinstance(new, Tracer) else ""
        raise MutationError(
            f"{what} writes a traced value into a concrete tensor at {user_frame()}: a transform "
            "cannot mutate a captured Tensor (one from outside it, or created from no traced "
            "value); create the tensor from a traced one (torch.zeros_like(x), x.new_zeros(...)) "
            f"or build the result out of place (torch.where, torch.cat){hint}"
        )
    if not isinstance(new, Tracer) or not (new._trace is x._trace or _is_inner(new, x)):
        # a value of an enclosing scope (e.g. a constant): make it a value of x's trace
        new = x._trace.lift(new)
    if id(x) in x._trace_inputs() and not (
        x._trace.writes_back_inputs and isinstance(new, Tracer) and new._trace is x._trace
    ):
        if x._trace.writes_back_inputs:
            raise _inner_write(x, new, what)
        raise MutationError(
            f"{what} mutates an input of the transformed function at {user_frame()}; "
            "transforms are functional: clone it first (y = x.clone()) and mutate the copy"
        )
    if tuple(new.aval.shape) != tuple(x.aval.shape):
        new = S.broadcast_to(new, tuple(x.aval.shape))
    if new.aval.dtype != x.aval.dtype:
        if not torch.can_cast(new.aval.dtype, x.aval.dtype):
            raise MutationError(
                f"{what} at {user_frame()}: result type {_dtype_name(new.aval.dtype)} can't be "
                f"cast to the desired output type {_dtype_name(x.aval.dtype)}"
            )
        new = convert(new, x.aval.dtype)
    if view_of(x) is not None:
        return write(x, new, what)
    # x takes new's identity: same trace (or an inner one, when x was constant to it)
    assign(x, new)
    return x


def write_back(dest, value, transform: str) -> None:
    """The end of a transform whose function updated its input `dest` in place: the caller's
    value (a tensor, or a tracer of an enclosing transform) takes the final `value`."""
    if tuple(value.shape) != tuple(dest.shape):
        raise MutationError(
            f"{transform}: an in-place update changed the shape of an input from "
            f"{tuple(dest.shape)} to {tuple(value.shape)}; the caller's tensor cannot follow: "
            "use the out-of-place form (x.unsqueeze(0) rather than x.unsqueeze_(0))"
        )
    dest.copy_(value)


def refuse_aliased_writes(dests, args, transform: str) -> None:
    """Before any write-back: an updated input that is also another argument, or shares its
    memory, is refused. torch sees the update through the other argument (the same memory);
    thunderx's inputs are separate values, so the other's reads inside the function would be
    stale (a silently different result)."""
    for d in dests:
        for a in args:
            shared = a is d and sum(b is d for b in args) > 1
            if a is not d and isinstance(a, torch.Tensor) and isinstance(d, torch.Tensor):
                sa, sd = a.untyped_storage(), d.untyped_storage()
                shared = sa.nbytes() > 0 and sa.data_ptr() == sd.data_ptr()
            if shared:
                raise MutationError(
                    f"{transform}: an input updated in place shares memory with another "
                    f"argument (at {user_frame()}); thunderx treats the arguments as separate "
                    "values, so the update would not be seen through the other: pass a clone"
                )


def _inner_write(x, new, what: str) -> MutationError:
    # torch.func's case: the input is not batched (or tracked) at the level the new value is
    return MutationError(
        f"{what} at {user_frame()}: in-place update of an input of a {type(x._trace).__name__} "
        "level with a value of a transform nested inside it is not possible; write out of "
        f"place instead{new._trace.foreign_write_hint}"
    )


def _dtype_name(dtype) -> str:
    # torch's spelling in its own message: Float, Long, ComplexDouble
    return torch.empty((), dtype=dtype, device="meta").type().split(".")[-1].replace("Tensor", "")


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
    "bitwise_not",
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
