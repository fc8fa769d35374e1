"""Composite operations expanded into their decompositions, for an executor that has no rule
for the kernel but has rules for the primitives it decomposes into (nvFuser fuses `gelu` as
`erf`, `mul` and `add`)."""

from __future__ import annotations

from typing import Callable

from thunderx.core import Primitive, decomposition_rules
from thunderx.ir import Jaxpr, Literal


def expand_composites(jaxpr: Jaxpr, keep: Callable[[Primitive], bool]) -> Jaxpr:
    """`jaxpr` with every composite equation whose primitive `keep` rejects replaced by the
    equations of its decomposition (recursively: a decomposition may hold composites)."""
    if not any(e.prim in decomposition_rules and not keep(e.prim) for e in jaxpr.eqns):
        return jaxpr
    from thunderx.tracing import trace_flat

    n_consts = len(jaxpr.constvars)

    def run(*args):
        env: dict[int, object] = {id(v): a for v, a in zip(jaxpr.constvars + jaxpr.invars, args)}

        def read(x):
            return x.val if isinstance(x, Literal) else env[id(x)]

        for e in jaxpr.eqns:
            ins = [read(x) for x in e.inputs]
            if e.prim in decomposition_rules and not keep(e.prim):
                out = decomposition_rules[e.prim](*ins, **e.params)
            else:
                out = e.prim.bind(*ins, **e.params)
            outs = out if e.prim.multiple_results else [out]
            for v, o in zip(e.outputs, outs):
                env[id(v)] = o
        return [read(x) for x in jaxpr.outvars], None

    closed, _ = trace_flat(run, [v.aval for v in jaxpr.constvars + jaxpr.invars])
    new = closed.jaxpr
    if new.constvars:  # a decomposition captured a tensor: keep the kernels instead
        return jaxpr
    expanded = Jaxpr(new.invars[:n_consts], new.invars[n_consts:], new.eqns, new.outvars)
    return expand_composites(expanded, keep)
