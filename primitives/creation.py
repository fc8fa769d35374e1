"""Primitives with no array operands: iota, full, and random draws."""

from __future__ import annotations

import contextvars

import torch

from thunderx.avals import CPU, ShapedArray
from thunderx.core import declare, get_aval


def _fmt_shape(shape) -> str:
    return "(" + "".join(f"{s}, " for s in shape) + ")"


def _dev(device) -> str:
    return repr(str(device))


def _iota_impl(*, dtype, shape, dimension, device):
    r = torch.arange(shape[dimension], dtype=dtype, device=device)
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return r.reshape(view).expand(shape)


def _iota_codegen(args, avals, *, dtype, shape, dimension, device):
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return (
        f"torch.arange({shape[dimension]}, dtype={dtype}, device={_dev(device)})"
        f".reshape({_fmt_shape(view)}).expand({_fmt_shape(shape)})"
    )


iota_p = declare(
    "iota",
    impl=_iota_impl,
    abstract_eval=lambda *, dtype, shape, dimension, device: ShapedArray(shape, dtype, device),
    torch_codegen=_iota_codegen,
    not_differentiable="no operands",
    overlapping=True,  # an expanded arange
)
full_p = declare(
    "full",
    impl=lambda *, shape, fill_value, dtype, device: torch.full(
        shape, fill_value, dtype=dtype, device=device
    ),
    abstract_eval=lambda *, shape, fill_value, dtype, device: ShapedArray(shape, dtype, device),
    torch_codegen=lambda args, avals, *, shape, fill_value, dtype, device: (
        f"torch.full({_fmt_shape(shape)}, {fill_value!r}, dtype={dtype}, device={_dev(device)})"
    ),
    nvfuser=lambda fd, *, shape, fill_value, dtype, device: fd.ops.full(
        list(shape), fd.define_scalar(fill_value, fd.dtype_of(dtype)), fd.dtype_of(dtype)
    ),
    not_differentiable="no operands",
)


# The device of the torch call being decomposed (thunderx.lang's dispatch sets it from the call's
# tensor arguments): a constant made without naming a device goes there, as torch's own
# decompositions pass `device=x.device`. CPU outside any call.
CALL_DEVICE: contextvars.ContextVar = contextvars.ContextVar("thunderx_call_device", default=CPU)


def iota(dtype, shape, dimension: int, device=None):
    device = CALL_DEVICE.get() if device is None else device
    return iota_p.bind(dtype=dtype, shape=tuple(shape), dimension=dimension, device=device)


def full(shape, fill_value, dtype, device=None):
    device = CALL_DEVICE.get() if device is None else device
    return full_p.bind(shape=tuple(shape), fill_value=fill_value, dtype=dtype, device=device)


def zeros_like(x):
    """Zeros of `x`'s shape, dtype and device."""
    a = get_aval(x)
    return full(a.shape, 0.0, a.dtype, a.device)


# Random draws: effectful, so jit runs them on each call; vmap handles them through its
# `randomness` setting in the language layer (they have no operands to batch).
def def_random(name: str, torch_name: str):
    """A draw from torch's default generator: effectful, so never removed or merged."""
    fn = getattr(torch, torch_name)
    return declare(
        name,
        impl=lambda *, shape, dtype, device: fn(shape, dtype=dtype, device=device),
        abstract_eval=lambda *, shape, dtype, device: ShapedArray(shape, dtype, device),
        torch_codegen=lambda args, avals, *, shape, dtype, device: (
            f"torch.{torch_name}({_fmt_shape(shape)}, dtype={dtype}, device={_dev(device)})"
        ),
        not_differentiable="a random draw has no operands",
        effects=("rng",),
    )


random_uniform_p = def_random("random_uniform", "rand")
random_normal_p = def_random("random_normal", "randn")


def random_uniform(shape, dtype, device):
    return random_uniform_p.bind(shape=tuple(shape), dtype=dtype, device=device)


def random_normal(shape, dtype, device):
    return random_normal_p.bind(shape=tuple(shape), dtype=dtype, device=device)
