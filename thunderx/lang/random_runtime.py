"""The state random ops share under transforms (the stack of RandomnessModes, jacfwd's
randomness='error' scopes) and draws made with a torch kernel: now under eager transforms, or on
each run of a staged program (lang/random.py)."""

from __future__ import annotations

import threading
import weakref

import torch

from thunderx.core import current_trace, set_trace
from thunderx.errors import RandomnessError, user_frame


class _Modes(threading.local):
    def __init__(self):
        self.stack: list = []
        self.forbidden: list = []  # forbid_random scopes, innermost last
        self.calling: list = []  # the random functions being called inside one, outermost first


_modes = _Modes()


class forbid_random:
    """Inside it, any random op raises torch.func's randomness error (jacfwd's
    randomness='error': its linearization must not draw)."""

    def __init__(self, api: str):
        self.api = api

    def __enter__(self):
        _modes.forbidden.append(self.api)

    def __exit__(self, *exc):
        _modes.forbidden.pop()


def check_forbidden() -> None:
    """Raises torch.func's randomness error inside `forbid_random` (jacfwd's randomness='error'):
    called where a random op is about to draw."""
    if _modes.forbidden:
        api = _modes.forbidden[-1]
        name = _modes.calling[0] if _modes.calling else "a random op"
        raise RandomnessError(
            f"{api}: {name} called random operation while in randomness error mode, at "
            f"{user_frame()}; pass {api}(..., randomness='same') or randomness='different'"
        )


def _staging_trace():
    """The nearest enclosing staging trace, or None when the transforms run eagerly."""
    from thunderx.tracing import StagingTrace

    t = current_trace()
    while t is not None:
        if isinstance(t, StagingTrace):
            return t
        t = t.parent
    return None


class RuntimeDraw:
    """A random torch call run each time the staged program runs (a `torch_call` equation).

    With a generator: while it is alive the draw advances it, as eager code would on each call;
    once it has been collected (it was local to the traced function, so each eager call made a
    fresh one) the draw starts from the state it had when traced."""

    def __init__(self, fn, args, dtype, generator):
        self.fn, self.args, self.dtype = fn, args, dtype
        self.gen_ref = None if generator is None else weakref.ref(generator)
        self.gen_state = None if generator is None else generator.get_state()
        self.__name__ = getattr(fn, "__name__", "draw")

    def _generator(self, device):
        if self.gen_ref is None:
            return None
        gen = self.gen_ref()
        if gen is None:
            gen = torch.Generator(device)
            gen.set_state(self.gen_state)
        return gen

    def __call__(self, like):
        if like.is_meta:
            return self.fn(*self.args, dtype=self.dtype, device="meta")
        return self.fn(
            *self.args, dtype=self.dtype, device=like.device, generator=self._generator(like.device)
        )

    def __repr__(self) -> str:
        gen = "" if self.gen_ref is None else ", generator=..."
        return f"{self.__name__}{self.args}{gen}"


def runtime_draw(fn, args, dtype, device, generator=None):
    """`fn(*args, dtype=, device=, generator=)` now (eager transforms) or on each run of the
    staged program (jit, reverse mode)."""
    check_forbidden()
    staging = _staging_trace()
    if staging is None:
        return fn(*args, dtype=dtype, device=device, generator=generator)
    if generator is not None:
        mode = next((m for m in reversed(_modes.stack) if m.trace is None), None)
        if mode is not None:
            mode.remember(generator)
    draw_ = RuntimeDraw(fn, args, dtype, generator)
    if generator is not None:
        # advance it as the eager call would: later draws in this trace see the next state
        fn(*args, dtype=dtype, device=device, generator=generator)
    from thunderx.lang.fallback import opaque_call

    with set_trace(staging):
        return opaque_call(draw_, (torch.empty(0, device=device),), {})
