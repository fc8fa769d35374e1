"""Generated source as Python functions: each compiled under its own `<thunderx-generated-N>`
filename and registered in linecache, so tracebacks and `inspect` show the generated lines, for
as long as the function lives (long runs compile many programs and must not keep every source).
"""

from __future__ import annotations

import functools
import itertools
import linecache
import re
import sys
import weakref

# Numbers of generated files; those of collected programs are reused, because CPython keeps
# every distinct code filename it has compiled (about 60 bytes each, for good).
_file_numbers = itertools.count(1)
_free_numbers: list[int] = []


def exec_source(src: str, namespace: dict, name: str):
    """Compile generated source (registered for tracebacks) and return its function `name`."""
    _forget_pending()
    try:
        number = _free_numbers.pop()  # list.pop and next(count) are atomic: no lock, which a
    except IndexError:  # finalizer run by the garbage collector could deadlock on
        number = next(_file_numbers)
    filename = f"<thunderx-generated-{number}>"
    # Register the source so tracebacks and inspect show the generated lines, for as long as the
    # function lives: long runs compile many programs and must not keep every source.
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    fn = namespace[name]
    weakref.finalize(fn, _forget_source, filename, number)
    return fn


def _forget_source(filename: str, number: int) -> None:
    if _inside_checkcache():
        # Run by the collector inside linecache.checkcache's loop over its keys (a removal would
        # raise KeyError there): removed later, the number staying taken until then.
        _pending_forget.append((filename, number))
        return
    linecache.cache.pop(filename, None)
    _free_numbers.append(number)
    _forget_pending()


_pending_forget: list = []


def _forget_pending() -> None:
    while _pending_forget and not _inside_checkcache():
        try:
            filename, number = _pending_forget.pop()
        except IndexError:  # emptied meanwhile by another thread's call
            return
        linecache.cache.pop(filename, None)
        _free_numbers.append(number)


def _inside_checkcache() -> bool:
    f = sys._getframe(1)
    while f is not None:
        if f.f_code is _CHECKCACHE_CODE:
            return True
        f = f.f_back
    return False


_CHECKCACHE_CODE = linecache.checkcache.__code__


# -- reading generated expressions (no string literal in them holds a bracket)


def closing_bracket(expr: str, start: int) -> int | None:
    """The index of the bracket closing the one at `start`, or None when it never closes."""
    depth = 0
    for k in range(start, len(expr)):
        c = expr[k]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return k
    return None


def closes_at_end(expr: str, start: int) -> bool:
    """Whether the bracket at `start` closes at the last character."""
    return closing_bracket(expr, start) == len(expr) - 1


def split_top(s: str, sep: str) -> list[str]:
    """`s` split at each `sep` outside brackets."""
    parts, depth, last, k = [], 0, 0, 0
    while k < len(s):
        c = s[k]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and s.startswith(sep, k):
            parts.append(s[last:k])
            last = k = k + len(sep)
            continue
        k += 1
    parts.append(s[last:])
    return parts


# -- binding aten overloads

_ATEN_PACKET_CALL = re.compile(r"torch\.ops\.aten\.(\w+)\(")
# the overloads that write into a buffer given by keyword: a call without it never picks them
_OUT_OVERLOADS = frozenset({"out", "grad_input", "output"})


def bind_default_overloads(src: str) -> str:
    """`torch.ops.aten.NAME(` as `torch.ops.aten.NAME.default(` where NAME's other overloads
    all write into an out= buffer, which is what the packet resolves a call without that
    keyword to: an OpOverloadPacket resolves the overload on every call
    (native_layer_norm_backward on a 4x4 input: 26-37 us against 18-21 us for `.default`)."""
    return _ATEN_PACKET_CALL.sub(
        lambda m: f"torch.ops.aten.{m[1]}.default(" if _only_default(m[1]) else m[0], src
    )


@functools.lru_cache(maxsize=None)
def _only_default(name: str) -> bool:
    import torch

    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return False
    overloads = set(packet.overloads())
    return "default" in overloads and overloads - {"default"} <= _OUT_OVERLOADS
