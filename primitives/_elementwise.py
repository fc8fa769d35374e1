"""Shared pieces of the elementwise families: abstract eval and batching with scalar operands."""

from __future__ import annotations

import torch

from thunderx.avals import ShapedArray
from thunderx.core import Tracer

SCALARS = (bool, int, float, complex)


def is_scalar(x) -> bool:
    return type(x) in SCALARS


def nary_abstract_eval(name: str, *avals: ShapedArray, out_dtype=None) -> ShapedArray:
    """Operands share one shape and dtype; Python scalars (weak, rank 0) may stand for either."""
    # weak operands (Python scalars, jit's scalar arguments) take the others' dtype; with
    # only weak operands, the first one decides
    strong = [a for a in avals if not a.weak_type] or [a.strip_weak() for a in avals[:1]]
    if not avals:
        raise TypeError(f"{name}: at least one operand must be a tensor")
    ref = strong[0]
    for a in strong[1:]:
        if a.shape != ref.shape:
            raise TypeError(f"{name}: operand shapes differ: {ref.str_short()} vs {a.str_short()}")
        if a.dtype != ref.dtype:
            raise TypeError(f"{name}: operand dtypes differ: {ref.str_short()} vs {a.str_short()}")
    return ShapedArray(ref.shape, ref.dtype if out_dtype is None else out_dtype, ref.device)


def elementwise_batch(prim, args, dims, **params):
    """Align every batched operand on one batch dim; broadcast unbatched tensors to it."""
    from thunderx.primitives import shape as S

    d = next(dim for dim in dims if dim is not None)
    size = None
    for x, dim in zip(args, dims):
        if dim is not None:
            size = _shape(x)[dim]
            break
    new_args = []
    for x, dim in zip(args, dims):
        if dim is None:
            if is_scalar(x):
                new_args.append(x)
            else:
                new_args.append(S.broadcast_batch(x, size, d))
        else:
            new_args.append(S.moveaxis(x, dim, d))
    out = prim.bind(*new_args, **params)
    if prim.multiple_results:
        return out, [d] * len(out)
    return out, d


def _shape(x):
    if isinstance(x, (Tracer, torch.Tensor)):
        return tuple(x.shape)
    return ()


def scalar_tensor(value, like):
    """A Python scalar as a 0-dim tensor of `like`'s dtype (for torch functions wanting tensors)."""
    return torch.tensor(value, dtype=like.dtype, device=like.device)
