"""Recycling a program's large outputs and intermediates across calls (the torch executor on
CPU).

On CPU a fresh tensor of several MiB is memory glibc maps and unmaps on every call, so writing
it costs first-touch page faults: a per-example gradient program spends most of its
time faulting in the gradients it returns (torch.compile pays the same). A program output of at
least RECYCLE_BYTES is instead written, through the kernel's out= form, into a buffer kept by
its `OutputPool`, and the caller gets a fresh tensor on that buffer's storage. The next call
writes into the same buffer only once nothing outside the pool refers to that storage any more:
no tensor or view of it (each holds a reference to the storage, counted by torch) and no Python
storage object (counted by Python). A caller that keeps its results, or passes them back in (a
training step's new parameters), gets another buffer; each output keeps at most KEEP, released
with the program (`jit(f).clear_cache()`, or the jit function itself).

The program's own large intermediates (at least INTERMEDIATE_BYTES) are written into recycled
buffers the same way: a buffer is taken at the equation that makes the value and is free again
once the program has deleted it, so steady-state calls fault in no fresh pages for them; a value
whose memory escapes (an output that is a view of it) makes the next call take another buffer.
The equations making values of one shape and dtype share one pool, which keeps as many buffers
as such values are ever alive at once: the memory kept is what the program's own peak holds.

Not recycled: under inference mode (results are inference tensors), under torch.func transforms
or a torch dispatch or function mode (operands are wrapped), on other devices (CUDA has its own
caching allocator), and in the variant torch autograd runs through. Set THUNDERX_RECYCLE_OUTPUTS=0
to turn it off.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from collections import Counter

import torch

from thunderx.executors.inplace import inplace_out_source
from thunderx.executors.release import nbytes
from thunderx.executors.sources import closes_at_end, split_top

# outputs of at least this many bytes are recycled. Measured (CPU, A/B in one process): outputs
# of 16 MiB and more (per-example gradients) are mapped afresh by malloc on every call and ran
# 3-10x faster recycled; outputs of 256 KiB to 4 MiB (a transformer layer's weight gradients, an
# SGD step's parameters) come back from malloc's heap still in cache and ran 2-4% slower written
# into a recycled buffer. THUNDERX_RECYCLE_BYTES=0 recycles every output (a thorough local run of
# the test suite).
RECYCLE_BYTES = int(os.environ.get("THUNDERX_RECYCLE_BYTES", 1 << 23))
# intermediates (results the program makes and drops) of at least this many bytes are written into
# recycled buffers too, from a pool per shape and dtype as large as the most such values alive at
# once (taken where a value is made, free again once the program deletes it). Measured (A/B in
# one process, against torch.compile): a GPT block's 4 MiB GELU activations and gradients
# faulted in 1500 pages a call and ran 3-6% slower than recycled; a 16 MiB elementwise chain ran
# 2x faster; pooling a transformer layer's 1 MiB intermediates measured 0.5-1% slower (within
# noise), its 4 MiB ones neutral.
INTERMEDIATE_BYTES = int(os.environ.get("THUNDERX_RECYCLE_INTERMEDIATE_BYTES", 1 << 22))
# buffers kept per output: two let a caller that feeds each result into the next call alternate
KEEP = 2
enabled = os.environ.get("THUNDERX_RECYCLE_OUTPUTS", "1") != "0"

_C = torch._C
_use_count = getattr(_C, "_storage_Use_Count", None)


def _py_refs(s) -> int:
    return sys.getrefcount(s)


def _calibrate() -> int:
    """Python references to a pool's storage object while `take` looks at it, when only the
    pool holds it (measured on the same code path, so that the interpreter's own counting of
    list slots, loop variables and arguments cancels out)."""
    storages = [torch.empty(0).untyped_storage()]
    for s in storages:
        return _py_refs(s)
    raise AssertionError


_BASE_REFS = _calibrate()


class OutputPool:
    """The buffers one program output (or a program's intermediates of one shape and dtype) is
    written into; `take()` gives a tensor on one that nothing else refers to, or None when the
    program must allocate its own result."""

    __slots__ = ("shape", "dtype", "device", "nbytes", "storages", "lock", "keep")

    def __init__(self, aval, keep: int = KEEP):
        self.shape, self.dtype, self.device = aval.shape, aval.dtype, aval.device
        self.nbytes = nbytes(aval)
        self.storages: list = []
        self.lock = threading.Lock()
        self.keep = keep  # buffers kept at most

    def take(self) -> torch.Tensor | None:
        if (
            not enabled
            or _C._are_functorch_transforms_active()
            or torch.is_inference_mode_enabled()
            or _C._len_torch_dispatch_stack()
            or _C._is_torch_function_mode_enabled()
        ):
            return None
        with self.lock:  # a tensor on the chosen storage exists before another thread looks
            for s in self.storages:
                if _use_count(s._cdata) == 1 and _py_refs(s) == _BASE_REFS:
                    if s.nbytes() >= self.nbytes:  # a caller may have resized it
                        return self._tensor(s)
                    self.storages.remove(s)
                    break
            t = torch.empty(self.shape, dtype=self.dtype, device=self.device)
            if len(self.storages) < self.keep:
                self.storages.append(t.untyped_storage())
            return t

    def _tensor(self, s) -> torch.Tensor:
        # a new contiguous tensor (its own version counter) on the recycled storage
        t = torch.empty((0,), dtype=self.dtype, device=self.device)
        return t.set_(s, 0, self.shape)

    def __repr__(self) -> str:
        return f"OutputPool({self.shape}, {self.dtype}, {len(self.storages)} buffers)"


def recyclable(v, threshold: int | None = None) -> bool:
    """Whether var `v` is worth a pool: a static CPU tensor of `threshold` (RECYCLE_BYTES)
    bytes or more."""
    a = v.aval
    return (
        enabled
        and _use_count is not None
        and getattr(a, "device", None) is not None
        and a.device.type == "cpu"
        and all(isinstance(d, int) for d in a.shape)
        and nbytes(a) >= (RECYCLE_BYTES if threshold is None else threshold)
    )


# torch functions whose out= form writes the functional result (a call spanning the whole
# expression); anything else has no out form here
_OUT_FUNCS = frozenset(
    {"mm", "bmm", "addmm", "baddbmm", "matmul", "tensordot", "mul", "add", "sub", "sum"}
)
_CALL = re.compile(r"torch\.(\w+)\(")
_CONVERT = re.compile(r"(\w+)\.to\(torch\.\w+\)")  # convert_element_type's source
_LINEAR = "torch.nn.functional.linear("


def out_source(e, args: list[str], expr: str, out: str, special: bool) -> str | None:
    """A statement computing equation `e` into the tensor named `out`, or None when it has no
    out= form: the primitive's own out= kernel, or `expr` (its source, or the source of the
    pattern that replaced it when `special`) as an out= call."""
    own = None if special else primitive_out_source(e, args, out)
    return own if own is not None else _call_with_out(expr, out)


def primitive_out_source(e, args: list[str], out: str) -> str | None:
    """An elementwise primitive's out= kernel writing into `out`: its declared out= overload,
    or the torch function of its in-place method; None otherwise."""
    props = e.prim.props
    if props.inplace_out is not None:
        return inplace_out_source(props.inplace_out, args, e.params, out)
    if not props.elementwise or props.inplace is None or e.params:
        return None
    base = props.inplace[:-1]
    dtype = e.outputs[0].aval.dtype
    floating = dtype.is_floating_point or dtype.is_complex
    if (floating or not props.inplace_floating_only) and _takes_out(base, len(args)):
        return f"torch.{base}({', '.join(args)}, out={out})"
    return None


def output_pools(
    jaxpr, pools: dict | None, namespace: dict, last_use: dict, unemitted: set
) -> dict[int, str]:
    """{equation index: the namespace name of its pool's `take`} for the outputs of `jaxpr`
    worth recycling (each made by a one-output equation, returned once), and for its large
    intermediates, with their pools made in `pools` unless there already: one per output (keyed
    by its index), one per intermediate shape and dtype (keyed by them), shared by every
    equation making such a value and keeping as many buffers as such values are ever alive at
    once (from `last_use`: var id -> index of its last reader), so that the buffers kept are
    those the program's own peak would hold, not one per equation. `unemitted`: indices of
    equations the program does not run as calls of their own (fused into a pattern, hoisted)."""
    if pools is None:
        return {}
    producer = {id(v): i for i, e in enumerate(jaxpr.eqns) for v in e.outputs}
    counts = Counter(id(v) for v in jaxpr.outvars)
    out: dict[int, str] = {}

    def one_output(i):
        e = jaxpr.eqns[i]
        return len(e.outputs) == 1 and not e.prim.multiple_results

    for k, v in enumerate(jaxpr.outvars):
        i = producer.get(id(v))
        if i is not None and counts[id(v)] == 1 and recyclable(v) and one_output(i):
            pool = pools.get(k)
            if pool is None:
                pool = pools[k] = OutputPool(v.aval)
            namespace[f"_recycled{k}"] = pool.take
            out[i] = f"_recycled{k}"
    lives: dict = {}  # (shape, dtype) -> [(index made, index last read, var)]
    for i, e in enumerate(jaxpr.eqns):
        v = e.outputs[0] if e.outputs else None
        if v is None or id(v) in counts or i in unemitted or not one_output(i):
            continue
        if recyclable(v, INTERMEDIATE_BYTES):
            key = ("intermediate", v.aval.shape, v.aval.dtype)
            lives.setdefault(key, []).append((i, last_use.get(id(v), i), v))
    for n, (key, spans) in enumerate(lives.items()):
        pool = pools.get(key)
        if pool is None:
            pool = pools[key] = OutputPool(spans[0][2].aval, keep=_most_alive(spans))
        name = f"_recycled_t{n}"
        namespace[name] = pool.take
        for i, _, _ in spans:
            out[i] = name
    return out


def _most_alive(spans) -> int:
    """The most values alive at once, each alive from the equation making it to its last
    reader (a view read later keeps the buffer longer: take() then finds it in use and
    allocates, never overwrites)."""
    # at one index, a value made there comes before one read for the last time there: the
    # equation's operands are alive while it writes its result
    events = sorted([(a, 0) for a, _, _ in spans] + [(b, 1) for _, b, _ in spans])
    alive = most = 0
    for _, released in events:
        alive += -1 if released else 1
        most = max(most, alive)
    return max(most, 1)


@functools.cache
def _takes_out(name: str, arity: int) -> bool:
    """Whether torch.<name> takes out= with `arity` tensor operands (torch.relu does not)."""
    fn = getattr(torch, name, None)
    if fn is None:
        return False
    try:
        fn(*[torch.ones(1)] * arity, out=torch.empty(1))
    except (TypeError, RuntimeError):
        return False
    return True


def _call_with_out(expr: str, out: str) -> str | None:
    """`torch.f(...)` spanning all of `expr`, f in _OUT_FUNCS, with `out=` added; `(a * b)` as
    `torch.mul(a, b, out=...)`; a conversion `x.to(dtype)` as `out.copy_(x)`; None for anything
    else."""
    m = _CONVERT.fullmatch(expr)
    if m is not None:
        return f"{out}.copy_({m.group(1)})"
    if expr.startswith(_LINEAR) and closes_at_end(expr, len(_LINEAR) - 1):
        # F.linear has no out=: the addmm it runs on the rows (torch's own for a contiguous
        # input), into a 2-D view of the buffer
        args = split_top(expr[len(_LINEAR) : -1], ", ")
        if len(args) == 3:
            x, w, b = args
            rows = f"{x}.reshape(-1, {x}.shape[-1])"
            return f"torch.addmm({b}, {rows}, {w}.t(), out={out}.view(-1, {out}.shape[-1]))"
        return None
    m = _CALL.match(expr)
    if m is not None:
        if m.group(1) in _OUT_FUNCS and closes_at_end(expr, m.end() - 1) and "out=" not in expr:
            return f"{expr[:-1]}, out={out})"
        return None
    if expr.startswith("(") and closes_at_end(expr, 0):
        parts = split_top(expr[1:-1], " * ")
        if len(parts) == 2:
            return f"torch.mul({parts[0]}, {parts[1]}, out={out})"
    return None


def recycled_lines(name: str, take: str, expr: str, into: str) -> list[str]:
    """The generated lines: `name` is a recycled buffer written by `into`, else `expr`."""
    return [
        f"    {name} = {take}()  # a recycled buffer, or None",
        f"    if {name} is None:",
        f"        {name} = {expr}",
        "    else:",
        f"        {into}",
    ]
