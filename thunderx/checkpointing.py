"""`checkpoint` (alias `remat`, JAX's names) and `checkpoint_policies`: reverse mode through a
checkpointed function keeps only what its policy saves from the forward pass and recomputes the
rest (primitives/remat.py); `checkpoint_name` (primitives/higher_order.py) tags values that the
name-based policies select.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

from thunderx import tree, validate
from thunderx.control_flow import _avals, _concrete, _flatten, _trace

__all__ = ["checkpoint", "checkpoint_policies", "remat"]


class checkpoint_policies:  # noqa: N801 - JAX's name
    """Which intermediate values reverse mode may keep from the forward pass of a checkpointed
    function (the rest are recomputed): `policy(prim, *avals, **params) -> bool`."""

    @staticmethod
    def nothing_saveable(prim, *avals, **params) -> bool:
        return False

    @staticmethod
    def everything_saveable(prim, *avals, **params) -> bool:
        return True

    @staticmethod
    def dots_saveable(prim, *avals, **params) -> bool:
        return prim.name == "dot_general"

    checkpoint_dots = dots_saveable

    @staticmethod
    def dots_with_no_batch_dims_saveable(prim, *avals, **params) -> bool:
        """Products without batch dimensions (matmuls, not batched matmuls)."""
        if prim.name != "dot_general":
            return False
        (_, _), (lhs_batch, rhs_batch) = params["dimension_numbers"]
        return not lhs_batch and not rhs_batch

    @staticmethod
    def save_only_these_names(*names: str) -> Callable:
        """Values tagged by `checkpoint_name` with one of `names`, and nothing else."""
        wanted = frozenset(names)
        return lambda prim, *avals, **params: prim.name == "name" and params["name"] in wanted

    @staticmethod
    def save_any_names_but_these(*names: str) -> Callable:
        """Values tagged by `checkpoint_name` with any name but `names`."""
        unwanted = frozenset(names)
        return lambda prim, *avals, **params: prim.name == "name" and params["name"] not in unwanted

    @staticmethod
    def save_from_both_policies(first: Callable, second: Callable) -> Callable:
        """What either policy saves."""
        return lambda prim, *avals, **params: bool(
            first(prim, *avals, **params) or second(prim, *avals, **params)
        )


def checkpoint(
    fun: Callable,
    policy: Callable | None = None,
    prevent_cse: bool = True,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
):
    """`fun` whose intermediates reverse mode recomputes instead of storing (those `policy`
    allows are stored). Works inside `scan` bodies, where it shrinks the per-step residuals.
    Arguments at `static_argnums` / `static_argnames` are Python values the function may branch
    on (they are not traced; JAX's meaning).

    >>> g = thunderx.grad(checkpoint(lambda x: torch.sin(torch.sin(x))))
    >>> g(torch.tensor(0.))
    tensor(1.)
    >>> f = checkpoint(lambda x, n: x**n if n > 1 else x, static_argnums=1)
    >>> thunderx.grad(f)(torch.tensor(2.0), 3)
    tensor(12.)
    """
    from thunderx.primitives.remat import checkpoint_p

    nums, names = validate.check_static_args(fun, static_argnums, static_argnames, "checkpoint")

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        if _concrete(args, kwargs):
            return fun(*args, **kwargs)
        n = len(args)
        static = {i: args[i] for i in validate.static_positions(nums, n, "checkpoint")}
        static_kw = {k: v for k, v in kwargs.items() if k in names}
        dyn = (
            [a for i, a in enumerate(args) if i not in static],
            {k: v for k, v in kwargs.items() if k not in names},
        )

        def body(ak):
            it = iter(ak[0])
            full = [static[i] if i in static else next(it) for i in range(n)]
            return fun(*full, **ak[1], **static_kw)

        leaves, in_tree = _flatten(dyn, "checkpoint")
        j, consts, out_tree = _trace(body, [in_tree], _avals(leaves), "checkpoint")
        outs = checkpoint_p.bind(*consts, *leaves, jaxpr=j, policy=policy)
        return tree.unflatten(out_tree, outs)

    del prevent_cse  # the primitive is never merged by CSE with the forward computation
    return wrapper


remat = checkpoint
