"""Primitives with no array operands: iota, full, and random draws."""

from __future__ import annotations

import torch

from thunderx.avals import CPU, ShapedArray
from thunderx.core import (
    abstract_eval_rules,
    effectful_primitives,
    impl_rules,
    new_primitive,
    not_differentiable,
    nvfuser_rules,
    torch_codegen_rules,
)


def _fmt_shape(shape) -> str:
    return "(" + "".join(f"{s}, " for s in shape) + ")"


def _dev(device) -> str:
    return repr(str(device))


iota_p = new_primitive("iota")
full_p = new_primitive("full")


def _iota_impl(*, dtype, shape, dimension, device):
    r = torch.arange(shape[dimension], dtype=dtype, device=device)
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return r.reshape(view).expand(shape)


impl_rules[iota_p] = _iota_impl
abstract_eval_rules[iota_p] = lambda *, dtype, shape, dimension, device: ShapedArray(
    shape, dtype, device
)


def _iota_codegen(args, avals, *, dtype, shape, dimension, device):
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return (
        f"torch.arange({shape[dimension]}, dtype={dtype}, device={_dev(device)})"
        f".reshape({_fmt_shape(view)}).expand({_fmt_shape(shape)})"
    )


torch_codegen_rules[iota_p] = _iota_codegen

impl_rules[full_p] = lambda *, shape, fill_value, dtype, device: torch.full(
    shape, fill_value, dtype=dtype, device=device
)
abstract_eval_rules[full_p] = lambda *, shape, fill_value, dtype, device: ShapedArray(
    shape, dtype, device
)
torch_codegen_rules[full_p] = lambda args, avals, *, shape, fill_value, dtype, device: (
    f"torch.full({_fmt_shape(shape)}, {fill_value!r}, dtype={dtype}, device={_dev(device)})"
)
nvfuser_rules[full_p] = lambda fd, *, shape, fill_value, dtype, device: fd.ops.full(
    list(shape), fd.define_scalar(fill_value, fd.dtype_of(dtype)), fd.dtype_of(dtype)
)


def iota(dtype, shape, dimension: int, device=CPU):
    return iota_p.bind(dtype=dtype, shape=tuple(shape), dimension=dimension, device=device)


def full(shape, fill_value, dtype, device=CPU):
    return full_p.bind(shape=tuple(shape), fill_value=fill_value, dtype=dtype, device=device)


# Random draws: effectful, so jit runs them on each call; vmap handles them through its
# `randomness` setting in the language layer (they have no operands to batch).
random_uniform_p = new_primitive("random_uniform")
random_normal_p = new_primitive("random_normal")
for _p, _fn in ((random_uniform_p, "rand"), (random_normal_p, "randn")):
    impl_rules[_p] = (
        lambda fn: lambda *, shape, dtype, device: fn(shape, dtype=dtype, device=device)
    )(getattr(torch, _fn))
    abstract_eval_rules[_p] = lambda *, shape, dtype, device: ShapedArray(shape, dtype, device)
    torch_codegen_rules[_p] = (
        lambda fn: (
            lambda args, avals, *, shape, dtype, device: (
                f"torch.{fn}({_fmt_shape(shape)}, dtype={dtype}, device={_dev(device)})"
            )
        )
    )(_fn)
    not_differentiable[_p] = "a random draw has no operands"
    # each draw is new: never merged by CSE, folded or dropped as if pure
    effectful_primitives.add(_p)


def random_uniform(shape, dtype, device):
    return random_uniform_p.bind(shape=tuple(shape), dtype=dtype, device=device)


def random_normal(shape, dtype, device):
    return random_normal_p.bind(shape=tuple(shape), dtype=dtype, device=device)


for _p in (iota_p, full_p):
    not_differentiable[_p] = "no operands"
