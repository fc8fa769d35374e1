"""torch.func's argument and output checks for `thunderx.func`: each raises the exception class
torch.func raises for the same misuse (as a thunderx error, with torch.func's words and the user's
line)."""

from __future__ import annotations

import functools
from typing import Callable

import optree

from thunderx import tree
from thunderx.core import get_aval, is_tensor_like
from thunderx.errors import (
    ArgumentValueError,
    FuncContractError,
    TransformArgumentTypeError,
    TransformArgumentValueError,
    user_frame,
)

JVP = "jvp(f, primals, tangents)"
VJP = "vjp(f, *primals)"
GRAD = "grad_and_value(f)(*args)"


def at() -> str:
    return f"(at {user_frame()})"


def torch_leaves(x) -> list:
    """Leaves as torch's pytree sees them: `None` is a leaf (optree would drop it)."""
    return optree.tree_leaves(x, none_is_leaf=True, namespace=tree.NAMESPACE)


def torch_structure(x):
    return optree.tree_structure(x, none_is_leaf=True, namespace=tree.NAMESPACE)


def normalize_argnums(argnums, nargs: int):
    """torch.func's argnums rule, at call time: an int or a non-empty tuple of distinct ints in
    range. Returns the non-negative form (an int stays an int)."""
    if isinstance(argnums, int):
        nums = (argnums,)
    elif isinstance(argnums, tuple):
        nums = argnums
        if not nums:
            raise TransformArgumentValueError(f"argnums must be non-empty {at()}")
    else:
        raise TransformArgumentTypeError(
            f"argnums must be int or Tuple[int, ...], got: {type(argnums)} {at()}"
        )
    out = []
    for a in nums:
        if not isinstance(a, int):
            raise TransformArgumentTypeError(f"argnum must be int, got: {type(a)} {at()}")
        if not -nargs <= a < nargs:
            raise TransformArgumentValueError(
                f"Got argnum={a}, but only {nargs} positional inputs {at()}"
            )
        out.append(int(a) % nargs)
    if len(set(out)) != len(out):
        raise TransformArgumentValueError(f"argnums elements must be unique, got {argnums} {at()}")
    return out[0] if isinstance(argnums, int) else tuple(out)


def check_differentiable(args) -> None:
    for leaf in torch_leaves(args):
        if not is_tensor_like(leaf):
            raise ArgumentValueError(
                f"Thing passed to transform API must be Tensor, got {type(leaf)} {at()}"
            )
        dtype = get_aval(leaf).dtype
        if not (dtype.is_floating_point or dtype.is_complex):
            raise TransformArgumentTypeError(
                f"only Tensors of floating point dtype can require gradients: a differentiated "
                f"input has dtype {dtype} {at()}"
            )


def check_forward_primals(primals, tangents) -> None:
    """jvp's primals float or complex, each tangent of its primal's shape (torch's checks)."""
    for p, t in zip(torch_leaves(primals), torch_leaves(tangents)):
        a = get_aval(p)
        if not (a.dtype.is_floating_point or a.dtype.is_complex):
            raise ArgumentValueError(
                f"{JVP}: Expected primal to be floating point or complex, but got: {a.dtype} {at()}"
            )
        ts = tuple(get_aval(t).shape)
        if ts != tuple(a.shape):
            raise TransformArgumentValueError(
                f"{JVP}: Trying to set a forward gradient that has a different size than that "
                f"of the original Tensor, this is not supported. Tensor is of size "
                f"{tuple(a.shape)} while the given forward gradient is of size {ts} {at()}"
            )


def split_aux(out, api: str):
    if not (isinstance(out, tuple) and len(out) == 2):
        raise FuncContractError(
            f"{api}: output of function f should be a tuple: (output, aux) if has_aux is True, "
            f"got {type(out).__name__} {at()}"
        )
    for leaf in torch_leaves(out[1]):
        if not is_tensor_like(leaf):
            raise FuncContractError(
                f"{api}: the aux output of f must be tensors or a pytree of tensors: Expected "
                f"tensors, got unsupported type {type(leaf)} {at()}"
            )
    return out


def check_outputs(out, api: str) -> None:
    leaves = torch_leaves(out)
    if not leaves or (len(leaves) == 1 and leaves[0] is None):
        raise FuncContractError(
            f"{api}: Expected f to be a function that has non-empty output (got output = "
            f"{out!r}) {at()}"
        )
    for leaf in leaves:
        if not is_tensor_like(leaf):
            raise FuncContractError(
                f"{api}: expected f(*primals) to return only tensors, got unsupported type "
                f"{type(leaf)} {at()}"
            )


def checked(func: Callable, api: str, has_aux: bool, extra: Callable | None = None):
    """`func` whose result is checked as torch.func does for `api` while the transform runs."""

    def checked(*args, **kwargs):
        res = func(*args, **kwargs)
        out = split_aux(res, api)[0] if has_aux else res
        check_outputs(out, api)
        if extra is not None:
            extra(out)
        return res

    return checked


def check_float_outputs(out) -> None:
    for leaf in torch_leaves(out):
        dtype = get_aval(leaf).dtype
        if not (dtype.is_floating_point or dtype.is_complex):
            raise FuncContractError(
                f"vjp(f, ...): All outputs of f must be floating-point or complex Tensors, got "
                f"Tensor with dtype {dtype} {at()}"
            )


def error_if_complex(api: str, values, inputs: bool) -> None:
    for i, leaf in enumerate(torch_leaves(values)):
        if is_tensor_like(leaf) and get_aval(leaf).dtype.is_complex:
            which = "inputs" if inputs else "outputs"
            raise FuncContractError(
                f"{api}: Expected all {which} to be real but received complex tensor at flattened "
                f"input idx: {i} {at()}"
            )


def check_tensor_list(values, api: str, arg: str) -> None:
    leaves = torch_leaves(values)
    if not leaves:
        raise TransformArgumentValueError(
            f"{api}: Expected {arg} to contain at least one Tensor. {at()}"
        )
    for leaf in leaves:
        if not is_tensor_like(leaf):
            raise TransformArgumentTypeError(
                f"{api}: Expected {arg} to only contain Tensors, got {type(leaf)} {at()}"
            )


def check_randomness(randomness) -> None:
    if randomness not in ("error", "different", "same"):
        raise TransformArgumentValueError(
            f"Only allowed values for randomness are 'error', 'different', or 'same'. Got "
            f"{randomness!r} {at()}"
        )


def name(func) -> str:
    if isinstance(func, functools.partial):
        return f"functools.partial({name(func.func)}, ...)"
    return getattr(func, "__name__", repr(func))


def check_mapped_outputs(out, out_dims, name: str) -> None:
    """torch.func's rule: an output with a mapped out_dim is a tensor (a Python number or None
    may only come back with out_dims None for it)."""
    leaves = torch_leaves(out)
    for prefix in (out_dims, out_dims[0] if isinstance(out_dims, tuple) and out_dims else None):
        try:
            dims = torch_leaves(
                optree.tree_broadcast_prefix(
                    prefix, out, none_is_leaf=True, namespace=tree.NAMESPACE
                )
            )
        except (ValueError, TypeError):
            continue  # the structures differ: the transform's own error says so
        for leaf, d in zip(leaves, dims):
            if d is not None and not is_tensor_like(leaf):
                raise ArgumentValueError(
                    f"vmap({name}, ...): `{name}` must only return Tensors, got type "
                    f"{type(leaf)}. Did you mean to set out_dims= to None for output? {at()}"
                )
        return
