"""The custom-derivative calls: custom_jvp_call, custom_vjp_call, and custom_lin (the linear half
of a custom_vjp under reverse mode). Built by `thunderx.custom_jvp` / `custom_vjp`.

As in JAX, the user's function is not traced when a rule answers: under `jvp`/`grad` the jvp
rule (or `fwd`) runs on the primals and the function itself only runs where a primal is needed
without a derivative. Params hold flat callables (`call`, `jvp`, `fwd`, `bwd`) over the
operands after the first `num_consts` (closed-over values hoisted when staged); `jaxpr` is None
until the call is staged into a jaxpr (jit, make_jaxpr), when `stage_rules` traces `call` once and
the jaxpr becomes the definition of the primal.
"""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero, instantiate
from thunderx.avals import is_float
from thunderx.core import ALL_OPERANDS, call_primitives, declare, get_aval
from thunderx.ir import closure_convert, eval_jaxpr


def _call_impl(*args, call, jaxpr, num_consts, **params):
    if jaxpr is not None:
        return eval_jaxpr(jaxpr, [], *args)
    return call(*args[num_consts:])


# ------------------------------------------------------- torch autograd through an eager call


def torch_records(args) -> bool:
    """Whether torch autograd records an eager call on `args` (grad mode on and an operand
    that requires grad): its derivative must then be the call's rule, as thunderx's own."""
    return torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args
    )


class _TorchRule(torch.autograd.Function):
    """torch autograd through a custom_jvp / custom_vjp call run on concrete tensors (eagerly,
    under an eager vmap, or in the program torch autograd runs through `jit`): the forward
    computes the outputs, the backward is the call's rule, so that `torch.autograd.grad`
    agrees with `thunderx.grad` (and a `torch.autograd.Function`'s `backward` keeps running, as
    under torch.compile). `run(xs) -> (outputs, pullback)`; the pullback travels on `run`
    itself (`setup_context` style, which torch.func's transforms require)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(run, *xs):
        outs, run.pullback = run(xs)
        return tuple(outs)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.pullback = inputs[0].pullback
        ctx.mark_non_differentiable(*[o for o in output if not _differentiable(o)])

    @staticmethod
    def backward(ctx, *gs):
        return (None, *ctx.pullback(gs))


class _Run:
    """`fn` as the first input of `_TorchRule`, carrying the pullback its call makes."""

    __slots__ = ("fn", "pullback")

    def __init__(self, fn):
        self.fn, self.pullback = fn, None

    def __call__(self, xs):
        return self.fn(xs)


def _differentiable(x) -> bool:
    return isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())


def _conj(x):
    return x.conj() if isinstance(x, torch.Tensor) and x.is_complex() else x


def _consts_checked(args, num_consts, what):
    if any(isinstance(c, torch.Tensor) and c.requires_grad for c in args[:num_consts]):
        raise _closure_error(what)


def _vjp_through_torch(args, fwd, bwd, num_consts):
    _consts_checked(args, num_consts, "custom_vjp")

    def run(xs):
        outs, res = fwd(*xs[num_consts:])

        def pullback(gs):
            # torch's cotangents are the conjugates of thunderx's (transforms/holomorphic)
            cts = [torch.zeros_like(o) if g is None else _conj(g) for o, g in zip(outs, gs)]
            return [None] * num_consts + [_conj(c) for c in bwd(res, cts)]

        return list(outs), pullback

    return list(_TorchRule.apply(_Run(run), *args))


def _jvp_through_torch(args, call, jvp, jaxpr, num_consts):
    _consts_checked(args, num_consts, "custom_jvp")

    def run(xs):
        primals = list(xs[num_consts:])
        outs = _call_impl(*xs, call=call, jaxpr=jaxpr, num_consts=num_consts)
        floats = [i for i, p in enumerate(primals) if _differentiable(p)]

        def tangent_map(*ts):
            """The rule's tangents of the float outputs for tangents `ts` of the float inputs
            (zero for the others): a linear map, whose transpose is the derivative."""
            full = [torch.zeros_like(p) for p in primals]
            for i, t in zip(floats, ts):
                full[i] = t
            t_out = jvp(primals, full)[1]
            return tuple(instantiate(t) for t, o in zip(t_out, outs) if _differentiable(o))

        def pullback(gs):
            cts_out = tuple(
                _conj(torch.zeros_like(o) if g is None else g)
                for o, g in zip(outs, gs)
                if _differentiable(o)
            )
            zeros = [torch.zeros_like(primals[i]) for i in floats]
            if torch._C._functorch.peek_interpreter_stack() is not None:
                # inside a torch.func transform, which refuses torch.autograd.grad
                from thunderx.transforms.ad import vjp

                cts = vjp(tangent_map, *zeros)[1](cts_out)
            else:  # torch autograd of the linear map at zero tangents is its transpose
                with torch.enable_grad():
                    ts = [z.requires_grad_() for z in zeros]
                    cts = torch.autograd.grad(
                        tangent_map(*ts),
                        ts,
                        cts_out,
                        allow_unused=True,
                        create_graph=torch.is_grad_enabled(),
                    )
            out = [None] * (num_consts + len(primals))
            for i, c in zip(floats, cts):
                out[num_consts + i] = None if c is None else _conj(c)
            return out

        return list(outs), pullback

    return list(_TorchRule.apply(_Run(run), *args))


def _custom_jvp_impl(*args, call, jvp, jaxpr, num_consts, name):
    if _users(name) and torch_records(args):
        return _jvp_through_torch(args, call, jvp, jaxpr, num_consts)
    return _call_impl(*args, call=call, jaxpr=jaxpr, num_consts=num_consts)


def _custom_vjp_impl(*args, call, fwd, bwd, jaxpr, num_consts, name):
    if _users(name) and torch_records(args):
        return _vjp_through_torch(args, fwd, bwd, num_consts)
    return _call_impl(*args, call=call, jaxpr=jaxpr, num_consts=num_consts)


def _call_abstract_eval(*avals, jaxpr, **params):
    if jaxpr is None:
        raise TypeError("internal error: a custom call reached abstract evaluation unstaged")
    for i, (a, v) in enumerate(zip(avals, jaxpr.invars)):
        if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
            raise TypeError(f"call: operand {i} is {a.str_short()}, expected {v.aval.str_short()}")
    return jaxpr.out_avals


def _stage(args, params):
    """Staged into a jaxpr: trace the primal function once; its consts become operands."""
    if params["jaxpr"] is not None:
        return args, params
    from thunderx.tracing import trace_flat

    # before staging no consts are hoisted: `call` takes every operand
    call = params["call"]
    closed, _ = trace_flat(lambda *xs: (call(*xs), None), [get_aval(a) for a in args])
    return list(closed.consts) + list(args), {
        **params,
        "jaxpr": closure_convert(closed.jaxpr),
        "num_consts": len(closed.consts),
        "call": None,
    }


def _closure_error(name):
    return TypeError(
        f"{name}: the function closes over a value that is being differentiated; pass it as an "
        "explicit argument instead"
    )


def _batch_size(args, dims):
    return next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)


def _batched_call(params, args, dims, size):
    """(new operands, params with call/jaxpr batched at out axis 0)."""
    from thunderx.transforms.jaxpr_cache import batch_of_jaxpr
    from thunderx.transforms.vmap import vmap

    nc = params["num_consts"]
    jaxpr = params["jaxpr"]
    if jaxpr is not None:
        new_jaxpr, consts, _ = batch_of_jaxpr(jaxpr, tuple(dims), size, force_out=0)
        return list(consts) + list(args), {
            **params,
            "jaxpr": new_jaxpr,
            "num_consts": len(consts) + nc,
            "call": None,
        }
    call = vmap(params["call"], in_axes=tuple(dims[nc:]), out_axes=0, axis_size=size)
    return list(args), {**params, "call": call}


# ---------------------------------------------------------------------------- custom_jvp_call


def _custom_jvp_jvp(primals, tangents, *, call, jvp, jaxpr, num_consts, name):
    if any(type(t) is not Zero for t in tangents[:num_consts]):
        raise _closure_error("custom_jvp")
    out, t_out = jvp(list(primals[num_consts:]), list(tangents[num_consts:]))
    # integer outputs carry no tangent
    return out, [
        t if is_float(get_aval(o).dtype) else Zero(get_aval(o)) for o, t in zip(out, t_out)
    ]


def _custom_jvp_batch(args, dims, *, jvp, num_consts, **params):
    from thunderx.transforms.vmap import vmap

    size = _batch_size(args, dims)
    arg_dims = list(dims[num_consts:])

    def batched_jvp(primals, tangents):
        # tangents may hold symbolic zeros: vmap sees them as unbatched zeros
        tangents = [instantiate(t) for t in tangents]
        return vmap(
            lambda p, t: tuple(jvp(p, t)), in_axes=(arg_dims, arg_dims), out_axes=0, axis_size=size
        )(list(primals), tangents)

    new_args, new_params = _batched_call(
        {**params, "jvp": jvp, "num_consts": num_consts}, args, dims, size
    )
    outs = custom_jvp_call_p.bind(*new_args, **{**new_params, "jvp": batched_jvp})
    return outs, [0] * len(outs)


# thunderx's own custom_jvp functions whose value is their last operand and whose derivative is
# their first operand's (lang/views.py: a write torch's autograd does not see). jit keeps their
# calls (passes.optimize) so that the program torch autograd runs through keeps the derivative:
# `keep_derivative_source`.
DERIVATIVE_KEEPERS = frozenset({"thunderx_keep_derivative", "thunderx_keep_reverse_derivative"})
# the name prefix of the calls of thunderx's own rules (its decompositions' derivative
# conventions): torch autograd differentiates their primal, which the program it runs through
# then inlines (bridging them made a jitted var + logsumexp loss's backward 3.6x slower)
INTERNAL_RULE = "thunderx."


def has_rule(e) -> bool:
    """A call of a user's custom_jvp / custom_vjp function (or torch.autograd.Function), whose
    rule torch autograd takes as the derivative."""
    return e.prim in (custom_jvp_call_p, custom_vjp_call_p) and _users(e.params["name"])


def _users(name: str) -> bool:
    return not name.startswith(INTERNAL_RULE) and name not in DERIVATIVE_KEEPERS


def holds_rules(jaxpr) -> bool:
    """Whether `jaxpr` calls a user's custom rule, directly or in a call it inlines."""
    for e in jaxpr.eqns:
        if has_rule(e):
            return True
        if e.prim in call_primitives and e.params.get("jaxpr") is not None:
            if holds_rules(e.params["jaxpr"]):
                return True
    return False


def keeps_derivative(e) -> bool:
    return e.prim is custom_jvp_call_p and e.params.get("name") in DERIVATIVE_KEEPERS


def keep_derivative_call(source, value):
    """A tensor with `value`'s values, bit for bit, whose torch autograd derivative is that of
    `source` (a clone of it overwritten outside autograd)."""
    out = source.clone()
    out.detach().copy_(value)
    return out


# The user's function may return its inputs (or views of them) as outputs.
custom_jvp_call_p = declare(
    "custom_jvp_call",
    multiple_results=True,
    impl=_custom_jvp_impl,
    abstract_eval=_call_abstract_eval,
    stage=_stage,
    jvp=_custom_jvp_jvp,
    batch=_custom_jvp_batch,
    aliases=ALL_OPERANDS,
    # the value of DERIVATIVE_KEEPERS; other calls (kept only in the program torch autograd
    # runs through, passes.optimize) call the impl, whose rule torch autograd then runs
    torch_codegen=lambda args, avals, **params: (
        f"({args[-1]},)" if params["name"] in DERIVATIVE_KEEPERS else None
    ),
)

# ---------------------------------------------------------------------------- custom_vjp_call


def _custom_vjp_jvp(primals, tangents, *, call, fwd, bwd, jaxpr, num_consts, name):
    if any(type(t) is not Zero for t in tangents[:num_consts]):
        raise _closure_error("custom_vjp")
    out_leaves, res_leaves = fwd(*primals[num_consts:])
    ts = [instantiate(t) for t in tangents[num_consts:]]
    t_out = custom_lin_p.bind(
        *res_leaves,
        *ts,
        bwd=bwd,
        num_res=len(res_leaves),
        out_avals=tuple(get_aval(o).strip_weak() for o in out_leaves),
    )
    return out_leaves, t_out


def _custom_vjp_batch(args, dims, *, fwd, bwd, num_consts, **params):
    from thunderx.transforms.vmap import vmap

    size = _batch_size(args, dims)
    arg_dims = tuple(dims[num_consts:])

    def batched_fwd(*xs):
        out, res = vmap(lambda *a: tuple(fwd(*a)), in_axes=arg_dims, out_axes=0, axis_size=size)(
            *xs
        )
        return list(out), list(res)

    batched_bwd = vmap(bwd, in_axes=0, out_axes=0, axis_size=size)
    new_args, new_params = _batched_call({**params, "num_consts": num_consts}, args, dims, size)
    outs = custom_vjp_call_p.bind(*new_args, **new_params, fwd=batched_fwd, bwd=batched_bwd)
    return outs, [0] * len(outs)


custom_vjp_call_p = declare(
    "custom_vjp_call",
    multiple_results=True,
    impl=_custom_vjp_impl,
    abstract_eval=_call_abstract_eval,
    stage=_stage,
    jvp=_custom_vjp_jvp,
    batch=_custom_vjp_batch,
    aliases=ALL_OPERANDS,
)
call_primitives.update({custom_jvp_call_p, custom_vjp_call_p})

# --------------------------------------------------------------------------------- custom_lin


def _custom_lin_impl(*args, **params):
    raise TypeError(
        "forward-mode differentiation (jvp, jacfwd) of a custom_vjp function is not supported: "
        "it only defines reverse mode. Use custom_jvp for a function that needs both."
    )


def _custom_lin_transpose(cts, *args, bwd, num_res, out_avals):
    cts_in = bwd(list(args[:num_res]), [instantiate(c) for c in cts])
    return [None] * num_res + list(cts_in)


def _custom_lin_batch(args, dims, *, bwd, num_res, out_avals):
    from thunderx.primitives import shape as S
    from thunderx.transforms.vmap import vmap

    size = _batch_size(args, dims)
    moved = [
        S.broadcast_batch(a, size, 0) if d is None else S.moveaxis(a, d, 0)
        for a, d in zip(args, dims)
    ]
    outs = custom_lin_p.bind(
        *moved,
        bwd=vmap(bwd, in_axes=0, out_axes=0, axis_size=size),
        num_res=num_res,
        out_avals=tuple(a.update(shape=(size,) + tuple(a.shape)) for a in out_avals),
    )
    return outs, [0] * len(outs)


custom_lin_p = declare(
    "custom_lin",
    multiple_results=True,
    impl=_custom_lin_impl,
    abstract_eval=lambda *avals, out_avals, **params: list(out_avals),
    linear=True,
    transpose=_custom_lin_transpose,
    batch=_custom_lin_batch,
    not_differentiable="the linear half of a custom_vjp: only its transpose exists",
)
