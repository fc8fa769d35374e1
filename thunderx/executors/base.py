"""The executor protocol and its registry.

An executor turns an optimized, closure-converted jaxpr into a program. Everything the rest of
thunderx needs to know about one (`jit`'s `executor=` argument, its default per device, the
header of `lower().as_text()`, the stage explorer's tabs) is asked of the executor object found
here by name, never decided by comparing names.

>>> from thunderx.executors import get_executor
>>> ex = get_executor("torch")
>>> ex.title, ex.available()
('torch codegen', True)
"""

from __future__ import annotations

import threading
from typing import Callable, Protocol, Sequence

from thunderx.ir import Jaxpr


class Program(Protocol):
    """What `Executor.lower` returns.

    Called with (consts..., args...) it returns a tuple of outputs. `fn` is the entry jit calls;
    `fn_plain` the variant safe under torch autograd (no in-place reuse of buffers); `fn_single` /
    `fn_single_plain` return the one output bare, or are None."""

    fn: Callable
    fn_plain: Callable
    fn_single: Callable | None
    fn_single_plain: Callable | None

    def __call__(self, *args): ...

    def as_text(self) -> str: ...


class Executor:
    """One way to run a jaxpr. Subclasses set `name` (what `jit(executor=...)` takes), `title`
    (how it is shown to people) and implement `lower`; fusing executors also `partition`."""

    name: str = ""
    title: str = ""
    #: Higher wins when several executors are the default for the same devices.
    default_priority: int = 0

    def unavailable_reason(self) -> str | None:
        """None when this executor can run here; otherwise why not, in one sentence."""
        return None

    def available(self) -> bool:
        return self.unavailable_reason() is None

    def claims(self, eqn) -> bool:
        """Whether this executor runs `eqn` itself (inside a fusion region for fusing
        executors); equations it does not claim run as torch calls."""
        return True

    def partition(self, jaxpr: Jaxpr) -> list[int | None] | None:
        """The fusion region of each equation (None: a torch call), or None when this executor
        does not fuse."""
        return None

    def is_default_for(self, device_types: set[str]) -> bool:
        """Whether `jit` picks this executor, unasked, for arguments on these device types."""
        return False

    def lower(self, jaxpr: Jaxpr) -> Program:
        """The program for an optimized, closure-converted jaxpr (consts lead its arguments).
        Cheap: expensive compilation, if any, happens on the program's first call."""
        raise NotImplementedError

    def describe(self) -> str:
        """The header line shown above the program in `lower().as_text()` and the explorer."""
        reason = self.unavailable_reason()
        return f"{self.title} executor" + (f" ({reason})" if reason else "")


_registry: dict[str, Executor] = {}
_lock = threading.Lock()


def register_executor(executor: Executor) -> Executor:
    """Make `executor` available to `jit(executor=executor.name)`, the explorer and lowering."""
    if not executor.name:
        raise ValueError("register_executor: the executor needs a non-empty `name`")
    with _lock:
        _registry[executor.name] = executor
    return executor


def unregister_executor(name: str) -> None:
    """Remove a registered executor (programs already lowered by it keep working)."""
    with _lock:
        _registry.pop(name, None)


def executor_names() -> list[str]:
    return list(_registry)


def executors() -> list[Executor]:
    return list(_registry.values())


def get_executor(name: str) -> Executor:
    """The registered executor called `name`; a ValueError listing the known names otherwise."""
    ex = _registry.get(name) if isinstance(name, str) else None
    if ex is None:
        known = ", ".join(repr(n) for n in _registry)
        raise ValueError(f"unknown executor {name!r}; the registered executors are {known}")
    return ex


def default_executor(device_types: Sequence[str] | set[str]) -> Executor:
    """The executor `jit` uses, unasked, for arguments on these device types."""
    devs = set(device_types)
    best = None
    for ex in _registry.values():
        if ex.is_default_for(devs) and (
            best is None or ex.default_priority > best.default_priority
        ):
            best = ex
    if best is None:
        raise RuntimeError(f"no registered executor is a default for devices {sorted(devs)}")
    return best
