"""linear_solve: `x = A^{-1} b` by a user's solver, differentiated implicitly (JAX's
custom_linear_solve). Built by `thunderx.lax.custom_linear_solve` (thunderx/implicit.py).

Operands: matvec's consts, solve's consts, transpose_solve's consts, then b's leaves. Params:
closure-converted jaxprs `matvec` ((consts, x) -> A x), `solve` ((consts, b) -> x, then aux
outputs) and `tsolve` (the same for A^T, or None), with the operand counts `n_mv`, `n_s`, `n_ts`
and `n_aux` (aux outputs after x's leaves: no derivative).

- jvp: x = solve(b); dx = solve(db - (d matvec / d consts)(x)), the same primitive on the tangent,
  so its derivatives exist to any order; the solver's own operations are never differentiated.
- transpose (linear in b): ct_b = (A^T)^{-1} ct_x, the primitive with matvec's transpose (traced
  from its jaxpr) and the two solvers swapped.
- batch: the three jaxprs batched over their operands' batch dims, x batched along dim 0.
"""

from __future__ import annotations

from thunderx.ad_util import UndefinedPrimal, Zero, add_tangents, instantiate
from thunderx.core import ALL_OPERANDS, declare, get_aval
from thunderx.ir import eval_jaxpr
from thunderx.primitives._subjaxpr import float_aval, run_jaxpr, transpose_jaxpr, type_error


def _split(args, n_mv, n_s, n_ts):
    a = n_mv + n_s
    return args[:n_mv], args[n_mv:a], args[a : a + n_ts], args[a + n_ts :]


def _impl(*args, matvec, solve, tsolve, n_mv, n_s, n_ts, n_aux):
    _, s, _, b = _split(args, n_mv, n_s, n_ts)
    return run_jaxpr(solve, [*s, *b])


def check_solution(jaxpr, b_avals, what: str) -> None:
    """A solver's jaxpr returns x (then aux) with b's shapes and dtypes."""
    for i, (o, a) in enumerate(zip(jaxpr.out_avals, b_avals)):
        if a.shape != o.shape or a.dtype != o.dtype:
            raise type_error(
                f"custom_linear_solve: {what} returned {o.str_short()} for b's leaf {i} of type "
                f"{a.str_short()}; x must have b's shapes and dtypes"
            )


def _abstract_eval(*avals, matvec, solve, tsolve, n_mv, n_s, n_ts, n_aux):
    _, _, _, b = _split(avals, n_mv, n_s, n_ts)
    check_solution(solve, b, "solve")
    return list(solve.out_avals)


def _jvp(primals, tangents, **params):
    n_mv, n_s, n_ts, n_aux = params["n_mv"], params["n_s"], params["n_ts"], params["n_aux"]
    outs = linear_solve_p.bind(*primals, **params)
    n_x = len(outs) - n_aux
    x = outs[:n_x]
    mv, s, ts, _ = _split(primals, n_mv, n_s, n_ts)
    _, _, _, db = _split(tangents, n_mv, n_s, n_ts)
    rhs = list(db)
    mv_t = tangents[:n_mv]
    nz = tuple(type(t) is not Zero and float_aval(get_aval(p)) for p, t in zip(mv, mv_t))
    if any(nz):
        from thunderx.transforms.jaxpr_cache import jvp_of_jaxpr

        # the part of b's tangent that matvec's values move: d(A x) with x held
        j, consts, out_nz = jvp_of_jaxpr(params["matvec"], nz + (False,) * n_x)
        res = eval_jaxpr(j, [], *consts, *mv, *x, *[t for t, z in zip(mv_t, nz) if z])
        moved = iter(res[n_x:])
        for i, z in enumerate(out_nz):
            if z:
                rhs[i] = add_tangents(rhs[i], -next(moved))
    aux_zero = [Zero(get_aval(o).strip_weak()) for o in outs[n_x:]]
    if all(type(r) is Zero for r in rhs):
        return outs, [Zero(get_aval(o).strip_weak()) for o in x] + aux_zero
    rhs = [instantiate(r) for r in rhs]
    dx = linear_solve_p.bind(*mv, *s, *ts, *rhs, **params)[:n_x]
    return outs, list(dx) + aux_zero


def _transpose(cts, *args, matvec, solve, tsolve, n_mv, n_s, n_ts, n_aux):
    mv, s, ts, b = _split(args, n_mv, n_s, n_ts)
    if any(type(a) is UndefinedPrimal for a in (*mv, *s, *ts)):
        raise type_error("custom_linear_solve is linear in b only, not in its functions' values")
    n_x = len(cts) - n_aux
    ct_x = cts[:n_x]
    if all(type(c) is Zero for c in ct_x):
        return [None] * len(args)
    if tsolve is None:
        raise type_error(
            "custom_linear_solve: reverse-mode differentiation (grad, vjp, jacrev) needs "
            "transpose_solve (or symmetric=True) to solve with A's transpose"
        )
    # vecmat: c -> A^T c, matvec's jaxpr transposed in x with its consts held
    linear = (False,) * n_mv + (True,) * n_x
    vecmat, vm_consts = transpose_jaxpr(matvec, linear, (True,) * n_x)
    outs = linear_solve_p.bind(
        *vm_consts,
        *mv,
        *ts,
        *s,
        *[instantiate(c) for c in ct_x],
        matvec=vecmat,
        solve=tsolve,
        tsolve=solve,
        n_mv=len(vm_consts) + n_mv,
        n_s=n_ts,
        n_ts=n_s,
        n_aux=n_aux,
    )
    return [None] * (n_mv + n_s + n_ts) + list(outs[:n_x])


def _batch(args, dims, *, matvec, solve, tsolve, n_mv, n_s, n_ts, n_aux):
    from thunderx.primitives import shape as S
    from thunderx.transforms.jaxpr_cache import batch_of_jaxpr

    size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
    # x is batched along 0 (b broadcast where only the functions' values are batched)
    moved = [
        a if d is None else S.moveaxis(a, d, 0) for a, d in zip(args[: n_mv + n_s + n_ts], dims)
    ]
    cdims = [None if d is None else 0 for d in dims[: n_mv + n_s + n_ts]]
    b = [
        S.broadcast_batch(a, size, 0) if d is None else S.moveaxis(a, d, 0)
        for a, d in zip(args[n_mv + n_s + n_ts :], dims[n_mv + n_s + n_ts :])
    ]
    mv_d, s_d, ts_d, _ = _split(cdims, n_mv, n_s, n_ts)
    mv, s, ts, _ = _split(moved, n_mv, n_s, n_ts)
    n_x = len(b)
    m_j, m_c, _ = batch_of_jaxpr(matvec, tuple(mv_d) + (0,) * n_x, size, force_out=0)
    s_j, s_c, _ = batch_of_jaxpr(solve, tuple(s_d) + (0,) * n_x, size, force_out=0)
    operands = [*m_c, *mv, *s_c, *s]
    params = dict(matvec=m_j, solve=s_j, tsolve=None, n_mv=len(m_c) + n_mv, n_aux=n_aux)
    params["n_s"] = len(s_c) + n_s
    if tsolve is not None:
        t_j, t_c, _ = batch_of_jaxpr(tsolve, tuple(ts_d) + (0,) * n_x, size, force_out=0)
        operands += [*t_c, *ts]
        params.update(tsolve=t_j, n_ts=len(t_c) + n_ts)
    else:
        params["n_ts"] = 0
    outs = linear_solve_p.bind(*operands, *b, **params)
    return outs, [0] * len(outs)


linear_solve_p = declare(
    "linear_solve",
    multiple_results=True,
    impl=_impl,
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    transpose=_transpose,
    batch=_batch,
    aliases=ALL_OPERANDS,  # the user's solve may return b (or a view of it) itself
)
