"""Unbound Tensor methods on traced values: `torch.Tensor.add_(x, y)`, `Tensor.view(x, 2, 3)`.

torch's methods are C descriptors that accept only real tensors, so on a tracer the unbound form
fails before any `__torch_function__` runs. While a transform runs (from its outermost start to
its end), each torch.Tensor method the language layer implements is shadowed in torch.Tensor's
class dictionary by a function that sends a tracer to the tracer's method and anything else to
torch's own method. Only the dictionary is touched, not the type's slots, so operators on eager
tensors (`a + b`) stay as they are; a bound call on an eager tensor inside a transform goes
through the shadow (one Python call more), and outside transforms nothing changes.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import types

import torch

from thunderx import core
from thunderx.core import Tracer

_lock = threading.Lock()
_depth = 0
_shadows: dict = {}
_originals: dict = {}  # the same descriptor objects torch.Tensor inherits from TensorBase
# shadow -> torch's method: torch's C code looks a method up on torch.Tensor by name when it
# dispatches `__torch_function__` (eager `t * tracer`), so it may hand over a shadow.
original_of: dict = {}
_type_modified = ctypes.pythonapi.PyType_Modified
_type_modified.argtypes = [ctypes.py_object]
_type_modified.restype = None
_DESCRIPTORS = (types.MethodDescriptorType, types.WrapperDescriptorType)


def _shadow(name: str, original, method):
    def unbound(self, *args, **kwargs):
        if isinstance(self, Tracer):
            return method(self, *args, **kwargs)
        return original(self, *args, **kwargs)

    unbound.__name__ = unbound.__qualname__ = name
    unbound.__doc__ = original.__doc__
    return unbound


def install(method_names) -> None:
    """Shadow the torch.Tensor methods among `method_names` that torch defines in C (methods
    torch writes in Python already dispatch a tracer through `__torch_function__`)."""
    for name in method_names:
        if name in torch.Tensor.__dict__:
            continue
        original = getattr(torch._C.TensorBase, name, None)
        method = getattr(Tracer, name, None)
        if isinstance(original, _DESCRIPTORS) and callable(method):
            _shadows[name] = _shadow(name, original, method)
            _originals[name] = original
            original_of[_shadows[name]] = original
    core.outermost_hooks.append((_enter, _leave))


def _class_dict() -> dict:
    # torch.Tensor.__dict__ is a read-only proxy of the class dictionary; writing the dictionary
    # itself (then invalidating the type's attribute cache) costs one update for all the names,
    # where setattr would also rewrite the type's slots and its subclasses' caches name by name.
    (d,) = [r for r in gc.get_referents(torch.Tensor.__dict__) if isinstance(r, dict)]
    return d


def _enter() -> None:
    global _depth
    with _lock:
        _depth += 1
        if _depth == 1:
            _class_dict().update(_shadows)
            _type_modified(torch.Tensor)


def _leave() -> None:
    global _depth
    with _lock:
        _depth -= 1
        if _depth == 0:
            # Put back torch's own descriptor objects (what torch.Tensor inherits, so
            # `torch.Tensor.add_ is torch._C.TensorBase.add_` stays true): one bulk update,
            # where deleting the names again would cost a dictionary operation each.
            _class_dict().update(_originals)
            _type_modified(torch.Tensor)
