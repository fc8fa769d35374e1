"""Partial evaluation of a jaxpr: split it into what known inputs determine and the rest.

Linearize = jvp + partial evaluation: the known part is the primal computation (it also returns
the residuals the tangent part needs); the unknown part is linear in the tangents.
"""

from __future__ import annotations

from thunderx.ir import Jaxpr, Var
from thunderx.passes import dce, inline_calls


def partial_eval_jaxpr(jaxpr: Jaxpr, unknowns: list[bool]):
    """Returns (known, unknown, out_unknowns, residuals).

    known:   constvars + known invars -> known outvars + residuals
    unknown: residuals + unknown invars -> unknown outvars
    """
    jaxpr = inline_calls(jaxpr)
    unknown_ids = {id(v) for v, u in zip(jaxpr.invars, unknowns) if u}
    known_eqns, unknown_eqns = [], []
    residuals: list[Var] = []
    res_ids: set[int] = set()

    def add_residual(x):
        if isinstance(x, Var) and id(x) not in unknown_ids and id(x) not in res_ids:
            res_ids.add(id(x))
            residuals.append(x)

    for e in jaxpr.eqns:
        if any(isinstance(x, Var) and id(x) in unknown_ids for x in e.inputs):
            unknown_eqns.append(e)
            for x in e.inputs:
                add_residual(x)
            for v in e.outputs:
                unknown_ids.add(id(v))
        else:
            known_eqns.append(e)
    out_unknowns = [isinstance(v, Var) and id(v) in unknown_ids for v in jaxpr.outvars]
    known_outs = [v for v, u in zip(jaxpr.outvars, out_unknowns) if not u]
    known_invars = [v for v, u in zip(jaxpr.invars, unknowns) if not u]
    unknown_invars = [v for v, u in zip(jaxpr.invars, unknowns) if u]
    known = dce(
        Jaxpr(jaxpr.constvars, known_invars, known_eqns, known_outs + residuals, check=False)
    )
    unknown = Jaxpr(
        [],
        residuals + unknown_invars,
        unknown_eqns,
        [v for v, u in zip(jaxpr.outvars, out_unknowns) if u],
        check=False,
    )
    return known, unknown, out_unknowns, len(residuals)
