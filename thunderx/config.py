"""Run-time switches of thunderx's transforms.

`disable_jit()` (as `jax.disable_jit`) runs `jit`-compiled functions as plain Python, op by op,
inside its block: Python `print`s, breakpoints and `.item()` see every call's values, and the
`thunderx.lax` control flow in them runs as Python `if` and loops on concrete values. Under
other transforms (`grad`, `vmap`) the function is traced into theirs instead of being staged as
one call. The switch is per thread; `THUNDERX_DISABLE_JIT=1` turns it on for a whole process.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator


class _Switches(threading.local):
    def __init__(self):
        self.jit_disabled = os.environ.get("THUNDERX_DISABLE_JIT", "0") not in ("", "0")


switches = _Switches()


@contextlib.contextmanager
def disable_jit(disable: bool = True) -> Iterator[None]:
    """Within the block, `jit` functions run their Python code on every call (`disable=False`
    turns `jit` back on inside an outer block). The previous state returns on any exit.

    >>> f = thunderx.jit(lambda x: x.item() + 1)  # .item() needs a value: refused under jit
    >>> with thunderx.disable_jit():
    ...     f(torch.tensor(2.0))
    3.0
    """
    prev = switches.jit_disabled
    switches.jit_disabled = bool(disable)
    try:
        yield
    finally:
        switches.jit_disabled = prev
