"""Transposition: run a linear jaxpr backwards, from output cotangents to input cotangents."""

from __future__ import annotations

from thunderx.ad_util import UndefinedPrimal, Zero, add_tangents
from thunderx.core import missing_rule, transpose_rules
from thunderx.ir import Jaxpr, Literal


def backward_pass(jaxpr: Jaxpr, residuals: list, cts_out: list) -> list:
    """`jaxpr` takes (residuals..., linear inputs...). Returns cotangents of the linear inputs
    (`Zero` where nothing flows). Each transpose rule binds in the current trace context."""
    known = {id(v): x for v, x in zip(jaxpr.invars, residuals)}
    linear_vars = jaxpr.invars[len(residuals) :]
    ct_env: dict[int, object] = {}

    def write(v, ct):
        if ct is None or type(ct) is Zero or isinstance(v, Literal) or id(v) in known:
            return
        prev = ct_env.get(id(v))
        ct_env[id(v)] = ct if prev is None else add_tangents(prev, ct)

    for v, ct in zip(jaxpr.outvars, cts_out):
        write(v, ct)

    # Equations whose inputs are all known compute residual-only values (e.g. zeros): evaluate
    # them forward first.
    for e in jaxpr.eqns:
        if all(isinstance(x, Literal) or id(x) in known for x in e.inputs):
            from thunderx.core import bind

            outs = bind(e.prim, *[_read(x, known) for x in e.inputs], **e.params)
            outs = outs if e.prim.multiple_results else [outs]
            for v, o in zip(e.outputs, outs):
                known[id(v)] = o

    for e in reversed(jaxpr.eqns):
        if all(id(v) in known for v in e.outputs):
            continue
        cts = [ct_env.pop(id(v), None) for v in e.outputs]
        if all(c is None for c in cts):
            continue
        args = [
            _read(x, known) if isinstance(x, Literal) or id(x) in known else UndefinedPrimal(x.aval)
            for x in e.inputs
        ]
        rule = transpose_rules.get(e.prim)
        if rule is None:
            raise missing_rule(e.prim, "transpose", e.params)
        if e.prim.multiple_results:
            ct = [Zero(v.aval) if c is None else c for v, c in zip(e.outputs, cts)]
        else:
            ct = cts[0]
        cts_in = rule(ct, *args, **e.params)
        for x, c in zip(e.inputs, cts_in):
            if c is not None and not isinstance(x, Literal):
                write(x, c)
    return [ct_env.get(id(v), Zero(v.aval)) for v in linear_vars]


def _read(x, known):
    return x.val if isinstance(x, Literal) else known[id(x)]
