"""`closure_convert`: JAX's way to hand a function that closes over differentiated values to code
whose custom derivative rule needs them as explicit arguments (custom_vjp and custom_jvp refuse a
derivative with respect to a closed-over value).

>>> fn, consts = closure_convert(lambda x: x * 2.0, torch.tensor(1.0))
>>> fn(torch.tensor(3.0), *consts), consts
(tensor(6.), [])
"""

from __future__ import annotations

from typing import Callable

from thunderx import tree
from thunderx.avals import is_float
from thunderx.core import Tracer, get_aval, is_tensor_like
from thunderx.errors import user_frame


def closure_convert(fun: Callable, *example_args) -> tuple[Callable, list]:
    """`(converted, consts)`: `converted(*args, *consts)` computes `fun(*args)` for arguments of
    the example arguments' structure, shapes and dtypes, with the floating-point traced values
    `fun` closes over (those of an enclosing grad, jvp, vmap or jit) hoisted into `consts`, as
    `jax.closure_convert` does. Other closed-over values stay closed over. `fun` is traced once,
    with the example arguments' abstract values.

    >>> def outer(y):
    ...     fn, consts = closure_convert(lambda x: x * y, torch.tensor(1.0))
    ...     return fn(torch.tensor(3.0), *consts), len(consts)
    >>> thunderx.vmap(lambda y: outer(y)[0])(torch.tensor([1.0, 2.0]))
    tensor([3., 6.])
    """
    from thunderx.ir import closure_convert as hoist_constvars
    from thunderx.ir import eval_jaxpr
    from thunderx.tracing import trace_flat

    where = user_frame()
    if not callable(fun):
        raise TypeError(f"closure_convert: fun must be callable, got {type(fun).__name__}")
    leaves, in_tree = tree.flatten(example_args)
    for x in leaves:
        if not (is_tensor_like(x) or type(x) in (bool, int, float, complex)):
            raise TypeError(
                f"closure_convert: example arguments must be tensors, Python scalars or pytrees "
                f"of them, got {type(x).__name__} (at {where})"
            )

    def flat(*xs):
        out_leaves, out_tree = tree.flatten(fun(*tree.unflatten(in_tree, list(xs))))
        return out_leaves, out_tree

    closed, out_tree = trace_flat(flat, [get_aval(x) for x in leaves])
    jaxpr, consts = hoist_constvars(closed.jaxpr), list(closed.consts)
    hoisted = [
        i for i, c in enumerate(consts) if isinstance(c, Tracer) and is_float(get_aval(c).dtype)
    ]
    n_args = len(example_args)

    def converted(*args):
        if len(args) != n_args + len(hoisted):
            raise TypeError(
                f"closure_convert: the converted function takes {n_args} argument(s) and "
                f"{len(hoisted)} const(s), got {len(args)} values"
            )
        arg_leaves, arg_tree = tree.flatten(args[:n_args])
        if arg_tree != in_tree:
            raise TypeError(
                f"closure_convert: the converted function was traced for arguments of structure "
                f"{in_tree}, got {arg_tree}"
            )
        values = list(consts)
        for i, c in zip(hoisted, args[n_args:]):
            values[i] = c
        return tree.unflatten(out_tree, eval_jaxpr(jaxpr, [], *values, *arg_leaves))

    converted.__name__ = f"converted_{getattr(fun, '__name__', 'fun')}"
    return converted, [consts[i] for i in hoisted]
