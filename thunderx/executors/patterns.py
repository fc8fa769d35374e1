"""Equation patterns the torch executor emits as one torch call: `select(le(x, 0), 0, x)` as
`relu`, `dot_general` plus a broadcast bias as `F.linear` (torch's addmm: the bias added in the
matmul's epilogue, one kernel and one pass over the output instead of two)."""

from __future__ import annotations

from thunderx.ir import Literal, Var
from thunderx.primitives.binary import add_p, le_p
from thunderx.primitives.linalg import dot_general_p
from thunderx.primitives.shape import broadcast_in_dim_p
from thunderx.primitives.unary import select_p


def _uses_and_producers(jaxpr):
    uses: dict[int, int] = {}
    producer: dict[int, int] = {}
    for i, e in enumerate(jaxpr.eqns):
        for x in e.inputs:
            if isinstance(x, Var):
                uses[id(x)] = uses.get(id(x), 0) + 1
        for v in e.outputs:
            producer[id(v)] = i
    for x in jaxpr.outvars:
        if isinstance(x, Var):
            uses[id(x)] = uses.get(id(x), 0) + 1
    return uses, producer


def relu_patterns(jaxpr):
    """`select(le(x, 0), 0, x)` is `torch.relu(x)`: one kernel and one allocation instead of
    two, and the same numbers (NaN stays NaN, -0.0 stays -0.0); the comparison is skipped when
    nothing else reads it (a gradient reads it as its mask). `select(gt(x, 0), x, 0)` is not
    relu: it maps NaN to 0."""
    uses, producer = _uses_and_producers(jaxpr)
    relus, skipped = set(), set()
    for i, e in enumerate(jaxpr.eqns):
        if e.prim is not select_p or not e.outputs[0].aval.dtype.is_floating_point:
            continue
        pred, zero, x = e.inputs
        if not (isinstance(zero, Literal) and zero.val == 0 and isinstance(pred, Var)):
            continue
        p = producer.get(id(pred))
        if p is None:
            continue
        cmp = jaxpr.eqns[p]
        if cmp.prim is not le_p:
            continue
        a, b = cmp.inputs
        if a is x and isinstance(b, Literal) and b.val == 0:
            relus.add(i)
            if uses.get(id(pred)) == 1:
                skipped.add(p)
    return relus, skipped


def bias_patterns(jaxpr, last_use: dict) -> dict:
    """`add(dot_general(x, w), broadcast(b))` with x (..., K), w (N, K), b (N,) of one floating
    dtype, the product read only by the add: {add index: ((x, w, b), skipped indices)}. The
    operands' last uses move to the add (`last_use` is updated), so no buffer they hold is
    reused in place before it reads them."""
    uses, producer = _uses_and_producers(jaxpr)
    found = {}
    for i, e in enumerate(jaxpr.eqns):
        if e.prim is not add_p or not all(isinstance(x, Var) for x in e.inputs):
            continue
        for prod, bias in (e.inputs, e.inputs[::-1]):
            fused = _linear_operands(jaxpr, prod, bias, uses, producer)
            if fused is not None:
                operands, skipped = fused
                found[i] = (operands, skipped)
                for x in operands:
                    if isinstance(x, Var):
                        last_use[id(x)] = max(last_use.get(id(x), i), i)
                break
    return found


def _linear_operands(jaxpr, prod, bias, uses, producer):
    p, q = producer.get(id(prod)), producer.get(id(bias))
    if p is None or q is None or uses.get(id(prod)) != 1:
        return None
    dot, bcast = jaxpr.eqns[p], jaxpr.eqns[q]
    if dot.prim is not dot_general_p or bcast.prim is not broadcast_in_dim_p:
        return None
    x, w = dot.inputs
    b = bcast.inputs[0]
    if not all(isinstance(v, Var) for v in (x, w, b)):
        return None
    n = len(x.aval.shape)
    out = dot.outputs[0].aval
    if dot.params["dimension_numbers"] != (((n - 1,), (1,)), ((), ())) or len(w.aval.shape) != 2:
        return None
    if b.aval.shape != out.shape[-1:] or bcast.params["broadcast_dimensions"] != (
        len(out.shape) - 1,
    ):
        return None
    dtypes = {x.aval.dtype, w.aval.dtype, b.aval.dtype, out.dtype}
    if len(dtypes) != 1 or not out.dtype.is_floating_point or n < 1:
        return None
    skipped = {p} | ({q} if uses.get(id(bias)) == 1 else set())
    return (x, w, b), skipped
