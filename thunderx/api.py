"""make_jaxpr and functional_call."""

from __future__ import annotations

import functools
from typing import Callable

import torch

from thunderx import tree
from thunderx.core import get_aval, is_tensor_like
from thunderx.errors import user_frame
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
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)

    @functools.wraps(fun)
    def traced(*args, **kwargs) -> ClosedJaxpr:
        n = len(args)
        static = {a % n for a in static_argnums}
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
    if not isinstance(args, tuple):
        args = (args,)
    saved = []
    try:
        for name, value in params_and_buffers.items():
            owner, attr = _resolve(module, name)
            if attr in owner._parameters:
                saved.append((owner, "_parameters", attr, owner._parameters[attr]))
                owner._parameters[attr] = value
            elif attr in owner._buffers:
                saved.append((owner, "_buffers", attr, owner._buffers[attr]))
                owner._buffers[attr] = value
            else:
                raise KeyError(
                    f"functional_call: {type(module).__name__} has no parameter or "
                    f"buffer named {name!r}"
                )
        return module(*args, **(kwargs or {}))
    finally:
        for owner, table, attr, old in reversed(saved):
            getattr(owner, table)[attr] = old


def _resolve(module, name):
    parts = name.split(".")
    for p in parts[:-1]:
        module = getattr(module, p)
    return module, parts[-1]
