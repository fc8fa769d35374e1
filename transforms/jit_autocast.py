"""jit's calls under CPU autocast: a program traced under `torch.autocast("cpu")` holds the
casts as equations and runs with autocast off. Its cache key has the autocast dtype, so the
general path (jit.JitFunction._call_slow) finds it; this table finds it again for a signature
seen before with one flatten and one dict lookup, as jit's fast path does outside autocast."""

from __future__ import annotations

import optree
import torch

from thunderx import tree
from thunderx.core import EvalTrace, _state, axis_env
from thunderx.lang.autocast import other_autocast_on

_flatten, _NAMESPACE = optree.tree_flatten, tree.NAMESPACE
_autocast_dtype, _default_dtype = torch.get_autocast_dtype, torch.get_default_dtype
_grad_enabled, _set_autocast = torch.is_grad_enabled, torch.set_autocast_enabled
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
            return self._first(key, args, kwargs)
        prog, consts = entry.program, entry.consts
        # torch autograd through the call needs the variant without in-place reuse
        grad = _grad_enabled() and any(t.requires_grad for t in (*consts, *flat))
        _set_autocast("cpu", False)
        try:
            outs = (prog.fn_plain if grad else prog.fn)(*consts, *flat)
        finally:
            _set_autocast("cpu", True)
        return tree.unflatten(entry.out_tree, outs)

    def _first(self, key, args, kwargs):
        """The general path; its entry is kept for the next call when nothing but the
        signature decides it (no writes back, no values read at trace time, no named axes)."""
        impl = self.impl
        out = impl._call_slow(args, kwargs)
        if axis_env():
            return out
        entry, _ = impl._lookup(args, kwargs)
        if entry.program is not None and not entry.writes and not entry.value_reads:
            if len(self.table) >= impl.cache_size:
                self.table.clear()
            self.table[key] = entry
        return out
