"""`torch.autograd.grad` inside `vmap`, as torch.func runs it.

Under an eager `vmap` every batched value stands on a concrete tensor holding the whole batch,
and torch's autograd records the operations run on those tensors. So `torch.autograd.grad`
called on batched values is torch's own on the batch-holding tensors:

- batched cotangents of a graph built outside the `vmap` (`vmap(vjp_fn)(cotangents)`, a
  Jacobian by rows): torch's batched-gradient mode (`is_grads_batched`), or one backward pass
  per batch element where that mode fails;
- outputs computed inside the `vmap` from a batched tensor that required grad before it: each
  batch element's outputs depend only on that element's inputs, so one backward pass over the
  whole batch, with the cotangents laid out like the outputs, gives every element's gradient.
  (`x.requires_grad_()` on a traced value is refused, as torch.func refuses it.)

Nested `vmap`s peel one level at a time. Values traced by `jit` have the staged record:
reverse mode runs over it (lang/autograd_staged.py). Values of thunderx's own differentiation
carry no torch graph: there `torch.autograd.grad` raises a clear error (use `thunderx.grad` /
`vjp`). Installed, like `Function.apply`, only while a transform runs.
"""

from __future__ import annotations

import functools

import torch

from thunderx import tree
from thunderx.core import Tracer, current_trace
from thunderx.errors import ThunderxError, UnexpectedTracerError, user_frame
from thunderx.lang.patching import patch_during_transforms

_TORCH_GRAD = torch.autograd.grad
_NAMES = {"StagingTrace": "jit (or make_jaxpr)", "JVPTrace": "thunderx's grad/jvp/vjp"}


def _tuple(x):
    if x is None:
        return None
    if isinstance(x, (Tracer, torch.Tensor)):
        return (x,)
    return tuple(x)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph=False,
    only_inputs=True,
    allow_unused=None,
    is_grads_batched=False,
    materialize_grads=False,
):
    """`torch.autograd.grad`; traced values are handled as the module docstring says."""
    outs, ins, cts = _tuple(outputs), _tuple(inputs), _tuple(grad_outputs)
    if not any(isinstance(v, Tracer) for v in outs + ins + (cts or ())):
        return _TORCH_GRAD(
            outputs,
            inputs,
            grad_outputs,
            retain_graph,
            create_graph,
            only_inputs,
            allow_unused,
            is_grads_batched,
            materialize_grads,
        )
    if is_grads_batched:
        raise NotImplementedError(
            f"torch.autograd.grad(..., is_grads_batched=True) on traced values at {user_frame()}: "
            "call it outside the transform, or vmap over the cotangents instead"
        )
    if cts is None:
        cts = (None,) * len(outs)
    if len(cts) != len(outs):
        raise RuntimeError(
            f"grad_outputs has {len(cts)} entries but outputs has {len(outs)} (at {user_frame()})"
        )
    kw = {
        "retain_graph": retain_graph,
        "create_graph": create_graph,
        "allow_unused": allow_unused,
        "materialize_grads": materialize_grads,
    }
    return _grad(outs, ins, cts, kw)


def _grad(outs, ins, cts, kw):
    from thunderx.lang.autograd_staged import staged_grad
    from thunderx.tracing import StagingTrace
    from thunderx.transforms.vmap import BatchTrace, BatchTracer

    tracers = [v for v in outs + ins + cts if isinstance(v, Tracer)]
    if not tracers:
        return _TORCH_GRAD(list(outs), list(ins), list(cts), **kw)
    owners = {id(v._trace) for v in tracers}
    t = current_trace()
    while t is not None and id(t) not in owners:
        t = t.parent
    if t is None:
        raise UnexpectedTracerError(
            f"torch.autograd.grad at {user_frame()} got a value of a transform that has returned"
        )
    if isinstance(t, StagingTrace):  # jit's record: reverse mode over it (autograd_staged.py)
        return staged_grad(t, outs, ins, cts, kw)
    if not isinstance(t, BatchTrace):
        raise NotImplementedError(
            f"torch.autograd.grad at {user_frame()} on values traced by "
            f"{_NAMES.get(type(t).__name__, type(t).__name__)}: thunderx runs "
            "torch's autograd only on vmap's concrete batches; differentiate with thunderx.grad / "
            "thunderx.vjp (they compose with every transform) instead"
        )

    def split(v):
        if isinstance(v, BatchTracer) and v._trace is t:
            return v.val, v.bdim
        return v, None

    o, i, c = [split(v) for v in outs], [split(v) for v in ins], [split(v) for v in cts]
    if all(b is None for _, b in o + i):
        return _batched_cotangents(t, o, i, c, kw)
    if any(b is None for _, b in i):
        raise NotImplementedError(
            f"torch.autograd.grad at {user_frame()}: inside vmap, the inputs must all be batched "
            "or all unbatched (an unbatched input's per-example gradient needs a backward pass "
            "per example); move the unbatched input out of the vmap or batch it"
        )
    phys_outs, phys_cts = [], []
    for (val, b), (ct, cb) in zip(o, c):
        if b is None:  # independent of the batched inputs: contributes nothing to their grads
            continue
        phys_outs.append(val)
        phys_cts.append(_layout(t, val, b, ct, cb))
    res = _grad(tuple(phys_outs), tuple(v for v, _ in i), tuple(phys_cts), kw)
    return tuple(None if r is None else BatchTracer(t, r, b) for r, (_, b) in zip(res, i))


def _layout(t, out, b, ct, cb):
    """The cotangent of a batched output, as a tensor laid out like the output's batch."""
    if ct is None:  # a per-example scalar output: cotangent 1 for each example
        return torch.ones_like(out)
    if cb is None:
        return ct.unsqueeze(b).expand(out.shape)
    return ct.movedim(cb, b)


def _batched_cotangents(t, o, i, c, kw):
    """Batched cotangents of outputs that do not depend on the batch: row k of the result is
    the gradient with cotangents row k."""
    from thunderx.transforms.vmap import BatchTracer

    n = t.axis_size
    outs, ins = tuple(v for v, _ in o), tuple(v for v, _ in i)
    rows = []
    for (val, _), (ct, cb) in zip(o, c):
        if ct is None:
            ct = torch.ones_like(val)
        rows.append(ct.movedim(cb, 0) if cb is not None else ct.unsqueeze(0).expand(n, *ct.shape))
    plain = not any(isinstance(v, Tracer) for v in outs + ins + tuple(rows))
    if plain:
        try:
            res = _TORCH_GRAD(list(outs), list(ins), rows, is_grads_batched=True, **_retained(kw))
            return tuple(None if r is None else BatchTracer(t, r, 0) for r in res)
        except RuntimeError:  # a backward formula torch cannot batch: one pass per example
            pass
    per_k = [_grad(outs, ins, tuple(r[k] for r in rows), _retained(kw)) for k in range(n)]
    out = []
    for j in range(len(ins)):
        col = [res[j] for res in per_k]
        out.append(None if col[0] is None else BatchTracer(t, torch.stack(col), 0))
    return tuple(out)


def _retained(kw):
    return {**kw, "retain_graph": True}


def requires_grad_(x, requires_grad: bool = True):
    """`x.requires_grad_()` on a traced value is refused, as torch.func refuses it (mixing torch's
    autograd with the transform's own differentiation); `requires_grad_(False)` is a no-op.
    A tensor that requires grad before the transform keeps its torch graph under `vmap`."""
    from thunderx.lang.autograd_staged import mark

    if requires_grad and isinstance(x, Tracer) and not mark(x):
        raise RuntimeError(
            f"You are attempting to call Tensor.requires_grad_() on a traced value at "
            f"{user_frame()}, inside a function being transformed: differentiate with thunderx's "
            "transforms (grad, vjp, jacrev, jacfwd, hessian), or call requires_grad_() on the "
            "tensor before the transform"
        )
    return x


def set_requires_grad(x, value: bool) -> None:
    """`x.requires_grad = value`: as `x.requires_grad_(value)`."""
    requires_grad_(x, bool(value))


def requires_grad(x) -> bool:
    """The `requires_grad` property of a traced value: its batch-holding tensor's, under vmap."""
    from thunderx.lang.autograd_staged import requires_grad as staged
    from thunderx.transforms.vmap import BatchTracer

    if (marked := staged(x)) is not None:
        return marked
    while isinstance(x, BatchTracer):
        x = x.val
    return isinstance(x, torch.Tensor) and x.requires_grad


# --------------------------------------------------------------- torch.autograd.functional

_FUNCTIONAL_ALTERNATIVES = {
    "vjp": "thunderx.vjp",
    "jvp": "thunderx.jvp",
    "jacobian": "thunderx.jacrev / thunderx.jacfwd",
    "hessian": "thunderx.hessian",
    "vhp": "thunderx.vjp of thunderx.grad",
    "hvp": "thunderx.jvp of thunderx.grad",
}
_TORCH_FUNCTIONAL = {n: getattr(torch.autograd.functional, n) for n in _FUNCTIONAL_ALTERNATIVES}


class AutogradFunctionalError(ThunderxError, RuntimeError):
    """`torch.autograd.functional.*` called on traced values inside a transform (torch.func
    refuses it too, with a RuntimeError)."""


def _functional(name: str):
    torch_fn = _TORCH_FUNCTIONAL[name]

    @functools.wraps(torch_fn)
    def call(func, inputs, *args, **kwargs):
        if any(isinstance(v, Tracer) for v in tree.leaves((inputs, args, kwargs))):
            raise AutogradFunctionalError(
                f"torch.autograd.functional.{name} was given traced values inside a thunderx "
                f"transform at {user_frame()}: it differentiates with torch's autograd, which "
                f"traced values do not carry; use {_FUNCTIONAL_ALTERNATIVES[name]}, which "
                "composes with the enclosing transform"
            )
        return torch_fn(func, inputs, *args, **kwargs)

    return call


_WRAPPED_FUNCTIONAL = {n: _functional(n) for n in _FUNCTIONAL_ALTERNATIVES}


def install() -> None:
    patch_during_transforms(
        [(torch.autograd, "grad", grad)]
        + [(torch.autograd.functional, n, f) for n, f in _WRAPPED_FUNCTIONAL.items()]
    )
