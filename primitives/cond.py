"""cond: `cond[branches=(b0, b1, ...)] index *operands` runs branch `clamp(index)` on the operands.

Each branch is a closure-converted jaxpr over the same operands (consts of all branches are
hoisted to leading operands; a branch ignores the others'), with identical output types.
Rules: jvp (tangents through every branch, the union of nonzero outputs instantiated), partial
evaluation (the known branches emit residuals into slots shared by all branches, zeros for the
slots of the others), transpose (the taken branch transposed), vmap (an unbatched index stays a
cond; a batched one runs every branch and selects), torch codegen (a real `if`/`elif`).
"""

from __future__ import annotations

from thunderx.ad_util import UndefinedPrimal, Zero
from thunderx.core import ALL_OPERANDS, declare, get_aval
from thunderx.ir import Eqn, Jaxpr, Var
from thunderx.primitives._subjaxpr import (
    float_aval,
    partial_eval_forced,
    run_jaxpr,
    transpose_jaxpr,
    type_error,
    with_invars,
)


def _clamp_index(i: int, n: int) -> int:
    return min(max(i, 0), n - 1)


def _cond_impl(index, *ops, branches):
    return run_jaxpr(branches[_clamp_index(int(index), len(branches))], ops)


def _cond_abstract_eval(index, *ops, branches):
    if index.shape != () or index.dtype.is_floating_point or index.dtype.is_complex:
        raise type_error(f"cond: the index must be an integer scalar, got {index.str_short()}")
    outs = branches[0].out_avals
    for k, b in enumerate(branches):
        for i, (a, v) in enumerate(zip(ops, b.invars)):
            if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
                raise type_error(
                    f"cond: operand {i} is {a.str_short()}, branch {k} expects {v.aval.str_short()}"
                )
        if [(a.shape, a.dtype) for a in b.out_avals] != [(a.shape, a.dtype) for a in outs]:
            raise type_error(
                f"cond: branch {k} returns {[a.str_short() for a in b.out_avals]}, branch 0 "
                f"returns {[a.str_short() for a in outs]}"
            )
    return [a.strip_weak() for a in outs]


def merge_branch_consts(pairs, rest_invars_from: int = 0):
    """[(jaxpr_k with invars [consts_k..., rest...], consts_k)] -> jaxprs over
    [consts_0..., consts_1..., ..., rest...] (each ignoring the others' consts), all consts."""
    all_consts = [c for _, cs in pairs for c in cs]
    const_avals = [[get_aval(c) for c in cs] for _, cs in pairs]
    out = []
    for k, (j, cs) in enumerate(pairs):
        invars = []
        for m, avals in enumerate(const_avals):
            invars += list(j.invars[: len(cs)]) if m == k else [Var(a) for a in avals]
        out.append(with_invars(j, invars + list(j.invars[len(cs) :])))
    return tuple(out), all_consts


def _cond_jvp(primals, tangents, *, branches):
    from thunderx.transforms.jaxpr_cache import jvp_of_jaxpr

    index, ops = primals[0], primals[1:]
    nz = tuple(type(t) is not Zero and float_aval(get_aval(p)) for p, t in zip(ops, tangents[1:]))
    out_nz = [False] * len(branches[0].outvars)
    for b in branches:
        _, _, onz = jvp_of_jaxpr(b, nz)
        out_nz = [a or o for a, o in zip(out_nz, onz)]
    inst = tuple(out_nz)
    pairs = [jvp_of_jaxpr(b, nz, inst)[:2] for b in branches]
    new_branches, consts = merge_branch_consts(pairs)
    ts = [t for t, n in zip(tangents[1:], nz) if n]
    outs = cond_p.bind(index, *consts, *ops, *ts, branches=new_branches)
    n = len(branches[0].outvars)
    it = iter(outs[n:])
    t_out = [next(it) if z else Zero(a) for z, a in zip(out_nz, branches[0].out_avals)]
    return outs[:n], t_out


def _cond_partial_eval(eqn, unknowns):
    from thunderx.primitives import creation
    from thunderx.primitives.remat import remat_inner_while_loops
    from thunderx.transforms.partial_eval import partial_eval_jaxpr

    branches = tuple(remat_inner_while_loops(b) for b in eqn.params["branches"])
    n_out = len(eqn.outputs)
    if unknowns[0]:
        return None, eqn, [True] * n_out, []
    ops_unk = list(unknowns[1:])
    out_unk = [False] * n_out
    for b in branches:
        out_unk = [a or o for a, o in zip(out_unk, partial_eval_jaxpr(b, ops_unk)[2])]
    splits = [partial_eval_forced(b, ops_unk, out_unk) for b in branches]
    res_avals = [[v.aval for v in k.outvars[len(k.outvars) - n :]] for k, _, _, n in splits]
    # Known branches: known outputs, then one residual slot per residual of every branch.
    known_branches = []
    for k, (known, _, _, n_res) in enumerate(splits):
        eqns, slots = list(known.eqns), []
        n_known = len(known.outvars) - n_res
        for m, avals in enumerate(res_avals):
            if m == k:
                slots += list(known.outvars[n_known:])
                continue
            for a in avals:
                z = Var(a)
                params = {"shape": a.shape, "fill_value": 0, "dtype": a.dtype, "device": a.device}
                eqns.append(Eqn(creation.full_p, [], [z], params))
                slots.append(z)
        known_branches.append(
            Jaxpr([], known.invars, eqns, list(known.outvars[:n_known]) + slots, check=False)
        )
    res_vars = [Var(a) for avals in res_avals for a in avals]
    unknown_branches = []
    for k, (_, unknown, _, n_res) in enumerate(splits):
        invars = []
        for m, avals in enumerate(res_avals):
            invars += list(unknown.invars[:n_res]) if m == k else [Var(a) for a in avals]
        unknown_branches.append(with_invars(unknown, invars + list(unknown.invars[n_res:])))
    index = eqn.inputs[0]
    known_ins = [x for x, u in zip(eqn.inputs[1:], ops_unk) if not u]
    unknown_ins = [x for x, u in zip(eqn.inputs[1:], ops_unk) if u]
    known_outs = [v for v, u in zip(eqn.outputs, out_unk) if not u]
    known_eqn = None
    if known_outs or res_vars:
        known_eqn = Eqn(
            cond_p, [index] + known_ins, known_outs + res_vars, {"branches": tuple(known_branches)}
        )
    unknown_eqn = None
    if any(out_unk):
        unknown_eqn = Eqn(
            cond_p,
            [index] + res_vars + unknown_ins,
            [v for v, u in zip(eqn.outputs, out_unk) if u],
            {"branches": tuple(unknown_branches)},
        )
    return known_eqn, unknown_eqn, out_unk, res_vars


def _cond_transpose(cts, index, *args, branches):
    if type(index) is UndefinedPrimal:
        raise type_error("cond: cannot transpose with respect to the branch index")
    linear = tuple(type(a) is UndefinedPrimal for a in args)
    ct_nz = tuple(type(c) is not Zero for c in cts)
    if not any(ct_nz):
        return [None] * (1 + len(args))
    pairs = [transpose_jaxpr(b, linear, ct_nz) for b in branches]
    new_branches, consts = merge_branch_consts(pairs)
    known = [a for a, lin in zip(args, linear) if not lin]
    outs = iter(
        cond_p.bind(
            index, *consts, *known, *[c for c in cts if type(c) is not Zero], branches=new_branches
        )
    )
    return [None] + [next(outs) if lin else None for lin in linear]


def _cond_batch(args, dims, *, branches):
    from thunderx.primitives import binary as B
    from thunderx.primitives import shape as S
    from thunderx.primitives import unary as U
    from thunderx.transforms.jaxpr_cache import batch_of_jaxpr

    size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
    index, ops, op_dims = args[0], args[1:], tuple(dims[1:])
    if dims[0] is None:
        out_b = [False] * len(branches[0].outvars)
        for b in branches:
            out_b = [a or d is not None for a, d in zip(out_b, batch_of_jaxpr(b, op_dims, size)[2])]
        force = tuple(0 if x else None for x in out_b)
        pairs = [batch_of_jaxpr(b, op_dims, size, force)[:2] for b in branches]
        new_branches, consts = merge_branch_consts(pairs)
        return cond_p.bind(index, *consts, *ops, branches=new_branches), list(force)
    # A batched index: every branch runs on the whole batch, and each element takes its own.
    from thunderx.ir import eval_jaxpr

    results = []
    for b in branches:
        j, consts, _ = batch_of_jaxpr(b, op_dims, size, 0)
        results.append(eval_jaxpr(j, [], *consts, *ops))
    idx = S.moveaxis(index, dims[0], 0)
    idx = B.minimum(B.maximum(idx, 0), len(branches) - 1)
    outs = []
    for i in range(len(branches[0].outvars)):
        out = results[0][i]
        shape = get_aval(out).shape
        for k in range(1, len(branches)):
            pred = S.broadcast_in_dim(B.eq(idx, k), shape, (0,))
            out = U.select(pred, results[k][i], out)
        outs.append(out)
    return outs, [0] * len(outs)


def _cond_codegen(args, avals, *, ctx, branches):
    names = [ctx.function(b, "branch") for b in branches]
    index, ops = args[0], ", ".join(args[1:])
    lhs = ", ".join(ctx.outs) + ("," if len(ctx.outs) == 1 else "")
    call = [f"    {lhs} = {n}({ops})" if ctx.outs else f"    {n}({ops})" for n in names]
    if len(names) == 1:  # the index is clamped: the one branch runs whatever it is
        return [call[0].removeprefix("    ")]
    if len(names) == 2:  # the index is clamped: anything above 0 takes branch 1
        return [f"if {index} > 0:", call[1], "else:", call[0]]
    i = f"_i{len(ctx.prelude)}"
    lines = [f"{i} = int({index})"]
    for k in range(len(names) - 1):
        lines += [("if " if k == 0 else "elif ") + f"{i} <= {k}:", call[k]]
    return lines + ["else:", call[-1]]


cond_p = declare(
    "cond",
    multiple_results=True,
    impl=_cond_impl,
    abstract_eval=_cond_abstract_eval,
    jvp=_cond_jvp,
    partial_eval=_cond_partial_eval,
    transpose=_cond_transpose,
    batch=_cond_batch,
    torch_codegen=_cond_codegen,
    torch_codegen_statement=True,
    aliases=ALL_OPERANDS,  # a branch may return an operand itself
)
