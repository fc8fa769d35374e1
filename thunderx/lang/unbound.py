"""Unbound Tensor methods on traced values: `torch.Tensor.add_(x, y)`, `Tensor.view(x, 2, 3)`,
`vmap(Tensor.copy_)(x, y)`.

torch's methods are C descriptors that accept only real tensors, so on a tracer the unbound form
fails before any `__torch_function__` runs. Each torch.Tensor method the language layer
implements is therefore shadowed in torch.Tensor's class dictionary by a `TensorMethod`:

- reached through an instance (`x.add_(y)`, the bound form) it is a `property` whose getter is
  the C descriptor's own `__get__`, so an eager tensor gets torch's bound method without any
  Python frame (about 0.1 µs more than torch's own lookup);
- reached through the class (`torch.Tensor.add_`, the unbound form) it is the object itself,
  and calling it sends a tracer to the tracer's method and anything else to torch's descriptor.

The shadows are installed when thunderx is imported and stay, because a user may fetch
`torch.Tensor.add_` before a transform starts (`vmap(torch.Tensor.add_)(x, y)`). Only the
dictionary is touched, not the type's slots: operators on eager tensors (`a + b`) keep torch's
C slots. `torch._C.TensorBase` keeps torch's descriptors. `THUNDERX_UNBOUND_METHODS=transforms`
in the environment narrows the shadows to the time a transform runs (torch.Tensor is then
untouched outside transforms, and only methods fetched inside a transform accept tracers).
"""

from __future__ import annotations

import ctypes
import gc
import os
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


class TensorMethod(property):
    """A torch.Tensor method that also takes a tracer as `self` in its unbound form."""

    def __init__(self, name: str, original) -> None:
        super().__init__(original.__get__, None, None, original.__doc__)
        self.__name__ = name
        self.__qualname__ = f"Tensor.{name}"
        self.__module__ = "torch"
        self.__wrapped__ = original
        self._original = original

    def __call__(self, obj, *args, **kwargs):
        if isinstance(obj, Tracer):
            # exactly the bound form (a tracer resolves some methods in `__getattr__`)
            return getattr(obj, self.__name__)(*args, **kwargs)
        return self._original(obj, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<thunderx shadow of method {self.__name__!r} of 'torch._C.TensorBase' objects>"

    def __reduce__(self):
        # pickled references to torch.Tensor.add_ load as torch's descriptor
        return getattr, (torch._C.TensorBase, self.__name__)


def install(operator_names) -> None:
    """Shadow every public method torch defines in C on TensorBase, and the operators among
    `operator_names` (methods torch writes in Python already dispatch a tracer through
    `__torch_function__`)."""
    names = [n for n in vars(torch._C.TensorBase) if not n.startswith("_")]
    for name in [*names, *operator_names]:
        if name in torch.Tensor.__dict__ or name in _shadows:
            continue
        original = getattr(torch._C.TensorBase, name, None)
        if isinstance(original, _DESCRIPTORS):
            _shadows[name] = TensorMethod(name, original)
            _originals[name] = original
            original_of[_shadows[name]] = original
    if os.environ.get("THUNDERX_UNBOUND_METHODS", "always") == "transforms":
        core.outermost_hooks.append((_enter, _leave))
    else:
        _enter()


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
