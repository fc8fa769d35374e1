"""`torch.autograd.Function` under thunderx transforms: its `backward` is the custom VJP.

torch runs a Function's `forward` with grad mode off and differentiates through its `backward`;
traced naively, `forward`'s operations would be recorded with no derivative at all (a silently
zero gradient). So when `Function.apply` sees a traced value, the call becomes a
`thunderx.custom_vjp` function: the primal is `forward`, reverse mode runs `backward` with a
context holding what `setup_context` (or a ctx-style `forward`) saved; `vmap` and `jit` trace
`forward` itself (torch.func would need a `vmap` staticmethod; thunderx batches the operations),
and torch autograd running through them (a `jit` program, an eager `vmap`) still runs `backward`
(primitives/custom.py: `_TorchRule`). As in torch, an enclosing derivative of the output also goes through `backward` (JAX's custom_vjp
would differentiate the forward instead); `backward`'s own operations are differentiated.
Forward mode (`jvp`, `jacfwd`) of such a call is refused with a clear error, as for any custom_vjp.
Calls on plain tensors go to torch's own `apply`, untouched, and `Function.apply` is torch's own
outside transforms: thunderx's is installed only while an outermost transform runs.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading

import torch._functorch.utils as _functorch_utils
from torch.autograd.function import Function, _is_setup_context_defined

from thunderx import tree
from thunderx.core import Tracer, is_tensor_like
from thunderx.errors import FuncContractError, unsupported, user_frame
from thunderx.lang.patching import patch_during_transforms

_TORCH_APPLY = Function.apply.__func__
_TORCH_UNWRAP = _functorch_utils.unwrap_dead_wrappers
_SETUP_CONTEXT_REQUIRED = threading.local()


@contextlib.contextmanager
def require_setup_context():
    """While active, a ctx-style Function (no `setup_context`) on traced values is refused with
    torch.func's error: `thunderx.func`'s transforms keep torch.func's contract."""
    depth = getattr(_SETUP_CONTEXT_REQUIRED, "depth", 0)
    _SETUP_CONTEXT_REQUIRED.depth = depth + 1
    try:
        yield
    finally:
        _SETUP_CONTEXT_REQUIRED.depth = depth


class FunctionCtx:
    """The `ctx` a Function's forward/setup_context and backward share, under thunderx."""

    def __init__(self, needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self.to_save: tuple = ()
        self.materialize_grads = True

    def save_for_backward(self, *tensors) -> None:
        self.to_save = tensors

    save_for_forward = save_for_backward

    @property
    def saved_tensors(self) -> tuple:
        return self.to_save

    def mark_non_differentiable(self, *args) -> None:
        pass  # their cotangents reach backward as zeros, as in torch

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value

    def residuals(self, statics: dict) -> tuple:
        """What backward needs, as residuals: the saved tensors and the traced values set as
        attributes; the other attributes (Python values) go into `statics`."""
        attrs = {k: v for k, v in vars(self).items() if k not in ("to_save", "needs_input_grad")}
        traced = {k: v for k, v in attrs.items() if is_tensor_like(v)}
        statics.update({k: v for k, v in attrs.items() if k not in traced})
        return tuple(self.to_save), traced

    @classmethod
    def restored(cls, needs_input_grad: tuple, residuals: tuple, statics: dict) -> FunctionCtx:
        """The ctx backward sees: `residuals()`'s values and the statics set again."""
        ctx = cls(needs_input_grad)
        ctx.to_save = tuple(residuals[0])
        for k, v in {**statics, **residuals[1]}.items():
            setattr(ctx, k, v)
        return ctx

    def mark_dirty(self, *args) -> None:
        raise NotImplementedError(
            "an autograd.Function that modifies its inputs in place (ctx.mark_dirty) is not "
            "supported under thunderx transforms"
        )


def _traced(args, kwargs) -> bool:
    return any(isinstance(x, Tracer) for x in tree.leaves((args, kwargs)))


def apply(cls, *args, **kwargs):
    """`Function.apply`: torch's own on plain tensors, a custom_vjp call on traced values."""
    if not _traced(args, kwargs):
        return _TORCH_APPLY(cls, *args, **kwargs)
    from thunderx.transforms.custom import custom_vjp

    setup = _is_setup_context_defined(cls.setup_context)
    if not setup and getattr(_SETUP_CONTEXT_REQUIRED, "depth", 0):
        raise FuncContractError(
            f"{cls.__name__}.apply at {user_frame()}: In order to use an autograd.Function with "
            "functorch transforms (vmap, grad, jvp, jacrev, ...), it must override the "
            "setup_context staticmethod (thunderx.func keeps torch.func's contract; thunderx's "
            "own transforms also accept a ctx-style forward)"
        )
    if setup:
        bound = inspect.signature(cls.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        args = tuple(bound.args)
    elif kwargs:
        raise TypeError(f"{cls.__name__}.apply: keyword arguments need a setup_context Function")
    diff = [i for i, a in enumerate(args) if is_tensor_like(a)]
    nondiff = tuple(i for i in range(len(args)) if i not in diff)
    needs = tuple(i in diff and args[i].dtype.is_floating_point for i in range(len(args)))
    statics: dict = {}

    def run_forward(ctx, xs):
        if setup:
            out = cls.forward(*xs)
            cls.setup_context(ctx, tuple(xs), out)
            return out
        return cls.forward(ctx, *xs)

    def primal(*xs):
        return run_forward(FunctionCtx(needs), xs)

    def fwd(*xs):
        # torch differentiates a Function's output with its backward at every level: an
        # enclosing transform sees the output through the custom rule again (JAX would
        # differentiate fwd itself), so the output comes from the custom function
        ctx = FunctionCtx(needs)
        out = f(*xs)
        if setup:
            cls.setup_context(ctx, tuple(xs), out)
        else:
            cls.forward(ctx, *xs)  # for what it saves in ctx
        return out, ctx.residuals(statics)

    def bwd(*static_and_res_ct):
        res, ct = static_and_res_ct[-2], static_and_res_ct[-1]
        ctx = FunctionCtx.restored(needs, res, statics)
        cts = ct if isinstance(ct, (tuple, list)) else (ct,)
        grads = cls.backward(ctx, *cts)
        grads = grads if isinstance(grads, (tuple, list)) else (grads,)
        if len(grads) != len(args):
            raise TypeError(
                f"{cls.__name__}.backward returned {len(grads)} gradients for "
                f"{len(args)} inputs to forward"
            )
        return tuple(grads[i] for i in diff)

    primal.__name__ = f"{cls.__name__}.forward"
    f = custom_vjp(primal, nondiff_argnums=nondiff)
    f.torch_rule = True  # the user's backward, though `primal` is defined here
    f.defvjp(fwd, bwd)
    return f(*args)


def _refuse_torch_apply(args):
    """torch's own `Function.apply` reached with traced values: `MyFn.apply` was looked up
    before the transform started (`grad(MyFn.apply)`), so it is torch's bound method, which runs
    `forward` under no_grad and would give a silently zero derivative. torch's apply calls this
    helper (torch._functorch.utils.unwrap_dead_wrappers) first; it refuses such a call."""
    if _traced(args, {}):
        cls = sys._getframe(1).f_locals.get("cls")
        name = getattr(cls, "__name__", "autograd.Function")
        raise unsupported(
            f"{name}.apply looked up before the transform started",
            f"pass `lambda *a: {name}.apply(*a)` instead of `{name}.apply` itself, so that the "
            "call is made while the transform runs and its backward defines the derivative",
        )
    return _TORCH_UNWRAP(args)


def install() -> None:
    """Route `Function.apply` to thunderx's from the outermost transform's start to its end
    (as the unbound Tensor methods are), so torch's class is untouched outside transforms; a
    bound `MyFn.apply` taken before the transform is refused (see `_refuse_torch_apply`)."""
    patch_during_transforms(
        [
            (Function, "apply", classmethod(apply)),
            (_functorch_utils, "unwrap_dead_wrappers", _refuse_torch_apply),
        ]
    )
