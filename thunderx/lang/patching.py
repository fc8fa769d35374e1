"""Replace attributes of torch (a class's method, a module's function) only while a transform runs:
from the outermost transform's start to its end, with torch's own put back afterwards (also after
an exception), so torch is untouched outside transforms. Thread-safe: nested and concurrent
transforms share one replacement, restored when the last one ends."""

from __future__ import annotations

import threading

from thunderx import core


def patch_during_transforms(patches) -> None:
    """`patches`: (owner, attribute name, replacement) triples, installed and removed together.
    The original is the owner's own dictionary entry (a classmethod stays a classmethod), or the
    attribute where it has none (a function's `__code__`)."""
    patches = list(patches)
    originals = [
        (owner, name, vars(owner)[name] if name in vars(owner) else getattr(owner, name))
        for owner, name, _ in patches
    ]
    lock = threading.Lock()
    depth = [0]

    def enter() -> None:
        with lock:
            depth[0] += 1
            if depth[0] == 1:
                for owner, name, value in patches:
                    setattr(owner, name, value)

    def leave() -> None:
        with lock:
            depth[0] -= 1
            if depth[0] == 0:
                for owner, name, value in originals:
                    setattr(owner, name, value)

    core.outermost_hooks.append((enter, leave))
