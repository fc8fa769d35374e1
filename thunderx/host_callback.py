"""`pure_callback`: call a Python function (numpy, scipy, a C extension) on run-time values from
inside `jit`, `vmap` and the other transforms, with JAX's `jax.pure_callback` contract.

>>> import numpy as np
>>> f = thunderx.jit(lambda x: thunderx.pure_callback(
...     lambda v: torch.from_numpy(np.sin(v.numpy())), thunderx.ShapeDtypeStruct((2,), x.dtype), x))
>>> f(torch.tensor([0.0, 1.0]))
tensor([0.0000, 0.8415])
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from thunderx import tree
from thunderx.avals import ShapedArray
from thunderx.core import is_tensor_like
from thunderx.errors import user_frame

__all__ = ["pure_callback"]


def pure_callback(
    callback: Callable[..., Any],
    result_shape_dtypes,
    *args,
    vmap_method: str | None = None,
    **kwargs,
):
    """`callback(*args, **kwargs)` on the run-time values of `args` (tensors arrive as torch
    tensors, other leaves as they are), returning results of `result_shape_dtypes` (a pytree of
    `ShapeDtypeStruct`s or tensors standing for their shape, dtype and device; checked on every
    call). The callback must be pure: a program may drop an unused call or merge identical ones.
    Not differentiable (give it a rule with `custom_jvp` / `custom_vjp`); under `vmap`,
    `vmap_method` is "sequential", "expand_dims" or "broadcast_all" (see
    thunderx/primitives/pure_callback.py).
    """
    from thunderx.debug import split_arrays
    from thunderx.primitives.pure_callback import VMAP_METHODS, pure_callback_p
    from thunderx.shapes import ShapeDtypeStruct

    where = user_frame()
    if not callable(callback):
        raise TypeError(f"pure_callback: callback must be callable, got {type(callback).__name__}")
    if vmap_method is not None and vmap_method not in VMAP_METHODS:
        raise ValueError(
            f"pure_callback: vmap_method must be one of {VMAP_METHODS} or None, got "
            f"{vmap_method!r} (at {where})"
        )
    spec_leaves, out_tree = tree.flatten(result_shape_dtypes)
    out_avals = []
    for s in spec_leaves:
        if not isinstance(s, (ShapeDtypeStruct, torch.Tensor)) and not is_tensor_like(s):
            raise TypeError(
                "pure_callback: result_shape_dtypes must be a pytree of ShapeDtypeStruct or "
                f"tensors, got {type(s).__name__} (at {where})"
            )
        device = getattr(s, "device", None) or torch.device("cpu")
        out_avals.append(ShapedArray(tuple(s.shape), s.dtype, torch.device(device)))
    arrays, rebuild = split_arrays(args, kwargs)

    def flat_callback(*values):
        call_args, call_kwargs = rebuild(values)
        out_leaves, got_tree = tree.flatten(callback(*call_args, **call_kwargs))
        if got_tree != out_tree:
            raise TypeError(
                f"pure_callback: the callback returned the structure {got_tree} where "
                f"result_shape_dtypes is {out_tree} (callback at {where})"
            )
        return out_leaves

    flat_callback.__name__ = getattr(callback, "__name__", type(callback).__name__)
    outs = pure_callback_p.bind(
        *arrays, callback=flat_callback, out_avals=tuple(out_avals), vmap_method=vmap_method
    )
    return tree.unflatten(out_tree, outs)
