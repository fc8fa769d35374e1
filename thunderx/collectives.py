"""Collectives over named axes (JAX's `jax.lax` names and semantics), and their torch.distributed
runtime.

A name is bound by `vmap(f, axis_name=...)` (then a collective is a computation over the batch
dim) or by a mesh dim of `shard_map` (then it is a torch.distributed call on that dim's process
group: functional collectives, and c10d point-to-point ops for `ppermute`). One SPMD program, two
ways to run it:

>>> f = lambda x: x - thunderx.lax.pmean(x, "i")
>>> thunderx.vmap(f, axis_name="i")(torch.tensor([1., 2., 3.]))
tensor([-1.,  0.,  1.])
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from thunderx import tree
from thunderx.core import NamedAxis, Tracer, axis_env
from thunderx.errors import ThunderxError, user_frame
from thunderx.peer_failures import (  # noqa: F401  (PeerFailedError: public)
    PeerFailedError,
    _peer_failures,
    record_failure,
    register_process,
)
from thunderx.primitives.collectives import (
    all_gather_p,
    all_to_all_p,
    axis_index_p,
    pmax_p,
    pmin_p,
    ppermute_p,
    psum_p,
    psum_scatter_p,
)

__all__ = [
    "all_gather",
    "all_to_all",
    "axis_index",
    "axis_size",
    "pmax",
    "pmean",
    "pmin",
    "ppermute",
    "psum",
    "psum_scatter",
]


class AxisNameError(ThunderxError, NameError):
    """A collective named an axis that no enclosing vmap or shard_map binds."""


# ---------------------------------------------------------------------------------- names


def _resolve(axis_name, what: str) -> tuple[NamedAxis, ...]:
    names = (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError(
            f"{what}: axis_name must be a str or a tuple of str, got {axis_name!r} "
            f"(at {user_frame()})"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"{what}: axis names {names} repeat (at {user_frame()})")
    env = axis_env()
    out = []
    for name in names:
        for axis in reversed(env):  # the innermost binding of a name wins
            if axis.name == name:
                out.append(axis)
                break
        else:
            bound = ", ".join(repr(a.name) for a in env) or "none"
            raise AxisNameError(
                f"{what}: unbound axis name {name!r} at {user_frame()} (names in scope: {bound}). "
                f"Bind it with vmap(..., axis_name={name!r}) or a shard_map mesh dim."
            )
    return tuple(out)


def _single(axis_name, what: str) -> tuple[NamedAxis]:
    axes = _resolve(axis_name, what)
    if len(axes) != 1:
        raise ValueError(f"{what} takes one axis name, got {axis_name!r} (at {user_frame()})")
    return axes


def _tensor(x, what: str):
    if isinstance(x, (Tracer, torch.Tensor)):
        return x
    if type(x) in (bool, int, float):
        return torch.tensor(x)
    raise TypeError(f"{what}: expected tensors, got {type(x).__name__} (at {user_frame()})")


def _map(fn, x):
    return tree.map(fn, x)


# ------------------------------------------------------------------------------------- API


def axis_size(axis_name) -> int:
    """The size of a named axis (the product, for a tuple of names).

    >>> thunderx.vmap(lambda x: x * thunderx.lax.axis_size("i"), axis_name="i")(torch.ones(3))
    tensor([3., 3., 3.])
    """
    return math.prod(a.size for a in _resolve(axis_name, "axis_size"))


def axis_index(axis_name):
    """This device's index along a named axis (row-major over a tuple of names), an int32 scalar.

    >>> thunderx.vmap(lambda x: thunderx.lax.axis_index("i"), axis_name="i")(torch.ones(3))
    tensor([0, 1, 2], dtype=torch.int32)
    """
    index = None
    for axis in _resolve(axis_name, "axis_index"):
        i = axis_index_p.bind(axes=(axis,))
        index = i if index is None else index * axis.size + i
    return index


def psum(x: Any, axis_name):
    """Sum over a named axis, the result on every member; `x` a pytree of tensors.

    A Python number counts once per member: `psum(1, "i")` is the axis size.

    >>> thunderx.vmap(lambda x: thunderx.lax.psum(x, "i"), axis_name="i")(torch.arange(3.))
    tensor([3., 3., 3.])
    """
    axes = _resolve(axis_name, "psum")
    size = math.prod(a.size for a in axes)
    axes = tuple(a for a in axes if a.size != 1)  # over a one-member axis psum is the identity
    if not axes:
        return x
    leaves, treedef = tree.flatten(x)
    tensors = [i for i, v in enumerate(leaves) if type(v) not in (bool, int, float)]
    out = [v * size for v in leaves]  # Python numbers: one count per member
    summed = (
        psum_p.bind(*[_tensor(leaves[i], "psum") for i in tensors], axes=axes) if tensors else []
    )
    for i, s in zip(tensors, summed):
        out[i] = s
    return tree.unflatten(treedef, out)


def pmean(x: Any, axis_name):
    """Mean over a named axis: `psum(x) / axis_size`.

    >>> thunderx.vmap(lambda x: thunderx.lax.pmean(x, "i"), axis_name="i")(torch.arange(3.))
    tensor([1., 1., 1.])
    """
    size = axis_size(axis_name)
    if size == 1:
        return x
    return _map(lambda v: v / size, psum(x, axis_name))


def pmax(x: Any, axis_name):
    """Maximum over a named axis (ties share the derivative evenly).

    >>> thunderx.vmap(lambda x: thunderx.lax.pmax(x, "i"), axis_name="i")(torch.arange(3.))
    tensor([2., 2., 2.])
    """
    axes = tuple(a for a in _resolve(axis_name, "pmax") if a.size != 1)
    if not axes:
        return x
    return _map(lambda v: pmax_p.bind(_tensor(v, "pmax"), axes=axes), x)


def pmin(x: Any, axis_name):
    """Minimum over a named axis (ties share the derivative evenly).

    >>> thunderx.vmap(lambda x: thunderx.lax.pmin(x, "i"), axis_name="i")(torch.arange(3.))
    tensor([0., 0., 0.])
    """
    axes = tuple(a for a in _resolve(axis_name, "pmin") if a.size != 1)
    if not axes:
        return x
    return _map(lambda v: pmin_p.bind(_tensor(v, "pmin"), axes=axes), x)


def _dim(d: int, ndim: int, what: str, name: str) -> int:
    """`d` normalized into range(ndim) (ndim counts the result's dims where one is inserted)."""
    if not -ndim <= d < ndim:
        raise ValueError(f"{what}: {name}={d} is out of range (at {user_frame()})")
    return d % ndim


def all_gather(x: Any, axis_name, *, axis: int = 0, tiled: bool = False):
    """Every member's value, stacked along a new dim `axis` (concatenated along `axis` when
    `tiled`), on every member.

    >>> thunderx.vmap(lambda x: thunderx.lax.all_gather(x, "i"), axis_name="i")(torch.arange(2.))
    tensor([[0., 1.],
            [0., 1.]])
    """
    axes = _single(axis_name, "all_gather")

    def one(v):
        v = _tensor(v, "all_gather")
        nd = len(v.shape)
        d = _dim(axis, nd if tiled else nd + 1, "all_gather", "axis")
        return all_gather_p.bind(v, axes=axes, axis=d, tiled=bool(tiled))

    return _map(one, x)


def psum_scatter(x: Any, axis_name, *, scatter_dimension: int = 0, tiled: bool = False):
    """`psum`, with member j keeping block j of dim `scatter_dimension` (whose size must equal
    the axis size, or be divisible by it when `tiled`).

    >>> f = lambda x: thunderx.lax.psum_scatter(x, "i")
    >>> thunderx.vmap(f, axis_name="i")(torch.tensor([[1., 2.], [3., 4.]]))
    tensor([4., 6.])
    """
    axes = _single(axis_name, "psum_scatter")

    def one(v):
        v = _tensor(v, "psum_scatter")
        d = _dim(scatter_dimension, len(v.shape), "psum_scatter", "scatter_dimension")
        return psum_scatter_p.bind(v, axes=axes, scatter_dimension=d, tiled=bool(tiled))

    return _map(one, x)


def ppermute(x: Any, axis_name, perm: Sequence[tuple[int, int]]):
    """Send each member's value along `perm`, pairs (source index, destination index); a member
    no pair sends to receives zeros.

    >>> shift = lambda x: thunderx.lax.ppermute(x, "i", perm=[(0, 1), (1, 2), (2, 0)])
    >>> thunderx.vmap(shift, axis_name="i")(torch.tensor([1., 2., 3.]))
    tensor([3., 1., 2.])
    """
    axes = _single(axis_name, "ppermute")
    n = axes[0].size
    try:
        perm = tuple((int(s), int(d)) for s, d in perm)
    except (TypeError, ValueError):
        raise TypeError(
            f"ppermute: perm must be a sequence of (source, destination) pairs, got {perm!r} "
            f"(at {user_frame()})"
        ) from None
    srcs, dsts = [s for s, _ in perm], [d for _, d in perm]
    if any(not 0 <= i < n for i in srcs + dsts):
        raise ValueError(
            f"ppermute: perm {perm} has an index outside axis {axes[0].name!r} of size {n} "
            f"(at {user_frame()})"
        )
    if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        raise ValueError(
            f"ppermute: perm {perm} repeats a source or a destination (at {user_frame()})"
        )
    return _map(lambda v: ppermute_p.bind(_tensor(v, "ppermute"), axes=axes, perm=perm), x)


def all_to_all(x: Any, axis_name, split_axis: int, concat_axis: int, *, tiled: bool = False):
    """Member j gets block j of every member's `split_axis`, stacked (concatenated when `tiled`)
    along `concat_axis` in member order.

    >>> f = lambda x: thunderx.lax.all_to_all(x, "i", 0, 0)
    >>> thunderx.vmap(f, axis_name="i")(torch.tensor([[1., 2.], [3., 4.]]))
    tensor([[1., 3.],
            [2., 4.]])
    """
    axes = _single(axis_name, "all_to_all")

    def one(v):
        v = _tensor(v, "all_to_all")
        nd = len(v.shape)
        s = _dim(split_axis, nd, "all_to_all", "split_axis")
        c = _dim(concat_axis, nd, "all_to_all", "concat_axis")
        return all_to_all_p.bind(v, axes=axes, split_axis=s, concat_axis=c, tiled=bool(tiled))

    return _map(one, x)


# ------------------------------------------------------------------ torch.distributed runtime


def _fc():
    import torch.distributed._functional_collectives as fc

    return fc


def _group(axis: NamedAxis, what: str):
    if axis.mesh is None:
        raise AxisNameError(
            f"{what} over vmap axis {axis.name!r} ran outside that vmap (at {user_frame()}); "
            "a collective over a vmapped name only exists inside the vmap"
        )
    return axis.mesh.get_group(axis.name)


def axis_index_runtime(axis: NamedAxis):
    _group(axis, "axis_index")
    return torch.tensor(axis.mesh.get_local_rank(axis.name), dtype=torch.int32)


_REDUCE_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN"}


def all_reduce_runtime(xs: list, op: str, axis: NamedAxis, what: str) -> list:
    """One all_reduce per dtype: the tensors travel flattened in one buffer that this function
    allocates, so the in-place c10d op serves (a functional all_reduce would copy it again)."""
    return all_reduce_wait(all_reduce_start(xs, op, axis, what))


class PendingAllReduce:
    """An all_reduce in flight (`all_reduce_start`); `all_reduce_wait` finishes it."""

    __slots__ = ("works", "shapes", "axis", "what")

    def __init__(self, works, shapes, axis, what):
        self.works = works  # [(c10d Work, flat buffer, operand positions)]
        self.shapes = shapes
        self.axis = axis
        self.what = what


def all_reduce_start(xs: Sequence, op: str, axis: NamedAxis, what: str) -> PendingAllReduce:
    """Start the all_reduce of `xs` (one buffer per dtype, copied now, so the operands may be
    overwritten once this returns); the communication proceeds while the caller computes."""
    import torch.distributed as dist

    group = _group(axis, what)
    reduce_op = getattr(dist.ReduceOp, _REDUCE_OPS[op])
    by_dtype: dict = {}
    for i, x in enumerate(xs):
        by_dtype.setdefault(x.dtype, []).append(i)
    works = []
    with _peer_failures(what, axis):
        for idx in by_dtype.values():
            if len(idx) == 1:
                buf = xs[idx[0]].clone(memory_format=torch.contiguous_format)
            else:
                buf = torch.cat([xs[i].reshape(-1) for i in idx])
            works.append((dist.all_reduce(buf, op=reduce_op, group=group, async_op=True), buf, idx))
    return PendingAllReduce(works, [x.shape for x in xs], axis, what)


def all_reduce_wait(pending: PendingAllReduce) -> list:
    """The reduced values of a started all_reduce, in operand order (views of its buffers)."""
    out: list = [None] * len(pending.shapes)
    with _peer_failures(pending.what, pending.axis):
        for work, buf, idx in pending.works:
            work.wait()
            if len(idx) == 1:
                out[idx[0]] = buf
                continue
            offset = 0
            for i in idx:
                shape = pending.shapes[i]
                n = math.prod(shape)
                out[i] = buf[offset : offset + n].view(shape)
                offset += n
    return out


def all_gather_runtime(x, axis: NamedAxis, dim: int, tiled: bool):
    group = _group(axis, "all_gather")
    if not tiled:
        x = x.unsqueeze(dim)
    with _peer_failures("all_gather", axis):
        return _fc().wait_tensor(_fc().all_gather_single(x.contiguous(), dim, group))


def psum_scatter_runtime(x, axis: NamedAxis, dim: int, tiled: bool):
    group = _group(axis, "psum_scatter")
    with _peer_failures("psum_scatter", axis):
        out = _fc().wait_tensor(_fc().reduce_scatter_single(x.contiguous(), "sum", dim, group))
    return out if tiled else out.squeeze(dim)


def ppermute_runtime(x, axis: NamedAxis, perm):
    import torch.distributed as dist

    group = _group(axis, "ppermute")
    me = axis.mesh.get_local_rank(axis.name)
    x = x.contiguous()
    out = torch.zeros_like(x)
    ops = []
    for src, dst in perm:
        if src == me and dst == me:
            out = x.clone()
        elif src == me:
            ops.append(dist.P2POp(dist.isend, x, dist.get_global_rank(group, dst), group))
        elif dst == me:
            ops.append(dist.P2POp(dist.irecv, out, dist.get_global_rank(group, src), group))
    if ops:
        with _peer_failures("ppermute", axis):
            for work in dist.batch_isend_irecv(ops):
                work.wait()
    return out


def all_to_all_runtime(x, axis: NamedAxis, split: int, concat: int, tiled: bool):
    group = _group(axis, "all_to_all")
    n = axis.size
    if tiled:
        blocks = torch.stack(x.chunk(n, split))  # [destination, *block]
    else:
        blocks = x.movedim(split, 0).contiguous()
    with _peer_failures("all_to_all", axis):
        out = _fc().wait_tensor(_fc().all_to_all_single(blocks, None, None, group))
    if tiled:  # out[i]: the block member i sent here
        return torch.cat(out.unbind(0), concat)
    return out.movedim(0, concat)
