"""Shapes without data: `ShapeDtypeStruct` and `eval_shape` (JAX's names and semantics)."""

from __future__ import annotations

from typing import Any, Callable

import torch

from thunderx import tree
from thunderx.avals import CPU, ShapedArray
from thunderx.core import get_aval, is_tensor_like
from thunderx.errors import user_frame
from thunderx.tracing import trace_flat

_SCALARS = (bool, int, float)


class ShapeDtypeStruct:
    """A tensor's shape, dtype and device, with no data: what `eval_shape` returns, and an
    argument `eval_shape`, `make_jaxpr` and `linear_transpose` accept in place of a tensor.

    >>> thunderx.ShapeDtypeStruct((2, 3), torch.float32)
    ShapeDtypeStruct(shape=(2, 3), dtype=torch.float32)
    """

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, shape, dtype: torch.dtype, device: torch.device | str | None = None):
        shape = tuple(shape)
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
            raise TypeError(f"ShapeDtypeStruct: shape must be non-negative ints, got {shape}")
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"ShapeDtypeStruct: dtype must be a torch.dtype, got {dtype!r}")
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self.device = CPU if device is None else torch.device(device)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return self.shape.numel()

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, ShapeDtypeStruct)
            and self.shape == other.shape
            and self.dtype == other.dtype
            and self.device == other.device
        )

    def __hash__(self) -> int:
        return hash((tuple(self.shape), self.dtype, self.device))

    def __repr__(self) -> str:
        dev = "" if self.device == CPU else f", device={str(self.device)!r}"
        return f"ShapeDtypeStruct(shape={tuple(self.shape)}, dtype={self.dtype}{dev})"

    @classmethod
    def from_aval(cls, aval: ShapedArray) -> ShapeDtypeStruct:
        return cls(aval.shape, aval.dtype, aval.device)


def aval_of_argument(x, where: str, hint: str = "") -> ShapedArray:
    """The abstract value of a tensor, tracer, ShapeDtypeStruct or Python scalar argument."""
    if isinstance(x, ShapeDtypeStruct):
        return ShapedArray(tuple(x.shape), x.dtype, x.device)
    if type(x) is float:
        # weakly typed with float64 storage, as jit passes a Python float
        return ShapedArray((), torch.float64, weak_type=True)
    if is_tensor_like(x) or type(x) in _SCALARS:
        return get_aval(x)
    raise TypeError(
        f"{where}: arguments must be tensors, ShapeDtypeStructs, Python scalars or pytrees of "
        f"them, got {type(x).__name__} (at {user_frame()}){hint}"
    )


def shape_struct(x) -> ShapeDtypeStruct:
    """The ShapeDtypeStruct of a tensor, tracer or Python scalar."""
    return ShapeDtypeStruct.from_aval(get_aval(x))


def eval_shape(fun: Callable, *args, **kwargs) -> Any:
    """The shapes, dtypes and devices of `fun(*args, **kwargs)`'s outputs (a pytree of
    ShapeDtypeStruct), found by tracing `fun`: none of its operations on the arguments runs, so
    arguments may be ShapeDtypeStructs of any size. Python control flow on argument values
    raises, as under `jit`.

    >>> x = thunderx.ShapeDtypeStruct((1000, 1000, 1000), torch.float32)
    >>> thunderx.eval_shape(lambda x, w: (x @ w).sum(-1), x, torch.ones(1000, 5))
    ShapeDtypeStruct(shape=(1000, 1000), dtype=torch.float32)
    """
    leaves, in_tree = tree.flatten((args, kwargs))
    avals = [aval_of_argument(x, "eval_shape") for x in leaves]

    def flat(*xs):
        call_args, call_kwargs = tree.unflatten(in_tree, xs)
        return tree.flatten(fun(*call_args, **call_kwargs))

    closed, out_tree = trace_flat(flat, avals)
    return tree.unflatten(
        out_tree, [ShapeDtypeStruct.from_aval(a.strip_weak()) for a in closed.out_avals]
    )
