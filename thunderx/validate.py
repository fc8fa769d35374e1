"""Argument checks shared by the public entry points: each refuses bad input with an error that
names the API, the argument and the user's line (`(at file:line)`), before any tracing starts.

>>> normalize_argnums((0, 2), nargs=3, api="grad")
(False, (0, 2))
>>> check_int(-1, "jit", "cache_size", minimum=1)
Traceback (most recent call last):
...
thunderx.errors.ArgumentValueError: jit: cache_size must be an int >= 1, got -1 (at ...)
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

from thunderx import tree
from thunderx.avals import ShapedArray, is_float
from thunderx.core import get_aval, is_tensor_like
from thunderx.errors import (
    ArgumentTypeError,
    ArgumentValueError,
    AxisOutOfRangeError,
    TransformArgumentTypeError,
    TransformArgumentValueError,
    user_frame,
)

_SCALARS = (bool, int, float)


def _at() -> str:
    return f"(at {user_frame()})"


def is_int(x) -> bool:
    """A Python int that is not a bool (True is not an axis or an argument number)."""
    return isinstance(x, int) and not isinstance(x, bool)


def check_callable(fun, api: str, arg: str = "fun") -> None:
    if not callable(fun):
        raise ArgumentTypeError(
            f"{api}: {arg} must be callable, got {type(fun).__name__} {_short(fun)} {_at()}"
        )


def check_bool(value, api: str, arg: str) -> None:
    if not isinstance(value, bool):
        raise ArgumentTypeError(
            f"{api}: {arg} must be True or False, got {type(value).__name__} {_short(value)} "
            f"{_at()}"
        )


def check_int(value, api: str, arg: str, minimum: int | None = None) -> int:
    if not is_int(value):
        raise ArgumentTypeError(
            f"{api}: {arg} must be an int, got {type(value).__name__} {_short(value)} {_at()}"
        )
    if minimum is not None and value < minimum:
        raise ArgumentValueError(f"{api}: {arg} must be an int >= {minimum}, got {value} {_at()}")
    return value


def _short(x) -> str:
    r = repr(x)
    return r if len(r) <= 60 else r[:57] + "..."


# ------------------------------------------------------------------------------- argnums


def check_argnums(argnums, api: str, arg: str = "argnums") -> tuple[bool, tuple]:
    """At construction: an int or a non-empty sequence of distinct ints. Returns (single, nums).
    The messages carry torch.func's phrases ("must be int or Tuple", "must be non-empty")."""
    if is_int(argnums):
        return True, (argnums,)
    if not isinstance(argnums, (tuple, list)):
        raise TransformArgumentTypeError(
            f"{api}: {arg} must be int or Tuple[int, ...] (or a list of ints), got "
            f"{type(argnums).__name__} {_short(argnums)} {_at()}"
        )
    if not argnums:
        raise TransformArgumentValueError(f"{api}: {arg} must be non-empty {_at()}")
    for a in argnums:
        if not is_int(a):
            raise TransformArgumentTypeError(
                f"{api}: {arg} entries must be int, got {type(a).__name__} {_short(a)} in "
                f"{_short(argnums)} {_at()}"
            )
    return False, tuple(argnums)


def normalize_argnums(argnums, nargs: int, api: str, arg: str = "argnums") -> tuple[bool, tuple]:
    """At call time: each entry in range for `nargs` positional arguments, no duplicates after
    wrapping negatives. Returns (single, non-negative nums)."""
    single, nums = check_argnums(argnums, api, arg)
    out = []
    for a in nums:
        if not -nargs <= a < nargs:
            raise TransformArgumentValueError(
                f"{api}: {arg} {a} is out of range: got {arg}={a}, but only {nargs} positional "
                f"inputs {_at()}"
            )
        out.append(a % nargs)
    if len(set(out)) != len(out):
        raise TransformArgumentValueError(
            f"{api}: {arg} elements must be unique, got {argnums}: it has duplicates (positions "
            f"{tuple(out)}) {_at()}"
        )
    return single, tuple(out)


def _signature(fun):
    try:
        return inspect.signature(fun)
    except (TypeError, ValueError):
        return None


def check_static_args(fun, static_argnums, static_argnames, api: str) -> tuple[tuple, tuple]:
    """At construction: `static_argnums` ints and `static_argnames` strings (one or a sequence),
    each naming a parameter `fun` has where its signature is known (JAX's rule); a function with
    `*args` / `**kwargs` accepts any number / name. Returns both as tuples."""
    if is_int(static_argnums):
        static_argnums = (static_argnums,)
    if not isinstance(static_argnums, (tuple, list)) or not all(map(is_int, static_argnums)):
        raise ArgumentTypeError(
            f"{api}: static_argnums must be an int or a tuple of ints, got "
            f"{_short(static_argnums)} {_at()}"
        )
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    if not isinstance(static_argnames, (tuple, list)) or not all(
        isinstance(n, str) for n in static_argnames
    ):
        raise ArgumentTypeError(
            f"{api}: static_argnames must be a str or a tuple of str, got "
            f"{_short(static_argnames)} {_at()}"
        )
    sig = _signature(fun)
    if sig is not None:
        params = list(sig.parameters.values())
        kinds = {p.kind for p in params}
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if inspect.Parameter.VAR_POSITIONAL not in kinds:
            n = len(positional)
            for a in static_argnums:
                if not -n <= a < n:
                    raise ArgumentValueError(
                        f"{api}: static_argnums {a} is out of range: "
                        f"{getattr(fun, '__name__', 'the function')} takes {n} positional "
                        f"argument{'s' if n != 1 else ''} {_at()}"
                    )
        if inspect.Parameter.VAR_KEYWORD not in kinds:
            names = {p.name for p in params if p.kind != p.POSITIONAL_ONLY}
            for name in static_argnames:
                if name not in names:
                    raise ArgumentValueError(
                        f"{api}: static_argnames entry {name!r} is not a parameter of "
                        f"{getattr(fun, '__name__', 'the function')} (it takes "
                        f"{', '.join(sorted(names)) or 'no named arguments'}) {_at()}"
                    )
    return tuple(static_argnums), tuple(static_argnames)


def static_positions(static_argnums: Sequence[int], nargs: int, api: str) -> set:
    """Non-negative positions of `static_argnums` in a call with `nargs` positional arguments."""
    out = set()
    for a in static_argnums:
        if not -nargs <= a < nargs:
            raise ArgumentValueError(
                f"{api}: static_argnums {a} is out of range for a call with {nargs} positional "
                f"argument{'s' if nargs != 1 else ''} {_at()}"
            )
        out.add(a % nargs)
    return out


# ----------------------------------------------------------------------------- vmap axes


def check_axis_spec(spec, api: str, arg: str) -> None:
    """At construction: every leaf of an in_axes/out_axes tree is an int or None."""
    leaves = tree.leaves(spec) if spec is not None else []
    for ax in leaves:
        if ax is not None and not is_int(ax):
            raise ArgumentTypeError(
                f"{api}: {arg} entries must be int or None, got {type(ax).__name__} "
                f"{_short(ax)} in {arg}={_short(spec)} {_at()}"
            )


def normalize_axis(ax, ndim: int, api: str, arg: str, what: str) -> int:
    """`ax` as a non-negative axis of a rank-`ndim` value (`what` describes the value)."""
    if not is_int(ax):
        raise ArgumentTypeError(f"{api}: {arg} entries must be int or None, got {ax!r} {_at()}")
    if not -ndim <= ax < ndim:
        raise AxisOutOfRangeError(
            f"{api}: {arg}={ax} is out of range for {what} (Dimension out of range; valid: "
            f"{-ndim}..{ndim - 1}) {_at()}"
        )
    return ax % ndim


# -------------------------------------------------------------------- tangents and cotangents


def check_tangent(primal: ShapedArray, tangent: ShapedArray, api: str, what: str, i: int) -> None:
    """A tangent (or cotangent) for a value of type `primal`: same shape; for a floating value
    also the same dtype (JAX's rule; torch.func.linearize and torch.autograd refuse too)."""
    if tuple(tangent.shape) != tuple(primal.shape):
        raise ArgumentValueError(
            f"{api}: {what} {i} has shape {tuple(tangent.shape)}, but the corresponding "
            f"{'output' if 'cotangent' in what else 'primal'} {primal.str_short()} has shape "
            f"{tuple(primal.shape)} {_at()}"
        )
    if is_float(primal.dtype) and tangent.dtype != primal.dtype:
        raise ArgumentTypeError(
            f"{api}: {what} {i} has dtype {tangent.dtype}, but the corresponding "
            f"{'output' if 'cotangent' in what else 'primal'} has dtype {primal.dtype}; convert "
            f"it with .to({primal.dtype}) {_at()}"
        )


def check_tangents(primal_avals, tangent_leaves, api: str, what: str = "tangent") -> None:
    for i, (pa, t) in enumerate(zip(primal_avals, tangent_leaves)):
        if not (is_tensor_like(t) or type(t) in (int, float)):
            raise ArgumentTypeError(
                f"{api}: {what} {i} must be a tensor, got {type(t).__name__} {_at()}"
            )
        check_tangent(pa, get_aval(t), api, what, i)


# --------------------------------------------------------------------------------- has_aux


def split_aux(out, api: str):
    """`(output, aux)` from a has_aux function's result, or a clear error."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise ArgumentTypeError(
            f"{api}(..., has_aux=True): the function must return a pair (output, aux), "
            f"got {type(out).__name__} {_at()}"
        )
    return out[0], out[1]


class AuxPassthrough:
    """Wraps a has_aux function so only its aux's tensor leaves are traced; every other leaf
    (strings, Python numbers, None, arbitrary objects) is handed back unchanged, as JAX does.

    >>> f = lambda x: ((x * x).sum(), {"step": 3, "h": x + 1})
    >>> wrapped = AuxPassthrough(f, "grad")
    >>> g, aux = thunderx.grad(wrapped, has_aux=True)(torch.ones(2))
    >>> wrapped.rebuild(aux)
    {'step': 3, 'h': tensor([2., 2.])}
    """

    def __init__(self, fun: Callable, api: str):
        self.fun = fun
        self.api = api
        self.treedef = None
        self.others: list = []
        self.tensor_pos: list = []

    def __call__(self, *args, **kwargs):
        out, aux = split_aux(self.fun(*args, **kwargs), self.api)
        leaves, self.treedef = tree.flatten(aux)
        self.tensor_pos = [i for i, x in enumerate(leaves) if is_tensor_like(x)]
        traced = [leaves[i] for i in self.tensor_pos]
        for i in self.tensor_pos:
            leaves[i] = None  # hold no tracer beyond the trace
        self.others = leaves
        return out, traced

    def rebuild(self, traced_aux: list) -> Any:
        leaves = list(self.others)
        for i, v in zip(self.tensor_pos, traced_aux):
            leaves[i] = v
        return tree.unflatten(self.treedef, leaves)


def check_leaves(x, api: str, arg: str) -> None:
    """Every leaf of `x` is a tensor (or tracer) or a Python scalar."""
    for leaf in tree.leaves(x):
        if not (is_tensor_like(leaf) or type(leaf) in _SCALARS):
            raise ArgumentTypeError(
                f"{api}: {arg} must be tensors, Python scalars or pytrees of them, got "
                f"{type(leaf).__name__} {_short(leaf)} {_at()}"
            )
