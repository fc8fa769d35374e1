"""while_loop: `while[cond_jaxpr body_jaxpr cond_nconsts body_nconsts num_stacked]
*cond_consts *body_consts *init -> *carry *stacks`.

The loop runs `body` while `cond(carry)` holds. With `num_stacked > 0` the body also returns that
many values per iteration, stacked along a new leading axis whose length (the trip count) is
known only at run time (`None` in the aval): this is the forward half reverse mode makes of a
while loop. Its last stacked value is a bool per iteration, "this element was active", which
the linear loop reads to leave finished elements alone (vmap with a batched predicate).

Rules: jvp (carry tangents by fixpoint), partial evaluation (the known loop records residuals
per iteration in buffers grown at run time; the unknown half is a `scan` of run-time length over
them, so its transpose runs the transposed body that many times in reverse), vmap (an unbatched
predicate stays a loop; a batched one runs while any element continues and freezes the finished
ones with a select), torch codegen (a real `while`).
"""

from __future__ import annotations

from thunderx.ad_util import Zero, instantiate
from thunderx.avals import ShapedArray
from thunderx.core import ALL_OPERANDS, declare, get_aval
from thunderx.ir import Eqn, Jaxpr, Var
from thunderx.primitives import creation
from thunderx.primitives._subjaxpr import (
    float_aval,
    pad_invars,
    partial_eval_forced,
    run_jaxpr,
    type_error,
    with_invars,
)
from thunderx.primitives.scan import scan_p, stack_list, stacked


def _split(args, cond_nconsts, body_nconsts):
    a, b = cond_nconsts, cond_nconsts + body_nconsts
    return list(args[:a]), list(args[a:b]), list(args[b:])


def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, num_stacked):
    cc, bc, carry = _split(args, cond_nconsts, body_nconsts)
    n = len(carry)
    stacks: list[list] = [[] for _ in range(num_stacked)]
    while bool(run_jaxpr(cond_jaxpr, cc + carry)[0]):
        outs = run_jaxpr(body_jaxpr, bc + carry)
        carry = list(outs[:n])
        for acc, y in zip(stacks, outs[n:]):
            acc.append(y)
    avals = [v.aval for v in body_jaxpr.outvars[n:]]
    return carry + [stack_list(s, a) for s, a in zip(stacks, avals)]


def _while_abstract_eval(*avals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, num_stacked):
    cc, bc, carry = _split(avals, cond_nconsts, body_nconsts)
    pred = cond_jaxpr.out_avals
    if len(pred) != 1 or pred[0].shape != () or pred[0].dtype is not torch_bool():
        raise type_error(
            f"while_loop: cond_fun must return a bool scalar, got "
            f"{', '.join(a.str_short() for a in pred)}"
        )
    for i, (a, v) in enumerate(zip(cc + carry, cond_jaxpr.invars)):
        if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
            raise type_error(f"while_loop: cond operand {i} is {a.str_short()}, expected {v.aval}")
    for i, (a, v) in enumerate(zip(bc + carry, body_jaxpr.invars)):
        if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
            raise type_error(f"while_loop: body operand {i} is {a.str_short()}, expected {v.aval}")
    outs = body_jaxpr.out_avals
    for i, (a, o) in enumerate(zip(carry, outs)):
        if a.shape != o.shape or a.dtype != o.dtype:
            raise type_error(
                f"while_loop: body_fun returns carry {i} as {o.str_short()}, but it enters as "
                f"{a.str_short()}"
            )
    return [a.strip_weak() for a in carry] + [stacked(o, None) for o in outs[len(carry) :]]


def torch_bool():
    import torch

    return torch.bool


def _while_jvp(
    primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, num_stacked
):
    from thunderx.transforms.jaxpr_cache import jvp_of_jaxpr

    cc, bc, carry = _split(primals, cond_nconsts, body_nconsts)
    _, tbc, tcarry = _split(tangents, cond_nconsts, body_nconsts)
    bc_nz = [type(t) is not Zero and float_aval(get_aval(p)) for p, t in zip(bc, tbc)]
    carry_nz = [type(t) is not Zero and float_aval(get_aval(p)) for p, t in zip(carry, tcarry)]
    while True:  # a carry tangent is nonzero if it enters so or the body makes it so
        out_nz = jvp_of_jaxpr(body_jaxpr, tuple(bc_nz + carry_nz))[2]
        new = [a or b for a, b in zip(carry_nz, out_nz)]
        if new == carry_nz:
            break
        carry_nz = new
    inst = tuple(carry_nz) + (False,) * num_stacked
    j, jc, out_nz = jvp_of_jaxpr(body_jaxpr, tuple(bc_nz + carry_nz), inst)
    nj, nb, nc = len(jc), len(bc), len(carry)
    ins = j.invars
    p_bc, p_carry = ins[nj : nj + nb], ins[nj + nb : nj + nb + nc]
    t_rest = ins[nj + nb + nc :]
    n_tbc = sum(bc_nz)
    # outputs: carry, carry tangents, stacks, their nonzero tangents, and the active flag last
    n_out = nc + num_stacked
    t_outs = iter(j.outvars[n_out:])
    t_vars = [next(t_outs) if z else None for z in out_nz]
    stacks = list(j.outvars[nc:n_out])
    st_t = [v for v in t_vars[nc:] if v is not None]
    outvars = list(j.outvars[:nc]) + [v for v in t_vars[:nc] if v is not None]
    outvars += stacks[:-1] + st_t + stacks[-1:]
    body = Jaxpr(
        [],
        list(ins[:nj]) + p_bc + t_rest[:n_tbc] + p_carry + t_rest[n_tbc:],
        j.eqns,
        outvars,
        check=False,
    )
    t_carry_avals = [get_aval(p).strip_weak() for p, z in zip(carry, carry_nz) if z]
    cond = pad_invars(cond_jaxpr, after=t_carry_avals)
    t_bc = [t for t, z in zip(tbc, bc_nz) if z]
    t_init = [instantiate(t) for t, z in zip(tcarry, carry_nz) if z]
    outs = while_p.bind(
        *cc,
        *jc,
        *bc,
        *t_bc,
        *carry,
        *t_init,
        cond_jaxpr=cond,
        body_jaxpr=body,
        cond_nconsts=cond_nconsts,
        body_nconsts=nj + nb + n_tbc,
        num_stacked=num_stacked + len(st_t),
    )
    n_ct = len(t_init)
    carry_out, t_carry_out = outs[:nc], iter(outs[nc : nc + n_ct])
    rest = outs[nc + n_ct :]
    st_out = rest[: num_stacked - 1] + rest[len(rest) - 1 :] if num_stacked else []
    st_t_out = iter(rest[max(num_stacked - 1, 0) : len(rest) - 1] if num_stacked else [])
    primal_out = list(carry_out) + list(st_out)
    t_all = [next(t_carry_out) if z else None for z in carry_nz]
    if num_stacked:
        t_all += [next(st_t_out) if z else None for z in out_nz[nc : n_out - 1]] + [None]
    return primal_out, [
        t if t is not None else Zero(get_aval(o).strip_weak()) for t, o in zip(t_all, primal_out)
    ]


def _uses(jaxpr: Jaxpr, var) -> bool:
    return any(x is var for e in jaxpr.eqns for x in e.inputs) or any(
        x is var for x in jaxpr.outvars
    )


def _while_partial_eval(eqn, unknowns):
    from thunderx.primitives import unary as U
    from thunderx.primitives.remat import remat_inner_while_loops
    from thunderx.transforms.partial_eval import partial_eval_jaxpr

    p = eqn.params
    cond_jaxpr, body_jaxpr = p["cond_jaxpr"], remat_inner_while_loops(p["body_jaxpr"])
    ncc, nbc, n_st = p["cond_nconsts"], p["body_nconsts"], p["num_stacked"]
    all_unknown = None, eqn, [True] * len(eqn.outputs), []
    cc_u, bc_u, carry_u = _split(list(unknowns), ncc, nbc)
    nc = len(carry_u)
    if any(cc_u):
        return all_unknown
    while True:
        out_u = partial_eval_jaxpr(body_jaxpr, bc_u + carry_u)[2]
        new = [a or b for a, b in zip(carry_u, out_u)]
        if new == carry_u:
            break
        carry_u = new
    c_carry_vars = cond_jaxpr.invars[ncc:]
    if any(u and _uses(cond_jaxpr, v) for u, v in zip(carry_u, c_carry_vars)):
        return all_unknown  # the trip count itself depends on unknown values
    known, unknown, out_unk, n_res = partial_eval_forced(
        body_jaxpr, bc_u + carry_u, carry_u + [False] * n_st
    )
    st_unk = out_unk[nc:]
    if n_st and st_unk[-1]:
        return all_unknown  # cannot happen: the active flag is a bool computed from known values
    n_known_out = len(known.outvars) - n_res
    residuals = known.outvars[n_known_out:]
    const_pos = {id(v): i for i, v in enumerate(body_jaxpr.invars[:nbc])}
    invariant = [id(r) in const_pos for r in residuals]
    st_res = [r for r, inv in zip(residuals, invariant) if not inv]
    known_outs = list(known.outvars[:n_known_out])
    eqns = list(known.eqns)
    dev = _device(eqn)
    if n_st:  # the body already stacks an active flag (last): keep it last
        active, known_outs = known_outs[-1], known_outs[:-1]
        active_out = eqn.outputs[-1]
    else:  # stack an "active" flag per iteration (a batched predicate turns it per element)
        active = Var(ShapedArray((), torch_bool(), dev))
        params = {"shape": (), "fill_value": True, "dtype": torch_bool(), "device": dev}
        eqns.append(Eqn(creation.full_p, [], [active], params))
        active_out = Var(ShapedArray((None,), torch_bool(), dev))
    # Known loop: the known carries and stacks, each iteration's residuals, the active flag.
    known_body = Jaxpr([], known.invars, eqns, known_outs + st_res + [active], check=False)
    known_cond = with_invars(
        cond_jaxpr,
        list(cond_jaxpr.invars[:ncc]) + [v for v, u in zip(c_carry_vars, carry_u) if not u],
    )
    cc_in, bc_in, carry_in = _split(eqn.inputs, ncc, nbc)
    out_flags = carry_u + st_unk
    stack_outs = [v for v, u in zip(eqn.outputs[nc : len(eqn.outputs) - 1], st_unk) if not u]
    res_vars = [Var(stacked(r.aval, None)) for r in st_res]
    known_eqn = Eqn(
        while_p,
        cc_in
        + [x for x, u in zip(bc_in, bc_u) if not u]
        + [x for x, u in zip(carry_in, carry_u) if not u],
        [v for v, u in zip(eqn.outputs[:nc], carry_u) if not u]
        + stack_outs
        + res_vars
        + [active_out],
        dict(
            p,
            cond_jaxpr=known_cond,
            body_jaxpr=known_body,
            body_nconsts=sum(1 for u in bc_u if not u),
            num_stacked=len(stack_outs) + len(res_vars) + 1,
        ),
    )
    # Unknown half: a scan of run-time length over the stacks; finished elements keep their carry.
    res_in = unknown.invars[:n_res]
    n_ubc = sum(bc_u)
    u_bc, u_carry = unknown.invars[n_res : n_res + n_ubc], unknown.invars[n_res + n_ubc :]
    inv_in = [r for r, inv in zip(res_in, invariant) if inv]
    st_in = [r for r, inv in zip(res_in, invariant) if not inv]
    n_ucr = sum(carry_u)
    x_active = Var(ShapedArray((), torch_bool(), dev))
    sel_eqns, new_outs = [], []
    for old, upd in zip(u_carry, unknown.outvars[:n_ucr]):
        out = Var(old.aval)
        pred = x_active
        if old.aval.shape != ():
            pred = Var(ShapedArray(old.aval.shape, torch_bool(), old.aval.device))
            params = {"shape": tuple(old.aval.shape), "broadcast_dimensions": ()}
            sel_eqns.append(Eqn(_bid_p(), [x_active], [pred], params))
        sel_eqns.append(Eqn(U.select_p, [pred, upd, old], [out], {}))
        new_outs.append(out)
    body = Jaxpr(
        [],
        inv_in + list(u_bc) + list(u_carry) + [x_active] + st_in,
        list(unknown.eqns) + sel_eqns,
        new_outs + list(unknown.outvars[n_ucr:]),
        check=False,
    )
    inv_atoms = [bc_in[const_pos[id(r)]] for r, inv in zip(residuals, invariant) if inv]
    unknown_eqn = Eqn(
        scan_p,
        inv_atoms
        + [x for x, u in zip(bc_in, bc_u) if u]
        + [x for x, u in zip(carry_in, carry_u) if u]
        + [active_out]
        + res_vars,
        [v for v, u in zip(eqn.outputs[: len(out_flags)], out_flags) if u],
        {
            "jaxpr": body,
            "num_consts": len(inv_atoms) + n_ubc,
            "num_carry": n_ucr,
            "length": None,
            "reverse": False,
        },
    )
    return known_eqn, unknown_eqn, out_flags, res_vars + [active_out]


def _bid_p():
    from thunderx.primitives import shape as S

    return S.broadcast_in_dim_p


def _device(eqn):
    for x in list(eqn.inputs) + list(eqn.outputs):
        dev = getattr(x.aval, "device", None)
        if dev is not None:
            return dev
    return creation.CPU


def _while_batch(args, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, num_stacked):
    from thunderx.ir import closure_convert
    from thunderx.primitives import binary as B
    from thunderx.primitives import reductions as R
    from thunderx.primitives import shape as S
    from thunderx.primitives import unary as U
    from thunderx.tracing import trace_flat
    from thunderx.transforms.jaxpr_cache import batch_of_jaxpr

    size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
    moved = [a if d is None else S.moveaxis(a, d, 0) for a, d in zip(args, dims)]
    cc, bc, carry = _split(moved, cond_nconsts, body_nconsts)
    cc_d, bc_d, carry_d = _split(
        [None if d is None else 0 for d in dims], cond_nconsts, body_nconsts
    )
    nc = len(carry)
    carry_b = [d is not None for d in carry_d]
    while True:
        cdims = tuple(0 if b else None for b in carry_b)
        out_d = batch_of_jaxpr(body_jaxpr, tuple(bc_d) + cdims, size)[2]
        new = [b or d is not None for b, d in zip(carry_b, out_d[:nc])]
        pred_batched = batch_of_jaxpr(cond_jaxpr, tuple(cc_d) + cdims, size)[2][0] is not None
        if pred_batched:
            new = [True] * nc
        if new == carry_b:
            break
        carry_b = new
    cdims = tuple(0 if b else None for b in carry_b)
    carry = [
        S.broadcast_batch(c, size, 0) if b and d is None else c
        for c, b, d in zip(carry, carry_b, carry_d)
    ]
    stack_force = tuple(0 for _ in range(num_stacked))
    bj, bjc, _ = batch_of_jaxpr(body_jaxpr, tuple(bc_d) + cdims, size, cdims + stack_force)
    if not pred_batched:
        cj, cjc, _ = batch_of_jaxpr(cond_jaxpr, tuple(cc_d) + cdims, size)
        outs = while_p.bind(
            *cjc,
            *cc,
            *bjc,
            *bc,
            *carry,
            cond_jaxpr=cj,
            body_jaxpr=bj,
            cond_nconsts=len(cjc) + len(cc),
            body_nconsts=len(bjc) + len(bc),
            num_stacked=num_stacked,
        )
        return outs, list(cdims) + [1] * num_stacked
    # A batched predicate: loop while any element continues; finished elements keep their carry.
    cj, cjc, _ = batch_of_jaxpr(cond_jaxpr, tuple(cc_d) + cdims, size, 0)
    n_cjc, n_cc, n_bjc, n_bc = len(cjc), len(cc), len(bjc), len(bc)

    def any_cond(*a):
        from thunderx.ir import eval_jaxpr

        (pred,) = eval_jaxpr(cj, [], *a)
        return [B.gt(R.reduce_max(U.convert(pred, _int32()), (0,)), 0)], None

    def frozen_body(*a):
        from thunderx.ir import eval_jaxpr

        cond_args = list(a[: n_cjc + n_cc])
        body_args = list(a[n_cjc + n_cc : n_cjc + n_cc + n_bjc + n_bc])
        old = list(a[n_cjc + n_cc + n_bjc + n_bc :])
        (pred,) = eval_jaxpr(cj, [], *cond_args, *old)
        outs = eval_jaxpr(bj, [], *body_args, *old)
        res = []
        for o, n in zip(old, outs[:nc]):
            shape = get_aval(o).shape
            res.append(U.select(S.broadcast_in_dim(pred, shape, (0,)), n, o))
        stacks = list(outs[nc:])
        if stacks:  # the active flag of each element is its own predicate
            stacks[-1] = B.and_p.bind(stacks[-1], pred)
        return res + stacks, None

    c_avals = [get_aval(x) for x in cjc + cc]
    b_avals = [get_aval(x) for x in bjc + bc]
    carry_avals = [get_aval(x) for x in carry]
    cond_closed, _ = trace_flat(any_cond, c_avals + carry_avals)
    body_closed, _ = trace_flat(frozen_body, c_avals + b_avals + carry_avals)
    outs = while_p.bind(
        *cond_closed.consts,
        *cjc,
        *cc,
        *body_closed.consts,
        *cjc,
        *cc,
        *bjc,
        *bc,
        *carry,
        cond_jaxpr=closure_convert(cond_closed.jaxpr),
        body_jaxpr=closure_convert(body_closed.jaxpr),
        cond_nconsts=len(cond_closed.consts) + n_cjc + n_cc,
        body_nconsts=len(body_closed.consts) + n_cjc + n_cc + n_bjc + n_bc,
        num_stacked=num_stacked,
    )
    return outs, [0] * nc + [1] * num_stacked


def _int32():
    import torch

    return torch.int32


def _while_codegen(
    args, avals, *, ctx, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, num_stacked
):
    cond = ctx.function(cond_jaxpr, "while_cond", bare_return=True)
    body = ctx.function(body_jaxpr, "while_body")
    cc, bc, carry = _split(args, cond_nconsts, body_nconsts)
    nc = len(carry)
    c_out, s_out = ctx.outs[:nc], ctx.outs[nc:]
    k = len(ctx.prelude)
    lists = [f"_s{k}_{i}" for i in range(num_stacked)]
    tmps = [f"_y{k}_{i}" for i in range(num_stacked)]
    lines = []
    if c_out:
        lines.append(f"{', '.join(c_out)} = {', '.join(carry)}")
    lines += [f"{s} = []" for s in lists]
    lines.append(f"while {cond}({', '.join(cc + c_out)}):")
    lhs = ", ".join(c_out + tmps) + ("," if len(c_out + tmps) == 1 else "")
    lines.append(f"    {lhs} = {body}({', '.join(bc + c_out)})")
    lines += [f"    {s}.append({t})" for s, t in zip(lists, tmps)]
    for out, s, v in zip(s_out, lists, body_jaxpr.outvars[nc:]):
        a = v.aval
        empty = (
            f"torch.empty((0,) + {tuple(a.shape)!r}, dtype={a.dtype}, device={ctx.param(a.device)})"
        )
        lines.append(f"{out} = torch.stack({s}) if {s} else {empty}")
    return lines


while_p = declare(
    "while",
    multiple_results=True,
    impl=_while_impl,
    abstract_eval=_while_abstract_eval,
    jvp=_while_jvp,
    partial_eval=_while_partial_eval,
    batch=_while_batch,
    torch_codegen=_while_codegen,
    torch_codegen_statement=True,
    aliases=ALL_OPERANDS,  # a loop that runs zero times returns its initial carry
)
