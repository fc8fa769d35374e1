"""torch autograd through a composite's torch kernel that torch cannot differentiate itself
(Properties.kernel_differentiable, kernel_constant_outputs): native_group_norm_backward,
silu_backward and mish_backward have no derivative in torch, and torch's derivative of fused
attention ignores the logsumexp it returns, which thunderx's attention backward reads.

Where torch autograd records such a call (grad mode on, an operand requiring grad: torch
autograd over gradients thunderx computed, MAML's outer step) the kernel still computes the
values, bit for bit and as fast, inside a torch.autograd.Function whose backward is thunderx's
own vjp of the primitive (its rules differentiate the decomposition, as its hessians do). That
vjp runs primitives of this kind again, so the outer derivative has derivatives of its own.

Under jit, the program torch autograd runs through calls the same implementation: each such
equation becomes one of its primitive's `twin`, which the code generator's patterns (statistics
shared between a norm's forward and backward, a norm's kernel group) do not claim, and whose
code is a call of the implementation."""

from __future__ import annotations

from typing import Callable

import torch

from thunderx.core import Primitive, impl_rules
from thunderx.ir import Eqn, Jaxpr
from thunderx.primitives.custom import _differentiable, _Run, _TorchRule, torch_records


def torch_autograd_impl(prim: Primitive, kernel: Callable) -> Callable:
    """The implementation of `prim`: its `kernel`, inside a Function whose derivative is
    thunderx's where torch autograd records the call."""

    def impl(*args, **params):
        if not torch_records(args):
            return kernel(*args, **params)

        def run(xs):
            out = kernel(*xs, **params)
            outs = list(out) if prim.multiple_results else [out]
            return outs, lambda gs: _pullback(prim, params, xs, outs, gs)

        outs = _TorchRule.apply(_Run(run), *args)
        return list(outs) if prim.multiple_results else outs[0]

    impl.kernel = kernel  # type: ignore[attr-defined]
    return impl


def _pullback(prim, params, xs, outs, gs) -> list:
    """Cotangents of `prim`'s floating operands `xs` for output cotangents `gs` (None: zero),
    by thunderx's vjp of the primitive; None for the others."""
    from thunderx.transforms.ad import vjp

    diff = [i for i, x in enumerate(xs) if _differentiable(x)]

    def f(*ds):
        full = list(xs)
        for i, d in zip(diff, ds):
            full[i] = d
        return prim.bind(*full, **params)

    cts = [torch.zeros_like(o) if g is None else g for o, g in zip(outs, gs)]
    grads = vjp(f, *[xs[i] for i in diff])[1](cts if prim.multiple_results else cts[0])
    result: list = [None] * len(xs)
    for i, g in zip(diff, grads):
        result[i] = g
    return result


_twins: dict[Primitive, Primitive] = {}


def twin(prim: Primitive) -> Primitive:
    """An unregistered primitive whose only rule is `prim`'s implementation (and whose
    properties are the conservative ones): the code generator emits a call of it."""
    t = _twins.get(prim)
    if t is None:
        t = _twins[prim] = Primitive(f"{prim.name}_under_autograd", prim.multiple_results)
        impl_rules[t] = impl_rules[prim]
    return t


def needs_torch_autograd_twin(e: Eqn, read: set[int]) -> bool:
    """Whether equation `e` of a program whose read vars are `read` (ids) must call its
    implementation under torch autograd."""
    props = e.prim.props
    return not props.kernel_differentiable or any(
        id(e.outputs[i]) in read for i in props.kernel_constant_outputs
    )


def for_torch_autograd(jaxpr: Jaxpr) -> Jaxpr:
    """`jaxpr` with every equation `needs_torch_autograd_twin` made one of its primitive's
    `twin` (the program torch autograd runs through)."""
    read = {id(x) for e in jaxpr.eqns for x in e.inputs} | {id(x) for x in jaxpr.outvars}
    eqns = [
        Eqn(twin(e.prim), e.inputs, e.outputs, e.params)
        if needs_torch_autograd_twin(e, read)
        else e
        for e in jaxpr.eqns
    ]
    if all(a is b for a, b in zip(eqns, jaxpr.eqns)):
        return jaxpr
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars, check=False, walk=False)
