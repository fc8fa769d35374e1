"""custom_vmap: a function with a user-defined batching rule (JAX's
`jax.custom_batching.custom_vmap`), for a function whose batched form is better written by hand
than derived (a call into a batched kernel, a loop the rule replaces with one operation).

>>> @thunderx.custom_vmap
... def f(x):
...     return x.sum()
>>> @f.def_vmap
... def f_vmap(axis_size, in_batched, x):
...     return x.sum(1), True  # one call for the whole batch
>>> thunderx.vmap(f)(torch.ones(3, 2))
tensor([2., 2., 2.])
"""

from __future__ import annotations

import functools
from typing import Callable

from thunderx import tree, validate
from thunderx.core import get_aval, is_tensor_like
from thunderx.errors import user_frame


class custom_vmap:  # noqa: N801 - JAX's name
    """`fun` with a batching rule: under `vmap`, `rule(axis_size, in_batched, *args)` runs
    instead, with each batched argument's batch dim first and `in_batched` the arguments' pytree
    of bools; it returns `(out, out_batched)`, out_batched a bool per output leaf (or one bool for
    all) saying which outputs carry the batch dim first. Outside `vmap` `fun` runs (or is staged
    by `jit`); under `jvp` / `grad` `fun` itself is differentiated, as in JAX.
    """

    def __init__(self, fun: Callable):
        validate.check_callable(fun, "custom_vmap")
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.rule: Callable | None = None

    def def_vmap(self, rule: Callable) -> Callable:
        """Set the batching rule `rule(axis_size, in_batched, *args) -> (out, out_batched)`."""
        validate.check_callable(rule, "custom_vmap.def_vmap", "rule")
        self.rule = rule
        return rule

    def __call__(self, *args):
        from thunderx.primitives.custom_vmap import custom_vmap_call_p
        from thunderx.transforms.custom import _needs_bind

        name = getattr(self.fun, "__name__", "custom_vmap function")
        if self.rule is None:
            raise AttributeError(
                f"no vmap rule defined for custom_vmap function {name}; use .def_vmap"
            )
        where = user_frame()
        leaves, in_tree = tree.flatten(args)
        for x in leaves:
            if not is_tensor_like(x):
                raise TypeError(
                    f"custom_vmap {name}: arguments must be tensors or pytrees of them, got "
                    f"{type(x).__name__} (at {where})"
                )
        if not _needs_bind(leaves):
            return self.fun(*args)
        fun, rule = self.fun, self.rule
        out_tree = []

        def note(t):
            if out_tree and out_tree[0] != t:
                raise TypeError(
                    f"custom_vmap {name}: the vmap rule returned the structure {t}, the function "
                    f"{out_tree[0]} (at {where})"
                )
            out_tree[:] = [t]

        def call(*xs):
            out_leaves, t = tree.flatten(fun(*tree.unflatten(in_tree, list(xs))))
            note(t)
            return out_leaves

        def flat_rule(size, batched, xs):
            res = rule(size, tree.unflatten(in_tree, batched), *tree.unflatten(in_tree, list(xs)))
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise TypeError(
                    f"custom_vmap {name}: the vmap rule must return (out, out_batched), got "
                    f"{type(res).__name__} (at {where})"
                )
            out_leaves, t = tree.flatten(res[0])
            note(t)
            flags = res[1]
            flags = [flags] * len(out_leaves) if isinstance(flags, bool) else tree.leaves(flags)
            if len(flags) != len(out_leaves) or not all(isinstance(b, bool) for b in flags):
                raise TypeError(
                    f"custom_vmap {name}: out_batched must be a bool or a bool per output leaf, "
                    f"got {res[1]!r} (at {where})"
                )
            for i, (o, b) in enumerate(zip(out_leaves, flags)):
                shape = tuple(get_aval(o).shape)
                if b and (not shape or shape[0] != size):
                    raise TypeError(
                        f"custom_vmap {name}: output {i} is marked batched but has shape {shape} "
                        f"for a batch of {size} (the batch dim comes first) (at {where})"
                    )
            return out_leaves, flags

        outs = custom_vmap_call_p.bind(
            *leaves, call=call, rule=flat_rule, jaxpr=None, num_consts=0, name=name
        )
        return tree.unflatten(out_tree[0], outs)
