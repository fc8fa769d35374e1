"""Partial evaluation: split a computation into what known inputs determine and the rest.

Linearize = jvp + partial evaluation: the known part is the primal computation (it also yields
the residuals the tangent part needs); the unknown part is linear in the tangents.

Two evaluators share one rule table (`partial_eval_rules`, for primitives that split better than
"any unknown input makes every output unknown"):

- `PartialEvalTrace` works *online*, as JAX's `JaxprTrace`: a value that is not one of its tracers
  is known and every primitive on known values runs now, in the parent trace (eagerly at top
  level, or staged into an enclosing `jit`); only primitives touching an unknown value are staged.
  So the primal computation of `grad`, `vjp`, `linearize`, `jacrev` and `hessian` sees concrete
  values and Python control flow on them works, as in JAX and torch.func.
- `partial_eval_jaxpr` splits a jaxpr that is already staged (a sub-jaxpr of a higher-order
  primitive, or a jaxpr under `jit`).

Decision: reverse mode has one path. `linearize_flat` (transforms/ad.py) always runs the online
trace; under `jit` its parent is jit's staging trace, so the primal equations land in jit's jaxpr
as they execute and the optimizer sees one program, the same as staging the whole jvp first.
"""

from __future__ import annotations

import torch

from thunderx.core import abstract_eval, get_aval, partial_eval_rules, set_trace
from thunderx.errors import ModifiedInPlaceError, user_frame
from thunderx.ir import Eqn, Jaxpr, Literal, Var, eval_jaxpr
from thunderx.passes import call_primitives, dce, inline_calls
from thunderx.tracing import StagingTrace, StagingTracer

_SCALARS = (bool, int, float, complex)


def partial_eval_jaxpr(jaxpr: Jaxpr, unknowns: list[bool]):
    """Returns (known, unknown, out_unknowns, num_residuals).

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

    def is_unknown(x):
        return isinstance(x, Var) and id(x) in unknown_ids

    for e in jaxpr.eqns:
        in_unknowns = [is_unknown(x) for x in e.inputs]
        if not any(in_unknowns):
            known_eqns.append(e)
            continue
        rule = partial_eval_rules.get(e.prim)
        if rule is None:
            known_eqn, unknown_eqn, out_unknowns = None, e, [True] * len(e.outputs)
        else:
            known_eqn, unknown_eqn, out_unknowns, _ = rule(e, in_unknowns)
        if known_eqn is not None:
            known_eqns.append(known_eqn)
        if unknown_eqn is not None:
            unknown_eqns.append(unknown_eqn)
            for x in unknown_eqn.inputs:
                add_residual(x)
        for v, u in zip(e.outputs, out_unknowns):
            if u:
                unknown_ids.add(id(v))
    out_unknowns = [is_unknown(v) for v in jaxpr.outvars]
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


def without_residuals(known: Jaxpr, n_res: int) -> Jaxpr:
    """The known jaxpr of `partial_eval_jaxpr` without its `n_res` residual outputs (for a
    primitive whose outputs are all known: nothing unknown is left to read them), dead equations
    dropped."""
    outs = known.outvars[: len(known.outvars) - n_res]
    return dce(Jaxpr(known.constvars, known.invars, known.eqns, list(outs), check=False))


class PartialEvalTrace(StagingTrace):
    """Online partial evaluation. Its own tracers are unknown and staged into its jaxpr; every
    other value (a tensor, or a tracer of an enclosing trace) is known. A primitive whose inputs
    are all known binds in the parent trace now; one touching an unknown value is staged, its known
    inputs becoming the staged jaxpr's constants (the residuals)."""

    __slots__ = ("versions", "hooks")

    def __init__(self, parent):
        super().__init__(parent)
        # (index in consts, tensor, its version counter when first read) per concrete const
        self.versions: list[tuple] = []
        # id(tangent var) -> the torch hooks registered on its primal (lang/hooks.py)
        self.hooks: dict[int, list] = {}

    def const_var(self, x) -> Var:
        # A concrete tensor read by the linear jaxpr is evaluated later, when cotangents (or
        # tangents) arrive: its version counter, read now, tells whether it changed meanwhile.
        n = len(self.consts)
        var = StagingTrace.const_var(self, x)
        if len(self.consts) != n and isinstance(x, torch.Tensor):
            v = _version(x)
            if v is not None:
                self.versions.append((n, x, v))
        return var

    def process_primitive(self, prim, args, params):
        unknowns = [type(a) is StagingTracer and a._trace is self for a in args]
        if not any(unknowns):
            with set_trace(self.parent):
                return prim.bind(*args, **params)
        rule = partial_eval_rules.get(prim)
        if rule is None:
            return StagingTrace.process_primitive(self, prim, args, params)
        return self._split(rule, prim, args, params, unknowns)

    def _split(self, rule, prim, args, params, unknowns):
        in_vars = []
        for a, u in zip(args, unknowns):
            if u:
                in_vars.append(a._var)
            elif type(a) in _SCALARS:
                in_vars.append(Literal(a))
            else:
                in_vars.append(Var(get_aval(a)))
        out = abstract_eval(prim, [v.aval for v in in_vars], params)
        out_vars = [Var(a) for a in (out if prim.multiple_results else [out])]
        eqn = Eqn(prim, in_vars, out_vars, params)
        known_eqn, unknown_eqn, _, _ = rule(eqn, unknowns)
        env = {id(v): a for v, a, u in zip(in_vars, args, unknowns) if not u}

        def read(x):
            return x.val if isinstance(x, Literal) else env[id(x)]

        if known_eqn is not None:
            with set_trace(self.parent):
                vals = known_eqn.prim.bind(*[read(x) for x in known_eqn.inputs], **known_eqn.params)
            vals = vals if known_eqn.prim.multiple_results else [vals]
            for v, x in zip(known_eqn.outputs, vals):
                env[id(v)] = x
        if unknown_eqn is not None:
            ins = [
                x if isinstance(x, Literal) or id(x) not in env else env[id(x)]
                for x in unknown_eqn.inputs
            ]
            ins = [StagingTracer(self, x) if isinstance(x, Var) else x for x in ins]
            if unknown_eqn.prim in call_primitives:
                # Inline staged calls: the linear jaxpr stays flat, so transposition needs no
                # rule for the call primitive.
                with set_trace(self):
                    res = eval_jaxpr(unknown_eqn.params["jaxpr"], [], *ins)
            else:
                res = StagingTrace.process_primitive(
                    self, unknown_eqn.prim, ins, unknown_eqn.params
                )
                res = res if unknown_eqn.prim.multiple_results else [res]
            for v, x in zip(unknown_eqn.outputs, res):
                env[id(v)] = x
        outs = [env[id(v)] for v in out_vars]
        return outs if prim.multiple_results else outs[0]


def _version(x: torch.Tensor) -> int | None:
    try:
        return x._version
    except RuntimeError:  # an inference tensor keeps no version counter (and cannot be modified)
        return None


def record_versions(values: list) -> list[tuple]:
    """(index, tensor, version) for each concrete tensor among `values`, for `check_versions`."""
    out = []
    for i, x in enumerate(values):
        if isinstance(x, torch.Tensor):
            v = _version(x)
            if v is not None:
                out.append((i, x, v))
    return out


def check_versions(linear: Jaxpr, consts: list, versions: list, when: str) -> None:
    """Raises ModifiedInPlaceError when a concrete tensor the linear jaxpr reads (a const recorded
    with its version by `PartialEvalTrace`; the jaxpr binds the consts first) was modified in
    place since it was read, as torch's version counter check does for saved tensors: the
    derivative would read the new value. `when` says where the write happened. A const replaced by a copy of its earlier value (a write that
    thunderx intercepted: lang/captured.py `_keep_earlier_reads`) is not the tensor any more."""
    for i, x, v in versions:
        if consts[i] is x and x._version != v:
            var = (linear.constvars + linear.invars)[i]  # the consts bind first
            readers = [e.prim.name for e in linear.eqns if any(a is var for a in e.inputs)]
            read_by = f" (read by `{readers[0]}`)" if readers else ""
            raise ModifiedInPlaceError(
                f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype} that the derivative "
                f"needs{read_by} was modified by an in-place operation {when} (its version went "
                f"from {v} to {x._version}); the derivative would read its new value. torch "
                "refuses this too (torch.func: an in-place operation that would mutate a captured "
                "Tensor; torch.autograd: one of the variables needed for gradient computation "
                "has been modified by an inplace operation). Modify a clone "
                f"(buf = buf.clone()), or modify it after the derivative is computed "
                f"(at {user_frame()})"
            )


def split_call_eqn(eqn: Eqn, unknowns: list[bool], jaxpr_param: str = "jaxpr"):
    """The partial-evaluation rule of a call primitive (its params hold a closed-over jaxpr in
    `jaxpr_param`; operands are the jaxpr's invars): the known half is the same primitive over the
    known part of the jaxpr, the unknown half over the rest."""
    sub = eqn.params[jaxpr_param]
    # cached on the sub-jaxpr, so the known half (a new jaxpr) is compiled once, not per call
    key = ("partial_eval", tuple(unknowns))
    split = sub._cache.get(key)
    if split is None:
        split = sub._cache[key] = partial_eval_jaxpr(sub, unknowns)
    known, unknown, out_unknowns, n_res = split
    res_vars = [Var(v.aval) for v in known.outvars[len(known.outvars) - n_res :]]
    known_outs = [v for v, u in zip(eqn.outputs, out_unknowns) if not u]
    known_ins = [x for x, u in zip(eqn.inputs, unknowns) if not u]
    unknown_ins = [x for x, u in zip(eqn.inputs, unknowns) if u]
    known_eqn = Eqn(eqn.prim, known_ins, known_outs + res_vars, {**eqn.params, jaxpr_param: known})
    unknown_eqn = Eqn(
        eqn.prim,
        res_vars + unknown_ins,
        [v for v, u in zip(eqn.outputs, out_unknowns) if u],
        {**eqn.params, jaxpr_param: unknown},
    )
    return known_eqn, unknown_eqn, out_unknowns, res_vars
