"""Writing results in place in generated torch code: into a dead intermediate the program
allocated, or a plain view (reshape, transpose) of one, read from each primitive's declared
properties (`prim.props`), which tests/test_properties.py proves against its implementation."""

from __future__ import annotations

import math
from typing import NamedTuple

from thunderx.ir import Var
from thunderx.passes import is_view_primitive
from thunderx.properties import out_overload


def inplace_source(e, args, i, last_use, state):
    """(`x.method_(...)` source, the input x written into), or (None, None)."""
    props = e.prim.props
    method = props.inplace
    out_aval = e.outputs[0].aval
    if props.inplace_out is not None:
        # an elementwise kernel's out= overload, into the first operand that dies here
        for k, x in enumerate(e.inputs):
            if reusable(x, out_aval, i, last_use, state):
                return inplace_out_source(props.inplace_out, args, e.params, args[k]), x
        return None, None
    if method is None or props.inplace_floating_only and not out_aval.dtype.is_floating_point:
        return None, None
    if len(e.inputs) == 1:
        x = e.inputs[0]
        if reusable(x, out_aval, i, last_use, state):
            return f"{args[0]}.{method}()", x
        return None, None
    if len(e.inputs) == 2:
        x, y = e.inputs
        ok_x = x is not y and reusable(x, out_aval, i, last_use, state)
        ok_y = props.commutative and x is not y and reusable(y, out_aval, i, last_use, state)
        if ok_y and (not ok_x or _is_view(x, state) and not _is_view(y, state)):
            return f"{args[1]}.{method}({args[0]})", y  # a buffer of its own before a view
        if ok_x:
            return f"{args[0]}.{method}({args[1]})", x
    return None, None


def _is_view(x, state) -> bool:
    return state.root.get(id(x)) != id(x)


def inplace_out_source(overload: str, args, params, into: str) -> str:
    """The call of aten's out= overload `overload` on the operand sources `args` with `params`
    as keywords, writing into the buffer named `into`."""
    _, out_name = out_overload(overload)
    kw = "".join(f", {k}={v!r}" for k, v in params.items())
    return f"torch.ops.aten.{overload}({', '.join(args)}{kw}, {out_name}={into})"


class Buffers(NamedTuple):
    """generate_source's bookkeeping of which buffers may be written in place."""

    root: dict  # var -> the buffer it may share storage with
    owned: set  # buffers this function allocated
    live_views: dict  # buffer -> number of live vars on it
    plain_views: set  # vars that are plain views (plain_view) of an owned buffer


def _writable(x, state) -> bool:
    """Whether x is a buffer this function allocated, or a plain view of one."""
    r = state.root.get(id(x))
    return r in state.owned and (r == id(x) or id(x) in state.plain_views)


def plain_view(e, state) -> bool:
    """Whether equation `e`'s one output is a view of its first operand alone whose elements
    never share memory (not an expand) and cover all of it (a reshape or transpose, not a slice:
    writing into a strided slice is slower than into a fresh buffer), that operand being an
    owned buffer or such a view."""
    x = e.inputs[0] if e.inputs else None
    if not (
        is_view_primitive(e.prim)
        and not e.prim.props.overlapping
        and len(e.outputs) == 1
        and isinstance(x, Var)
        and _writable(x, state)
    ):
        return False
    a, b = x.aval, e.outputs[0].aval
    sizes = (*a.shape, *b.shape)
    return (
        a.dtype == b.dtype
        and all(isinstance(d, int) for d in sizes)
        and math.prod(a.shape) == math.prod(b.shape)
    )


def reusable(x, out_aval, i, last_use, state) -> bool:
    """Whether equation `i` may write its result into `x`: x dies there, is the one live value
    on its buffer, has the result's shape and dtype, and is a buffer this function allocated
    or a plain view of one (a reshape of a dead matmul result is as writable as the result)."""
    return (
        isinstance(x, Var)
        and _writable(x, state)
        and last_use.get(id(x)) == i
        and state.live_views.get(state.root[id(x)], 0) == 1
        and x.aval.shape == out_aval.shape
        and x.aval.dtype == out_aval.dtype
    )
