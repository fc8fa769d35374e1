"""The opaque fallback for torch functions without a decomposition: under jit (staging only) the
call becomes one `torch_call` equation, its output shape found by running it on meta tensors.
A transform that needs a rule for it (grad, vmap) raises an error naming the function."""

from __future__ import annotations

import torch

from thunderx import tree
from thunderx.avals import ShapedArray
from thunderx.core import ALL_OPERANDS, Tracer, current_trace, declare, get_aval
from thunderx.errors import unsupported


def _name(func) -> str:
    resolved = torch.overrides.resolve_name(func)
    if resolved:
        return resolved
    mod = getattr(func, "__module__", None) or "torch"
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    if mod.startswith("torch._C"):
        mod = "torch"
    return f"{mod}.{qual}"


class _Call:
    """Hashable description of a call: the static leaves and where the tensors go."""

    __slots__ = ("structure", "leaves")

    def __init__(self, structure, leaves):
        self.structure = structure
        self.leaves = leaves


def _impl(*tensors, func, call, tensor_pos, out_tree):
    flat = list(call.leaves)
    for i, t in zip(tensor_pos, tensors):
        flat[i] = t
    args, kwargs = tree.unflatten(call.structure, flat)
    return tree.leaves(func(*args, **kwargs))


def _abstract_eval(*avals, func, call, tensor_pos, out_tree):
    flat = list(call.leaves)
    for i, a in zip(tensor_pos, avals):
        flat[i] = torch.empty(a.shape, dtype=a.dtype, device="meta")
    args, kwargs = tree.unflatten(call.structure, flat)
    try:
        out = func(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - reported with the function's name
        raise unsupported(_name(func), f"it could not run on meta tensors ({e})") from None
    device = avals[0].device if avals else torch.device("cpu")
    return [ShapedArray(o.shape, o.dtype, device) for o in tree.leaves(out)]


# Nothing is known about an opaque function: it may return views of its inputs and may draw
# random numbers (or have other effects), so it is never removed, merged or written into.
torch_call_p = declare(
    "torch_call",
    multiple_results=True,
    impl=_impl,
    abstract_eval=_abstract_eval,
    describe=lambda func, **_: f"the opaque torch function {_name(func)}",
    not_differentiable="an opaque torch function: no derivative rule is known",
    aliases=ALL_OPERANDS,
    effects=("opaque",),
)


def opaque_call(func, args, kwargs):
    from thunderx.tracing import StagingTrace

    trace = current_trace()
    if not isinstance(trace, StagingTrace):
        transform = _TRANSFORM_NAMES.get(type(trace).__name__, type(trace).__name__)
        raise unsupported(
            _name(func),
            f"it has no decomposition into thunderx primitives, so {transform} cannot see "
            "inside it (under jit alone it runs as one opaque call)",
        )
    flat, structure = tree.flatten((tuple(args), dict(kwargs)))
    tensor_pos = tuple(i for i, x in enumerate(flat) if isinstance(x, (Tracer, torch.Tensor)))
    tensors = [flat[i] for i in tensor_pos]
    static = [None if i in tensor_pos else x for i, x in enumerate(flat)]
    call = _Call(structure, tuple(static))
    outs = torch_call_p.bind(*tensors, func=func, call=call, tensor_pos=tensor_pos, out_tree=None)
    # the output's structure, from a run on meta tensors
    meta_flat = [
        torch.empty(get_aval(x).shape, dtype=get_aval(x).dtype, device="meta")
        if i in tensor_pos
        else x
        for i, x in enumerate(flat)
    ]
    meta_args, meta_kwargs = tree.unflatten(structure, meta_flat)
    return tree.unflatten(tree.structure(func(*meta_args, **meta_kwargs)), outs)


_TRANSFORM_NAMES = {
    "JVPTrace": "differentiation (jvp/grad)",
    "BatchTrace": "vmap",
    "EvalTrace": "eager evaluation",
}
