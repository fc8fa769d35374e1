"""jit's signature: the cache key of a call (each leaf's shape, dtype and device; Python
scalars as weakly typed 0-dim tensors), static arguments completed across names and positions,
and the checks a cached program's call makes (captured values unchanged, torch autograd
through the call)."""

from __future__ import annotations

import inspect

import torch

from thunderx.core import Tracer
from thunderx.errors import user_frame

SCALARS = (bool, int, float, complex)
SCALAR_KEYS = frozenset(SCALARS)


def leaf_key(x):
    t = type(x)
    if t is torch.Tensor or isinstance(x, torch.Tensor):
        return (x.shape, x.dtype, x.device)
    if t in SCALARS:
        return t
    if isinstance(x, Tracer):
        a = x.aval
        return (a.shape, a.dtype, a.device)
    raise TypeError(
        f"jit: arguments must be tensors, Python scalars or pytrees of them, got {t.__name__} "
        f"(at {user_frame()}); mark non-array arguments static with static_argnums"
    )


def scalar_leaf(x):
    if type(x) is float:
        return torch.tensor(x, dtype=torch.float64)
    if type(x) is complex:
        return torch.tensor(x, dtype=torch.complex128)
    return torch.tensor(x)


def weak_aval(aval):
    """A Python scalar argument's aval: weakly typed, so it takes the dtype of the tensors it
    meets (torch's rule for Python scalars), while its value keeps float64 precision."""
    from thunderx.avals import ShapedArray

    return ShapedArray(aval.shape, aval.dtype, aval.device, weak_type=True)


def complete_statics(fun, argnums, argnames):
    """As JAX does: a static parameter named in one list is static however it is passed, so
    each list gains the other's entries where the signature connects them."""
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return tuple(argnums), tuple(argnames)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    nums, names = list(argnums), list(argnames)
    for name in argnames:
        if name in positional and positional.index(name) not in nums:
            nums.append(positional.index(name))
    for i in argnums:
        if 0 <= i < len(positional) and positional[i] not in names:
            names.append(positional[i])
    return tuple(nums), tuple(names)


def reads_hold(reads) -> bool:
    """Whether every captured tensor whose value the trace read still has that version."""
    return all(t._version == v for t, v in reads)


def grad_flags(leaves) -> tuple:
    """Which arguments are tensors that require grad where torch would record them (grad mode
    on): the leaves torch.autograd.grad inside the function may differentiate with respect to."""
    on = torch.is_grad_enabled()
    return tuple(on and isinstance(x, torch.Tensor) and x.requires_grad for x in leaves)


def any_requires_grad(*groups) -> bool:
    return any(isinstance(t, torch.Tensor) and t.requires_grad for g in groups for t in g)


def needs_autograd(leaves, consts) -> bool:
    """torch autograd through a call needs the program variant without in-place reuse."""
    return torch.is_grad_enabled() and any_requires_grad(leaves, consts)
