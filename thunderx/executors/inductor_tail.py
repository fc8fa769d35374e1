"""Large outputs of an inductor program written by torch into recycled buffers.

Inductor allocates every result of its graph afresh on each call, and on CPU a fresh buffer of a
few MiB costs its page faults on first write (recycle.py): per-example gradients spend most of
their time there under `torch.compile` too. An output made by a contraction (a GEMM, an extern
kernel in inductor as well) or by a kernel that broadcasts small operands into a large result
(an outer product) has nothing to fuse with: it leaves the graph, and the torch executor's
host program computes it through its out= kernel into a buffer recycled across calls. The
graph returns that equation's operands instead, which are small for exactly these equations."""

from __future__ import annotations

from collections import Counter

from thunderx.core import Primitive, torch_codegen_rules
from thunderx.executors.recycle import out_source, recyclable
from thunderx.executors.release import nbytes
from thunderx.ir import Eqn, Jaxpr, Var
from thunderx.properties import ALL_OPERANDS, Properties


def tail_equations(jaxpr: Jaxpr) -> list[int]:
    """Indices of the equations whose one output is a program output worth recycling, read by
    no other equation, with an out= form, made by a contraction or by broadcasting operands of
    at most half its size."""
    read = {id(x) for e in jaxpr.eqns for x in e.inputs}
    counts = Counter(id(v) for v in jaxpr.outvars)
    out = []
    for i, e in enumerate(jaxpr.eqns):
        if len(e.outputs) != 1 or e.prim.multiple_results or e.prim.props.effects:
            continue
        v = e.outputs[0]
        if counts.get(id(v)) != 1 or id(v) in read or not recyclable(v):
            continue
        if e.prim.props.alias_positions(len(e.inputs)):
            continue
        contraction = e.prim.name == "dot_general"
        operand_bytes = sum(nbytes(x.aval) for x in e.inputs if isinstance(x, Var))
        expanding = 2 * operand_bytes <= nbytes(v.aval)
        if not (contraction or expanding) or e.prim not in torch_codegen_rules:
            continue
        names = [f"x{k}" for k in range(len(e.inputs))]
        expr = torch_codegen_rules[e.prim](names, [x.aval for x in e.inputs], **e.params)
        if out_source(e, names, expr, "out", False) is not None:
            out.append(i)
    return out


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
