"""Shape primitives: broadcast_in_dim, reshape, transpose, squeeze, expand_dims (the slicing
family, slice/pad/concatenate/rev, is in slicing.py). All are linear; batching moves or inserts
the batch dimension."""

from __future__ import annotations

from thunderx.avals import ShapedArray
from thunderx.core import declare, get_aval


def _t(shape) -> str:
    return "(" + "".join(f"{s}, " for s in shape) + ")"


def _shape(x) -> tuple:
    return tuple(get_aval(x).shape)


# ----------------------------------------------------------------------------- broadcast_in_dim


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


broadcast_in_dim_p = declare(
    "broadcast_in_dim",
    impl=_bid_impl,
    abstract_eval=_bid_abstract_eval,
    linear=True,
    transpose=_bid_transpose,
    batch=_bid_batch,
    torch_codegen=_bid_codegen,
    nvfuser=lambda fd, x, *, shape, broadcast_dimensions: fd.ops.broadcast_in_dim(
        x, shape=list(shape), broadcast_dims=list(broadcast_dimensions)
    ),
    aliases=(0,),  # an expanded view
    overlapping=True,
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


def batch_to_front(args, dims) -> list:
    """Every operand with the batch dim first: batched ones moved, unbatched ones broadcast to
    the batch size (the batching rule of a kernel whose leading dims are its own batch)."""
    size = next(_shape(x)[d] for x, d in zip(args, dims) if d is not None)
    return [
        broadcast_batch(x, size, 0) if d is None else moveaxis(x, d, 0) for x, d in zip(args, dims)
    ]


# ---------------------------------------------------------------------------------------- reshape


def _reshape_abstract_eval(x, *, new_sizes):
    n = 1
    for s in new_sizes:
        n *= s
    if n != x.size:
        raise TypeError(f"reshape: cannot reshape {x.str_short()} to {new_sizes}")
    return ShapedArray(new_sizes, x.dtype, x.device)


def _reshape_batch(args, dims, *, new_sizes):
    x = moveaxis(args[0], dims[0], 0)
    return reshape(x, (_shape(x)[0],) + tuple(new_sizes)), 0


reshape_p = declare(
    "reshape",
    impl=lambda x, *, new_sizes: x.reshape(new_sizes),
    abstract_eval=_reshape_abstract_eval,
    linear=True,
    transpose=lambda ct, x, *, new_sizes: [reshape(ct, x.aval.shape)],
    batch=_reshape_batch,
    torch_codegen=lambda args, avals, *, new_sizes: f"{args[0]}.reshape({_t(new_sizes)})",
    nvfuser=lambda fd, x, *, new_sizes: fd.ops.reshape(x, list(new_sizes)),
    aliases=(0,),  # a view where the strides allow one
)


def reshape(x, new_sizes):
    new_sizes = tuple(new_sizes)
    if _shape(x) == new_sizes:
        return x
    return reshape_p.bind(x, new_sizes=new_sizes)


# -------------------------------------------------------------------------------------- transpose


def _transpose_abstract_eval(x, *, permutation):
    if sorted(permutation) != list(range(x.ndim)):
        raise TypeError(f"transpose: {permutation} is not a permutation of {x.str_short()}'s dims")
    return ShapedArray(tuple(x.shape[p] for p in permutation), x.dtype, x.device)


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _transpose_batch(args, dims, *, permutation):
    x, d = args[0], dims[0]
    x = moveaxis(x, d, 0)
    return transpose(x, (0,) + tuple(p + 1 for p in permutation)), 0


transpose_p = declare(
    "transpose",
    impl=lambda x, *, permutation: x.permute(permutation),
    abstract_eval=_transpose_abstract_eval,
    linear=True,
    transpose=lambda ct, x, *, permutation: [transpose(ct, _inverse(permutation))],
    batch=_transpose_batch,
    torch_codegen=lambda args, avals, *, permutation: f"{args[0]}.permute{_t(permutation)}",
    nvfuser=lambda fd, x, *, permutation: fd.ops.permute(x, list(permutation)),
    aliases=(0,),
)


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


squeeze_p = declare(
    "squeeze",
    impl=lambda x, *, dimensions: x.squeeze(dimensions),
    abstract_eval=_squeeze_abstract_eval,
    linear=True,
    transpose=lambda ct, x, *, dimensions: [reshape(ct, x.aval.shape)],
    batch=lambda args, dims, *, dimensions: (
        squeeze(moveaxis(args[0], dims[0], 0), tuple(d + 1 for d in dimensions)),
        0,
    ),
    torch_codegen=lambda args, avals, *, dimensions: f"{args[0]}.squeeze({_t(dimensions)})",
    nvfuser=lambda fd, x, *, dimensions: fd.ops.squeeze(x, list(dimensions)),
    aliases=(0,),
)
expand_dims_p = declare(
    "expand_dims",
    impl=lambda x, *, dimensions: x.reshape(_expand_dims_shape(x.shape, dimensions)),
    abstract_eval=lambda x, *, dimensions: ShapedArray(
        _expand_dims_shape(x.shape, dimensions), x.dtype, x.device
    ),
    linear=True,
    transpose=lambda ct, x, *, dimensions: [reshape(ct, x.aval.shape)],
    batch=lambda args, dims, *, dimensions: (
        expand_dims(moveaxis(args[0], dims[0], 0), tuple(d + 1 for d in dimensions)),
        0,
    ),
    torch_codegen=lambda args, avals, *, dimensions: (
        f"{args[0]}.reshape({_t(_expand_dims_shape(avals[0].shape, dimensions))})"
    ),
    nvfuser=lambda fd, x, *, dimensions: fd.ops.reshape(x, list(fd.out_avals[0].shape)),
    aliases=(0,),
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


# The slicing family lives in its own module; its functions are part of this namespace too.
from thunderx.primitives.slicing import (  # noqa: E402, F401
    concatenate,
    pad,
    rev,
    slice_,
    slice_in_dim,
)
