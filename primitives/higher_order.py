"""Higher-order primitives: stop_gradient and jit_call (a call holding a jaxpr). The custom
derivative calls live in custom.py.

Sub-jaxprs sit in params["jaxpr"] with no constvars: their consts are passed as leading operands.
"""

from __future__ import annotations

from thunderx.ad_util import Zero
from thunderx.core import ALL_OPERANDS, call_primitives, declare, get_aval

# --------------------------------------------------------------------------------- stop_gradient


def _stop_gradient_jvp(primals, tangents):
    out = stop_gradient_p.bind(primals[0])
    return out, Zero(get_aval(out))


def _cut(x):
    """The identity for thunderx's transforms; for torch autograd running through an eager
    transform (a tensor that requires grad), the cut of its graph that `x.detach()` makes."""
    return x.detach() if x.requires_grad else x


stop_gradient_p = declare(
    "stop_gradient",
    impl=_cut,
    abstract_eval=lambda x: x.strip_weak(),
    jvp=_stop_gradient_jvp,
    batch=lambda args, dims: (stop_gradient_p.bind(args[0]), dims[0]),
    torch_codegen=lambda args, avals: args[0],
    nvfuser=lambda fd, x: x,
    aliases=(0,),  # the identity: its operand itself
    elementwise=True,
)


def _name_jvp(primals, tangents, *, name):
    return name_p.bind(primals[0], name=name), tangents[0]


# checkpoint_name's tag: the identity, whose outputs checkpoint policies can select by name
name_p = declare(
    "name",
    impl=lambda x, *, name: x,
    abstract_eval=lambda x, *, name: x.strip_weak(),
    jvp=_name_jvp,
    transpose=lambda ct, x, *, name: [ct],
    linear=True,
    batch=lambda args, dims, *, name: (name_p.bind(args[0], name=name), dims[0]),
    torch_codegen=lambda args, avals, *, name: args[0],
    nvfuser=lambda fd, x, *, name: x,
    aliases=(0,),  # the identity: its operand itself
    elementwise=True,
)


def checkpoint_name(x, name: str):
    """`x` tagged with `name` (JAX's `checkpoint_name`): inside `checkpoint`, the policies
    `checkpoint_policies.save_only_these_names` / `save_any_names_but_these` choose by these
    names which values reverse mode keeps from the forward pass.

    >>> f = thunderx.checkpoint(lambda x: torch.sin(thunderx.checkpoint_name(x.exp(), "e")),
    ...     policy=thunderx.checkpoint_policies.save_only_these_names("e"))
    >>> thunderx.grad(f)(torch.tensor(0.))
    tensor(0.5403)
    """
    from thunderx import tree, validate
    from thunderx.core import Tracer

    if not isinstance(name, str):
        raise TypeError(f"checkpoint_name: name must be a str, got {type(name).__name__}")
    validate.check_leaves(x, "checkpoint_name", "its argument")
    return tree.map(lambda v: name_p.bind(v, name=name) if isinstance(v, Tracer) else v, x)


def _no_grad_jvp(primals, tangents):
    out = no_grad_p.bind(primals[0])
    return out, Zero(get_aval(out))


def _no_grad_forward_jvp(primals, tangents):
    # the tangent too is computed in the block: a constant for enclosing reverse-mode levels
    return no_grad_p.bind(primals[0]), no_grad_p.bind(tangents[0])


# A value computed in a torch `no_grad` block: no derivative for reverse-mode levels (grad, vjp,
# jacrev), while forward-mode levels (jvp, jacfwd) carry its tangent, as torch's forward AD does.
no_grad_p = declare(
    "no_grad",
    impl=_cut,
    abstract_eval=lambda x: x.strip_weak(),
    jvp=_no_grad_jvp,
    forward_jvp=_no_grad_forward_jvp,
    # an identity on tangents (linearize stages it into the linear map)
    transpose=lambda ct, x: [ct],
    batch=lambda args, dims: (no_grad_p.bind(args[0]), dims[0]),
    torch_codegen=lambda args, avals: args[0],
    nvfuser=lambda fd, x: x,
    aliases=(0,),  # the identity: its operand itself
    elementwise=True,
)


def _copy_jvp(primals, tangents):
    return copy_p.bind(primals[0]), tangents[0]


# torch.clone, and a jit output the optimizer made an input (x * 1): a fresh tensor with x's
# value, so that mutating the result leaves x alone (torch's and torch.compile's semantics). The
# optimizer removes every copy but those of an input returned as an output (passes.simplify).
copy_p = declare(
    "copy",
    impl=lambda x: x.clone(),
    abstract_eval=lambda x: x.strip_weak(),
    jvp=_copy_jvp,
    linear=True,
    transpose=lambda ct, x: [ct],
    batch=lambda args, dims: (copy_p.bind(args[0]), dims[0]),
    torch_codegen=lambda args, avals: f"{args[0]}.clone()",
    elementwise=True,
)


def copy(x):
    """A fresh tensor with x's value (torch.clone)."""
    return copy_p.bind(x)


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


def _call_abstract_eval(*avals, jaxpr, **params):
    for i, (a, v) in enumerate(zip(avals, jaxpr.invars)):
        if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
            raise TypeError(f"call: operand {i} is {a.str_short()}, expected {v.aval.str_short()}")
    return jaxpr.out_avals


def _jit_call_impl(*args, jaxpr, name):
    from thunderx.transforms.jaxpr_cache import compiled_for

    return compiled_for(jaxpr)(*args)


def _jit_call_jvp(primals, tangents, *, jaxpr, name):
    from thunderx.transforms.jaxpr_cache import jvp_of_jaxpr

    nonzero = tuple(type(t) is not Zero for t in tangents)
    jvp_jaxpr, consts, out_nonzero = jvp_of_jaxpr(jaxpr, nonzero)
    ts = [t for t in tangents if type(t) is not Zero]
    outs = jit_call_p.bind(*consts, *primals, *ts, jaxpr=jvp_jaxpr, name=f"jvp({name})")
    n = len(jaxpr.outvars)
    it = iter(outs[n:])
    t_out = [next(it) if nz else Zero(a) for nz, a in zip(out_nonzero, jaxpr.out_avals)]
    return outs[:n], t_out


def _jit_call_batch(args, dims, *, jaxpr, name):
    from thunderx.transforms.jaxpr_cache import batch_of_jaxpr

    size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
    new_jaxpr, consts, out_dims = batch_of_jaxpr(jaxpr, tuple(dims), size)
    outs = jit_call_p.bind(*consts, *args, jaxpr=new_jaxpr, name=f"vmap({name})")
    return outs, list(out_dims)


def _jit_call_partial_eval(eqn, unknowns):
    from thunderx.transforms.partial_eval import split_call_eqn

    return split_call_eqn(eqn, unknowns)


# A called program may return its inputs (or views of them) as outputs.
jit_call_p = declare(
    "jit_call",
    multiple_results=True,
    impl=_jit_call_impl,
    abstract_eval=_call_abstract_eval,
    jvp=_jit_call_jvp,
    batch=_jit_call_batch,
    partial_eval=_jit_call_partial_eval,
    aliases=ALL_OPERANDS,
)
call_primitives.add(jit_call_p)
