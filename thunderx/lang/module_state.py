"""Guards of a jitted program on the torch modules its trace used.

`jit` traces a function once per signature; what it reads from a `torch.nn.Module` at trace time
is then part of the program: which parameter, buffer and submodule objects the module holds
(`self.weight` is captured by identity), and Python attributes its `forward` reads
(`self.training`, dropout's `p`, an `eps`). torch code changes these between calls:
`model.eval()` / `model.train()`, `model.fc = nn.Linear(...)`, `load_state_dict(sd, assign=True)`,
`module.weight = nn.Parameter(...)`. A program traced before such a change would silently keep
the old behaviour (dropout on in evaluation, the replaced layer's weights), so, as torch.compile
guards on them, the program records the modules its trace used and is traced again when one of
them changed:

- the modules used are those called during the trace (a global forward pre-hook) and those whose
  parameters, buffers or submodules the trace read (`Module.__getattr__`);
- each one's state is its `training` flag, the identities of its parameters, buffers and
  submodules, its plain Python attributes (numbers, strings, bools, None, tuples of them) by
  value, its other public attributes (a replaced `forward`) by identity, and its forward hooks;
- a change can only come through `Module.__setattr__` / `__delattr__`, `register_*`,
  `add_module`, `_apply`, adding a forward (pre-)hook or removing a hook, which bump a global
  counter: while it is unchanged a call checks
  one integer; after a bump the states are compared once, and a program whose modules changed
  is traced again. In-place updates of parameters (an optimizer step) change no state: the
  program reads captured tensors on every call.
"""

from __future__ import annotations

import threading

import torch

_EPOCH = [0]
_PLAIN = (bool, int, float, str, type(None), torch.dtype, torch.device)
_local = threading.local()


def _bumping(method):
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        finally:
            _EPOCH[0] += 1

    wrapper.__name__ = method.__name__
    wrapper.__qualname__ = method.__qualname__
    wrapper.__doc__ = method.__doc__
    wrapper.__wrapped__ = method
    return wrapper


def install() -> None:
    """Count every change of any module's attributes (once, at import)."""
    cls = torch.nn.Module
    if getattr(cls.__setattr__, "_thunderx_bumps", False):
        return
    for name in (
        "__setattr__",
        "__delattr__",
        "register_parameter",
        "register_buffer",
        "register_module",
        "add_module",
        "_apply",
        "register_forward_hook",
        "register_forward_pre_hook",
    ):
        method = getattr(cls, name, None)
        if method is not None:
            wrapped = _bumping(method)
            wrapped._thunderx_bumps = True
            setattr(cls, name, wrapped)
    # a hook's handle removes it from the module's dict directly
    handle = torch.utils.hooks.RemovableHandle
    handle.remove = _bumping(handle.remove)


def _plain(value) -> bool:
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return isinstance(value, _PLAIN)


def _state(module) -> tuple:
    d = module.__dict__
    return (
        tuple((k, id(v)) for k, v in d["_parameters"].items()),
        tuple((k, id(v)) for k, v in d["_buffers"].items()),
        tuple((k, id(v)) for k, v in d["_modules"].items()),
        tuple(d["_forward_hooks"]),
        tuple(d["_forward_pre_hooks"]),
        # plain values by value; others (a replaced `forward`, an activation function, a tensor
        # kept as a plain attribute) by identity
        tuple((k, v if _plain(v) else id(v)) for k, v in d.items() if not k.startswith("_")),
    )


class ModuleGuard:
    """Stands in the program's `value_reads` as a captured tensor would: its `_version` is 0
    while the recorded modules keep the state the trace saw, 1 once one has changed."""

    __slots__ = ("modules", "states", "epoch")

    def __init__(self, modules: list):
        self.modules = modules
        self.states = [_state(m) for m in modules]
        self.epoch = _EPOCH[0]

    @property
    def _version(self) -> int:
        if self.epoch == _EPOCH[0]:
            return 0
        if all(_state(m) == s for m, s in zip(self.modules, self.states)):
            self.epoch = _EPOCH[0]
            return 0
        return 1


class _Recorder:
    def __init__(self):
        self.modules: dict[int, torch.nn.Module] = {}

    def add(self, module) -> None:
        self.modules.setdefault(id(module), module)


def _recorders() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _pre_hook(module, args):
    for r in _recorders():
        r.add(module)


_TORCH_GETATTR = torch.nn.Module.__getattr__


def _recording_getattr(self, name):
    value = _TORCH_GETATTR(self, name)
    for r in _recorders():
        r.add(self)
    return value


class recording:  # noqa: N801 - a context manager used like a function
    """While active (a jit trace), the modules the trace uses are recorded; `guard()` gives the
    guard of their states at the end of the trace, or None when no module was used."""

    def __enter__(self) -> recording:
        self._rec = _Recorder()
        stack = _recorders()
        if not stack:
            self._hook = torch.nn.modules.module.register_module_forward_pre_hook(_pre_hook)
            torch.nn.Module.__getattr__ = _recording_getattr
        stack.append(self._rec)
        return self

    def __exit__(self, *exc) -> None:
        stack = _recorders()
        stack.pop()
        if not stack:
            self._hook.remove()
            torch.nn.Module.__getattr__ = _TORCH_GETATTR

    def guard(self) -> ModuleGuard | None:
        modules = list(self._rec.modules.values())
        return ModuleGuard(modules) if modules else None


install()
