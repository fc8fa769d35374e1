"""Jacobians and Hessians: `jacfwd` (vmap of the linearized map over a basis of input tangents),
`jacrev` (vmap of its transpose over a basis of output cotangents) and `hessian`."""

from __future__ import annotations

import contextlib
import functools
from typing import Callable

import torch

from thunderx import tree, validate
from thunderx.core import get_aval
from thunderx.lang.random import forbid_random
from thunderx.transforms import holomorphic as H
from thunderx.transforms.ad import (
    _apply_linearized,
    _as_value,
    _check_api,
    _check_float_args,
    _checked_outputs,
    _normalize_argnums,
    _partial,
    _transpose_linearized,
    linearize_flat,
)
from thunderx.transforms.input_updates import write_back_primals


def _std_basis(avals):
    """Identity rows split per leaf: leaf i gets a [N, *shape_i] block."""
    if not avals:
        return []
    sizes = [a.size for a in avals]
    n = sum(sizes)
    dtype = avals[0].dtype
    for a in avals[1:]:
        dtype = torch.promote_types(dtype, a.dtype)
    eye = torch.eye(n, dtype=dtype, device=avals[0].device)
    blocks, offset = [], 0
    for a, s in zip(avals, sizes):
        blocks.append(eye[:, offset : offset + s].reshape((n,) + tuple(a.shape)).to(a.dtype))
        offset += s
    return blocks


def _no_rows(shape, aval):
    """The empty Jacobian part of `shape` (which has a 0 in it) for a leaf of `aval`."""
    from thunderx.primitives import creation as C

    return C.full(shape, 0, aval.dtype, aval.device)


def _jac_tree(out_tree, in_tree, blocks):
    """blocks[i][j]: d out_leaf_i / d in_leaf_j -> out tree of in trees."""
    return tree.unflatten(out_tree, [tree.unflatten(in_tree, row) for row in blocks])


def _linearize_args(fun, argnums, has_aux, name, args, kwargs):
    """Linearize `fun` in the arguments `argnums` (flattened): (linearized, leaves, in_tree)."""
    single, nums = _normalize_argnums(argnums, len(args), name)
    dyn = tuple(tree.map(lambda x: _as_value(x, name), args[i]) for i in nums)
    _check_float_args(dyn, nums, name)
    leaves, in_tree = tree.flatten(dyn[0] if single else dyn)
    f = _partial(fun, args, kwargs, nums)
    user_f = validate.AuxPassthrough(f, name) if has_aux else f
    checked = _checked_outputs(user_f, name)

    def flat(*xs):
        dyn_args = tree.unflatten(in_tree, xs)
        return checked(dyn_args) if single else checked(*dyn_args)

    # jacfwd's inputs updated in place are written back to the caller's (after the columns are
    # computed), as torch.func's forward mode writes through its dual tensors
    forward = name == "jacfwd"
    lin = linearize_flat(flat, leaves, has_aux, name, reverse=not forward, defer_writes=forward)
    if has_aux:
        lin.aux = user_f.rebuild(lin.aux)
    return lin, leaves, in_tree


def jacfwd(
    fun: Callable,
    argnums=0,
    has_aux: bool = False,
    *,
    chunk_size: int | None = None,
    holomorphic: bool = False,
    randomness: str = "error",
):
    """Jacobian by forward mode (vmap over a basis of input tangents): shape out + in.
    `chunk_size` bounds memory: at most that many basis tangents are pushed forward at a time.
    `randomness` is torch.func's: 'error' refuses random ops, 'same' draws once for all columns,
    'different' draws anew for each column (a jvp per basis tangent under vmap).

    >>> thunderx.jacfwd(lambda x: x ** 2)(torch.tensor([1., 2.]))
    tensor([[2., 0.],
            [0., 4.]])
    """

    _check_api(fun, has_aux, "jacfwd", argnums)
    if randomness not in ("error", "same", "different"):
        raise ValueError(
            f"jacfwd: randomness must be 'error', 'same' or 'different', not {randomness!r}"
        )

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        from thunderx.transforms.vmap import vmap

        if randomness == "different":
            return _jacfwd_different(fun, argnums, has_aux, chunk_size, holomorphic, args, kwargs)
        scope = forbid_random("jacfwd") if randomness == "error" else contextlib.nullcontext()
        with scope:
            lin, leaves, in_tree = _linearize_args(fun, argnums, has_aux, "jacfwd", args, kwargs)
        H.check(holomorphic, leaves, "jacfwd")
        in_avals = [get_aval(x) for x in leaves]
        basis = _std_basis(in_avals)
        if basis and not any(a.size for a in in_avals):  # inputs without elements (as jacrev)
            cols = [_no_rows(tuple(a.shape) + (0,), a) for a in lin.tangent_avals]
        elif basis:
            cols = vmap(
                lambda *ts: _apply_linearized(lin, list(ts)),
                in_axes=0,
                out_axes=-1,
                chunk_size=chunk_size,
            )(*basis)
        else:  # no input leaves: every Jacobian row is an empty tree
            cols = [None] * len(lin.tangent_avals)
        blocks = []
        for o, a in zip(cols, lin.tangent_avals):
            row, offset = [], 0
            for ia in in_avals:
                from thunderx.primitives import shape as S

                part = S.slice_in_dim(o, offset, offset + ia.size, 1, len(a.shape))
                row.append(S.reshape(part, tuple(a.shape) + tuple(ia.shape)))
                offset += ia.size
            blocks.append(row)
        jac = _jac_tree(lin.out_tree, in_tree, blocks)
        for mutated, primals in lin.deferred_writes:
            write_back_primals(mutated, primals)
        return (jac, lin.aux) if has_aux else jac

    wrapper.__thunderx_transform__ = ("jacfwd", fun, None)
    return wrapper


def _jacfwd_different(fun, argnums, has_aux, chunk_size, holomorphic, args, kwargs):
    """jacfwd(randomness='different'): each column a jvp of its own under
    vmap(randomness='different'), so every column sees its own random draws (torch.func's)."""
    from thunderx.transforms.ad import jvp
    from thunderx.transforms.vmap import vmap

    if has_aux:
        raise NotImplementedError(
            "jacfwd(has_aux=True, randomness='different') is not supported: the aux output "
            "would differ per column; use randomness='same'"
        )
    single, nums = _normalize_argnums(argnums, len(args), "jacfwd")
    dyn = tuple(tree.map(lambda x: _as_value(x, "jacfwd"), args[i]) for i in nums)
    _check_float_args(dyn, nums, "jacfwd")
    leaves, in_tree = tree.flatten(dyn[0] if single else dyn)
    H.check(holomorphic, leaves, "jacfwd")
    checked = _checked_outputs(_partial(fun, args, kwargs, nums), "jacfwd")

    def flat(*xs):
        dyn_args = tree.unflatten(in_tree, xs)
        return checked(dyn_args) if single else checked(*dyn_args)

    in_avals = [get_aval(x) for x in leaves]
    basis = _std_basis(in_avals)

    def column(*ts):
        return jvp(flat, tuple(leaves), tuple(ts))[1]

    cols = vmap(column, in_axes=0, out_axes=-1, chunk_size=chunk_size, randomness="different")(
        *basis
    )
    out_leaves, out_tree = tree.flatten(cols)
    from thunderx.primitives import shape as S

    blocks = []
    for o in out_leaves:
        out_shape = tuple(get_aval(o).shape)[:-1]
        row, offset = [], 0
        for ia in in_avals:
            part = S.slice_in_dim(o, offset, offset + ia.size, 1, len(out_shape))
            row.append(S.reshape(part, out_shape + tuple(ia.shape)))
            offset += ia.size
        blocks.append(row)
    return _jac_tree(out_tree, in_tree, blocks)


def jacrev(
    fun: Callable,
    argnums=0,
    has_aux: bool = False,
    *,
    chunk_size: int | None = None,
    holomorphic: bool = False,
):
    """Jacobian by reverse mode (vmap of vjp over a basis of output cotangents): shape out + in.
    `chunk_size` bounds memory as in torch.func: at most that many cotangents are pulled back
    at a time (the rows are computed chunk by chunk and concatenated).

    >>> thunderx.jacrev(lambda x: x.sin().sum(), argnums=0)(torch.zeros(2))
    tensor([1., 1.])
    """

    _check_api(fun, has_aux, "jacrev", argnums)

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        from thunderx.primitives import shape as S
        from thunderx.transforms.vmap import vmap

        lin, leaves, in_tree = _linearize_args(fun, argnums, has_aux, "jacrev", args, kwargs)
        H.check(holomorphic, leaves, "jacrev")
        out_avals = lin.tangent_avals
        in_avals = [get_aval(x) for x in leaves]
        basis = _std_basis(out_avals)
        if basis and not any(a.size for a in out_avals):
            # outputs without elements: no cotangent to pull back (a vmap over an empty basis
            # would still run every batching rule on a batch of 0, which some torch kernels
            # reject); the Jacobian has no elements either
            rows = [_no_rows((0,) + tuple(a.shape), a) for a in in_avals]
        elif basis:
            rows = vmap(
                lambda *cts: _transpose_linearized(lin, list(cts), holomorphic),
                in_axes=0,
                out_axes=0,
                chunk_size=chunk_size,
            )(*basis)
        else:  # no output leaves: the Jacobian is the (empty) output tree
            rows = []
        blocks = []
        offset = 0
        for oa in out_avals:
            row = []
            for r, ia in zip(rows, in_avals):
                part = S.slice_in_dim(r, offset, offset + oa.size, 1, 0)
                row.append(S.reshape(part, tuple(oa.shape) + tuple(ia.shape)))
            offset += oa.size
            blocks.append(row)
        jac = _jac_tree(lin.out_tree, in_tree, blocks)
        return (jac, lin.aux) if has_aux else jac

    wrapper.__thunderx_transform__ = ("jacrev", fun, None)
    return wrapper


def hessian(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False):
    """Hessian as forward-over-reverse: `jacfwd(jacrev(fun))`.

    >>> thunderx.hessian(lambda x: (x ** 3).sum())(torch.tensor([1., 2.]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])
    """
    _check_api(fun, has_aux, "hessian", argnums)
    inner = jacfwd(
        jacrev(fun, argnums, has_aux, holomorphic=holomorphic),
        argnums,
        has_aux,
        holomorphic=holomorphic,
    )

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        _normalize_argnums(argnums, len(args), "hessian")  # errors name hessian, not jacfwd
        return inner(*args, **kwargs)

    wrapper.__thunderx_transform__ = inner.__thunderx_transform__
    return wrapper
