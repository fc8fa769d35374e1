"""The language layer: torch calls on tracers reach one table of decompositions into
primitives. Importing this package installs the operators and Tensor methods on `Tracer`."""

from __future__ import annotations

import torch

from thunderx.core import Tracer
from thunderx.errors import UnsupportedOperationError, unsupported, user_frame
from thunderx.lang import (  # noqa: F401  (importing registers the decompositions)
    adaptive_max,
    aliases,
    array_funcs,
    assertions,
    attention,
    autocast,
    autograd_function,
    autograd_grad,
    compare,
    complex,
    conv,
    conv_transpose,
    copies,
    ctc_loss,
    custom_ops,
    decompositions,
    diagonals,
    distributions,
    elementwise,
    elementwise_rules,
    embedding_bag,
    extras,
    fft,
    gather,
    hooks,
    householder,
    indexing,
    interpolate,
    linalg,
    linalg_functions,
    losses,
    margin_losses,
    misc_ops,
    nn,
    norms,
    pool_grads,
    random,
    random_dropout,
    random_inplace,
    reductions,
    rnn,
    scatter_reduce,
    segment_reduce,
    shape_ops,
    sorting,
    special,
    special_kernels,
    stft,
    tensor,
    unbound,
    vision,
    vision_ops,
    vision_pool,
)
from thunderx.lang._base import aval, method_table, torch_table
from thunderx.lang.fallback import opaque_call
from thunderx.lang.inplace import install_inplace
from thunderx.lang.patching import patch_during_transforms
from thunderx.lang.views import install_views, view_function
from thunderx.primitives.creation import CALL_DEVICE
from thunderx.primitives.higher_order import no_grad_p

_VIEW_PROPERTIES = install_views(torch_table, method_table)
install_inplace()


def _torch_function(cls, func, types, args=(), kwargs=None):
    if kwargs and kwargs.get("out") is not None:
        return _with_out(cls, func, types, args, kwargs)
    func = unbound.original_of.get(func, func)
    impl = torch_table.get(func)
    if impl is None:
        _check_autocast()
        if _any_autocast() and autocast.cpu_autocast_on():
            raise autocast_refused(
                f"in a call of {getattr(func, '__name__', func)}",
                "it has no decomposition, so thunderx would run torch's own function without "
                "autocast's casts",
            )
        opdef = custom_ops.opdef_of(func)
        if opdef is not None:  # torch.library.custom_op: the rules its author registered
            out = custom_ops.call(opdef, func, args, kwargs or {})
        else:
            out = opaque_call(func, args, kwargs or {})
    else:
        out = _decompose(impl, args, kwargs or {}, func)
    return out if _grad_enabled() else _no_grad(out, args)


def _with_out(cls, func, types, args, kwargs):
    """`op(..., out=t)` where t is a traced value, or a captured tensor under jit (a module's
    buffer: spectral_norm's power iteration writes its `_u` this way): the result computed, then
    `t.copy_(result)`, an in-place update like any other (functionalized for a captured tensor,
    written back after each call). Into any other tensor (one the function made while tracing,
    or outside jit) the write is a side effect the traced program cannot express: refused."""
    from thunderx.lang.captured import is_captured

    out = kwargs["out"]
    targets = list(out) if isinstance(out, (tuple, list)) else [out]
    name = getattr(func, "__name__", func)
    if not all(isinstance(t, Tracer) or is_captured(t) for t in targets):
        raise unsupported(
            f"{name}(..., out=...)",
            "write `t = op(...)` (or `t.copy_(op(...))` on a local tensor) instead",
        )
    rest = {k: v for k, v in kwargs.items() if k != "out"}
    result = _torch_function(cls, func, types, args, rest)
    values = list(result) if isinstance(out, (tuple, list)) else [result]
    for target, value in zip(targets, values):
        if tuple(target.shape) != tuple(value.shape):
            raise unsupported(
                f"{name}(..., out=...) into a tensor of another shape", "write `t = op(...)`"
            )
        target.copy_(value)
    return out


def _decompose(impl, args, kwargs, func=None, name=None):
    """impl(*args, **kwargs), the constants it makes going to the device of the call's tensors;
    under CPU autocast, with torch's cast policy for `func` (or the method `name`) applied."""
    if _any_autocast():
        _check_autocast()
        if autocast.cpu_autocast_on():
            if func is None:
                func = getattr(torch.Tensor, name, None)
            return autocast.call(impl, func, name, args, kwargs, _run)
    return _run(impl, args, kwargs)


def _run(impl, args, kwargs):
    device = _call_device(args)
    if device is None:
        return impl(*args, **kwargs)
    token = CALL_DEVICE.set(device)
    try:
        return impl(*args, **kwargs)
    finally:
        CALL_DEVICE.reset(token)


_any_autocast = torch._C._is_any_autocast_enabled


def _check_autocast() -> None:
    """CPU autocast's policy is applied by the language layer (lang/autocast.py). Other devices'
    autocast is refused where thunderx stages or differentiates: primitives take their inputs'
    dtypes, so its casts would be lost in a staged program or mismatch the derivative's dtypes.
    An eager vmap runs torch's kernels, which apply it, and is let through."""
    if not _any_autocast() or not autocast.other_autocast_on():
        return
    from thunderx.core import EvalTrace, current_trace
    from thunderx.transforms.vmap import BatchTrace

    t = current_trace()
    while type(t) is BatchTrace:
        t = t.parent
    if type(t) is not EvalTrace:
        raise autocast_refused(
            "inside a thunderx transform that stages or differentiates (jit, grad, vjp, jvp, "
            "jacrev, jacfwd, hessian)"
        )


def autocast_refused(where: str, why: str | None = None) -> UnsupportedOperationError:
    """The error for autocast where thunderx cannot apply its casts: `where` (after the user's
    line), and `why` (default: a device other than the CPU, whose policy is not applied)."""
    dev = next((d for d in autocast.OTHER_DEVICES if torch.is_autocast_enabled(d)), "cpu")
    why = why or "thunderx applies CPU autocast's cast policy only"
    return UnsupportedOperationError(
        f"torch.autocast({dev!r}, dtype={torch.get_autocast_dtype(dev)}) is active at "
        f"{user_frame()} {where}: {why}; cast explicitly where lower precision is wanted "
        "(x.to(torch.bfloat16), a module's .to(dtype)), or call it in a "
        f"`torch.autocast({dev!r}, enabled=False)` block"
    )


def _call_device(args):
    """The first device other than the CPU among a torch call's tensor arguments (lists and
    tuples searched too), or None: where the constants of its decomposition go."""
    for a in args:
        if isinstance(a, (list, tuple)):
            d = _call_device(a)
            if d is not None:
                return d
        elif isinstance(a, (Tracer, torch.Tensor)):
            d = a.aval.device if isinstance(a, Tracer) else a.device
            if d.type != "cpu":
                return d
    return None


def _method(name, impl):
    def method(self, *args, **kwargs):
        out = _decompose(impl, (self,) + args, kwargs, None, name)
        return out if _grad_enabled() else _no_grad(out, (self,) + args)

    method.__name__ = name
    return method


_OPERATORS = {
    "__add__": torch.Tensor.__add__,
    "__radd__": torch.Tensor.__radd__,
    "__sub__": torch.Tensor.__sub__,
    "__rsub__": torch.Tensor.__rsub__,
    "__mul__": torch.Tensor.__mul__,
    "__rmul__": torch.Tensor.__rmul__,
    "__truediv__": torch.Tensor.__truediv__,
    "__rtruediv__": torch.Tensor.__rtruediv__,
    "__floordiv__": torch.Tensor.__floordiv__,
    "__rfloordiv__": torch.Tensor.__rfloordiv__,
    "__mod__": torch.Tensor.__mod__,
    "__rmod__": torch.Tensor.__rmod__,
    "__pow__": torch.Tensor.__pow__,
    "__rpow__": torch.Tensor.__rpow__,
    "__matmul__": torch.Tensor.__matmul__,
    "__rmatmul__": torch.Tensor.__rmatmul__,
    "__neg__": torch.Tensor.__neg__,
    "__abs__": torch.Tensor.__abs__,
    "__invert__": torch.Tensor.__invert__,
    "__and__": torch.Tensor.__and__,
    "__rand__": torch.Tensor.__rand__,
    "__or__": torch.Tensor.__or__,
    "__ror__": torch.Tensor.__ror__,
    "__xor__": torch.Tensor.__xor__,
    "__rxor__": torch.Tensor.__rxor__,
    "__lshift__": torch.Tensor.__lshift__,
    "__rlshift__": torch.Tensor.__rlshift__,
    "__rshift__": torch.Tensor.__rshift__,
    "__rrshift__": torch.Tensor.__rrshift__,
    "__eq__": torch.Tensor.__eq__,
    "__ne__": torch.Tensor.__ne__,
    "__lt__": torch.Tensor.__lt__,
    "__le__": torch.Tensor.__le__,
    "__gt__": torch.Tensor.__gt__,
    "__ge__": torch.Tensor.__ge__,
    "__getitem__": torch.Tensor.__getitem__,
    "__setitem__": torch.Tensor.__setitem__,
}


_grad_enabled = torch.is_grad_enabled


def _no_grad_value(x):
    return no_grad_p.bind(x) if isinstance(x, Tracer) else x


def _no_grad_alias(t):
    # torch's view made in a no_grad block, for concrete values: not `torch.detach` itself,
    # whose writes no derivative sees (lang/views.py `write`): torch's forward AD sees a
    # write through a view made in a no_grad block
    return t.detach()


# a view made in a no_grad block stays a view of its base (torch: a detached view)
_no_grad_view = view_function(_no_grad_value, _no_grad_alias, "view")


def _no_grad(out, args):
    """Values created in a `torch.no_grad()` / `set_grad_enabled(False)` / `inference_mode()`
    block carry no derivative for reverse-mode levels (grad, vjp, jacrev); forward mode (jvp,
    jacfwd) keeps their tangents, as torch's forward AD does (the `no_grad` primitive). A view
    stays a view of its base. An in-place op returns its (mutated) argument unchanged."""
    from thunderx import tree
    from thunderx.lang.views import view_of

    def stop(v):
        if not isinstance(v, Tracer) or any(v is a for a in args):
            return v
        return _no_grad_view(v) if view_of(v) is not None else no_grad_p.bind(v)

    return tree.map(stop, out)


_UNSUPPORTED_HINTS = {
    "backward": (
        "a traced value has no `.grad` to accumulate into; take gradients as values with "
        "torch.autograd.grad(loss, params) (under jit) or thunderx.grad / value_and_grad, and "
        "update the parameters from them (`p.sub_(lr * g)` in a torch.no_grad() block)"
    ),
}


def _getattr(self, name):
    # Methods torch has but we do not decompose: a clear error at the call site.
    if hasattr(torch.Tensor, name) and not name.startswith("_"):
        raise unsupported(f"Tensor.{name}", _UNSUPPORTED_HINTS.get(name, ""))
    raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")


def _install():
    Tracer.__torch_function__ = classmethod(_torch_function)
    for name, fn in _OPERATORS.items():
        setattr(Tracer, name, _method(name, torch_table[fn]))
    for name, impl in method_table.items():
        if name not in _OPERATORS:
            setattr(Tracer, name, _method(name, impl))
    Tracer.__hash__ = object.__hash__
    Tracer.__len__ = lambda self: _len(self)
    Tracer.__iter__ = lambda self: iter(method_table["unbind"](self, 0))
    Tracer.__getattr__ = _getattr
    props = {
        "shape": lambda self: torch.Size(aval(self).shape),
        "dtype": lambda self: aval(self).dtype,
        "device": lambda self: aval(self).device,
        "ndim": lambda self: len(aval(self).shape),
        **_VIEW_PROPERTIES,
        "is_cuda": lambda self: aval(self).device.type == "cuda",
        "is_cpu": lambda self: aval(self).device.type == "cpu",
        "is_nested": lambda self: False,
        "is_sparse": lambda self: False,
        "is_quantized": lambda self: False,
        "is_meta": lambda self: False,
        "is_mkldnn": lambda self: False,
        "is_complex_dtype": lambda self: aval(self).dtype.is_complex,
        "real": lambda self: torch_table[torch.real](self),
        "imag": lambda self: torch_table[torch.imag](self),
        "requires_grad": autograd_grad.requires_grad,
        "is_leaf": lambda self: True,
        "layout": lambda self: torch.strided,
        "grad": lambda self: None,
        "data": lambda self: method_table["detach"](self),
    }
    setters = {"requires_grad": autograd_grad.set_requires_grad}  # `x.requires_grad = True`
    for name, fn in props.items():
        setattr(Tracer, name, property(fn, setters.get(name)))
    unbound.install([n for n in _OPERATORS if callable(getattr(Tracer, n, None))])


def _len(x):
    s = aval(x).shape
    if not s:
        raise TypeError("len() of a 0-d tensor")
    return s[0]


_install()
autograd_function.install()
autograd_grad.install()
_BN = torch.nn.modules.batchnorm._BatchNorm
patch_during_transforms([(_BN, "forward", norms.cumulative_batch_norm(vars(_BN)["forward"]))])
