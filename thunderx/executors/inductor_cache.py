"""Inductor kernels specialized to their inputs' layouts, in one cache shared by every program
of the inductor executor (fusion regions and whole programs): two programs with the same
structure and input descriptors share one compiled kernel."""

from __future__ import annotations

import collections
import threading
from typing import Callable

CACHE_SIZE = 512
_kernels: collections.OrderedDict = collections.OrderedDict()
_lock = threading.Lock()


def clear_kernel_cache() -> None:
    """Forget compiled kernels (programs holding one keep it): the next new program compiles
    afresh, e.g. to measure a first call."""
    with _lock:
        _kernels.clear()


class PerLayout:
    """A callable compiled on its first call per input layout (inductor asserts its inputs'
    strides): subclasses set `key` (structure and input descriptors) and give `_build(args)`,
    the compiled callable for these example arguments."""

    key: object

    def __init__(self):
        self._by_layout: dict = {}
        # True: a layout not compiled yet runs `unseen` instead of compiling (the tiered
        # executor's compiled programs, whose torch program serves any other layout)
        self.frozen = False

    def __call__(self, *args):
        layout = tuple(a.stride() for a in args)
        fn = self._by_layout.get(layout)
        if fn is None:
            if self.frozen:
                return self.unseen(*args)
            fn = self._compile(layout, args)
        return fn(*args)

    def unseen(self, *args):
        """What a frozen callable runs for a layout it has no kernel for."""
        raise NotImplementedError

    def _build(self, args) -> Callable:
        raise NotImplementedError

    def _compile(self, layout, args):
        key = (self.key, layout)
        with _lock:
            fn = _kernels.get(key)
            if fn is None:
                fn = self._build(args)
                _kernels[key] = fn
                while len(_kernels) > CACHE_SIZE:
                    _kernels.popitem(last=False)
            else:
                _kernels.move_to_end(key)
            self._by_layout[layout] = fn
        return fn
