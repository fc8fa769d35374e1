"""checkpoint (remat): `checkpoint[jaxpr policy] *args` computes the jaxpr; under reverse mode its
partial evaluation saves only the residuals `policy` allows and the linear half recomputes the
rest from the saved ones and the inputs, so the forward pass holds less memory.

`policy(prim, *avals, **params) -> bool` says whether an equation's output may be saved (JAX's
`checkpoint_policies`); None saves nothing but the inputs. The primitive is opaque to inlining and
CSE, so the recomputation is not merged back into the forward computation under jit; inside a
scan body it shrinks the residuals stacked per iteration.
"""

from __future__ import annotations

from thunderx.ad_util import UndefinedPrimal, Zero
from thunderx.core import ALL_OPERANDS, declare, get_aval
from thunderx.ir import Eqn, Jaxpr, Var
from thunderx.primitives._subjaxpr import float_aval, run_jaxpr, transpose_jaxpr, type_error


def _impl(*args, jaxpr, policy):
    return run_jaxpr(jaxpr, args)


def _abstract_eval(*avals, jaxpr, policy):
    for i, (a, v) in enumerate(zip(avals, jaxpr.invars)):
        if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
            raise type_error(f"checkpoint: operand {i} is {a.str_short()}, expected {v.aval}")
    return jaxpr.out_avals


def _jvp(primals, tangents, *, jaxpr, policy):
    from thunderx.transforms.jaxpr_cache import jvp_of_jaxpr

    nz = tuple(type(t) is not Zero and float_aval(get_aval(p)) for p, t in zip(primals, tangents))
    j, consts, out_nz = jvp_of_jaxpr(jaxpr, nz)
    ts = [t for t, z in zip(tangents, nz) if z]
    outs = checkpoint_p.bind(*consts, *primals, *ts, jaxpr=j, policy=policy)
    n = len(jaxpr.outvars)
    it = iter(outs[n:])
    return outs[:n], [next(it) if z else Zero(a) for z, a in zip(out_nz, jaxpr.out_avals)]


def _batch(args, dims, *, jaxpr, policy):
    from thunderx.transforms.jaxpr_cache import batch_of_jaxpr

    size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
    j, consts, out_dims = batch_of_jaxpr(jaxpr, tuple(dims), size)
    return checkpoint_p.bind(*consts, *args, jaxpr=j, policy=policy), list(out_dims)


def _partial_eval(eqn, unknowns):
    from thunderx.transforms.partial_eval import partial_eval_jaxpr, without_residuals

    jaxpr, policy = eqn.params["jaxpr"], eqn.params["policy"]
    known, unknown, out_unk, n_res = partial_eval_jaxpr(jaxpr, list(unknowns))
    n_known_out = len(known.outvars) - n_res
    if not any(out_unk):
        if not any(unknowns):
            return eqn, None, out_unk, []
        # no output depends on the unknown operands: the known part alone, without them
        body = without_residuals(known, n_res)
        k_ins = [x for x, u in zip(eqn.inputs, unknowns) if not u]
        return (
            Eqn(checkpoint_p, k_ins, list(eqn.outputs), dict(eqn.params, jaxpr=body)),
            None,
            out_unk,
            [],
        )
    residuals = list(known.outvars[n_known_out:])
    invar_pos = {id(v): i for i, v in enumerate(jaxpr.invars)}

    def saveable(e) -> bool:
        return policy is not None and bool(policy(e.prim, *[x.aval for x in e.inputs], **e.params))

    # Walk back from the residuals: a value the policy saves is kept from the forward pass,
    # anything else is recomputed from kept values and the known inputs.
    keep: list = []
    need = {id(r) for r in residuals if id(r) not in invar_pos}
    recompute = []
    for e in reversed(known.eqns):
        needed = [v for v in e.outputs if id(v) in need]
        if not needed:
            continue
        if saveable(e):
            keep.extend(needed)
            continue
        recompute.append(e)
        need.update(id(x) for x in e.inputs if isinstance(x, Var) and id(x) not in invar_pos)
    recompute.reverse()
    used_invars = {id(x) for e in recompute for x in e.inputs} | {id(r) for r in residuals}
    k_invars = [v for v, u in zip(jaxpr.invars, unknowns) if not u and id(v) in used_invars]
    # the unknown jaxpr's residual invars are the known jaxpr's own vars: recompute defines them
    body = Jaxpr(
        [],
        keep + k_invars + list(unknown.invars[n_res:]),
        recompute + list(unknown.eqns),
        unknown.outvars,
        check=False,
    )
    keep_vars = [Var(r.aval) for r in keep]
    known_body = Jaxpr(
        [], known.invars, known.eqns, list(known.outvars[:n_known_out]) + keep, check=False
    )
    k_ins = [x for x, u in zip(eqn.inputs, unknowns) if not u]
    known_eqn = Eqn(
        checkpoint_p,
        k_ins,
        [v for v, u in zip(eqn.outputs, out_unk) if not u] + keep_vars,
        {"jaxpr": known_body, "policy": policy},
    )
    unknown_eqn = Eqn(
        checkpoint_p,
        keep_vars
        + [eqn.inputs[invar_pos[id(v)]] for v in k_invars]
        + [x for x, u in zip(eqn.inputs, unknowns) if u],
        [v for v, u in zip(eqn.outputs, out_unk) if u],
        {"jaxpr": body, "policy": policy},
    )
    return known_eqn, unknown_eqn, out_unk, keep_vars


def _transpose(cts, *args, jaxpr, policy):
    linear = tuple(type(a) is UndefinedPrimal for a in args)
    ct_nz = tuple(type(c) is not Zero for c in cts)
    if not any(ct_nz):
        return [None] * len(args)
    tj, consts = transpose_jaxpr(jaxpr, linear, ct_nz)
    known = [a for a, lin in zip(args, linear) if not lin]
    # a checkpoint again, so jit's CSE does not merge the recomputation with the forward pass
    outs = iter(
        checkpoint_p.bind(
            *consts, *known, *[c for c in cts if type(c) is not Zero], jaxpr=tj, policy=policy
        )
    )
    return [next(outs) if lin else None for lin in linear]


checkpoint_p = declare(
    "checkpoint",
    multiple_results=True,
    impl=_impl,
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    batch=_batch,
    partial_eval=_partial_eval,
    transpose=_transpose,
    aliases=ALL_OPERANDS,  # the wrapped function may return an operand itself
)


def _holds_while(eqn) -> bool:
    from thunderx.primitives.while_loop import while_p

    if eqn.prim is while_p:
        return True
    for v in eqn.params.values():
        subs = v if isinstance(v, tuple) else (v,)
        for j in subs:
            if isinstance(j, Jaxpr) and any(_holds_while(e) for e in j.eqns):
                return True
    return False


def remat_inner_while_loops(jaxpr: Jaxpr) -> Jaxpr:
    """The body of a loop or branch with each equation that runs a `while_loop` wrapped in a
    checkpoint: reverse mode then keeps only that equation's inputs per outer iteration and
    reruns the inner loop in the backward pass, since its residual stacks (one run-time length
    per outer iteration) cannot be stacked again."""
    hit = jaxpr._cache.get("remat_inner_while")
    if hit is not None:
        return hit
    if not any(_holds_while(e) for e in jaxpr.eqns):
        jaxpr._cache["remat_inner_while"] = jaxpr
        return jaxpr
    eqns = []
    for e in jaxpr.eqns:
        if e.prim is checkpoint_p or not _holds_while(e):
            eqns.append(e)
            continue
        var_ins = [x for x in e.inputs if isinstance(x, Var)]
        local = {id(x): Var(x.aval) for x in var_ins}
        inner_ins = [local.get(id(x), x) if isinstance(x, Var) else x for x in e.inputs]
        inner_outs = [Var(v.aval) for v in e.outputs]
        inner = Jaxpr(
            [],
            _unique(var_ins, local),
            [Eqn(e.prim, inner_ins, inner_outs, e.params)],
            inner_outs,
            check=False,
        )
        eqns.append(
            Eqn(checkpoint_p, _unique_atoms(var_ins), e.outputs, {"jaxpr": inner, "policy": None})
        )
    out = Jaxpr([], jaxpr.invars, eqns, jaxpr.outvars, check=False)
    jaxpr._cache["remat_inner_while"] = out
    return out


def _unique_atoms(xs):
    seen, out = set(), []
    for x in xs:
        if id(x) not in seen:
            seen.add(id(x))
            out.append(x)
    return out


def _unique(xs, local):
    return [local[id(x)] for x in _unique_atoms(xs)]
