"""Symbolic zeros and undefined primals: the vocabulary of jvp and transpose rules."""

from __future__ import annotations

from thunderx.avals import ShapedArray, is_float


class Zero:
    """A tangent or cotangent known to be zero; never materialized unless a rule must."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    def __repr__(self) -> str:
        return f"Zero({self.aval.str_short()})"


class UndefinedPrimal:
    """A linear input of an equation being transposed."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    def __repr__(self) -> str:
        return f"UndefinedPrimal({self.aval.str_short()})"


def is_undefined(x) -> bool:
    return type(x) is UndefinedPrimal


def instantiate(t):
    """Materialize a symbolic zero as a tensor of zeros."""
    if type(t) is Zero:
        from thunderx.primitives import creation

        a = t.aval
        return creation.full(a.shape, 0, a.dtype, a.device)
    return t


def add_tangents(a, b):
    if type(a) is Zero:
        return b
    if type(b) is Zero:
        return a
    from thunderx.primitives import binary

    return binary.add(a, b)


def tangent_aval(aval: ShapedArray) -> ShapedArray | None:
    """Only floating values carry tangents; integer and bool outputs carry none."""
    return aval.strip_weak() if is_float(aval.dtype) else None


def deflinear(prim, *, transpose=None, nonlinear=()) -> None:
    """Low-level: mark a primitive made with `new_primitive` linear (new primitives use
    `core.declare(linear=True, transpose=..., nonlinear=...)` instead)."""
    from thunderx.core import jvp_rules, linear_jvp, linear_primitives, transpose_rules

    jvp_rules[prim] = linear_jvp(prim, nonlinear)
    linear_primitives.add(prim)
    if transpose is not None:
        transpose_rules[prim] = transpose
