"""Custom operators (`torch.library.custom_op`) under thunderx transforms.

A custom operator's kernel is opaque (a C++, CUDA or Triton kernel, or Python thunderx cannot
look into), but torch asks its author for the rules the transforms need, and thunderx uses them:

- `jit` stages the call as one opaque `torch_call` equation, its output shapes from the
  operator's fake implementation (`register_fake`), as torch.compile does;
- `grad`, `vjp`, `jacrev`, `hessian` run the derivative registered with
  `register_autograd(backward, setup_context=...)`: a `thunderx.custom_vjp` whose residuals are
  what `setup_context` saved and whose backward is the author's `backward`, traced like any torch
  code (so it is differentiated again for a Hessian and batched under `vmap`);
- `vmap` runs the rule registered with `torch.library.register_vmap`, or without one calls the
  operator once per example and stacks the results (torch.func's fallback);
- forward mode (`jvp`, `jacfwd`) has no registered rule: refused with a clear error, as for any
  custom_vjp.

Operators that mutate their arguments keep the opaque `jit`-only path. torch.func (2.13) refuses
`grad` of such an operator (its autograd.Function lacks `setup_context`); thunderx runs it.
"""

from __future__ import annotations

import torch

from thunderx import tree
from thunderx.core import Tracer, current_trace
from thunderx.errors import unsupported


def opdef_of(func):
    """The `CustomOpDef` behind a torch operator overload, or None (aten, prims, a legacy
    `torch.library.Library` definition, or a mutating operator)."""
    if not isinstance(func, torch._ops.OpOverload) or func.namespace in ("aten", "prims"):
        return None
    try:
        from torch._library.custom_ops import OPDEFS
    except ImportError:  # a torch without torch.library.custom_op
        return None
    opdef = OPDEFS.get(func.name())
    if opdef is None or getattr(opdef, "_is_inplace", False) or func._schema.is_mutable:
        return None
    return opdef


def call(opdef, func, args: tuple, kwargs: dict):
    """`func(*args, **kwargs)` where some argument is a traced value."""
    from thunderx.transforms.custom_batching import custom_vmap

    name = opdef._name
    flat, structure = tree.flatten((tuple(args), dict(kwargs)))
    pos = [i for i, x in enumerate(flat) if isinstance(x, (Tracer, torch.Tensor))]

    def rebuild(ts):
        leaves = list(flat)
        for i, t in zip(pos, ts):
            leaves[i] = t
        return tree.unflatten(structure, leaves)

    def kernel(*ts):
        a, k = rebuild(ts)
        if any(isinstance(t, Tracer) for t in ts):
            return _opaque(func, a, k, opdef)
        with torch._C.DisableTorchFunction():
            return func(*a, **k)

    def rule(size, in_batched, *ts):
        if opdef._vmap_fn is not None:
            return _registered_vmap(opdef, rebuild, size, in_batched, ts)
        # torch.func's fallback: the operator once per example, the results stacked
        rows = [
            call(opdef, func, *rebuild([t[i] if b else t for t, b in zip(ts, in_batched)]))
            for i in range(size)
        ]
        return tree.map(lambda *r: torch.stack(r), *rows), True

    kernel.__name__ = kernel.__qualname__ = f"{opdef._namespace}::{name}"
    batched = custom_vmap(kernel)
    batched.def_vmap(rule)
    tensors = [flat[i] for i in pos]
    if opdef._backward_fn is None:
        return batched(*tensors)
    return _with_registered_vjp(opdef, func, batched, rebuild, tensors)(*tensors)


def _opaque(func, a, k, opdef):
    from thunderx.lang.fallback import opaque_call
    from thunderx.tracing import StagingTrace

    if isinstance(current_trace(), StagingTrace):
        return opaque_call(func, a, k)
    raise unsupported(
        f"the custom operator {opdef._namespace}::{opdef._name}",
        "it has no registered derivative: register one with torch.library.register_autograd",
    )


def _registered_vmap(opdef, rebuild, size, in_batched, ts):
    """torch.library.register_vmap's rule `func(info, in_dims, *args) -> (out, out_dims)`, with
    every batched operand's batch first; its outputs' batch dims moved first again."""
    from types import SimpleNamespace

    a, k = rebuild(ts)
    dims_flat = [0 if b else None for b in in_batched]
    in_dims, _ = rebuild(dims_flat)
    info = SimpleNamespace(batch_size=size, randomness="error")
    out, out_dims = opdef._vmap_fn(info, tuple(_dims_of(x, d) for x, d in zip(a, in_dims)), *a, **k)
    outs, out_tree = tree.flatten(out)
    dims = tree.leaves(tree.broadcast_prefix(out_dims, out)) if outs else []
    moved = [o if d is None else torch.movedim(o, d, 0) for o, d in zip(outs, dims)]
    return tree.unflatten(out_tree, moved), [d is not None for d in dims]


def _dims_of(x, d):
    # a tensor's batch dim, None for a Python argument (register_vmap's in_dims)
    return d if isinstance(x, (Tracer, torch.Tensor)) else None


class _Slot:
    """Stands for the i-th tensor operand while matching arguments to gradients."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def _bind(schema, a, k):
    """(positional inputs, keyword-only inputs) in the schema's order, defaults filled: what
    torch hands `setup_context` (its `inputs` and `keyword_only_inputs`)."""
    pos, kwonly = [], {}
    for i, arg in enumerate(schema.arguments):
        if i < len(a) and not arg.kwarg_only:
            value = a[i]
        elif arg.name in k:
            value = k[arg.name]
        else:
            value = arg.default_value if arg.has_default_value() else None
        if arg.kwarg_only:
            kwonly[arg.name] = value
        else:
            pos.append(value)
    return tuple(pos), kwonly


def _with_registered_vjp(opdef, func, batched, rebuild, tensors):
    """`batched` with the derivative registered by torch.library.register_autograd."""
    from thunderx.lang.autograd_function import FunctionCtx
    from thunderx.transforms.custom import custom_vjp

    schema = func._schema
    has_kwonly = any(arg.kwarg_only for arg in schema.arguments)
    slot_args, _ = _bind(schema, *rebuild([_Slot(i) for i in range(len(tensors))]))
    differentiable = [t.dtype.is_floating_point or t.dtype.is_complex for t in tensors]
    needs = tuple(
        any(isinstance(x, _Slot) and differentiable[x.i] for x in tree.leaves(arg))
        for arg in slot_args
    )
    statics: dict = {}

    def fwd(*ts):
        out = f(*ts)
        ctx = FunctionCtx(needs)
        inputs, kwonly = _bind(schema, *rebuild(ts))
        if has_kwonly:
            opdef._setup_context_fn(ctx=ctx, inputs=inputs, keyword_only_inputs=kwonly, output=out)
        else:
            opdef._setup_context_fn(ctx=ctx, inputs=inputs, output=out)
        return out, ctx.residuals(statics)

    def bwd(res, ct):
        ctx = FunctionCtx.restored(needs, res, statics)
        grads = opdef._backward_fn(ctx, *(ct if isinstance(ct, (tuple, list)) else (ct,)))
        grads = grads if isinstance(grads, (tuple, list)) else (grads,)
        if len(grads) != len(slot_args):
            raise TypeError(
                f"the backward registered for {opdef._namespace}::{opdef._name} returned "
                f"{len(grads)} gradients for {len(slot_args)} inputs"
            )
        out = [None] * len(tensors)
        for arg, g in zip(slot_args, grads):
            slots = [x for x in tree.leaves(arg) if isinstance(x, _Slot)]
            if not slots or g is None:
                continue
            for slot, gi in zip(slots, g if isinstance(g, (tuple, list)) else (g,)):
                out[slot.i] = gi if differentiable[slot.i] else None
        return tuple(out)

    f = custom_vjp(lambda *ts: batched(*ts))
    f.torch_rule = True  # the author's backward
    f.defvjp(fwd, bwd)
    return f
