"""shard_map: run a per-shard (SPMD) function on every process of a torch `DeviceMesh`.

Outside the body values are global; `in_specs` say which mesh dims shard which tensor dims, the
body sees this process's block, and `out_specs` say how the blocks of each output form the global
result. Each mesh dim is a named axis in the body, so `thunderx.lax` collectives over it are
torch.distributed calls on that dim's process group.

The boundary is two primitives (`shard_slice`: global -> local block, `shard_gather`: local block
-> global, an all_gather over the sharded dims), so `grad`, `vmap` and `jit` compose with
shard_map in any order. Replication follows JAX's `check_rep=False` semantics: an output whose
spec omits a mesh dim is taken to be equal across it (not checked), so its cotangent is shared
evenly among the members; an input replicated over a mesh dim gets the psum of its members'
cotangents.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch

from thunderx import tree
from thunderx.ad_util import deflinear
from thunderx.avals import ShapedArray
from thunderx.core import (
    NamedAxis,
    Tracer,
    abstract_eval_rules,
    batch_rules,
    declare_properties,
    extend_axis_env,
    impl_rules,
    new_primitive,
)
from thunderx.errors import ThunderxError, user_frame


class P(tuple):
    """A partition spec (JAX's `PartitionSpec`): per tensor dim, the mesh dim name(s) sharding
    it, or None; missing trailing dims are unsharded. `P()` is replicated.

    >>> thunderx.P("dp", None)
    P('dp', None)
    """

    def __new__(cls, *entries):
        return super().__new__(cls, entries)

    def __repr__(self) -> str:
        return "P(" + ", ".join(repr(e) for e in self) + ")"


class ShardingError(ThunderxError, ValueError):
    """A spec that does not fit the mesh or the value it describes."""


# ------------------------------------------------------------------------------ boundary prims

# `spec`: per dim, a tuple of mesh dim names (major to minor); `mesh`: the DeviceMesh.
shard_slice_p = new_primitive("shard_slice")
shard_gather_p = new_primitive("shard_gather")


def _sizes(mesh, names) -> int:
    return math.prod(mesh.size(mesh.mesh_dim_names.index(n)) for n in names)


def _block_index(mesh, names) -> int:
    index = 0
    for n in names:
        index = index * mesh.size(mesh.mesh_dim_names.index(n)) + mesh.get_local_rank(n)
    return index


def _slice_abstract_eval(x, *, mesh, spec):
    shape = list(x.shape)
    for d, names in enumerate(spec):
        if names:
            shape[d] //= _sizes(mesh, names)
    return ShapedArray(shape, x.dtype, x.device)


def _gather_abstract_eval(x, *, mesh, spec):
    shape = list(x.shape)
    for d, names in enumerate(spec):
        if names:
            shape[d] *= _sizes(mesh, names)
    return ShapedArray(shape, x.dtype, x.device)


def _slice_impl(x, *, mesh, spec):
    from torch.distributed.tensor import DTensor

    if isinstance(x, DTensor):
        # the DTensor's own shards, laid out as `spec` asks (no traffic when they already are)
        placements = _placements(mesh, spec, len(x.shape))
        if tuple(x.placements) != placements:
            x = x.redistribute(mesh, placements)
        return x.to_local()
    for d, names in enumerate(spec):
        if names:
            block = x.shape[d] // _sizes(mesh, names)
            x = x.narrow(d, _block_index(mesh, names) * block, block)
    return x  # a view of the input (declared so to the torch executor)


def _gather_impl(x, *, mesh, spec):
    from thunderx.collectives import all_gather_runtime

    if not any(spec):
        return x
    for d, names in enumerate(spec):
        for name in reversed(names):  # minor dims first, so blocks land in row-major order
            axis = NamedAxis(name, _sizes(mesh, (name,)), mesh)
            x = all_gather_runtime(x, axis, d, True)
    return x


def _unmentioned(mesh, spec) -> tuple[NamedAxis, ...]:
    used = {n for names in spec for n in names}
    return tuple(
        NamedAxis(n, mesh.size(i), mesh) for i, n in enumerate(mesh.mesh_dim_names) if n not in used
    )


def _slice_transpose(ct, x, *, mesh, spec):
    # the members holding one block (they differ only on unmentioned dims) each add their part
    from thunderx.primitives.collectives import psum_p

    rest = _unmentioned(mesh, spec)
    if rest:
        (ct,) = psum_p.bind(ct, axes=rest)
    return [shard_gather_p.bind(ct, mesh=mesh, spec=spec)]


def _gather_transpose(ct, x, *, mesh, spec):
    # the output is taken to be equal across unmentioned dims: its cotangent is shared evenly
    ct = shard_slice_p.bind(ct, mesh=mesh, spec=spec)
    n = math.prod(a.size for a in _unmentioned(mesh, spec))
    return [ct / n if n > 1 else ct]


def _boundary_batch(prim):
    def rule(args, dims, *, mesh, spec):
        d = dims[0]
        spec = spec[:d] + ((),) + spec[d:]
        return prim.bind(args[0], mesh=mesh, spec=spec), d

    return rule


for _p, _ae, _impl, _t in (
    (shard_slice_p, _slice_abstract_eval, _slice_impl, _slice_transpose),
    (shard_gather_p, _gather_abstract_eval, _gather_impl, _gather_transpose),
):
    abstract_eval_rules[_p] = _ae
    impl_rules[_p] = _impl
    batch_rules[_p] = _boundary_batch(_p)
    deflinear(_p, transpose=_t)
    # the local block (or the global value) is the operand itself when unsharded
    declare_properties(_p, aliases=(0,))


# ---------------------------------------------------------------------------------- specs


def _placements(mesh, spec, ndim: int) -> tuple:
    from torch.distributed.tensor import Replicate, Shard

    placements = [Replicate()] * mesh.ndim
    for d, names in enumerate(spec):
        dims = [mesh.mesh_dim_names.index(n) for n in names]
        if dims != sorted(dims):
            raise ShardingError(
                f"shard_map: dim {d} is sharded over {names}, against the mesh's dim order "
                f"{mesh.mesh_dim_names}; a DTensor cannot express that (at {user_frame()})"
            )
        for i in dims:
            placements[i] = Shard(d)
    return tuple(placements)


def _spec_of_dtensor(x, where: str) -> tuple:
    from torch.distributed.tensor import Replicate, Shard

    spec = [[] for _ in x.shape]
    for i, p in enumerate(x.placements):
        if isinstance(p, Shard):
            spec[p.dim].append(x.device_mesh.mesh_dim_names[i])
        elif not isinstance(p, Replicate):
            raise ShardingError(
                f"shard_map: {where} is a DTensor with placement {p} on mesh dim {i}; only Shard "
                f"and Replicate are accepted (redistribute it first) (at {user_frame()})"
            )
    return tuple(tuple(n) for n in spec)


def _normalize(spec, mesh, ndim: int, where: str) -> tuple:
    """A P (or None entries) as per-dim tuples of mesh dim names, checked against the mesh."""
    if not isinstance(spec, tuple):
        raise ShardingError(
            f"shard_map: {where} must be a P(...) partition spec, got {spec!r} (at {user_frame()})"
        )
    if len(spec) > ndim:
        raise ShardingError(
            f"shard_map: {where} {spec!r} has {len(spec)} entries for a value of rank {ndim} "
            f"(at {user_frame()})"
        )
    names_in_mesh = tuple(mesh.mesh_dim_names or ())
    out, seen = [], set()
    for entry in tuple(spec) + (None,) * (ndim - len(spec)):
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        for n in names:
            if n not in names_in_mesh:
                raise ShardingError(
                    f"shard_map: {where} {spec!r} names mesh dim {n!r}, but the mesh has "
                    f"{names_in_mesh} (at {user_frame()})"
                )
            if n in seen:
                raise ShardingError(
                    f"shard_map: {where} {spec!r} uses mesh dim {n!r} twice (at {user_frame()})"
                )
            seen.add(n)
        out.append(names)
    return tuple(out)


def _check_divides(shape, spec, mesh, where: str, spec_src) -> None:
    for d, names in enumerate(spec):
        if names and shape[d] % _sizes(mesh, names):
            raise ShardingError(
                f"shard_map: {where} {spec_src!r} shards dim {d} of size {shape[d]} over "
                f"{names} of size {_sizes(mesh, names)}, which does not divide it "
                f"(at {user_frame()})"
            )


def _specs_for(specs, values, what: str) -> list:
    try:
        return tree.broadcast_prefix(specs, values)  # P is a tuple subclass: a leaf to optree
    except (ValueError, TypeError) as e:
        raise ShardingError(
            f"shard_map: {what} {specs!r} does not match the structure of the "
            f"{'arguments' if what == 'in_specs' else 'outputs'} ({e}) (at {user_frame()})"
        ) from None


# ------------------------------------------------------------------------------------- API


def shard_map(
    f: Callable,
    mesh,
    in_specs: Any,
    out_specs: Any,
    *,
    dtensor_out: bool = False,
) -> Callable:
    """Map `f` over the shards of its arguments on a `torch.distributed` DeviceMesh.

    `in_specs`: a pytree prefix of the positional arguments (a tuple, one entry per argument)
    of `P` specs; None for a DTensor argument takes the spec from its placements. Plain tensor
    arguments are global values, the same on every process. `out_specs` likewise for the
    outputs; an output sharded over mesh dims is all-gathered into the global value, or, with
    `dtensor_out=True` (outside other transforms), returned as a DTensor of the local blocks.
    Each mesh dim is a named axis inside `f` for `thunderx.lax` collectives.

    >>> mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))  # doctest: +SKIP
    >>> total = thunderx.shard_map(lambda x: thunderx.lax.psum(x.sum(), "dp"),
    ...                            mesh, in_specs=(P("dp"),), out_specs=P())  # doctest: +SKIP
    """
    names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
    if not names:
        raise ShardingError(
            "shard_map: the mesh needs named dims, e.g. init_device_mesh('cpu', (n,), "
            f"mesh_dim_names=('dp',)) (at {user_frame()})"
        )
    axes = tuple(NamedAxis(n, mesh.size(i), mesh) for i, n in enumerate(names))

    @functools.wraps(f)
    def mapped(*args):
        from thunderx.collectives import record_failure, register_process

        register_process()
        try:
            return _call(f, mesh, axes, in_specs, out_specs, dtensor_out, args)
        except BaseException as e:
            record_failure(e)
            raise

    mapped.__thunderx_transform__ = ("shard_map", f, in_specs)
    return mapped


def _call(f, mesh, axes, in_specs, out_specs, dtensor_out, args):
    from torch.distributed.tensor import DTensor

    if isinstance(in_specs, list):
        in_specs = tuple(in_specs)
    if isinstance(in_specs, tuple) and type(in_specs) is not P and len(in_specs) != len(args):
        raise ShardingError(
            f"shard_map: in_specs has {len(in_specs)} entries but the function got {len(args)} "
            f"arguments (at {user_frame()})"
        )
    leaves, in_tree = tree.flatten(args)
    specs = _specs_for(in_specs, args, "in_specs")
    local = []
    for i, (x, spec_src) in enumerate(zip(leaves, specs)):
        where = f"in_specs for argument leaf {i}"
        if not isinstance(x, (torch.Tensor, Tracer)):
            raise TypeError(
                f"shard_map: arguments must be tensors, got {type(x).__name__} for argument leaf "
                f"{i} (at {user_frame()})"
            )
        if spec_src is None:
            if not isinstance(x, DTensor):
                raise ShardingError(
                    f"shard_map: {where} is None, which only a DTensor argument may have "
                    f"(its placements give the spec) (at {user_frame()})"
                )
            spec = _spec_of_dtensor(x, f"argument leaf {i}")
        else:
            spec = _normalize(spec_src, mesh, len(x.shape), where)
        _check_divides(tuple(x.shape), spec, mesh, where, spec_src)
        # bound even for a replicated value: its cotangent is the psum over the mesh
        local.append(shard_slice_p.bind(x, mesh=mesh, spec=spec))
    with extend_axis_env(axes):
        out = f(*tree.unflatten(in_tree, local))
    out_leaves, out_tree = tree.flatten(out)
    ospecs = _specs_for(out_specs, out, "out_specs")
    results = []
    for i, (y, spec_src) in enumerate(zip(out_leaves, ospecs)):
        where = f"out_specs for output leaf {i}"
        if not isinstance(y, (torch.Tensor, Tracer)):
            y = torch.tensor(y)
        if spec_src is None:
            raise ShardingError(f"shard_map: {where} is None; give a P(...) (at {user_frame()})")
        spec = _normalize(spec_src, mesh, len(y.shape), where)
        if dtensor_out:
            results.append(_as_dtensor(y, mesh, spec, where))
        else:  # even unsharded: the cotangent of a replicated output is shared by the members
            results.append(shard_gather_p.bind(y, mesh=mesh, spec=spec))
    return tree.unflatten(out_tree, results)


def _as_dtensor(y, mesh, spec, where):
    from torch.distributed.tensor import DTensor

    if isinstance(y, Tracer):
        raise ShardingError(
            f"shard_map: dtensor_out=True returns DTensors, which exist only outside grad, vmap "
            f"and jit; {where} is traced here (at {user_frame()}). Use dtensor_out=False."
        )
    shape = list(y.shape)
    for d, names in enumerate(spec):
        shape[d] *= _sizes(mesh, names) if names else 1
    return DTensor.from_local(
        y,
        mesh,
        _placements(mesh, spec, y.ndim),
        run_check=False,
        shape=torch.Size(shape),
        stride=torch.empty(shape, device="meta").stride(),
    )
