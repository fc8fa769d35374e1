"""custom_jvp and custom_vjp: user-defined derivative rules that compose with jit and vmap."""

from __future__ import annotations

import functools
from typing import Callable

from thunderx import tree
from thunderx.core import get_aval, is_top_level
from thunderx.passes import closure_convert
from thunderx.tracing import trace_flat


def _stage(fun, args):
    leaves, in_tree = tree.flatten(args)

    def flat(*xs):
        out_leaves, out_tree = tree.flatten(fun(*tree.unflatten(in_tree, xs)))
        return out_leaves, out_tree

    closed, out_tree = trace_flat(flat, [get_aval(x) for x in leaves])
    return closed, leaves, in_tree, out_tree


class custom_jvp:  # noqa: N801 - JAX's name
    """A function with a custom forward-mode rule; reverse mode is derived by transposition.

    >>> @thunderx.custom_jvp
    ... def f(x):
    ...     return torch.sin(x)
    >>> @f.defjvp
    ... def f_jvp(primals, tangents):
    ...     (x,), (t,) = primals, tangents
    ...     return torch.sin(x), torch.cos(x) * t
    """

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.jvp: Callable | None = None

    def defjvp(self, jvp: Callable) -> Callable:
        """`jvp(primals, tangents) -> (primal_out, tangent_out)`, primals/tangents as tuples."""
        self.jvp = jvp
        return jvp

    def __call__(self, *args):
        if self.jvp is None:
            raise AttributeError(
                f"no JVP rule defined for custom_jvp function {self.__name__}; use .defjvp"
            )
        if is_top_level():
            return self.fun(*args)
        from thunderx.primitives.higher_order import custom_jvp_call_p

        closed, leaves, in_tree, out_tree = _stage(self.fun, args)
        outs = custom_jvp_call_p.bind(
            *closed.consts,
            *leaves,
            jaxpr=closure_convert(closed.jaxpr),
            jvp=self._flat_jvp,
            num_consts=len(closed.consts),
            in_tree=in_tree,
            out_tree=out_tree,
        )
        return tree.unflatten(out_tree, outs)

    def _flat_jvp(self, primals, tangents):
        return self.jvp(tuple(primals), tuple(tangents))


class custom_vjp:  # noqa: N801 - JAX's name
    """A function with a custom reverse-mode rule.

    `fwd(*args) -> (out, residuals)`; `bwd(residuals, ct) -> tuple of one cotangent per arg`.

    >>> @thunderx.custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> clip_gradient.defvjp(lambda x: (x, None), lambda _, ct: (ct.clamp(-1, 1),))
    >>> thunderx.grad(lambda x: 5 * clip_gradient(x))(torch.tensor(2.))
    tensor(1.)
    """

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        self.fwd = fwd
        self.bwd = bwd

    def __call__(self, *args):
        if self.fwd is None:
            raise AttributeError(
                f"no VJP rule defined for custom_vjp function {self.__name__}; "
                "use .defvjp(fwd, bwd)"
            )
        if is_top_level():
            return self.fun(*args)
        from thunderx.primitives.higher_order import custom_vjp_call_p

        closed, leaves, in_tree, out_tree = _stage(self.fun, args)
        outs = custom_vjp_call_p.bind(
            *closed.consts,
            *leaves,
            jaxpr=closure_convert(closed.jaxpr),
            fwd=self.fwd,
            bwd=self.bwd,
            num_consts=len(closed.consts),
            in_tree=in_tree,
            out_tree=out_tree,
        )
        return tree.unflatten(out_tree, outs)
