"""Releasing dead intermediates in generated programs: a `del` after a buffer's last reader
hands its memory back to the allocator while later kernels run, still in cache, instead of
holding every intermediate until the function returns (eager code frees them the same way)."""

from __future__ import annotations

import math

from thunderx.ir import Jaxpr

# An intermediate of at least this many bytes is released (`del`) after its last use, so that
# the allocator hands its memory, still in cache, to the next buffer (as eager code and
# inductor's programs do); smaller ones stay bound until the function returns.
RELEASE_BYTES = 1 << 16


def releases(jaxpr: Jaxpr, last_use: dict, unnamed: set, affine: dict) -> dict:
    """{equation index: the intermediates bound by the generated function to release after
    it}: those of RELEASE_BYTES or more whose last reader is that equation. A buffer whose last
    reader is a view of it is released with that view (the view keeps it alive until then)."""
    from thunderx.passes import is_view_primitive

    # a fused layer-norm call binds the group's outputs it names, not its own equation's
    named = [
        v
        for i, e in enumerate(jaxpr.eqns)
        if i not in unnamed and i not in affine
        for v in e.outputs
    ]
    named += [v for outs, _, _ in affine.values() for v in outs if v is not None]
    big = {id(v) for v in named if nbytes(v.aval) >= RELEASE_BYTES}
    dying: dict[int, list] = {}
    for v in named:
        i = last_use.get(id(v))
        if i is not None and i < len(jaxpr.eqns):  # not dead, not an output
            dying.setdefault(i, []).append(v)
    out: dict = {}
    held: dict[int, list] = {}  # view var -> the buffers released with it
    for i in sorted(dying):
        e = jaxpr.eqns[i]
        view = i not in unnamed and is_view_primitive(e.prim) and len(e.outputs) == 1
        for v in dying[i]:
            group = [v, *held.pop(id(v), ())]
            if view and any(x is v for x in e.inputs):
                held.setdefault(id(e.outputs[0]), []).extend(group)
            elif any(id(u) in big for u in group):
                out.setdefault(i, []).extend(group)
    return out


def nbytes(aval) -> int:
    """Bytes of a tensor value (0 for a value whose size is not static, such as a dynamic
    count)."""
    if any(not isinstance(d, int) for d in aval.shape):
        return 0
    return math.prod(aval.shape) * (aval.dtype.itemsize or 0)


def release_line(lines: list, dead: list | None, reused: int | None, namer) -> None:
    """`del` of the dead intermediates, but for one a result was written into in place."""
    names = [namer(v) for v in dead or () if id(v) != reused]
    if names:
        lines.append(f"    del {', '.join(names)}")
