"""Split-phase collectives in the torch executor's program: each collective's operands travel in
buckets started as soon as their operands exist and waited for where the collective stood, so
communication overlaps the computation that follows (as DDP's gradient buckets do)."""

from __future__ import annotations

import math

from thunderx.core import split_phase_rules
from thunderx.ir import Literal

# Operands of a split-phase collective travel in buckets of at least this many bytes (the last
# one may be smaller), each started as soon as its last operand exists: DDP's first bucket is
# 1 MiB, and a smaller one pays the per-call latency more often.
SPLIT_PHASE_BUCKET_BYTES = 1 << 20


def split_phase_plan(jaxpr, namer, namespace, param_src):
    """Where to start and finish each split-phase collective (`core.split_phase_rules`): its
    operands, in the order they are computed, are cut into buckets; a bucket starts right after
    its last operand's equation, and all are waited for where the collective stood. Returns
    (sorted [(start after eqn index, line)], {eqn index: expression of its outputs});
    `param_src(value, namespace)` writes a parameter's source, as the code generator does."""
    producer: dict[int, int] = {}
    for i, e in enumerate(jaxpr.eqns):
        for v in e.outputs:
            producer[id(v)] = i
    starts, waits = [], {}
    for i, e in enumerate(jaxpr.eqns):
        rule = split_phase_rules.get(e.prim)
        if rule is None or not e.inputs or any(isinstance(x, Literal) for x in e.inputs):
            continue
        start, wait = rule
        namespace[f"_start_{e.prim.name}"] = start
        namespace[f"_wait_{e.prim.name}"] = wait
        namespace["_wait_buckets"] = _wait_buckets
        params = "".join(f", {k}={param_src(v, namespace)}" for k, v in e.params.items())
        order = sorted(range(len(e.inputs)), key=lambda k: producer.get(id(e.inputs[k]), -1))
        buckets, current, size = [], [], 0
        for k in order:
            current.append(k)
            aval = e.inputs[k].aval
            size += math.prod(aval.shape) * aval.dtype.itemsize
            if size >= SPLIT_PHASE_BUCKET_BYTES:
                buckets.append(current)
                current, size = [], 0
        if current:
            buckets.append(current)
        handles, where = [], {}
        for b, bucket in enumerate(buckets):
            handle = f"_h{i}_{b}"
            handles.append(handle)
            after = max(producer.get(id(e.inputs[k]), -1) for k in bucket)
            operands = ", ".join(namer(e.inputs[k]) for k in bucket)
            starts.append((after, f"    {handle} = _start_{e.prim.name}({operands}{params})"))
            where.update({k: (b, j) for j, k in enumerate(bucket)})
        layout = tuple(where[k] for k in range(len(e.inputs)))
        waits[i] = f"_wait_buckets(_wait_{e.prim.name}, ({', '.join(handles)},), {layout!r})"
    starts.sort(key=lambda s: s[0])
    return starts, waits


def _wait_buckets(wait, handles, layout) -> list:
    """The outputs of a collective started in buckets, in operand order."""
    results = [wait(h) for h in handles]
    return [results[b][j] for b, j in layout]
