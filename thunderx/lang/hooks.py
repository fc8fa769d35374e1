"""`Tensor.register_hook` under thunderx's reverse mode (grad, vjp, jacrev, and those under vmap
or jit), as torch.func runs it: the hook receives the tensor's gradient when the derivative is
evaluated and may return a replacement (None keeps it); hooks of one tensor run in the order
they were registered; the handle's `remove()` drops a hook that has not run.

- On an input of the differentiated function the hook transforms that input's gradient, the sum
  over all its uses, when the linear map is transposed (transforms/ad.py).
- On a value the function computed, the value takes a new identity whose cotangent goes through
  the hooks (a custom-VJP identity), so every later use is covered. A use made before the
  registration is refused with a clear error: torch's hook sees its gradient too, and thunderx
  cannot tell it from a use of an alias sharing the value's derivative (a clone's).
- Where no thunderx reverse-mode level differentiates the value (under `jit` alone, torch
  autograd runs through the compiled program and cannot run the hook; under `vmap` or `jvp`
  alone nothing is differentiated) the registration is refused with a clear error.
"""

from __future__ import annotations

from thunderx.ad_util import Zero
from thunderx.errors import UnsupportedOperationError, user_frame
from thunderx.lang._base import register


class RemovableHandle:
    """What `register_hook` returns: `remove()` drops the hook (a no-op once it ran)."""

    def __init__(self, hooks: list, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


def run_hooks(hooks: list, ct):
    for hook in list(hooks):
        out = hook(ct)
        if out is not None:
            if tuple(out.shape) != tuple(ct.shape):
                raise RuntimeError(
                    f"hook returned a gradient of shape {tuple(out.shape)} for a tensor of "
                    f"shape {tuple(ct.shape)} (registered with register_hook)"
                )
            ct = out
    return ct


@register(methods=("register_hook",))
def _register_hook(x, hook):
    from thunderx.transforms.jvp import JVPTracer
    from thunderx.transforms.partial_eval import PartialEvalTrace

    if not callable(hook):
        raise TypeError(f"register_hook expects a callable, got {type(hook).__name__}")
    if not (isinstance(x, JVPTracer) and x._trace.reverse_mode):
        raise UnsupportedOperationError(
            f"Tensor.register_hook at {user_frame()}: the tensor is not differentiated by "
            "thunderx's grad, vjp or jacrev here (under jit alone torch autograd runs through "
            "the compiled program and cannot run the hook); register it inside the function "
            "that grad/vjp transforms"
        )
    t = x.tangent
    if type(t) is Zero:
        raise RuntimeError(
            f"cannot register a hook on a tensor that doesn't require gradient (at {user_frame()})"
        )
    trace = getattr(t, "_trace", None)
    if not isinstance(trace, PartialEvalTrace):
        raise UnsupportedOperationError(
            f"Tensor.register_hook at {user_frame()}: the tensor's derivative is not staged "
            "for a transpose here"
        )
    var = t._var
    hooks = trace.hooks.get(id(var))
    if hooks is None:
        hooks = []
        if id(x) in x._trace.input_ids:  # an input's hooks run in transforms/ad.py
            trace.hooks[id(var)] = hooks
        else:  # keyed by the new identity's tangent only: a clone sharing var keeps its own
            if any(v is var for e in trace.eqns for v in e.inputs):
                raise UnsupportedOperationError(
                    f"Tensor.register_hook at {user_frame()}: the tensor was already used "
                    "before the hook was registered; torch's hook would see that use's gradient "
                    "too, and thunderx cannot tell it from the use of an alias sharing its "
                    "derivative (a clone): register the hook right after computing the tensor"
                )
            _wrap(x, hooks, trace)
    hooks.append(hook)
    return RemovableHandle(hooks, hook)


def _wrap(x, hooks: list, trace) -> None:
    """x takes a new identity whose cotangent runs `hooks` (the list may grow later); other
    tensors sharing x's derivative (a clone of it, or what it is a clone of) keep theirs."""
    import torch

    from thunderx.lang.views import assign
    from thunderx.transforms.custom import custom_vjp

    @custom_vjp
    def hooked(v):
        return v

    hooked.defvjp(lambda v: (v, None), lambda _, ct: (run_hooks(hooks, ct),))
    with torch.enable_grad():
        new = hooked(x)
    tangent = getattr(new, "tangent", None)
    if getattr(tangent, "_trace", None) is trace:
        trace.hooks[id(tangent._var)] = hooks  # a second registration appends to the list
    assign(x, new)
