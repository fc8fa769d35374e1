"""Slicing primitives: slice, pad, concatenate, rev. All are linear."""

from __future__ import annotations

import torch

from thunderx.ad_util import is_undefined
from thunderx.avals import ShapedArray
from thunderx.core import declare, get_aval
from thunderx.ir import Literal
from thunderx.primitives.shape import _shape, _t, broadcast_batch, moveaxis, reshape  # noqa: F401

# ------------------------------------------------------------------------------------------ slice


def _slice_impl(x, *, start_indices, limit_indices, strides):
    return x[tuple(slice(s, e, st) for s, e, st in zip(start_indices, limit_indices, strides))]


def _slice_abstract_eval(x, *, start_indices, limit_indices, strides):
    shape = []
    for n, s, e, st in zip(x.shape, start_indices, limit_indices, strides):
        if not (0 <= s <= e <= n) or st < 1:
            raise TypeError(f"slice: [{s}:{e}:{st}] out of bounds for {x.str_short()}")
        shape.append(max(0, (e - s + st - 1) // st))
    return ShapedArray(shape, x.dtype, x.device)


def _slice_codegen(args, avals, *, start_indices, limit_indices, strides):
    parts = []
    for n, s, e, st in zip(avals[0].shape, start_indices, limit_indices, strides):
        if (s, e, st) == (0, n, 1):
            parts.append(":")
        else:
            parts.append(f"{s}:{e}" + (f":{st}" if st != 1 else ""))
    while parts and parts[-1] == ":":
        parts.pop()
    return f"{args[0]}[{', '.join(parts)},]" if parts else args[0]


def _slice_transpose(ct, x, *, start_indices, limit_indices, strides):
    shape = x.aval.shape
    config = []
    for n, s, st, m in zip(shape, start_indices, strides, _shape(ct)):
        used = s + (m - 1) * st + 1 if m > 0 else s
        config.append((s, n - used, st - 1))
    return [pad(ct, 0.0 if x.aval.dtype.is_floating_point else 0, tuple(config))]


def _slice_batch(args, dims, *, start_indices, limit_indices, strides):
    x = moveaxis(args[0], dims[0], 0)
    n = _shape(x)[0]
    return (
        slice_p.bind(
            x,
            start_indices=(0,) + tuple(start_indices),
            limit_indices=(n,) + tuple(limit_indices),
            strides=(1,) + tuple(strides),
        ),
        0,
    )


slice_p = declare(
    "slice",
    impl=_slice_impl,
    abstract_eval=_slice_abstract_eval,
    linear=True,
    transpose=_slice_transpose,
    batch=_slice_batch,
    torch_codegen=_slice_codegen,
    nvfuser=lambda fd, x, *, start_indices, limit_indices, strides: fd.ops.slice(
        x, list(start_indices), list(limit_indices), list(strides)
    ),
    aliases=(0,),
)


def slice_(x, start_indices, limit_indices, strides=None):
    shape = _shape(x)
    strides = tuple(strides) if strides is not None else (1,) * len(shape)
    if (
        tuple(start_indices) == (0,) * len(shape)
        and tuple(limit_indices) == shape
        and set(strides) <= {1}
    ):
        return x
    return slice_p.bind(
        x,
        start_indices=tuple(start_indices),
        limit_indices=tuple(limit_indices),
        strides=strides,
    )


def slice_in_dim(x, start: int, limit: int, stride: int = 1, axis: int = 0):
    shape = _shape(x)
    starts = [0] * len(shape)
    limits = list(shape)
    strides = [1] * len(shape)
    starts[axis], limits[axis], strides[axis] = start, limit, stride
    return slice_(x, starts, limits, strides)


# -------------------------------------------------------------------------------------------- pad


def batch_element(args, dims, i: int) -> list:
    """Element `i` of each operand along its batch dim (`dims`, None: unbatched, as it is): what
    a rule that runs a primitive once per batch element passes to each run."""
    from thunderx.primitives.shape import squeeze

    return [
        a if d is None else squeeze(slice_in_dim(a, i, i + 1, 1, d), (d,))
        for a, d in zip(args, dims)
    ]


def _pad_shape(shape, config):
    return tuple(
        lo + hi + n + max(0, n - 1) * interior for n, (lo, hi, interior) in zip(shape, config)
    )


def _pad_impl(x, padding_value, *, padding_config):
    if all(i == 0 and lo >= 0 and hi >= 0 for lo, hi, i in padding_config):
        flat = []
        for lo, hi, _ in reversed(padding_config):
            flat += [lo, hi]
        value = padding_value if not isinstance(padding_value, torch.Tensor) else None
        if value is not None:
            return torch.nn.functional.pad(x, flat, value=value)
    # General case: place x on a strided grid, then crop negative edges.
    grown = [(max(lo, 0), max(hi, 0), i) for lo, hi, i in padding_config]
    out_shape = _pad_shape(x.shape, grown)
    out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
    out.fill_(padding_value if not isinstance(padding_value, torch.Tensor) else padding_value)
    idx = tuple(
        slice(lo, lo + (n - 1) * (i + 1) + 1 if n else lo, i + 1)
        for n, (lo, _, i) in zip(x.shape, grown)
    )
    out[idx] = x
    crop = tuple(
        slice(-lo if lo < 0 else 0, size + hi if hi < 0 else size)
        for size, (lo, hi, _) in zip(out_shape, padding_config)
    )
    return out[crop]


def _pad_abstract_eval(x, padding_value, *, padding_config):
    if len(padding_config) != x.ndim:
        raise TypeError(f"pad: padding_config needs {x.ndim} entries")
    shape = _pad_shape(x.shape, padding_config)
    if any(s < 0 for s in shape):
        raise TypeError(f"pad: negative size {shape} from {padding_config}")
    return ShapedArray(shape, x.dtype, x.device)


def _pad_transpose(ct, x, padding_value, *, padding_config):
    from thunderx.primitives import reductions

    result = [None, None]
    if is_undefined(x):
        unpad = pad(ct, 0.0, tuple((-lo, -hi, 0) for lo, hi, _ in padding_config))
        shape = _shape(unpad)
        result[0] = slice_(
            unpad, (0,) * len(shape), shape, tuple(i + 1 for _, _, i in padding_config)
        )
    if is_undefined(padding_value):
        total = reductions.reduce_sum(ct, tuple(range(len(_shape(ct)))))
        inner = (
            reductions.reduce_sum(result[0], tuple(range(len(x.aval.shape))))
            if result[0] is not None
            else None
        )
        result[1] = total if inner is None else _sub(total, inner)
    return result


def _sub(a, b):
    from thunderx.primitives import binary

    return binary.sub(a, b)


def _pad_batch(args, dims, *, padding_config):
    x, pv = args
    dx, dp = dims
    config = ((0, 0, 0),) + tuple(padding_config)
    if dp is None:
        return pad(moveaxis(x, dx, 0), pv, config), 0
    # a per-example padding value: pad with 0, then add the value where the padding is
    from thunderx.primitives import binary, creation

    size = _shape(pv)[dp]
    x = broadcast_batch(x, size, 0) if dx is None else moveaxis(x, dx, 0)
    aval = get_aval(x)
    padded = pad(x, 0.0, config)
    where_pad = pad(creation.full(aval.shape, 0.0, aval.dtype, aval.device), 1.0, config)
    out_shape = _shape(padded)
    value = broadcast_in_dim_batch(moveaxis(pv, dp, 0), out_shape)
    return binary.add(padded, binary.mul(where_pad, value)), 0


def broadcast_in_dim_batch(v, shape):
    from thunderx.primitives.shape import broadcast_in_dim

    return broadcast_in_dim(v, shape, (0,))


def _pad_codegen(args, avals, *, padding_config):
    if all(i == 0 and lo >= 0 and hi >= 0 for lo, hi, i in padding_config) and not avals[1].shape:
        flat = []
        for lo, hi, _ in reversed(padding_config):
            flat += [lo, hi]
        return f"torch.nn.functional.pad({args[0]}, {flat}, value={args[1]})"
    return f"_impl_pad({args[0]}, {args[1]}, padding_config={padding_config!r})"


pad_p = declare(
    "pad",
    impl=_pad_impl,
    abstract_eval=_pad_abstract_eval,
    linear=True,
    transpose=_pad_transpose,
    batch=_pad_batch,
    torch_codegen=_pad_codegen,
    nvfuser=lambda fd, x, pv, *, padding_config: fd.ops.pad(
        x, [v for lo, hi, _ in reversed(padding_config) for v in (lo, hi)], pv
    ),
    # nvFuser pads with a scalar, without interior padding or cropping
    nvfuser_check=lambda eqn: (
        isinstance(eqn.inputs[1], Literal)
        and all(i == 0 and lo >= 0 and hi >= 0 for lo, hi, i in eqn.params["padding_config"])
    ),
)


def pad(x, padding_value, padding_config):
    padding_config = tuple(tuple(c) for c in padding_config)
    if all(c == (0, 0, 0) for c in padding_config):
        return x
    return pad_p.bind(x, padding_value, padding_config=padding_config)


# ------------------------------------------------------------------------------------ concatenate


def _concat_abstract_eval(*xs, dimension):
    ref = xs[0]
    total = 0
    for x in xs:
        if (
            x.ndim != ref.ndim
            or x.dtype != ref.dtype
            or any(a != b for i, (a, b) in enumerate(zip(x.shape, ref.shape)) if i != dimension)
        ):
            raise TypeError(
                f"concatenate: operands {', '.join(a.str_short() for a in xs)} do not agree "
                f"off dimension {dimension}"
            )
        total += x.shape[dimension]
    shape = list(ref.shape)
    shape[dimension] = total
    return ShapedArray(shape, ref.dtype, ref.device)


def _concat_transpose(ct, *xs, dimension):
    out, offset = [], 0
    for x in xs:
        n = x.aval.shape[dimension] if is_undefined(x) else _shape(x)[dimension]
        out.append(slice_in_dim(ct, offset, offset + n, 1, dimension) if is_undefined(x) else None)
        offset += n
    return out


def _concat_batch(args, dims, *, dimension):
    size = next(_shape(x)[d] for x, d in zip(args, dims) if d is not None)
    xs = [
        broadcast_batch(x, size, 0) if d is None else moveaxis(x, d, 0) for x, d in zip(args, dims)
    ]
    return concatenate(xs, dimension + 1), 0


concatenate_p = declare(
    "concatenate",
    impl=lambda *xs, dimension: torch.cat(xs, dimension),
    abstract_eval=_concat_abstract_eval,
    linear=True,
    transpose=_concat_transpose,
    batch=_concat_batch,
    torch_codegen=lambda args, avals, *, dimension: f"torch.cat([{', '.join(args)}], {dimension})",
    nvfuser=lambda fd, *xs, dimension: fd.ops.cat(list(xs), dimension),
)


def concatenate(xs, dimension: int):
    xs = list(xs)
    if len(xs) == 1:
        return xs[0]
    return concatenate_p.bind(*xs, dimension=dimension)


# -------------------------------------------------------------------------------------------- rev

rev_p = declare(
    "rev",
    impl=lambda x, *, dimensions: torch.flip(x, dimensions),
    abstract_eval=lambda x, *, dimensions: x.strip_weak(),
    linear=True,
    transpose=lambda ct, x, *, dimensions: [rev(ct, dimensions)],
    batch=lambda args, dims, *, dimensions: (
        rev(moveaxis(args[0], dims[0], 0), tuple(d + 1 for d in dimensions)),
        0,
    ),
    torch_codegen=lambda args, avals, *, dimensions: f"torch.flip({args[0]}, {dimensions!r})",
)


def rev(x, dimensions):
    dimensions = tuple(dimensions)
    if not dimensions:
        return x
    return rev_p.bind(x, dimensions=dimensions)
