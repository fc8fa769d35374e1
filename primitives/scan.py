"""scan: `scan[jaxpr num_consts num_carry length reverse] *consts *init *xs -> *carry *ys`.

The body maps (consts, carry, x slices) -> (carry, y slices); ys are the slices stacked along a new
leading axis. `length=None` is a run-time length (the leading dimension of the xs): the linear
loop reverse mode makes of a `while_loop` runs over residuals stacked by the forward loop.

Rules: jvp (carry tangents nonzero by fixpoint), partial evaluation (the known loop stacks the
residuals of each iteration as extra ys; loop-invariant residuals stay consts), transpose (a
scan in the opposite direction over the transposed body, cotangents of consts accumulated in the
carry), vmap (carries batched by fixpoint), torch codegen (a real `for` loop).
"""

from __future__ import annotations

import torch

from thunderx.ad_util import UndefinedPrimal, Zero, instantiate
from thunderx.avals import ShapedArray
from thunderx.core import ALL_OPERANDS, declare, get_aval
from thunderx.ir import Eqn, Jaxpr, Var, eval_jaxpr
from thunderx.primitives._subjaxpr import (
    float_aval,
    partial_eval_forced,
    run_jaxpr,
    transpose_jaxpr,
    type_error,
    with_invars,
    with_outvars,
)


def stacked(aval: ShapedArray, length) -> ShapedArray:
    return ShapedArray((length,) + tuple(aval.shape), aval.dtype, aval.device)


def empty_stack(aval: ShapedArray, n: int):
    return torch.empty((n,) + tuple(aval.shape), dtype=aval.dtype, device=aval.device)


def stack_list(values: list, aval: ShapedArray):
    if not values:
        return empty_stack(aval, 0)
    return torch.stack([torch.as_tensor(v, dtype=aval.dtype) for v in values])


def keep(vs):
    return [v for v in vs if v is not None]


def _split(args, num_consts, num_carry):
    return (
        list(args[:num_consts]),
        list(args[num_consts : num_consts + num_carry]),
        list(args[num_consts + num_carry :]),
    )


def _scan_impl(*args, jaxpr, num_consts, num_carry, length, reverse):
    consts, carry, xs = _split(args, num_consts, num_carry)
    n = length if length is not None else xs[0].shape[0]
    n_ys = len(jaxpr.outvars) - num_carry
    ys: list[list] = [[] for _ in range(n_ys)]
    for i in reversed(range(n)) if reverse else range(n):
        outs = run_jaxpr(jaxpr, consts + carry + [x[i] for x in xs])
        carry = list(outs[:num_carry])
        for acc, y in zip(ys, outs[num_carry:]):
            acc.append(y)
    y_avals = [v.aval for v in jaxpr.outvars[num_carry:]]
    return carry + [stack_list(y[::-1] if reverse else y, a) for y, a in zip(ys, y_avals)]


def _scan_abstract_eval(*avals, jaxpr, num_consts, num_carry, length, reverse):
    consts, carry, xs = _split(avals, num_consts, num_carry)
    if length is None and not xs:
        raise type_error("scan: a run-time length needs at least one xs operand")
    n = length if length is not None else xs[0].shape[0]
    ins = jaxpr.invars
    for i, (a, v) in enumerate(zip(consts + carry, ins)):
        if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
            raise type_error(f"scan: operand {i} is {a.str_short()}, body expects {v.aval}")
    for i, (a, v) in enumerate(zip(xs, ins[num_consts + num_carry :])):
        if a.shape[1:] != v.aval.shape or a.dtype != v.aval.dtype or a.shape[0] != n:
            raise type_error(
                f"scan: xs operand {i} is {a.str_short()}, expected a stack of {n} "
                f"{v.aval.str_short()}"
            )
    for i, (a, v) in enumerate(zip(carry, jaxpr.outvars)):
        if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
            raise type_error(
                f"scan: the body returns carry {i} as {v.aval.str_short()}, but it enters as "
                f"{a.str_short()}"
            )
    return [a.strip_weak() for a in carry] + [stacked(v.aval, n) for v in jaxpr.outvars[num_carry:]]


def _scan_jvp(primals, tangents, *, jaxpr, num_consts, num_carry, length, reverse):
    from thunderx.transforms.jaxpr_cache import jvp_of_jaxpr

    nz = [type(t) is not Zero and float_aval(get_aval(p)) for p, t in zip(primals, tangents)]
    n_ys = len(jaxpr.outvars) - num_carry
    carry_nz = nz[num_consts : num_consts + num_carry]
    while True:  # a carry tangent is nonzero if it enters so or the body makes it so
        _, _, out_nz = jvp_of_jaxpr(jaxpr, tuple(nz))
        new = [c or o for c, o in zip(carry_nz, out_nz[:num_carry])]
        if new == carry_nz:
            break
        carry_nz = new
        nz[num_consts : num_consts + num_carry] = carry_nz
    j, jc, out_nz = jvp_of_jaxpr(jaxpr, tuple(nz), tuple(carry_nz) + (False,) * n_ys)
    nj = len(jc)
    n_in = len(primals)
    p_in = j.invars[nj : nj + n_in]
    t_in = iter(j.invars[nj + n_in :])
    t_vars = [next(t_in) if z else None for z in nz]
    cs, cr, xs = _split(p_in, num_consts, num_carry)
    tcs, tcr, txs = _split(t_vars, num_consts, num_carry)
    invars = list(j.invars[:nj]) + cs + keep(tcs) + cr + keep(tcr) + xs + keep(txs)
    n_out = len(jaxpr.outvars)
    t_out = iter(j.outvars[n_out:])
    t_outs = [next(t_out) if z else None for z in out_nz]
    outvars = (
        j.outvars[:num_carry]
        + keep(t_outs[:num_carry])
        + j.outvars[num_carry:n_out]
        + keep(t_outs[num_carry:])
    )
    body = Jaxpr([], invars, j.eqns, outvars, check=False)
    pc, pcr, pxs = _split(primals, num_consts, num_carry)
    tc, tcr_v, txs_v = _split(tangents, num_consts, num_carry)
    t_consts = [t for t, z in zip(tc, nz[:num_consts]) if z]
    t_carry = [instantiate(t) for t, z in zip(tcr_v, carry_nz) if z]
    t_xs = [t for t, z in zip(txs_v, nz[num_consts + num_carry :]) if z]
    outs = scan_p.bind(
        *jc,
        *pc,
        *t_consts,
        *pcr,
        *t_carry,
        *pxs,
        *t_xs,
        jaxpr=body,
        num_consts=nj + num_consts + len(t_consts),
        num_carry=num_carry + len(t_carry),
        length=length,
        reverse=reverse,
    )
    n_tc = len(t_carry)
    carry_out, t_carry_out = outs[:num_carry], iter(outs[num_carry : num_carry + n_tc])
    ys, t_ys_out = (
        outs[num_carry + n_tc : num_carry + n_tc + n_ys],
        iter(outs[num_carry + n_tc + n_ys :]),
    )
    out_avals = [get_aval(o) for o in outs[:num_carry]] + [get_aval(y) for y in ys]
    t_all = [next(t_carry_out) if z else None for z in carry_nz] + [
        next(t_ys_out) if z else None for z in out_nz[num_carry:]
    ]
    return list(carry_out) + list(ys), [
        t if t is not None else Zero(a.strip_weak()) for t, a in zip(t_all, out_avals)
    ]


def _scan_partial_eval(eqn, unknowns):
    from thunderx.primitives.remat import remat_inner_while_loops
    from thunderx.transforms.partial_eval import partial_eval_jaxpr, without_residuals

    p = eqn.params
    jaxpr, num_consts, num_carry = p["jaxpr"], p["num_consts"], p["num_carry"]
    jaxpr = remat_inner_while_loops(jaxpr)
    n_ys = len(jaxpr.outvars) - num_carry
    unknowns = list(unknowns)
    carry_u = unknowns[num_consts : num_consts + num_carry]
    while True:
        out_u = partial_eval_jaxpr(jaxpr, unknowns)[2]
        new = [c or o for c, o in zip(carry_u, out_u[:num_carry])]
        if new == carry_u:
            break
        carry_u = new
        unknowns[num_consts : num_consts + num_carry] = carry_u
    xs_u = unknowns[num_consts + num_carry :]
    if p["length"] is None and all(xs_u):
        # a run-time length comes from a known xs: with none, the known loop could not run
        return None, eqn, [True] * len(eqn.outputs), []
    known, unknown, out_unk, n_res = partial_eval_forced(jaxpr, unknowns, carry_u + [False] * n_ys)
    n_known_out = len(known.outvars) - n_res
    if not any(out_unk):
        if not any(unknowns):
            return eqn, None, out_unk, []
        # no output depends on the unknown operands (a stack or a constant the body ignores):
        # the loop without them
        n_kc, n_kcr = _counts(unknowns, num_consts, num_carry, False)
        body = without_residuals(known, n_res)
        k_ins = [x for x, u in zip(eqn.inputs, unknowns) if not u]
        params = dict(p, jaxpr=body, num_consts=n_kc, num_carry=n_kcr)
        return Eqn(scan_p, k_ins, list(eqn.outputs), params), None, out_unk, []
    residuals = known.outvars[n_known_out:]
    const_pos = {id(v): i for i, v in enumerate(jaxpr.invars[:num_consts])}
    invariant = [id(r) in const_pos for r in residuals]
    length = p["length"]
    if length is None:
        length = eqn.inputs[num_consts + num_carry].aval.shape[0]
    stacked_vars = [Var(stacked(r.aval, length)) for r, inv in zip(residuals, invariant) if not inv]
    ins = eqn.inputs
    k_atoms = [x for x, u in zip(ins, unknowns) if not u]
    n_kc, n_kcr = _counts(unknowns, num_consts, num_carry, False)
    k_cs, k_cr, k_xs = _split(k_atoms, n_kc, n_kcr)
    known_body = with_outvars(
        known,
        list(known.outvars[:n_known_out]) + [r for r, inv in zip(residuals, invariant) if not inv],
    )
    known_eqn = Eqn(
        scan_p,
        k_cs + k_cr + k_xs,
        [v for v, u in zip(eqn.outputs, out_unk) if not u] + stacked_vars,
        dict(p, jaxpr=known_body, num_consts=len(k_cs), num_carry=len(k_cr)),
    )
    res_in = unknown.invars[:n_res]
    u_in = unknown.invars[n_res:]
    n_uc = sum(unknowns[:num_consts])
    n_ucr = sum(carry_u)
    u_cs, u_cr, u_xs = u_in[:n_uc], u_in[n_uc : n_uc + n_ucr], u_in[n_uc + n_ucr :]
    inv_in = [r for r, inv in zip(res_in, invariant) if inv]
    st_in = [r for r, inv in zip(res_in, invariant) if not inv]
    inv_atoms = [ins[const_pos[id(r)]] for r, inv in zip(residuals, invariant) if inv]
    u_atoms = [x for x, u in zip(ins, unknowns) if u]
    a_cs, a_xs = u_atoms[:n_uc], u_atoms[n_uc + n_ucr :]
    if p["length"] is None and not stacked_vars and not a_xs:
        # the unknown loop still needs a stack to read its run-time length from
        k_x = next(x for x, u in zip(ins[num_consts + num_carry :], xs_u) if not u)
        a_xs = [k_x]
        u_xs = list(u_xs) + [Var(k_x.aval.update(shape=k_x.aval.shape[1:]))]
    body = with_invars(unknown, inv_in + u_cs + u_cr + st_in + u_xs)
    # a carry unknown only from a later iteration enters with its known value
    a_cr = [x for x, u in zip(ins[num_consts : num_consts + num_carry], carry_u) if u]
    unknown_eqn = Eqn(
        scan_p,
        inv_atoms + a_cs + a_cr + stacked_vars + a_xs,
        [v for v, u in zip(eqn.outputs, out_unk) if u],
        dict(p, jaxpr=body, num_consts=len(inv_atoms) + n_uc, num_carry=n_ucr),
    )
    if not known_eqn.outputs:
        known_eqn = None  # nothing known is needed: the loop need not run twice
    return known_eqn, unknown_eqn, out_unk, stacked_vars


def _counts(flags, num_consts, num_carry, value):
    return (
        sum(1 for f in flags[:num_consts] if f == value),
        sum(1 for f in flags[num_consts : num_consts + num_carry] if f == value),
    )


def _scan_transpose(cts, *args, jaxpr, num_consts, num_carry, length, reverse):
    from thunderx.ir import closure_convert
    from thunderx.primitives import binary as B
    from thunderx.tracing import trace_flat

    consts, carry, xs = _split(args, num_consts, num_carry)
    c_lin = [type(c) is UndefinedPrimal for c in consts]
    x_lin = [type(x) is UndefinedPrimal for x in xs]
    linear = tuple(c_lin + [True] * num_carry + x_lin)
    ct_carry = [instantiate(c) for c in cts[:num_carry]]
    ct_ys = cts[num_carry:]
    ys_nz = [type(c) is not Zero for c in ct_ys]
    tj, tconsts = transpose_jaxpr(jaxpr, linear, tuple([True] * num_carry + ys_nz))
    k_consts = [c for c, lin in zip(consts, c_lin) if not lin]
    k_xs = [x for x, lin in zip(xs, x_lin) if not lin]
    body_avals = [v.aval for v in jaxpr.invars]
    c_avals, carry_avals, x_avals = _split(body_avals, num_consts, num_carry)
    lin_c_avals = [a for a, lin in zip(c_avals, c_lin) if lin]
    n_tc, n_kc, n_kx = len(tconsts), len(k_consts), len(k_xs)

    def body(*a):
        tcs, kcs = a[:n_tc], a[n_tc : n_tc + n_kc]
        rest = a[n_tc + n_kc :]
        ctc, acc = rest[:num_carry], rest[num_carry : num_carry + len(lin_c_avals)]
        rest = rest[num_carry + len(lin_c_avals) :]
        kx, cty = rest[:n_kx], rest[n_kx:]
        outs = eval_jaxpr(tj, [], *tcs, *kcs, *kx, *ctc, *cty)
        n_lc = len(lin_c_avals)
        new_acc = [B.add(x, y) for x, y in zip(acc, outs[:n_lc])]
        return list(outs[n_lc : n_lc + num_carry]) + new_acc + list(outs[n_lc + num_carry :]), None

    y_avals = [v.aval for v in jaxpr.outvars[num_carry:]]
    in_avals = (
        [get_aval(c) for c in tconsts]
        + [get_aval(c) for c in k_consts]
        + carry_avals
        + lin_c_avals
        + [a for a, lin in zip(x_avals, x_lin) if not lin]
        + [a for a, z in zip(y_avals, ys_nz) if z]
    )
    closed, _ = trace_flat(body, in_avals)
    tbody = closure_convert(closed.jaxpr)
    zeros = [instantiate(Zero(a)) for a in lin_c_avals]
    outs = scan_p.bind(
        *closed.consts,
        *tconsts,
        *k_consts,
        *ct_carry,
        *zeros,
        *k_xs,
        *[c for c, z in zip(ct_ys, ys_nz) if z],
        jaxpr=tbody,
        num_consts=len(closed.consts) + n_tc + n_kc,
        num_carry=num_carry + len(lin_c_avals),
        length=length,
        reverse=not reverse,
    )
    ct_init = outs[:num_carry]
    ct_consts = iter(outs[num_carry : num_carry + len(lin_c_avals)])
    ct_xs = iter(outs[num_carry + len(lin_c_avals) :])
    return (
        [next(ct_consts) if lin else None for lin in c_lin]
        + [c if type(a) is UndefinedPrimal else None for c, a in zip(ct_init, carry)]
        + [next(ct_xs) if lin else None for lin in x_lin]
    )


def _scan_batch(args, dims, *, jaxpr, num_consts, num_carry, length, reverse):
    from thunderx.primitives import shape as S
    from thunderx.transforms.jaxpr_cache import batch_of_jaxpr

    size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
    consts, carry, xs = _split(list(args), num_consts, num_carry)
    c_d, cr_d, x_d = _split(list(dims), num_consts, num_carry)
    consts = [c if d is None else S.moveaxis(c, d, 0) for c, d in zip(consts, c_d)]
    # xs carry their batch dim right after the scanned axis, so a slice has it in front
    xs = [x if d is None else S.moveaxis(x, d, 1) for x, d in zip(xs, x_d)]
    carry_b = [d is not None for d in cr_d]
    const_dims = tuple(None if d is None else 0 for d in c_d)
    x_dims = tuple(None if d is None else 0 for d in x_d)
    while True:  # a carry is batched if it enters so or the body makes it so
        body_dims = const_dims + tuple(0 if b else None for b in carry_b) + x_dims
        out_d = batch_of_jaxpr(jaxpr, body_dims, size)[2]
        new = [b or d is not None for b, d in zip(carry_b, out_d[:num_carry])]
        if new == carry_b:
            break
        carry_b = new
    force = tuple(0 if b else None for b in carry_b) + tuple(
        None if d is None else 0 for d in out_d[num_carry:]
    )
    bj, bconsts, _ = batch_of_jaxpr(jaxpr, body_dims, size, force)
    carry = [
        c if not b else (S.broadcast_batch(c, size, 0) if d is None else S.moveaxis(c, d, 0))
        for c, b, d in zip(carry, carry_b, cr_d)
    ]
    outs = scan_p.bind(
        *bconsts,
        *consts,
        *carry,
        *xs,
        jaxpr=bj,
        num_consts=len(bconsts) + num_consts,
        num_carry=num_carry,
        length=length,
        reverse=reverse,
    )
    out_dims = [0 if b else None for b in carry_b] + [
        None if f is None else 1 for f in force[num_carry:]
    ]
    return outs, out_dims


def _scan_codegen(args, avals, *, ctx, jaxpr, num_consts, num_carry, length, reverse):
    body = ctx.function(jaxpr, "scan_body")
    consts, carry, xs = _split(args, num_consts, num_carry)
    outs = ctx.outs
    c_out, y_out = outs[:num_carry], outs[num_carry:]
    k = len(ctx.prelude)
    n = str(length) if length is not None else f"{xs[0]}.shape[0]"
    lines = []
    if c_out:
        lines.append(f"{', '.join(c_out)} = {', '.join(carry)}")
    y_avals = [v.aval for v in jaxpr.outvars[num_carry:]]
    for y, a in zip(y_out, y_avals):
        dev = ctx.param(a.device)
        lines.append(
            f"{y} = torch.empty(({n},) + {tuple(a.shape)!r}, dtype={a.dtype}, device={dev})"
        )
    ys_tmp = [f"_y{k}_{i}" for i in range(len(y_out))]
    rng = f"range({n} - 1, -1, -1)" if reverse else f"range({n})"
    lines.append(f"for _i{k} in {rng}:")
    lhs = ", ".join(c_out + ys_tmp) + ("," if len(c_out + ys_tmp) == 1 else "")
    call_args = ", ".join(consts + c_out + [f"{x}[_i{k}]" for x in xs])
    lines.append(
        f"    {lhs} = {body}({call_args})" if c_out or ys_tmp else f"    {body}({call_args})"
    )
    for y, t in zip(y_out, ys_tmp):
        lines.append(f"    {y}[_i{k}] = {t}")
    return lines


scan_p = declare(
    "scan",
    multiple_results=True,
    impl=_scan_impl,
    abstract_eval=_scan_abstract_eval,
    jvp=_scan_jvp,
    partial_eval=_scan_partial_eval,
    transpose=_scan_transpose,
    batch=_scan_batch,
    torch_codegen=_scan_codegen,
    torch_codegen_statement=True,
    aliases=ALL_OPERANDS,  # a loop that runs zero times returns its initial carry
)
