"""Shape primitives: broadcast_in_dim, reshape, transpose, squeeze, expand_dims, slice, pad,
concatenate, rev. All are linear; batching moves or inserts the batch dimension."""

from __future__ import annotations

import torch

from thunderx.ad_util import deflinear, is_undefined
from thunderx.avals import ShapedArray
from thunderx.core import (
    abstract_eval_rules,
    batch_rules,
    get_aval,
    impl_rules,
    new_primitive,
    nvfuser_checks,
    nvfuser_rules,
    torch_codegen_rules,
)
from thunderx.ir import Literal


def _t(shape) -> str:
    return "(" + "".join(f"{s}, " for s in shape) + ")"


def _shape(x) -> tuple:
    return tuple(get_aval(x).shape)


# ----------------------------------------------------------------------------- broadcast_in_dim

broadcast_in_dim_p = new_primitive("broadcast_in_dim")


def _bid_view(in_shape, shape, broadcast_dimensions):
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        view[d] = in_shape[i]
    return view


def _bid_impl(x, *, shape, broadcast_dimensions):
    return x.reshape(_bid_view(x.shape, shape, broadcast_dimensions)).expand(shape)


def _bid_abstract_eval(x, *, shape, broadcast_dimensions):
    if len(broadcast_dimensions) != x.ndim:
        raise TypeError(f"broadcast_in_dim: {x.str_short()} needs {x.ndim} broadcast_dimensions")
    prev = -1
    for i, d in enumerate(broadcast_dimensions):
        if d <= prev or d >= len(shape) or x.shape[i] not in (1, shape[d]):
            raise TypeError(
                f"broadcast_in_dim: cannot broadcast {x.str_short()} to {shape} "
                f"along {broadcast_dimensions}"
            )
        prev = d
    return ShapedArray(shape, x.dtype, x.device)


def _bid_codegen(args, avals, *, shape, broadcast_dimensions):
    view = _bid_view(avals[0].shape, shape, broadcast_dimensions)
    x = args[0] if tuple(view) == tuple(avals[0].shape) else f"{args[0]}.reshape({_t(view)})"
    return f"{x}.expand({_t(shape)})"


def _bid_transpose(ct, x, *, shape, broadcast_dimensions):
    in_shape = x.aval.shape
    sum_dims = [d for d in range(len(shape)) if d not in broadcast_dimensions]
    kept = [d for i, d in enumerate(broadcast_dimensions) if in_shape[i] == 1 and shape[d] != 1]
    from thunderx.primitives import reductions

    out = ct
    if kept:
        out = reductions.reduce_sum(out, tuple(kept), keepdims=True)
    if sum_dims:
        out = reductions.reduce_sum(out, tuple(sum_dims))
    if _shape(out) != tuple(in_shape):
        out = reshape(out, in_shape)
    return [out]


def _bid_batch(args, dims, *, shape, broadcast_dimensions):
    (x,), (d,) = args, dims
    x = moveaxis(x, d, 0)
    size = _shape(x)[0]
    new_dims = (0,) + tuple(b + 1 for b in broadcast_dimensions)
    return broadcast_in_dim(x, (size,) + tuple(shape), new_dims), 0


impl_rules[broadcast_in_dim_p] = _bid_impl
torch_codegen_rules[broadcast_in_dim_p] = _bid_codegen
abstract_eval_rules[broadcast_in_dim_p] = _bid_abstract_eval
batch_rules[broadcast_in_dim_p] = _bid_batch
deflinear(broadcast_in_dim_p, transpose=_bid_transpose)
nvfuser_rules[broadcast_in_dim_p] = lambda fd, x, *, shape, broadcast_dimensions: (
    fd.ops.broadcast_in_dim(x, shape=list(shape), broadcast_dims=list(broadcast_dimensions))
)


def broadcast_in_dim(x, shape, broadcast_dimensions):
    shape, broadcast_dimensions = tuple(shape), tuple(broadcast_dimensions)
    if _shape(x) == shape and broadcast_dimensions == tuple(range(len(shape))):
        return x
    return broadcast_in_dim_p.bind(x, shape=shape, broadcast_dimensions=broadcast_dimensions)


def broadcast_to(x, shape):
    """numpy-style: align trailing dimensions."""
    xs = _shape(x)
    lead = len(shape) - len(xs)
    return broadcast_in_dim(x, shape, tuple(range(lead, len(shape))))


def broadcast_batch(x, size: int, d: int):
    """An unbatched value made batched: a new axis of `size` at position `d`."""
    xs = _shape(x)
    shape = xs[:d] + (size,) + xs[d:]
    dims = tuple(i if i < d else i + 1 for i in range(len(xs)))
    return broadcast_in_dim(x, shape, dims)


# ---------------------------------------------------------------------------------------- reshape

reshape_p = new_primitive("reshape")
impl_rules[reshape_p] = lambda x, *, new_sizes: x.reshape(new_sizes)


def _reshape_abstract_eval(x, *, new_sizes):
    n = 1
    for s in new_sizes:
        n *= s
    if n != x.size:
        raise TypeError(f"reshape: cannot reshape {x.str_short()} to {new_sizes}")
    return ShapedArray(new_sizes, x.dtype, x.device)


abstract_eval_rules[reshape_p] = _reshape_abstract_eval
torch_codegen_rules[reshape_p] = lambda args, avals, *, new_sizes: (
    f"{args[0]}.reshape({_t(new_sizes)})"
)
nvfuser_rules[reshape_p] = lambda fd, x, *, new_sizes: fd.ops.reshape(x, list(new_sizes))
deflinear(reshape_p, transpose=lambda ct, x, *, new_sizes: [reshape(ct, x.aval.shape)])


def _reshape_batch(args, dims, *, new_sizes):
    x = moveaxis(args[0], dims[0], 0)
    return reshape(x, (_shape(x)[0],) + tuple(new_sizes)), 0


batch_rules[reshape_p] = _reshape_batch


def reshape(x, new_sizes):
    new_sizes = tuple(new_sizes)
    if _shape(x) == new_sizes:
        return x
    return reshape_p.bind(x, new_sizes=new_sizes)


# -------------------------------------------------------------------------------------- transpose

transpose_p = new_primitive("transpose")
impl_rules[transpose_p] = lambda x, *, permutation: x.permute(permutation)


def _transpose_abstract_eval(x, *, permutation):
    if sorted(permutation) != list(range(x.ndim)):
        raise TypeError(f"transpose: {permutation} is not a permutation of {x.str_short()}'s dims")
    return ShapedArray(tuple(x.shape[p] for p in permutation), x.dtype, x.device)


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


abstract_eval_rules[transpose_p] = _transpose_abstract_eval
torch_codegen_rules[transpose_p] = lambda args, avals, *, permutation: (
    f"{args[0]}.permute{_t(permutation)}"
)
nvfuser_rules[transpose_p] = lambda fd, x, *, permutation: fd.ops.permute(x, list(permutation))
deflinear(
    transpose_p, transpose=lambda ct, x, *, permutation: [transpose(ct, _inverse(permutation))]
)


def _transpose_batch(args, dims, *, permutation):
    x, d = args[0], dims[0]
    x = moveaxis(x, d, 0)
    return transpose(x, (0,) + tuple(p + 1 for p in permutation)), 0


batch_rules[transpose_p] = _transpose_batch


def transpose(x, permutation):
    permutation = tuple(permutation)
    if permutation == tuple(range(len(permutation))):
        return x
    return transpose_p.bind(x, permutation=permutation)


def moveaxis(x, src: int, dst: int):
    n = len(_shape(x))
    src, dst = src % n, dst % n
    if src == dst:
        return x
    perm = [i for i in range(n) if i != src]
    perm.insert(dst, src)
    return transpose(x, perm)


# ------------------------------------------------------------------------- squeeze / expand_dims

squeeze_p = new_primitive("squeeze")
expand_dims_p = new_primitive("expand_dims")


def _squeeze_abstract_eval(x, *, dimensions):
    for d in dimensions:
        if x.shape[d] != 1:
            raise TypeError(f"squeeze: dimension {d} of {x.str_short()} is not 1")
    shape = tuple(s for i, s in enumerate(x.shape) if i not in dimensions)
    return ShapedArray(shape, x.dtype, x.device)


def _expand_dims_shape(shape, dimensions):
    out = list(shape)
    for d in sorted(dimensions):
        out.insert(d, 1)
    return tuple(out)


impl_rules[squeeze_p] = lambda x, *, dimensions: x.squeeze(dimensions)
abstract_eval_rules[squeeze_p] = _squeeze_abstract_eval
torch_codegen_rules[squeeze_p] = lambda args, avals, *, dimensions: (
    f"{args[0]}.squeeze({_t(dimensions)})"
)
nvfuser_rules[squeeze_p] = lambda fd, x, *, dimensions: fd.ops.squeeze(x, list(dimensions))
deflinear(squeeze_p, transpose=lambda ct, x, *, dimensions: [reshape(ct, x.aval.shape)])
batch_rules[squeeze_p] = lambda args, dims, *, dimensions: (
    squeeze(moveaxis(args[0], dims[0], 0), tuple(d + 1 for d in dimensions)),
    0,
)

impl_rules[expand_dims_p] = lambda x, *, dimensions: x.reshape(
    _expand_dims_shape(x.shape, dimensions)
)
abstract_eval_rules[expand_dims_p] = lambda x, *, dimensions: ShapedArray(
    _expand_dims_shape(x.shape, dimensions), x.dtype, x.device
)
torch_codegen_rules[expand_dims_p] = lambda args, avals, *, dimensions: (
    f"{args[0]}.reshape({_t(_expand_dims_shape(avals[0].shape, dimensions))})"
)
nvfuser_rules[expand_dims_p] = lambda fd, x, *, dimensions: fd.ops.reshape(
    x, list(fd.out_avals[0].shape)
)
deflinear(expand_dims_p, transpose=lambda ct, x, *, dimensions: [reshape(ct, x.aval.shape)])
batch_rules[expand_dims_p] = lambda args, dims, *, dimensions: (
    expand_dims(moveaxis(args[0], dims[0], 0), tuple(d + 1 for d in dimensions)),
    0,
)


def squeeze(x, dimensions):
    dimensions = tuple(sorted(d % len(_shape(x)) for d in dimensions))
    if not dimensions:
        return x
    return squeeze_p.bind(x, dimensions=dimensions)


def expand_dims(x, dimensions):
    n = len(_shape(x)) + len(dimensions)
    dimensions = tuple(sorted(d % n for d in dimensions))
    if not dimensions:
        return x
    return expand_dims_p.bind(x, dimensions=dimensions)


# ------------------------------------------------------------------------------------------ slice

slice_p = new_primitive("slice")


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


impl_rules[slice_p] = _slice_impl
abstract_eval_rules[slice_p] = _slice_abstract_eval
torch_codegen_rules[slice_p] = _slice_codegen
batch_rules[slice_p] = _slice_batch
deflinear(slice_p, transpose=_slice_transpose)
nvfuser_rules[slice_p] = lambda fd, x, *, start_indices, limit_indices, strides: fd.ops.slice(
    x, list(start_indices), list(limit_indices), list(strides)
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

pad_p = new_primitive("pad")


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
    if dp is not None:
        raise NotImplementedError("pad with a batched padding value")
    x = moveaxis(x, dx, 0)
    return pad(x, pv, ((0, 0, 0),) + tuple(padding_config)), 0


def _pad_codegen(args, avals, *, padding_config):
    if all(i == 0 and lo >= 0 and hi >= 0 for lo, hi, i in padding_config) and not avals[1].shape:
        flat = []
        for lo, hi, _ in reversed(padding_config):
            flat += [lo, hi]
        return f"torch.nn.functional.pad({args[0]}, {flat}, value={args[1]})"
    return f"_impl_pad({args[0]}, {args[1]}, padding_config={padding_config!r})"


impl_rules[pad_p] = _pad_impl
abstract_eval_rules[pad_p] = _pad_abstract_eval
torch_codegen_rules[pad_p] = _pad_codegen
batch_rules[pad_p] = _pad_batch
deflinear(pad_p, transpose=_pad_transpose)
nvfuser_rules[pad_p] = lambda fd, x, pv, *, padding_config: fd.ops.pad(
    x, [v for lo, hi, _ in reversed(padding_config) for v in (lo, hi)], pv
)
# nvFuser pads with a scalar, without interior padding or cropping
nvfuser_checks[pad_p] = lambda eqn: (
    isinstance(eqn.inputs[1], Literal)
    and all(i == 0 and lo >= 0 and hi >= 0 for lo, hi, i in eqn.params["padding_config"])
)


def pad(x, padding_value, padding_config):
    padding_config = tuple(tuple(c) for c in padding_config)
    if all(c == (0, 0, 0) for c in padding_config):
        return x
    return pad_p.bind(x, padding_value, padding_config=padding_config)


# ------------------------------------------------------------------------------------ concatenate

concatenate_p = new_primitive("concatenate")


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


impl_rules[concatenate_p] = lambda *xs, dimension: torch.cat(xs, dimension)
abstract_eval_rules[concatenate_p] = _concat_abstract_eval
torch_codegen_rules[concatenate_p] = lambda args, avals, *, dimension: (
    f"torch.cat([{', '.join(args)}], {dimension})"
)
batch_rules[concatenate_p] = _concat_batch
deflinear(concatenate_p, transpose=_concat_transpose)
nvfuser_rules[concatenate_p] = lambda fd, *xs, dimension: fd.ops.cat(list(xs), dimension)


def concatenate(xs, dimension: int):
    xs = list(xs)
    if len(xs) == 1:
        return xs[0]
    return concatenate_p.bind(*xs, dimension=dimension)


# -------------------------------------------------------------------------------------------- rev

rev_p = new_primitive("rev")
impl_rules[rev_p] = lambda x, *, dimensions: torch.flip(x, dimensions)
abstract_eval_rules[rev_p] = lambda x, *, dimensions: x.strip_weak()
torch_codegen_rules[rev_p] = lambda args, avals, *, dimensions: (
    f"torch.flip({args[0]}, {dimensions!r})"
)
deflinear(rev_p, transpose=lambda ct, x, *, dimensions: [rev(ct, dimensions)])
batch_rules[rev_p] = lambda args, dims, *, dimensions: (
    rev(moveaxis(args[0], dims[0], 0), tuple(d + 1 for d in dimensions)),
    0,
)


def rev(x, dimensions):
    dimensions = tuple(dimensions)
    if not dimensions:
        return x
    return rev_p.bind(x, dimensions=dimensions)
