"""make_jaxpr, functional_call and stack_module_state."""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from thunderx import tree, validate
from thunderx.errors import (
    ArgumentTypeError,
    ArgumentValueError,
    TransformArgumentValueError,
    user_frame,
)
from thunderx.ir import ClosedJaxpr
from thunderx.passes import dce
from thunderx.shapes import ShapeDtypeStruct, aval_of_argument
from thunderx.tracing import trace_flat


def make_jaxpr(
    fun: Callable, static_argnums: int | tuple = (), *, return_shape: bool = False
) -> Callable[..., Any]:
    """Trace `fun` and return its closed jaxpr (inputs and outputs any pytree; arguments may be
    ShapeDtypeStructs). With `return_shape=True` the traced function returns
    `(jaxpr, out_shapes)`, out_shapes a pytree of ShapeDtypeStruct like `eval_shape`'s.

    >>> print(thunderx.make_jaxpr(lambda x: torch.sin(x).sum())(torch.ones(3)))
    { lambda ; a:f32[3]. let
        b:f32[3] = sin a
        c:f32[] = reduce_sum[axes=(0,)] b
      in (c,) }
    >>> jaxpr, shape = thunderx.make_jaxpr(torch.sin, return_shape=True)(torch.ones(2))
    >>> shape
    ShapeDtypeStruct(shape=(2,), dtype=torch.float32)
    """
    validate.check_callable(fun, "make_jaxpr")
    static_argnums, _ = validate.check_static_args(fun, static_argnums, (), "make_jaxpr")

    @functools.wraps(fun)
    def traced(*args, **kwargs):
        static = validate.static_positions(static_argnums, len(args), "make_jaxpr")
        dyn = tuple(None if i in static else a for i, a in enumerate(args))
        leaves, in_tree = tree.flatten((dyn, kwargs))
        avals = [aval_of_argument(x, "make_jaxpr", "; mark it static") for x in leaves]

        def flat(*xs):
            d, kw = tree.unflatten(in_tree, xs)
            full = [args[i] if i in static else a for i, a in enumerate(d)]
            out = fun(*full, **kw)
            out_leaves, out_tree = tree.flatten(out)
            return out_leaves, out_tree

        closed, out_tree = trace_flat(flat, avals, writeback=True)
        jaxpr = dce(closed.jaxpr)
        used = {id(v) for v in _used_vars(jaxpr)}
        consts_n = len(jaxpr.constvars)
        used.update(id(jaxpr.constvars[i]) for i, _ in closed.writes if i < consts_n)
        keep = [i for i, v in enumerate(jaxpr.constvars) if id(v) in used]
        if len(keep) != len(jaxpr.constvars):
            from thunderx.ir import Jaxpr

            jaxpr = Jaxpr(
                [jaxpr.constvars[i] for i in keep], jaxpr.invars, jaxpr.eqns, jaxpr.outvars
            )
            n = len(closed.consts)  # writes index consts, then inputs
            writes = tuple(
                (keep.index(i) if i < n else i - n + len(keep), g) for i, g in closed.writes
            )
            result = ClosedJaxpr(jaxpr, [closed.consts[i] for i in keep], writes)
        else:
            result = ClosedJaxpr(jaxpr, closed.consts, closed.writes)
        if return_shape:
            n = len(closed.out_avals) - len(closed.writes)  # the written-back values trail
            shapes = [ShapeDtypeStruct.from_aval(a.strip_weak()) for a in closed.out_avals[:n]]
            return result, tree.unflatten(out_tree, shapes)
        return result

    return traced


def _used_vars(jaxpr):
    for e in jaxpr.eqns:
        yield from e.inputs
    yield from jaxpr.outvars


def functional_call(
    module: torch.nn.Module,
    params_and_buffers,
    args: Any = None,
    kwargs: dict | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    """Call `module` with its parameters and buffers replaced by `params_and_buffers` (a dict of
    tensors or traced values, or a tuple of such dicts), like `torch.func.functional_call`; the
    module is restored afterwards.

    With `tie_weights` (the default, as torch's) a value given for one name of a tied tensor
    (a weight shared by two layers, which `named_parameters()` lists once) replaces it under all
    its names; two different values for one tied tensor are an error. With `strict`, every
    parameter and buffer must be given, and no other name.

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
    named = _named_tensors(module) if tie_weights or strict else {}
    if tie_weights:
        replacements = _untied(named, replacements)
    if strict:
        _check_keys(module, named, replacements)
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ArgumentTypeError(
            f"functional_call: kwargs must be a dict or None, got {type(kwargs).__name__} "
            f"(at {user_frame()})"
        )
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
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


def _named_tensors(module) -> dict:
    """Every name of every parameter and buffer, tied ones under each of their names."""
    named = dict(module.named_parameters(remove_duplicate=False))
    named.update(module.named_buffers(remove_duplicate=False))
    return named


def _untied(named: dict, replacements: dict) -> dict:
    """`replacements` with a tied tensor's value under all its names (torch's tie_weights);
    `named` is `_named_tensors` of the module."""
    by_tensor: dict = {}
    for name, t in named.items():
        by_tensor.setdefault(id(t), []).append(name)
    out = dict(replacements)
    for names in by_tensor.values():
        given = [n for n in names if n in replacements]
        if len(names) < 2 or not given:
            continue
        if len({id(replacements[n]) for n in given}) > 1:
            raise ArgumentValueError(
                f"functional_call got multiple values for keys {sorted(names)}, which are tied. "
                f"Consider using tie_weights=False (at {user_frame()})"
            )
        for n in names:
            out[n] = replacements[given[0]]
    return out


def _check_keys(module, named: dict, replacements: dict) -> None:
    valid = set(named)
    missing, unexpected = sorted(valid - set(replacements)), sorted(set(replacements) - valid)
    msgs = [f"Unexpected key(s): {', '.join(map(repr, unexpected))}."] if unexpected else []
    msgs += [f"Missing key(s): {', '.join(map(repr, missing))}."] if missing else []
    if msgs:  # a RuntimeError, as torch raises
        raise TransformArgumentValueError(
            f"Error(s) in reparametrizing for {module._get_name()}:\n\t"
            + "\n\t".join(msgs)
            + f"\n(at {user_frame()})"
        )


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


def stack_module_state(models) -> tuple[dict, dict]:
    """Stack the parameters and buffers of same-class models along a new leading axis:
    `(params, buffers)` dicts, for ensembling with `vmap` over `functional_call` (as
    `torch.func.stack_module_state`). Stacked parameters are new leaves that require grad when
    the models' parameters do.

    >>> models = [torch.nn.Linear(3, 2) for _ in range(4)]
    >>> params, buffers = thunderx.stack_module_state(models)
    >>> params["weight"].shape
    torch.Size([4, 2, 3])
    >>> x = torch.ones(5, 3)
    >>> run = lambda p, b: thunderx.functional_call(models[0], (p, b), (x,))
    >>> thunderx.vmap(run)(params, buffers).shape
    torch.Size([4, 5, 2])
    """
    models = list(models)
    if not models:
        raise ValueError("stack_module_state: expected at least one model, got none")
    kind = type(models[0])
    for i, m in enumerate(models):
        if type(m) is not kind:
            raise TypeError(
                f"stack_module_state: models must share one class; model 0 is {kind.__name__}, "
                f"model {i} is {type(m).__name__}"
            )
        if m.training != models[0].training:
            raise ValueError(
                f"stack_module_state: models must all be in training or all in eval mode "
                f"(model {i} differs from model 0)"
            )
    params = _stack(models, lambda m: dict(m.named_parameters()), "parameter")
    buffers = _stack(models, lambda m: dict(m.named_buffers()), "buffer")
    return params, buffers


def _stack(models, named, what: str) -> dict:
    tables = [named(m) for m in models]
    out = {}
    for name in tables[0]:
        tensors = []
        for i, t in enumerate(tables):
            if name not in t:
                raise ValueError(f"stack_module_state: model {i} has no {what} {name!r}")
            tensors.append(t[name])
        shapes = {tuple(x.shape) for x in tensors}
        if len(shapes) > 1:
            raise ValueError(
                f"stack_module_state: {what} {name!r} has different shapes across models: "
                f"{sorted(shapes)}"
            )
        grads = {x.requires_grad for x in tensors}
        if len(grads) > 1:
            raise ValueError(
                f"stack_module_state: {what} {name!r} requires grad in some models but not all"
            )
        stacked = torch.stack([x.detach() for x in tensors])
        out[name] = stacked.requires_grad_() if grads == {True} else stacked
    for i, t in enumerate(tables[1:], 1):
        extra = sorted(set(t) - set(tables[0]))
        if extra:
            raise ValueError(f"stack_module_state: model {i} has extra {what}s {extra}")
    return out


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
