"""vmap: the batch trace carries (value, batch_dim) pairs through each primitive's batch rule."""

from __future__ import annotations

import functools
from typing import Any, Callable

from thunderx import tree, validate
from thunderx.avals import ShapedArray
from thunderx.core import (
    Trace,
    Tracer,
    batch_rules,
    get_aval,
    is_tensor_like,
    missing_rule,
    new_trace,
    set_trace,
)
from thunderx.errors import ArgumentValueError, user_frame


class BatchTracer(Tracer):
    __slots__ = ()

    def __init__(self, trace, val, bdim: int):
        self._trace = trace
        self.val = val
        self.bdim = bdim

    @property
    def aval(self) -> ShapedArray:
        a = get_aval(self.val)
        shape = a.shape[: self.bdim] + a.shape[self.bdim + 1 :]
        return ShapedArray(shape, a.dtype, a.device)


class BatchTrace(Trace):
    __slots__ = ("axis_size", "randomness")

    def __init__(self, parent, axis_size: int, randomness: str = "error"):
        super().__init__(parent)
        self.axis_size = axis_size
        self.randomness = randomness

    def unpack(self, x):
        if type(x) is BatchTracer and x._trace is self:
            return x.val, x.bdim
        if isinstance(x, Tracer):
            self.check_foreign(x)
        return x, None

    def process_primitive(self, prim, args, params):
        vals, dims = [], []
        batched = False
        for a in args:
            v, d = self.unpack(a)
            vals.append(v)
            dims.append(d)
            batched = batched or d is not None
        with set_trace(self.parent):
            if not batched:
                return prim.bind(*vals, **params)
            rule = batch_rules.get(prim)
            if rule is None:
                raise missing_rule(prim, "batching (vmap)", params)
            out, out_dim = rule(vals, dims, **params)
        if prim.multiple_results:
            return [self.wrap(o, d) for o, d in zip(out, out_dim)]
        return self.wrap(out, out_dim)

    def lift(self, value):
        from thunderx.primitives import shape as S

        with set_trace(self.parent):
            return BatchTracer(self, S.broadcast_batch(value, self.axis_size, 0), 0)

    def wrap(self, val, bdim):
        if bdim is None:
            return val
        return BatchTracer(self, val, bdim)


def _axes_for(spec, args, what: str):
    try:
        return tree.broadcast_prefix(spec, args)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"vmap {what} specification {spec!r} does not match the structure of the "
            f"{'arguments' if what == 'in_axes' else 'outputs'} ({e}) (at {user_frame()})"
        ) from None


def vmap(
    fun: Callable,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    randomness: str = "error",
) -> Callable:
    """Vectorize `fun` over a batch axis of its inputs.

    `in_axes`: an int, None, or a pytree prefix of the positional arguments; `out_axes` likewise
    for the outputs. `randomness`: 'error' (default), 'different' or 'same' for random ops.

    >>> thunderx.vmap(torch.dot, in_axes=(0, None))(torch.ones(5, 3), torch.ones(3)).shape
    torch.Size([5])
    """
    validate.check_callable(fun, "vmap")
    if randomness not in ("error", "different", "same"):
        raise ArgumentValueError(
            f"vmap: randomness must be 'error', 'different' or 'same', not {randomness!r} "
            f"(at {user_frame()})"
        )
    if axis_size is not None:
        validate.check_int(axis_size, "vmap", "axis_size", minimum=0)
    validate.check_axis_spec(in_axes, "vmap", "in_axes")
    validate.check_axis_spec(out_axes, "vmap", "out_axes")
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)

    @functools.wraps(fun)
    def batched(*args, **kwargs):
        spec = in_axes
        if isinstance(spec, tuple) and len(spec) != len(args):
            raise ValueError(
                f"vmap in_axes has {len(spec)} entries but the function got {len(args)} "
                f"positional arguments (at {user_frame()})"
            )
        # keyword arguments are always batched along axis 0 (JAX's rule)
        flat_args, in_tree = tree.flatten((args, kwargs))
        axes = _axes_for(spec, args, "in_axes") + [0] * len(tree.leaves(kwargs))
        sizes = {}
        norm_axes = []
        for i, (x, ax) in enumerate(zip(flat_args, axes)):
            if ax is None:
                norm_axes.append(None)
                continue
            if not isinstance(ax, int):
                raise TypeError(f"vmap in_axes entries must be int or None, got {ax!r}")
            if not is_tensor_like(x):
                raise ValueError(
                    f"vmap got in_axes={ax} for a non-tensor argument leaf {type(x).__name__} "
                    f"(at {user_frame()}); use None for it"
                )
            nd = len(x.shape)
            if not -nd <= ax < nd:
                raise ValueError(
                    f"vmap in_axes={ax} is out of range for an argument of rank {nd} "
                    f"(shape {tuple(x.shape)}) (at {user_frame()})"
                )
            ax = ax % nd
            norm_axes.append(ax)
            sizes[i] = x.shape[ax]
        distinct = set(sizes.values())
        if len(distinct) > 1:
            listing = ", ".join(f"leaf {i}: {s}" for i, s in sizes.items())
            raise ValueError(
                f"vmap got inconsistent batch sizes across arguments ({listing}) (at {user_frame()})"
            )
        if distinct:
            size = distinct.pop()
            if axis_size is not None and axis_size != size:
                raise ArgumentValueError(
                    f"vmap axis_size={axis_size} but the inputs have size {size} "
                    f"(at {user_frame()})"
                )
        elif axis_size is None:
            raise ValueError(
                f"vmap needs at least one batched input (in_axes not all None) or an explicit "
                f"axis_size (at {user_frame()})"
            )
        else:
            size = axis_size
        with new_trace(BatchTrace, size, randomness) as trace:
            ins = [
                x if ax is None else BatchTracer(trace, x, ax)
                for x, ax in zip(flat_args, norm_axes)
            ]
            trace.input_ids.update(id(t) for t in ins)
            with _random_mode(trace):
                call_args, call_kwargs = tree.unflatten(in_tree, ins)
                out = fun(*call_args, **call_kwargs)
            out_leaves, out_tree = tree.flatten(out)
            validate.check_leaves(out_leaves, "vmap", "the function's outputs")
            unpacked = [trace.unpack(o) for o in out_leaves]
        oaxes = _axes_for(out_axes, out, "out_axes")
        from thunderx.primitives import shape as S

        results = []
        for (val, bdim), oax in zip(unpacked, oaxes):
            if oax is None:
                if bdim is not None:
                    raise ValueError(
                        f"vmap out_axes=None for an output that depends on the batched inputs "
                        f"(at {user_frame()})"
                    )
                results.append(val)
                continue
            if not is_tensor_like(val):
                from thunderx.primitives import creation

                val = creation.full((), val, get_aval(val).dtype)
            nd = len(get_aval(val).shape) + (1 if bdim is None else 0)
            oax = validate.normalize_axis(
                oax, nd, "vmap", "out_axes", f"an output of rank {nd} (with the batch axis)"
            )
            if bdim is None:
                results.append(S.broadcast_batch(val, size, oax))
            else:
                results.append(S.moveaxis(val, bdim, oax))
        return tree.unflatten(out_tree, results)

    batched.__thunderx_transform__ = ("vmap", fun, in_axes)
    return batched


def _random_mode(trace):
    from thunderx.lang.random import RandomnessMode

    return RandomnessMode(trace)
