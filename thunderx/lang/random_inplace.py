"""In-place random Tensor methods (`bernoulli_`, `uniform_`, `normal_`, `exponential_`,
`random_`) and `randint_like` under transforms, routed like the other random functions of
lang/random.py: vmap's randomness modes, fresh draws under jit, torch's kernels elsewhere."""

from __future__ import annotations

import math

import torch

from thunderx.core import get_aval
from thunderx.errors import user_frame
from thunderx.lang import random_exact as exact
from thunderx.lang.random import _batch_traces, _randint, _staging_trace, draw, register_random


def _randint_like(x, *args, dtype=None, device=None, layout=None, memory_format=None, **kw):
    """randint_like(x, high) or randint_like(x, low, high): randint of x's shape."""
    kw.pop("requires_grad", None)
    low, high = (0, *args) if len(args) == 1 else args
    kw = {k: v for k, v in dict(dtype=dtype, device=device).items() if v is not None}
    out = exact.call("torch.randint_like", torch.randint_like, (x, *args), kw, like=True)
    if out is not exact.NOT_EXACT:
        return out
    a = get_aval(x)
    return _randint(low, high, tuple(a.shape), dtype=dtype or a.dtype, device=device or a.device)


def _transformed() -> bool:
    """True under a vmap or a staging trace: a draw there is not one eager draw of torch's."""
    return next(_batch_traces(), None) is not None or _staging_trace() is not None


def _inplace_draw(name, values):
    """`Tensor.<name>(...)` (bernoulli_, uniform_, ...): torch's own kernel in eager transforms;
    under vmap or staging, the draw `values(shape, dtype, device, *args)` written into the
    tensor, which must be a traced one (a batched draw does not fit a concrete tensor)."""
    method = getattr(torch.Tensor, name)

    def impl(x, *args, generator=None, **kwargs):
        from thunderx.core import Tracer
        from thunderx.lang.inplace import MutationError, mutate

        if not _transformed() and not isinstance(x, Tracer):
            return method(x, *args, generator=generator, **kwargs)
        out = exact.inplace(f"Tensor.{name}", name, x, args, dict(kwargs, generator=generator))
        if out is not exact.NOT_EXACT:
            return out
        exact.same_batched_check(f"Tensor.{name}", [a for a in args if isinstance(a, Tracer)])
        exact.unbatched_target_check(f"Tensor.{name}", x)
        a = get_aval(x)
        new = values(a.shape, a.dtype, a.device, f"Tensor.{name}", generator, *args, **kwargs)
        if not isinstance(x, Tracer) and not isinstance(new, Tracer):
            return x.copy_(new)  # one concrete draw (vmap's randomness="same" outside jit)
        if not isinstance(x, Tracer):
            raise MutationError(
                f"Tensor.{name} on a tensor created outside the traced values at {user_frame()}: "
                "under vmap or jit its draws cannot be written into a concrete tensor (torch."
                "empty_like(x) of a vmapped x is one). Use the out-of-place form (torch."
                "bernoulli(torch.full_like(x, p)), torch.rand_like(x), torch.randint_like(x, "
                "high), torch.normal(mean, std)) or draw into a traced tensor (x.clone())"
            )
        return mutate(x, new, f"Tensor.{name}")

    return impl


def _bernoulli_values(shape, dtype, device, name, generator, p=0.5):
    u = draw("uniform", shape, torch.float64, device, name, generator)
    return (u < p).to(dtype)


def _cauchy_values(shape, dtype, device, name, generator, median=0.0, sigma=1.0):
    u = draw("uniform", shape, dtype, device, name, generator)
    return torch.tan(math.pi * (u - 0.5)) * sigma + median


def _geometric_values(shape, dtype, device, name, generator, p):
    u = draw("uniform", shape, torch.float64, device, name, generator)
    return torch.ceil(torch.log1p(-u) / math.log1p(-p)).clamp(min=1).to(dtype)


def _log_normal_values(shape, dtype, device, name, generator, mean=1.0, std=2.0):
    return torch.exp(draw("normal", shape, dtype, device, name, generator) * std + mean)


def _uniform_values(shape, dtype, device, name, generator, low=0.0, high=1.0):
    u = draw("uniform", shape, dtype, device, name, generator)
    return u * (high - low) + low


def _normal_values(shape, dtype, device, name, generator, mean=0.0, std=1.0):
    return draw("normal", shape, dtype, device, name, generator) * std + mean


def _exponential_values(shape, dtype, device, name, generator, lambd=1.0):
    u = draw("uniform", shape, dtype, device, name, generator)
    return -torch.log1p(-u) / lambd


def _random_values(shape, dtype, device, name, generator, *args, **kwargs):
    low, high = (kwargs.get("from", 0), kwargs.get("to"))
    if args:
        low, high = (0, args[0]) if len(args) == 1 else args[:2]
    if high is None:
        raise NotImplementedError(
            f"{name}() without an upper bound is not supported under a thunderx transform (at "
            f"{user_frame()}): give random_(to) or random_(from, to)"
        )
    u = draw("uniform", shape, torch.float64, device, name, generator)
    return (torch.floor(u * (high - low)) + low).clamp(max=high - 1).to(dtype)


for _name, _values in [
    ("bernoulli_", _bernoulli_values),
    ("uniform_", _uniform_values),
    ("normal_", _normal_values),
    ("exponential_", _exponential_values),
    ("random_", _random_values),
    ("cauchy_", _cauchy_values),
    ("geometric_", _geometric_values),
    ("log_normal_", _log_normal_values),
]:
    register_random(getattr(torch.Tensor, _name), _inplace_draw(_name, _values), _name)
register_random(torch.randint_like, _randint_like)
