"""Higher-order primitives: stop_gradient, jit_call (a call holding a jaxpr), and the custom
derivative calls custom_jvp_call, custom_vjp_call and the linear custom_lin they lower to.

Sub-jaxprs sit in params["jaxpr"] with no constvars: their consts are passed as leading operands.
"""

from __future__ import annotations

from thunderx.ad_util import Zero, instantiate
from thunderx.core import (
    abstract_eval_rules,
    batch_rules,
    get_aval,
    impl_rules,
    jvp_rules,
    linear_primitives,
    new_primitive,
    not_differentiable,
    nvfuser_rules,
    torch_codegen_rules,
    transpose_rules,
)
from thunderx.ir import eval_jaxpr
from thunderx.passes import call_primitives

# --------------------------------------------------------------------------------- stop_gradient

stop_gradient_p = new_primitive("stop_gradient")
impl_rules[stop_gradient_p] = lambda x: x
abstract_eval_rules[stop_gradient_p] = lambda x: x.strip_weak()
torch_codegen_rules[stop_gradient_p] = lambda args, avals: args[0]
nvfuser_rules[stop_gradient_p] = lambda fd, x: x
batch_rules[stop_gradient_p] = lambda args, dims: (stop_gradient_p.bind(args[0]), dims[0])


def _stop_gradient_jvp(primals, tangents):
    out = stop_gradient_p.bind(primals[0])
    return out, Zero(get_aval(out))


jvp_rules[stop_gradient_p] = _stop_gradient_jvp


def stop_gradient(x):
    """Identity whose derivative is zero (`x.detach()` under tracing means the same).

    >>> thunderx.grad(lambda x: x * thunderx.stop_gradient(x))(torch.tensor(3.))
    tensor(3.)
    """
    from thunderx import tree, validate
    from thunderx.core import Tracer

    validate.check_leaves(x, "stop_gradient", "its argument")
    return tree.map(lambda v: stop_gradient_p.bind(v) if isinstance(v, Tracer) else v, x)


# -------------------------------------------------------------------------------------- jit_call

jit_call_p = new_primitive("jit_call", multiple_results=True)
call_primitives.add(jit_call_p)


def _call_abstract_eval(*avals, jaxpr, **params):
    for i, (a, v) in enumerate(zip(avals, jaxpr.invars)):
        if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
            raise TypeError(f"call: operand {i} is {a.str_short()}, expected {v.aval.str_short()}")
    return jaxpr.out_avals


def _jit_call_impl(*args, jaxpr, name):
    from thunderx.transforms.jit import compiled_for

    return compiled_for(jaxpr)(*args)


def _jit_call_jvp(primals, tangents, *, jaxpr, name):
    from thunderx.transforms.jit import jvp_of_jaxpr

    nonzero = tuple(type(t) is not Zero for t in tangents)
    jvp_jaxpr, consts, out_nonzero = jvp_of_jaxpr(jaxpr, nonzero)
    ts = [t for t in tangents if type(t) is not Zero]
    outs = jit_call_p.bind(*consts, *primals, *ts, jaxpr=jvp_jaxpr, name=f"jvp({name})")
    n = len(jaxpr.outvars)
    it = iter(outs[n:])
    t_out = [next(it) if nz else Zero(a) for nz, a in zip(out_nonzero, jaxpr.out_avals)]
    return outs[:n], t_out


def _jit_call_batch(args, dims, *, jaxpr, name):
    from thunderx.transforms.jit import batch_of_jaxpr

    size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
    new_jaxpr, consts, out_dims = batch_of_jaxpr(jaxpr, tuple(dims), size)
    outs = jit_call_p.bind(*consts, *args, jaxpr=new_jaxpr, name=f"vmap({name})")
    return outs, list(out_dims)


impl_rules[jit_call_p] = _jit_call_impl
abstract_eval_rules[jit_call_p] = _call_abstract_eval
jvp_rules[jit_call_p] = _jit_call_jvp
batch_rules[jit_call_p] = _jit_call_batch

# ------------------------------------------------------------------------------- custom_jvp_call

custom_jvp_call_p = new_primitive("custom_jvp_call", multiple_results=True)
custom_vjp_call_p = new_primitive("custom_vjp_call", multiple_results=True)
custom_lin_p = new_primitive("custom_lin", multiple_results=True)
call_primitives.update({custom_jvp_call_p, custom_vjp_call_p})


def _inline_impl(*args, jaxpr, **params):
    return eval_jaxpr(jaxpr, [], *args)


def _closure_error(name):
    return TypeError(
        f"{name}: the function closes over a value that is being differentiated; pass it as an "
        "explicit argument instead"
    )


def _custom_jvp_jvp(primals, tangents, *, jaxpr, jvp, num_consts, in_tree, out_tree):
    from thunderx import tree

    if any(type(t) is not Zero for t in tangents[:num_consts]):
        raise _closure_error("custom_jvp")
    args = primals[num_consts:]
    ts = [instantiate(t) for t in tangents[num_consts:]]
    out, t_out = jvp(tree.unflatten(in_tree, args), tree.unflatten(in_tree, ts))
    out_leaves, out_tree2 = tree.flatten(out)
    t_leaves, t_tree = tree.flatten(t_out)
    if out_tree2 != out_tree or t_tree != out_tree:
        raise TypeError(
            "custom_jvp rule must return (primal_out, tangent_out) with the structure of the "
            f"function's output {out_tree}, got {out_tree2} and {t_tree}"
        )
    return out_leaves, t_leaves


def _custom_jvp_batch(args, dims, *, jaxpr, jvp, num_consts, in_tree, out_tree):
    from thunderx import tree
    from thunderx.transforms.jit import batch_of_jaxpr
    from thunderx.transforms.vmap import vmap

    size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
    new_jaxpr, consts, out_dims = batch_of_jaxpr(jaxpr, tuple(dims), size, force_out=0)
    arg_dims = tree.unflatten(in_tree, list(dims[num_consts:]))

    def batched_jvp(primals, tangents):
        return vmap(jvp, in_axes=(arg_dims, arg_dims), out_axes=0, axis_size=size)(
            primals, tangents
        )

    outs = custom_jvp_call_p.bind(
        *consts,
        *args,
        jaxpr=new_jaxpr,
        jvp=batched_jvp,
        num_consts=len(consts) + num_consts,
        in_tree=in_tree,
        out_tree=out_tree,
    )
    return outs, list(out_dims)


for _p in (custom_jvp_call_p, custom_vjp_call_p):
    impl_rules[_p] = _inline_impl
    abstract_eval_rules[_p] = _call_abstract_eval
jvp_rules[custom_jvp_call_p] = _custom_jvp_jvp
batch_rules[custom_jvp_call_p] = _custom_jvp_batch

# ------------------------------------------------------------------------------- custom_vjp_call


def _custom_vjp_jvp(primals, tangents, *, jaxpr, fwd, bwd, num_consts, in_tree, out_tree):
    from thunderx import tree

    if any(type(t) is not Zero for t in tangents[:num_consts]):
        raise _closure_error("custom_vjp")
    args = primals[num_consts:]
    res_out = fwd(*tree.unflatten(in_tree, args))
    if not isinstance(res_out, (tuple, list)) or len(res_out) != 2:
        raise TypeError("custom_vjp fwd must return a pair (output, residuals)")
    out, res = res_out
    out_leaves, out_tree2 = tree.flatten(out)
    if out_tree2 != out_tree:
        raise TypeError(
            f"custom_vjp fwd output {out_tree2} does not match the function's {out_tree}"
        )
    res_leaves, res_tree = tree.flatten(res)
    ts = [instantiate(t) for t in tangents[num_consts:]]
    t_out = custom_lin_p.bind(
        *res_leaves,
        *ts,
        bwd=bwd,
        num_res=len(res_leaves),
        res_tree=res_tree,
        in_tree=in_tree,
        out_tree=out_tree,
        out_avals=tuple(get_aval(o) for o in out_leaves),
    )
    return out_leaves, t_out


def _custom_vjp_batch(args, dims, *, jaxpr, fwd, bwd, num_consts, in_tree, out_tree):
    from thunderx import tree
    from thunderx.transforms.jit import batch_of_jaxpr
    from thunderx.transforms.vmap import vmap

    size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
    new_jaxpr, consts, out_dims = batch_of_jaxpr(jaxpr, tuple(dims), size, force_out=0)
    arg_dims = tuple(tree.unflatten(in_tree, list(dims[num_consts:])))
    batched_fwd = vmap(fwd, in_axes=arg_dims, out_axes=0, axis_size=size)
    batched_bwd = vmap(bwd, in_axes=0, out_axes=0, axis_size=size)
    outs = custom_vjp_call_p.bind(
        *consts,
        *args,
        jaxpr=new_jaxpr,
        fwd=batched_fwd,
        bwd=batched_bwd,
        num_consts=len(consts) + num_consts,
        in_tree=in_tree,
        out_tree=out_tree,
    )
    return outs, list(out_dims)


jvp_rules[custom_vjp_call_p] = _custom_vjp_jvp
batch_rules[custom_vjp_call_p] = _custom_vjp_batch


def _custom_lin_impl(*args, **params):
    raise TypeError(
        "forward-mode differentiation (jvp, jacfwd) of a custom_vjp function is not supported: "
        "it only defines reverse mode. Use custom_jvp for a function that needs both."
    )


def _custom_lin_transpose(cts, *args, bwd, num_res, res_tree, in_tree, out_tree, out_avals):
    from thunderx import tree

    res = tree.unflatten(res_tree, list(args[:num_res]))
    ct = tree.unflatten(out_tree, [instantiate(c) for c in cts])
    cts_in = bwd(res, ct)
    if not isinstance(cts_in, tuple):
        raise TypeError(
            f"custom_vjp bwd must return a tuple (one entry per argument), got {type(cts_in).__name__}"
        )
    arg_avals = [get_aval(a) if not hasattr(a, "aval") else a.aval for a in args[num_res:]]
    leaves = []
    for sub, n in zip(cts_in, _per_arg_counts(in_tree)):
        sub_leaves = [None] * n if sub is None else tree.flatten(sub)[0]
        leaves.extend(sub_leaves)
    if len(leaves) != len(arg_avals) or len(cts_in) != len(_per_arg_counts(in_tree)):
        raise TypeError("custom_vjp bwd returned cotangents that do not match the arguments")
    return [None] * num_res + leaves


def _per_arg_counts(in_tree):
    from thunderx import tree

    dummy = tree.unflatten(in_tree, [0] * in_tree.num_leaves)
    return [len(tree.leaves(a)) for a in dummy]


def _custom_lin_batch(args, dims, *, bwd, num_res, res_tree, in_tree, out_tree, out_avals):
    from thunderx.primitives import shape as S
    from thunderx.transforms.vmap import vmap

    size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
    moved = [
        S.broadcast_batch(a, size, 0) if d is None else S.moveaxis(a, d, 0)
        for a, d in zip(args, dims)
    ]
    outs = custom_lin_p.bind(
        *moved,
        bwd=vmap(bwd, in_axes=0, out_axes=0, axis_size=size),
        num_res=num_res,
        res_tree=res_tree,
        in_tree=in_tree,
        out_tree=out_tree,
        out_avals=tuple(a.update(shape=(size,) + tuple(a.shape)) for a in out_avals),
    )
    return outs, [0] * len(outs)


impl_rules[custom_lin_p] = _custom_lin_impl
abstract_eval_rules[custom_lin_p] = lambda *avals, out_avals, **params: list(out_avals)
transpose_rules[custom_lin_p] = _custom_lin_transpose
batch_rules[custom_lin_p] = _custom_lin_batch
linear_primitives.add(custom_lin_p)
not_differentiable[custom_lin_p] = "the linear half of a custom_vjp: only its transpose exists"
