"""Collectives over named axes: psum, pmax, pmin, all_gather, psum_scatter, ppermute, all_to_all,
axis_index. The user-facing functions (which resolve axis names) are in `thunderx.collectives`.

Params hold `axes`: a tuple of `NamedAxis` (name, size, and the DeviceMesh for a shard_map axis, or
None for a vmap axis). Under vmap a collective over the vmapped name is a computation over the
batch dim (`axis_batch_rules`); under shard_map its impl is a torch.distributed call on the mesh
dim's process group (`thunderx.collectives` holds that runtime).

Transposes follow JAX's `check_rep=False` semantics: every per-device value is treated as
device-varying, so psum's transpose is psum (the sum of all cotangents reaches every device);
replication is accounted for once, at the shard_map boundary (see `thunderx.shard_map`).
all_gather <-> psum_scatter, ppermute <-> the inverse permutation, all_to_all <-> all_to_all with
split and concat axes swapped.
"""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero, deflinear
from thunderx.avals import ShapedArray
from thunderx.core import (
    ALL_OPERANDS,
    abstract_eval_rules,
    axis_batch_rules,
    axis_names_rules,
    batch_rules,
    declare_properties,
    get_aval,
    impl_rules,
    jvp_rules,
    new_primitive,
    split_phase_rules,
)


def _runtime():
    from thunderx import collectives

    return collectives


def _axes_param(**params):
    return params["axes"]


def _one(axes) -> int:
    (axis,) = axes
    return axis.size


def _to_front(x, d, size):
    """The batched value with its batch dim first (an unbatched one broadcast to `size`)."""
    if d is None:
        return x.unsqueeze(0).expand((size,) + tuple(get_aval(x).shape))
    return x.movedim(d, 0)


def _rest(axes, axis):
    return tuple(a for a in axes if a != axis)


def _register(prim, abstract_eval, impl, batch, axis_batch):
    # whatever the process group returns may be an operand's buffer (one-member axes return
    # their input): executors never write into it
    declare_properties(prim, aliases=ALL_OPERANDS)
    abstract_eval_rules[prim] = abstract_eval
    impl_rules[prim] = impl
    if batch is not None:
        batch_rules[prim] = batch
    axis_batch_rules[prim] = axis_batch
    axis_names_rules[prim] = _axes_param


# ------------------------------------------------------------------------ psum / pmax / pmin


def _same_aval(x, *, axes):
    return x.strip_weak()


def _elementwise_batch(prim):
    """Over another name the collective acts elementwise: the batch dim passes through."""

    def rule(args, dims, **params):
        return prim.bind(args[0], **params), dims[0]

    return rule


def _sum_batch(x, d, size):
    return x * size if d is None else x.sum(d)


# psum takes any number of operands (a pytree's leaves), so a gradient's leaves travel in one
# all_reduce over one flat buffer, as DDP's buckets do.
psum_p = new_primitive("psum", multiple_results=True)


def _psum_impl(*xs, axes):
    rt = _runtime()
    outs = list(xs)
    for axis in axes:
        outs = rt.all_reduce_runtime(outs, "sum", axis, "psum")
    return outs


def _psum_axis_batch(axis, vals, dims, *, axes):
    outs = [_sum_batch(x, d, axis.size) for x, d in zip(vals, dims)]
    rest = _rest(axes, axis)
    if rest:
        outs = psum_p.bind(*outs, axes=rest)
    return list(outs), [None] * len(outs)


def _psum_transpose(cts, *xs, axes):
    live = [i for i, c in enumerate(cts) if type(c) is not Zero]
    out = [None] * len(cts)
    if live:
        for i, c in zip(live, psum_p.bind(*[cts[i] for i in live], axes=axes)):
            out[i] = c
    return out


_register(
    psum_p,
    lambda *xs, axes: [x.strip_weak() for x in xs],
    _psum_impl,
    lambda args, dims, *, axes: (psum_p.bind(*args, axes=axes), list(dims)),
    _psum_axis_batch,
)
deflinear(psum_p, transpose=_psum_transpose)


def _psum_start(*xs, axes):
    # over several axes the sums run one after the other: all but the last one now
    rt = _runtime()
    outs = list(xs)
    for axis in axes[:-1]:
        outs = rt.all_reduce_runtime(outs, "sum", axis, "psum")
    return rt.all_reduce_start(outs, "sum", axes[-1], "psum")


split_phase_rules[psum_p] = (_psum_start, lambda handle: _runtime().all_reduce_wait(handle))


def _def_extremum(name, op, reduce_batch):
    prim = new_primitive(name)

    def impl(x, *, axes):
        rt = _runtime()
        for axis in axes:
            (x,) = rt.all_reduce_runtime([x], op, axis, name)
        return x

    def axis_batch(axis, vals, dims, *, axes):
        x, d = vals[0], dims[0]
        y = x if d is None else reduce_batch(x, d)
        rest = _rest(axes, axis)
        return (prim.bind(y, axes=rest) if rest else y), None

    _register(prim, _same_aval, impl, _elementwise_batch(prim), axis_batch)
    return prim


pmax_p = _def_extremum("pmax", "max", lambda x, d: x.amax(d))
pmin_p = _def_extremum("pmin", "min", lambda x, d: x.amin(d))


def _extremum_jvp(prim):
    """Ties share the tangent evenly (torch's rule for amax/amin): psum(t * tie) / psum(tie)."""

    def jvp(primals, tangents, *, axes):
        (x,), (t,) = primals, tangents
        out = prim.bind(x, axes=axes)
        if type(t) is Zero:
            return out, Zero(get_aval(out))
        tie = (x == out).to(get_aval(x).dtype)
        # two binds: one equation mixing primal and tangent operands would make both linear
        (count,) = psum_p.bind(tie, axes=axes)
        (num,) = psum_p.bind(t * tie, axes=axes)
        return out, num / count

    jvp_rules[prim] = jvp


_extremum_jvp(pmax_p)
_extremum_jvp(pmin_p)

# ----------------------------------------------------------------------------------- all_gather

all_gather_p = new_primitive("all_gather")


def _check_dim(what, d, ndim):
    if not 0 <= d < ndim:
        raise ValueError(f"{what}: axis {d} is out of range for a value of rank {ndim}")


def _all_gather_abstract_eval(x, *, axes, axis, tiled):
    n = _one(axes)
    shape = list(x.shape)
    if tiled:
        _check_dim("all_gather", axis, x.ndim)
        shape[axis] *= n
    else:
        _check_dim("all_gather", axis, x.ndim + 1)
        shape.insert(axis, n)
    return ShapedArray(shape, x.dtype, x.device)


def _all_gather_impl(x, *, axes, axis, tiled):
    return _runtime().all_gather_runtime(x, axes[0], axis, tiled)


def _all_gather_batch(args, dims, *, axes, axis, tiled):
    x = args[0].movedim(dims[0], 0)
    return all_gather_p.bind(x, axes=axes, axis=axis + 1, tiled=tiled), 0


def _all_gather_axis_batch(named, vals, dims, *, axes, axis, tiled):
    x = _to_front(vals[0], dims[0], named.size)  # [devices, *shape]
    y = x.movedim(0, axis)
    if tiled:
        shape = list(get_aval(y).shape)
        shape[axis : axis + 2] = [shape[axis] * shape[axis + 1]]
        y = y.reshape(shape)
    return y, None


_register(
    all_gather_p,
    _all_gather_abstract_eval,
    _all_gather_impl,
    _all_gather_batch,
    _all_gather_axis_batch,
)

# --------------------------------------------------------------------------------- psum_scatter

psum_scatter_p = new_primitive("psum_scatter")


def _psum_scatter_abstract_eval(x, *, axes, scatter_dimension, tiled):
    n, d = _one(axes), scatter_dimension
    _check_dim("psum_scatter", d, x.ndim)
    shape = list(x.shape)
    if tiled:
        if shape[d] % n:
            raise ValueError(
                f"psum_scatter: dimension {d} of {x.str_short()} is not divisible by the size "
                f"{n} of axis {axes[0].name!r}"
            )
        shape[d] //= n
    else:
        if shape[d] != n:
            raise ValueError(
                f"psum_scatter: dimension {d} of {x.str_short()} must equal the size {n} of axis "
                f"{axes[0].name!r} (or pass tiled=True)"
            )
        del shape[d]
    return ShapedArray(shape, x.dtype, x.device)


def _psum_scatter_impl(x, *, axes, scatter_dimension, tiled):
    return _runtime().psum_scatter_runtime(x, axes[0], scatter_dimension, tiled)


def _psum_scatter_batch(args, dims, *, axes, scatter_dimension, tiled):
    x = args[0].movedim(dims[0], 0)
    out = psum_scatter_p.bind(x, axes=axes, scatter_dimension=scatter_dimension + 1, tiled=tiled)
    return out, 0


def _psum_scatter_axis_batch(named, vals, dims, *, axes, scatter_dimension, tiled):
    n, d = named.size, scatter_dimension
    total = _sum_batch(vals[0], dims[0], n)
    if tiled:
        shape = list(get_aval(total).shape)
        shape[d : d + 1] = [n, shape[d] // n]
        total = total.reshape(shape)
    # device j keeps block j: the blocks' axis becomes the batch dim
    return total.movedim(d, 0), 0


_register(
    psum_scatter_p,
    _psum_scatter_abstract_eval,
    _psum_scatter_impl,
    _psum_scatter_batch,
    _psum_scatter_axis_batch,
)


def _all_gather_transpose(ct, x, *, axes, axis, tiled):
    return [psum_scatter_p.bind(ct, axes=axes, scatter_dimension=axis, tiled=tiled)]


def _psum_scatter_transpose(ct, x, *, axes, scatter_dimension, tiled):
    return [all_gather_p.bind(ct, axes=axes, axis=scatter_dimension, tiled=tiled)]


deflinear(all_gather_p, transpose=_all_gather_transpose)
deflinear(psum_scatter_p, transpose=_psum_scatter_transpose)

# ------------------------------------------------------------------------------------- ppermute

ppermute_p = new_primitive("ppermute")


def _ppermute_impl(x, *, axes, perm):
    return _runtime().ppermute_runtime(x, axes[0], perm)


def _ppermute_axis_batch(named, vals, dims, *, axes, perm):
    n = named.size
    x = _to_front(vals[0], dims[0], n)
    source = [0] * n
    received = [False] * n
    for src, dst in perm:
        source[dst] = src
        received[dst] = True
    y = x.index_select(0, torch.tensor(source))
    if not all(received):
        # devices no one sends to receive zeros (JAX's rule)
        aval = get_aval(x)
        mask = torch.tensor(received, dtype=aval.dtype).reshape((n,) + (1,) * (aval.ndim - 1))
        y = y * mask
    return y, 0


_register(
    ppermute_p,
    lambda x, *, axes, perm: x.strip_weak(),
    _ppermute_impl,
    _elementwise_batch(ppermute_p),
    _ppermute_axis_batch,
)


def _ppermute_transpose(ct, x, *, axes, perm):
    inverse = tuple((dst, src) for src, dst in perm)
    return [ppermute_p.bind(ct, axes=axes, perm=inverse)]


deflinear(ppermute_p, transpose=_ppermute_transpose)

# ----------------------------------------------------------------------------------- all_to_all

all_to_all_p = new_primitive("all_to_all")


def _all_to_all_abstract_eval(x, *, axes, split_axis, concat_axis, tiled):
    n = _one(axes)
    _check_dim("all_to_all split_axis", split_axis, x.ndim)
    shape = list(x.shape)
    if tiled:
        _check_dim("all_to_all concat_axis", concat_axis, x.ndim)
        if shape[split_axis] % n:
            raise ValueError(
                f"all_to_all: split_axis {split_axis} of {x.str_short()} is not divisible by "
                f"the size {n} of axis {axes[0].name!r}"
            )
        shape[split_axis] //= n
        shape[concat_axis] *= n
    else:
        _check_dim("all_to_all concat_axis", concat_axis, x.ndim)
        if shape[split_axis] != n:
            raise ValueError(
                f"all_to_all: split_axis {split_axis} of {x.str_short()} must equal the size {n} "
                f"of axis {axes[0].name!r} (or pass tiled=True)"
            )
        del shape[split_axis]
        shape.insert(concat_axis, n)
    return ShapedArray(shape, x.dtype, x.device)


def _all_to_all_impl(x, *, axes, split_axis, concat_axis, tiled):
    return _runtime().all_to_all_runtime(x, axes[0], split_axis, concat_axis, tiled)


def _all_to_all_batch(args, dims, *, axes, split_axis, concat_axis, tiled):
    x = args[0].movedim(dims[0], 0)
    out = all_to_all_p.bind(
        x, axes=axes, split_axis=split_axis + 1, concat_axis=concat_axis + 1, tiled=tiled
    )
    return out, 0


def _all_to_all_axis_batch(named, vals, dims, *, axes, split_axis, concat_axis, tiled):
    n = named.size
    x = _to_front(vals[0], dims[0], n)  # [source i, *shape]
    if not tiled:
        # device j gets, stacked at concat_axis over sources i, block j of each source's split axis
        y = x.movedim(1 + split_axis, 0)  # [j, i, *rest]
        return y.movedim(1, 1 + concat_axis), 0
    shape = list(get_aval(x).shape)
    s = 1 + split_axis
    shape[s : s + 1] = [n, shape[s] // n]
    y = x.reshape(shape).movedim(s, 0)  # [j, i, *blocks]
    c = 2 + concat_axis  # the concat axis of a block in y
    y = y.movedim(1, c - 1)  # sources sit right before the blocks' concat axis
    shape = list(get_aval(y).shape)
    shape[c - 1 : c + 1] = [shape[c - 1] * shape[c]]
    return y.reshape(shape), 0


_register(
    all_to_all_p,
    _all_to_all_abstract_eval,
    _all_to_all_impl,
    _all_to_all_batch,
    _all_to_all_axis_batch,
)


def _all_to_all_transpose(ct, x, *, axes, split_axis, concat_axis, tiled):
    out = all_to_all_p.bind(
        ct, axes=axes, split_axis=concat_axis, concat_axis=split_axis, tiled=tiled
    )
    return [out]


deflinear(all_to_all_p, transpose=_all_to_all_transpose)

# ----------------------------------------------------------------------------------- axis_index

axis_index_p = new_primitive("axis_index")


def _axis_index_abstract_eval(*, axes):
    mesh = axes[0].mesh
    device = torch.device("cpu") if mesh is None else torch.device(mesh.device_type)
    return ShapedArray((), torch.int32, device)


def _axis_index_axis_batch(named, vals, dims, *, axes):
    from thunderx.primitives import creation

    return creation.iota(torch.int32, (named.size,), 0), 0


_register(
    axis_index_p,
    _axis_index_abstract_eval,
    lambda *, axes: _runtime().axis_index_runtime(axes[0]),
    None,  # no operands: only the trace binding its name batches it
    _axis_index_axis_batch,
)
