"""jit's calls under CPU autocast: a program traced under `torch.autocast("cpu")` holds the
casts as equations and runs with autocast off. Its cache key has the autocast dtype, so the
general path (jit.JitFunction._call_slow) finds it; this table finds it again for a signature
seen before with one flatten and one dict lookup, as jit's fast path does outside autocast."""

from __future__ import annotations

import optree
import torch

from thunderx import tree
from thunderx.core import EvalTrace, _state, axis_env, cpu_autocast_off
from thunderx.lang.autocast import other_autocast_on

_flatten, _NAMESPACE = optree.tree_flatten, tree.NAMESPACE
_autocast_dtype, _default_dtype = torch.get_autocast_dtype, torch.get_default_dtype
_autocast_on = torch.is_autocast_enabled


class AutocastCalls:
    """The programs of one jitted function run under CPU autocast, by (autocast dtype, default
    dtype, argument structure, each leaf's (shape, dtype, device))."""

    __slots__ = ("impl", "table")

    def __init__(self, impl):
        self.impl = impl
        self.table: dict = {}

    def clear(self) -> None:
        self.table.clear()

    def __call__(self, args, kwargs):
        impl = self.impl
        if (
            kwargs
            or not impl._fast_ok
            or impl._grad_keyed
            or _state.trace.__class__ is not EvalTrace
            or not _autocast_on("cpu")
            or other_autocast_on()
        ):
            return impl._call_slow(args, kwargs)
        flat, treedef = _flatten(args, namespace=_NAMESPACE)
        try:
            sig = tuple([(a.shape, a.dtype, a.device) for a in flat])
        except AttributeError:  # a Python scalar leaf: the general path
            return impl._call_slow(args, kwargs)
        key = (_autocast_dtype("cpu"), _default_dtype(), treedef, sig)
        entry = self.table.get(key)
        if entry is None:
            entry, out = self.run(args, kwargs)
            # kept for the next call when nothing but the signature decides it (no writes
            # back, no values read at trace time, no named axes)
            if not axis_env() and not entry.writes and not entry.value_reads:
                if len(self.table) >= impl.cache_size:
                    self.table.clear()
                self.table[key] = entry
            return out
        with cpu_autocast_off():
            return impl._run_top(entry, flat, args, kwargs, remember=False)

    def run(self, args, kwargs):
        """(entry, outputs): the general path at the top level under CPU autocast, the program
        traced with autocast's casts (the cache key has its state) and run without it."""
        impl = self.impl
        entry, leaves = impl._lookup(args, kwargs)
        with cpu_autocast_off():
            return entry, impl._run_top(entry, leaves, args, kwargs, remember=False)
