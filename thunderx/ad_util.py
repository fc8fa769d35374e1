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
    """A primitive linear in its array operands (except the positions in `nonlinear`, such as
    indices, which pass their primal): its jvp applies it to the tangents."""
    from thunderx.core import get_aval, jvp_rules, linear_primitives, transpose_rules

    skip = nonlinear if callable(nonlinear) else (lambda i: i in nonlinear)

    def jvp(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        if all(type(t) is Zero for i, t in enumerate(tangents) if not skip(i)):
            if prim.multiple_results:
                return out, [Zero(get_aval(o)) for o in out]
            return out, Zero(get_aval(out))
        args = [p if skip(i) else instantiate(t) for i, (p, t) in enumerate(zip(primals, tangents))]
        return out, prim.bind(*args, **params)

    jvp_rules[prim] = jvp
    linear_primitives.add(prim)
    if transpose is not None:
        transpose_rules[prim] = transpose
