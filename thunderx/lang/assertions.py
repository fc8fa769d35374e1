"""Run-time checks on traced values: `torch._is_all_true` / `torch._is_any_true`, the private ops
torch's own assertions are written with (`torch.distributions`' argument and support validation,
`torch._check_tensor_all`). Their result is a bool tensor that the caller only ever asks for its
truth (`if not torch._is_all_true(valid): raise ...`).

Where the value is known (eager values under grad, vjp, jvp, ...), the check runs on it and fails
as in eager torch. Where it is not (jit, vmap, make_jaxpr), the result is still computed as a traced
value (so arithmetic on it stays right), and asking for its truth answers True: the assertion is
skipped, as torch.func's transforms do with `validate_args` off. Nothing else about the value is
affected; any other tracer's truth still raises a ConcretizationError."""

from __future__ import annotations

import weakref

import torch

from thunderx.core import Tracer
from thunderx.lang._base import known_value, register
from thunderx.lang.reductions import _all, _any

# id -> weak reference (a WeakSet would compare tracers with their elementwise `==`)
_UNCHECKABLE: dict[int, weakref.ref] = {}


def is_skipped_check(x) -> bool:
    """Whether `x` is the traced result of a run-time check whose value is unknown while tracing:
    its truth is taken as True (the check is skipped)."""
    ref = _UNCHECKABLE.get(id(x)) if isinstance(x, Tracer) else None
    return ref is not None and ref() is x


def _check(reduce, eager):
    def impl(x):
        value = known_value(x)
        if value is not None:
            return eager(value)
        out = reduce(x)
        key = id(out)
        _UNCHECKABLE[key] = weakref.ref(out, lambda _, key=key: _UNCHECKABLE.pop(key, None))
        return out

    return impl


register(torch._is_all_true, methods=("_is_all_true",))(_check(_all, torch._is_all_true))
register(torch._is_any_true, methods=("_is_any_true",))(_check(_any, torch._is_any_true))
