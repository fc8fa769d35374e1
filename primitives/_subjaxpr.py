"""What the control-flow primitives (cond, scan, while_loop, checkpoint) share: running a
sub-jaxpr with the current executor, rearranging a jaxpr's inputs and outputs, partial
evaluation that forces chosen outputs unknown, and the transpose of a jaxpr as a jaxpr.

Every sub-jaxpr is closed and closure-converted: no constvars; its consts are leading operands of
the equation (the `jit_call` pattern). Each helper recurses with the machinery the transforms use
for a whole function (`jvp_of_jaxpr`, `batch_of_jaxpr`, `partial_eval_jaxpr`, `backward_pass`),
so no transform gets a second code path.
"""

from __future__ import annotations

import contextvars

from thunderx.ad_util import Zero, instantiate
from thunderx.avals import ShapedArray, is_float
from thunderx.core import Tracer
from thunderx.ir import Jaxpr, Literal, Var

# The executor running the enclosing program: bodies of control flow run with the same one
# (the nvFuser executor fuses inside loop bodies and drives the loop from the host).
current_executor: contextvars.ContextVar[str] = contextvars.ContextVar(
    "thunderx_executor", default="torch"
)


def run_jaxpr(jaxpr: Jaxpr, args) -> list:
    """Execute a closure-converted jaxpr on concrete tensors with the current executor."""
    import torch

    from thunderx.transforms.jaxpr_cache import compiled_for

    prog = compiled_for(jaxpr, current_executor.get())
    if torch.is_grad_enabled() and any(getattr(a, "requires_grad", False) for a in args):
        # torch autograd through the call: the variant without in-place buffer reuse
        return list(prog.fn_plain(*args))
    return list(prog.fn(*args))


def with_invars(jaxpr: Jaxpr, invars) -> Jaxpr:
    return Jaxpr([], invars, jaxpr.eqns, jaxpr.outvars, check=False)


def with_outvars(jaxpr: Jaxpr, outvars) -> Jaxpr:
    return Jaxpr([], jaxpr.invars, jaxpr.eqns, outvars, check=False)


def pad_invars(jaxpr: Jaxpr, before=(), after=()) -> Jaxpr:
    """The jaxpr with unused inputs of avals `before` and `after` around its own."""
    pre = [Var(a) for a in before]
    post = [Var(a) for a in after]
    return with_invars(jaxpr, pre + list(jaxpr.invars) + post)


def float_aval(a: ShapedArray) -> bool:
    return is_float(a.dtype)


def no_tracers(consts) -> bool:
    return not any(isinstance(c, Tracer) for c in consts)


def partial_eval_forced(jaxpr: Jaxpr, unknowns, force_unknown):
    """`partial_eval_jaxpr`, with the outputs in `force_unknown` made unknown even when known
    inputs determine them (a loop carry unknown on a later iteration, a cond output unknown in
    another branch): the known jaxpr passes such a value on as a residual.

    Returns (known, unknown, out_unknowns, num_residuals) as `partial_eval_jaxpr` does."""
    from thunderx.transforms.partial_eval import partial_eval_jaxpr

    known, unknown, out_unk, n_res = partial_eval_jaxpr(jaxpr, list(unknowns))
    n_known_out = len(known.outvars) - n_res
    known_outs = list(known.outvars[:n_known_out])
    residuals = list(known.outvars[n_known_out:])
    res_in = list(unknown.invars[:n_res])
    unknown_in = list(unknown.invars[n_res:])
    unknown_outs = iter(unknown.outvars)
    k_iter = iter(known_outs)
    new_known_outs, new_unknown_outs, new_unk = [], [], []
    for u, f in zip(out_unk, force_unknown):
        if u:
            new_unknown_outs.append(next(unknown_outs))
            new_unk.append(True)
            continue
        v = next(k_iter)
        if not f:
            new_known_outs.append(v)
            new_unk.append(False)
            continue
        new_unk.append(True)
        if isinstance(v, Literal):
            new_unknown_outs.append(v)
            continue
        r = Var(v.aval)
        residuals.append(v)
        res_in.append(r)
        new_unknown_outs.append(r)
    known = Jaxpr(
        known.constvars, known.invars, known.eqns, new_known_outs + residuals, check=False
    )
    unknown = Jaxpr([], res_in + unknown_in, unknown.eqns, new_unknown_outs, check=False)
    return known, unknown, new_unk, len(residuals)


def transpose_jaxpr(jaxpr: Jaxpr, linear: tuple, ct_nonzero: tuple):
    """A closure-converted jaxpr of (consts..., non-linear inputs..., nonzero output cotangents...)
    -> cotangents of the linear inputs (zeros instantiated), and its consts. `jaxpr` must be
    linear in the inputs marked in `linear`."""
    key = ("transpose", linear, ct_nonzero)
    hit = jaxpr._cache.get(key)
    if hit is not None:
        return hit
    from thunderx.ir import closure_convert
    from thunderx.tracing import trace_flat
    from thunderx.transforms.transpose import backward_pass

    nonlin = [v for v, lin in zip(jaxpr.invars, linear) if not lin]
    lin_vars = [v for v, lin in zip(jaxpr.invars, linear) if lin]
    ordered = with_invars(jaxpr, nonlin + lin_vars)
    n = len(nonlin)

    def fun(*args):
        res, cts_in = args[:n], iter(args[n:])
        cts = [next(cts_in) if nz else Zero(v.aval) for v, nz in zip(jaxpr.outvars, ct_nonzero)]
        out = backward_pass(ordered, list(res), cts)
        return [instantiate(c) for c in out], None

    ct_avals = [v.aval for v, nz in zip(jaxpr.outvars, ct_nonzero) if nz]
    closed, _ = trace_flat(fun, [v.aval for v in nonlin] + ct_avals)
    result = (closure_convert(closed.jaxpr), closed.consts)
    if no_tracers(closed.consts):
        jaxpr._cache[key] = result
    return result


def type_error(msg: str) -> TypeError:
    """A TypeError naming the line of the user's code that built the equation."""
    from thunderx.errors import user_frame

    return TypeError(f"{msg} (at {user_frame()})")


def join_avals(what: str, a_avals, b_avals, a_name: str, b_name: str, where: str) -> None:
    """Raise a TypeError naming both types when two output signatures differ."""
    if len(a_avals) != len(b_avals):
        raise TypeError(
            f"{what}: {a_name} returns {len(a_avals)} values but {b_name} returns "
            f"{len(b_avals)} (at {where})"
        )
    for i, (a, b) in enumerate(zip(a_avals, b_avals)):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise TypeError(
                f"{what}: leaf {i} of {a_name} has type {a.str_short()} but {b_name} has "
                f"{b.str_short()} (at {where}); they must match exactly"
            )
