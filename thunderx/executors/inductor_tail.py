"""Large outputs of an inductor program written into buffers recycled across calls.

Inductor allocates every result of its graph afresh on each call, and on CPU a fresh buffer of a
few MiB costs its page faults on first write (recycle.py): per-example gradients spend most of
their time there under `torch.compile` too. Two ways around it:

- an output made by a contraction (a GEMM: an extern kernel in inductor too, nothing to fuse
  with) leaves the graph (`tail_equations`): the torch executor's host program computes it
  through its out= kernel into a recycled buffer, and the graph returns its operands instead;
- any other large output (an outer product, a broadcast, an elementwise result) stays in the
  graph, which takes a recycled buffer per such output as an extra input and copies the value
  into it (`recycled_outputs`): inductor fuses the copy into the kernel computing the value,
  which then stores into the buffer directly, as torch.compile's kernel stores into its fresh
  one. An outer product thus fuses with the other per-example gradients' kernels (one loop
  writing them all, as torch.compile's) where the tail's torch call was a kernel of its own."""

from __future__ import annotations

from collections import Counter

import torch

from thunderx.core import Primitive, torch_codegen_rules
from thunderx.executors.recycle import out_source, recyclable
from thunderx.executors.release import nbytes
from thunderx.ir import Eqn, Jaxpr, Var
from thunderx.properties import ALL_OPERANDS, Properties


def _recyclable_outputs(jaxpr: Jaxpr):
    """(index, equation) of the equations whose one output is a program output worth recycling,
    returned once, read by no other equation, not a view of an operand."""
    read = {id(x) for e in jaxpr.eqns for x in e.inputs}
    counts = Counter(id(v) for v in jaxpr.outvars)
    for i, e in enumerate(jaxpr.eqns):
        if len(e.outputs) != 1 or e.prim.multiple_results or e.prim.props.effects:
            continue
        v = e.outputs[0]
        if counts.get(id(v)) != 1 or id(v) in read or not recyclable(v):
            continue
        if not e.prim.props.alias_positions(len(e.inputs)):
            yield i, e


def _contraction(e: Eqn) -> bool:
    """Whether `e` is a GEMM (a dot_general other than a batched outer product, which torch and
    inductor compute as a broadcast multiply)."""
    if e.prim.name != "dot_general":
        return False
    from thunderx.primitives.linalg import outer_product_layout

    avals = [x.aval for x in e.inputs]
    return outer_product_layout(avals, e.params["dimension_numbers"]) is None


def tail_equations(jaxpr: Jaxpr) -> list[int]:
    """Indices of the contractions whose one output is a program output worth recycling (see
    `_recyclable_outputs`) with an out= form."""
    out = []
    for i, e in _recyclable_outputs(jaxpr):
        if not _contraction(e) or e.prim not in torch_codegen_rules:
            continue
        names = [f"x{k}" for k in range(len(e.inputs))]
        expr = torch_codegen_rules[e.prim](names, [x.aval for x in e.inputs], **e.params)
        if out_source(e, names, expr, "out", False) is not None:
            out.append(i)
    return out


def stored_operands(jaxpr: Jaxpr) -> Jaxpr:
    """`jaxpr` in which each value made by an elementwise (non-GEMM) equation and broadcast,
    through views, into an output (read by no equation) at least twice its size is read by
    every later equation through `realize_p`: a buffer inductor stores.

    Inductor inlines an unrealized elementwise operand into each consumer's loop, so an outer
    product recomputes it for every element of its large result: a ReLU's backward inlined into
    a 16 MiB per-example gradient took 481 us where the product of stored operands takes 290
    (torch.mul 318), a log-softmax backward inlined into the last layer's 1.3 MiB one 4x its
    time."""
    read = {id(x) for e in jaxpr.eqns for x in e.inputs}
    producer = {id(v): e for e in jaxpr.eqns for v in e.outputs}

    def source(x):  # through views (a reshape, a broadcast) to the value they read
        e = producer.get(id(x))
        while e is not None and len(e.inputs) == 1 and e.prim.props.alias_positions(1):
            x = e.inputs[0]
            e = producer.get(id(x))
        return x, e

    stored: set[int] = set()
    for e in jaxpr.eqns:
        out = e.outputs[0] if len(e.outputs) == 1 else None
        if out is None or id(out) in read or _contraction(e):
            continue
        for x in e.inputs:
            if not isinstance(x, Var):
                continue
            src, made_by = source(x)
            if made_by is None or _contraction(made_by) or made_by.prim.multiple_results:
                continue
            if 2 * nbytes(src.aval) <= nbytes(out.aval):
                stored.add(id(src))
    if not stored:
        return jaxpr
    renamed: dict[int, Var] = {}
    eqns = []
    for e in jaxpr.eqns:
        inputs = [renamed.get(id(x), x) if isinstance(x, Var) else x for x in e.inputs]
        eqns.append(Eqn(e.prim, inputs, e.outputs, e.params))
        for v in e.outputs:
            if id(v) in stored:
                renamed[id(v)] = Var(v.aval)
                eqns.append(Eqn(realize_p, [v], [renamed[id(v)]], {}))
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars, check=False)


def _realize(x):
    force = getattr(torch.ops.prims, "inductor_force_stride_order", None)
    return x if force is None else force(x, x.stride())


# the identity, as inductor's stride-forcing primitive, which it lowers by storing its operand
# into a buffer (a no-op where the operand is one already); generated source calls `_realize`
realize_p = Primitive("realize")
realize_p.props = Properties(aliases=ALL_OPERANDS)
REALIZE_NAMESPACE = {"_impl_realize": _realize}


def recycled_outputs(jaxpr: Jaxpr) -> list[int]:
    """Positions in `jaxpr.outvars` of the outputs an inductor graph writes into recycled
    buffers: those of `_recyclable_outputs` that are not contractions (those are the tail's)."""
    where = {id(e.outputs[0]) for _, e in _recyclable_outputs(jaxpr) if not _contraction(e)}
    return [k for k, v in enumerate(jaxpr.outvars) if id(v) in where]


def split_tail(jaxpr: Jaxpr, tail: list[int]):
    """(the graph: `jaxpr` without the tail equations, returning the outputs they do not make
    and their operands; the host: the graph as one equation of `prim`, then the tail equations,
    returning `jaxpr`'s outputs; prim)."""
    skip = set(tail)
    body = [e for i, e in enumerate(jaxpr.eqns) if i not in skip]
    made = {id(v) for e in body for v in e.outputs}
    wanted, seen = [], set()
    tails = [jaxpr.eqns[i] for i in tail]
    for x in list(jaxpr.outvars) + [x for e in tails for x in e.inputs]:
        if isinstance(x, Var) and id(x) in made and id(x) not in seen:
            seen.add(id(x))
            wanted.append(x)
    graph = Jaxpr(jaxpr.constvars, jaxpr.invars, body, wanted, check=False)
    prim = Primitive("inductor_graph", multiple_results=True)
    prim.props = Properties(aliases=ALL_OPERANDS)  # inductor may return views of its inputs
    call = Eqn(prim, list(jaxpr.constvars) + list(jaxpr.invars), wanted, {})
    host = Jaxpr(jaxpr.constvars, jaxpr.invars, [call, *tails], jaxpr.outvars, check=False)
    return graph, host, prim
