"""In-place ops on traced values are functionalized: the tracer object takes the new value.

Only values created inside the traced function may be mutated; mutating an input of the
transform or a captured tensor is an error, because the transform could not honour it."""

from __future__ import annotations

import torch

from thunderx.core import Tracer
from thunderx.errors import ThunderxError, user_frame
from thunderx.lang._base import aval, convert, method_table, register, shape
from thunderx.primitives import shape as S


class MutationError(ThunderxError, RuntimeError):
    """An in-place operation that a transform cannot functionalize."""


def mutate(x, new, what: str):
    if not isinstance(x, Tracer):
        raise MutationError(
            f"{what} writes a traced value into a concrete tensor at {user_frame()}; under a "
            "transform, create the tensor from a traced one (torch.zeros_like(x), x.new_zeros(...)) "
            "or build the result out of place (torch.where, torch.cat)"
        )
    if not isinstance(new, Tracer) or not (new._trace is x._trace or _is_inner(new, x)):
        # a value of an enclosing scope (e.g. a constant): make it a value of x's trace
        new = x._trace.lift(new)
    if id(x) in x._trace_inputs():
        raise MutationError(
            f"{what} mutates an input of the transformed function at {user_frame()}; "
            "transforms are functional: clone it first (y = x.clone()) and mutate the copy"
        )
    if tuple(new.aval.shape) != tuple(x.aval.shape):
        new = S.broadcast_to(new, tuple(x.aval.shape))
    if new.aval.dtype != x.aval.dtype:
        new = convert(new, x.aval.dtype)
    # x takes new's identity: same trace (or an inner one, when x was constant to it)
    x.__class__ = new.__class__
    for slot in Tracer.__slots__:
        if slot != "__weakref__" and hasattr(new, slot):
            object.__setattr__(x, slot, getattr(new, slot))
    return x


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


_INPLACE = [
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
    "t",
    "transpose",
    "squeeze",
    "unsqueeze",
    "index_add",
    "scatter",
    "scatter_add",
    "tril",
    "triu",
]


def install_inplace():
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
