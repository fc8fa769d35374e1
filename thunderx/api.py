"""make_jaxpr and functional_call."""

from __future__ import annotations

import functools
from typing import Callable

import torch

from thunderx import tree, validate
from thunderx.core import get_aval, is_tensor_like
from thunderx.errors import ArgumentTypeError, ArgumentValueError, user_frame
from thunderx.ir import ClosedJaxpr
from thunderx.passes import dce
from thunderx.tracing import trace_flat


def make_jaxpr(fun: Callable, static_argnums: int | tuple = ()) -> Callable[..., ClosedJaxpr]:
    """Trace `fun` and return its closed jaxpr (inputs and outputs any pytree).

    >>> print(thunderx.make_jaxpr(lambda x: torch.sin(x).sum())(torch.ones(3)))
    { lambda ; a:f32[3]. let
        b:f32[3] = sin a
        c:f32[] = reduce_sum[axes=(0,)] b
      in (c,) }
    """
    validate.check_callable(fun, "make_jaxpr")
    static_argnums, _ = validate.check_static_args(fun, static_argnums, (), "make_jaxpr")

    @functools.wraps(fun)
    def traced(*args, **kwargs) -> ClosedJaxpr:
        static = validate.static_positions(static_argnums, len(args), "make_jaxpr")
        dyn = tuple(None if i in static else a for i, a in enumerate(args))
        leaves, in_tree = tree.flatten((dyn, kwargs))
        for x in leaves:
            if not (is_tensor_like(x) or type(x) in (bool, int, float)):
                raise TypeError(
                    f"make_jaxpr: arguments must be tensors, Python scalars or pytrees of them, "
                    f"got {type(x).__name__} (at {user_frame()}); mark it static"
                )

        def flat(*xs):
            d, kw = tree.unflatten(in_tree, xs)
            full = [args[i] if i in static else a for i, a in enumerate(d)]
            out = fun(*full, **kw)
            out_leaves, out_tree = tree.flatten(out)
            return out_leaves, out_tree

        closed, _ = trace_flat(flat, [get_aval(x) for x in leaves])
        jaxpr = dce(closed.jaxpr)
        used = {id(v) for v in _used_vars(jaxpr)}
        keep = [i for i, v in enumerate(jaxpr.constvars) if id(v) in used]
        if len(keep) != len(jaxpr.constvars):
            from thunderx.ir import Jaxpr

            jaxpr = Jaxpr(
                [jaxpr.constvars[i] for i in keep], jaxpr.invars, jaxpr.eqns, jaxpr.outvars
            )
            return ClosedJaxpr(jaxpr, [closed.consts[i] for i in keep])
        return ClosedJaxpr(jaxpr, closed.consts)

    return traced


def _used_vars(jaxpr):
    for e in jaxpr.eqns:
        yield from e.inputs
    yield from jaxpr.outvars


def functional_call(module: torch.nn.Module, params_and_buffers: dict, args, kwargs=None):
    """Call `module` with its parameters and buffers replaced by `params_and_buffers` (tensors or
    traced values), like `torch.func.functional_call`; the module is restored afterwards.

    >>> model = torch.nn.Linear(3, 1)
    >>> params = {k: v.detach() for k, v in model.named_parameters()}
    >>> g = thunderx.grad(lambda p: thunderx.functional_call(model, p, (torch.ones(2, 3),)).sum())(params)
    >>> g["weight"]
    tensor([[2., 2., 2.]])
    """
    if not isinstance(module, torch.nn.Module):
        raise ArgumentTypeError(
            f"functional_call: module must be a torch.nn.Module, got {type(module).__name__} "
            f"(at {user_frame()})"
        )
    replacements = _merge_replacements(params_and_buffers)
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ArgumentTypeError(
            f"functional_call: kwargs must be a dict or None, got {type(kwargs).__name__} "
            f"(at {user_frame()})"
        )
    if not isinstance(args, tuple):
        args = (args,)
    saved = []
    try:
        for name, value in replacements.items():
            owner, attr = _resolve(module, name)
            if attr in owner._parameters:
                saved.append((owner, "_parameters", attr, owner._parameters[attr]))
                owner._parameters[attr] = value
            elif attr in owner._buffers:
                saved.append((owner, "_buffers", attr, owner._buffers[attr]))
                owner._buffers[attr] = value
            else:
                raise ArgumentValueError(
                    f"functional_call: {type(module).__name__} has no parameter or "
                    f"buffer named {name!r} (at {user_frame()})"
                )
        return module(*args, **(kwargs or {}))
    finally:
        for owner, table, attr, old in reversed(saved):
            getattr(owner, table)[attr] = old


def _merge_replacements(params_and_buffers) -> dict:
    """A dict, or (as torch.func accepts) a tuple/list of dicts with distinct keys."""
    dicts = (
        list(params_and_buffers)
        if isinstance(params_and_buffers, (tuple, list))
        else [params_and_buffers]
    )
    merged: dict = {}
    for d in dicts:
        if not isinstance(d, dict):
            raise ArgumentTypeError(
                "functional_call: parameter_and_buffer_dicts must be a dict or a tuple of dicts "
                f"(name -> tensor), got {type(d).__name__} (at {user_frame()})"
            )
        for k, v in d.items():
            if not isinstance(k, str):
                raise ArgumentTypeError(
                    f"functional_call: parameter names must be str, got {k!r} (at {user_frame()})"
                )
            if k in merged:
                raise ArgumentValueError(
                    f"functional_call: {k!r} appears in more than one of the dicts "
                    f"(at {user_frame()})"
                )
            merged[k] = v
    return merged


def _resolve(module, name):
    parts = name.split(".")
    for p in parts[:-1]:
        sub = getattr(module, p, None)
        if not isinstance(sub, torch.nn.Module):
            raise ArgumentValueError(
                f"functional_call: {name!r} names no parameter or buffer: "
                f"{type(module).__name__} has no submodule {p!r} (at {user_frame()})"
            )
        module = sub
    return module, parts[-1]
