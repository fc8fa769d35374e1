"""Channel normalizations with their affine in torch's kernels. The language layer writes
`F.batch_norm(x, None, None, w, b, training=True)`, `F.instance_norm(x, weight=w, bias=b)` and
`F.group_norm(x, G, w, b)` as the normalized value times a broadcast weight plus a broadcast bias
(so transforms see an affine map of a normalization). Torch's kernels fold the affine into the
normalization (`x * (w * invstd) + (b - mean * w * invstd)`), which rounds differently: at a
constant channel of 30s with weight 30 and bias -30, eager torch gives -30.0000000000073 and the
product-then-sum -29.99999999997, and a `trunc` after it turns that into -30 against -29. The
torch executor puts each group back together as torch runs it, so that the numbers are eager
torch's own:

- batch norm without running buffers: `torch.native_batch_norm(x, w, b, None, None, True, 0.0,
  eps)`, its saved mean and invstd read by the normalization's backward in the same program
  (batch norm with running buffers: patterns_norm.batch_norm_training);
- instance norm: `torch.instance_norm(x, w, b, None, None, True, 0.0, eps, False)`, the call
  `F.instance_norm` makes (batch norm of x seen as one sample of N * C channels);
- group norm: `torch.native_group_norm(x, w, b, N, C, HxW, G, eps)` with its saved statistics for
  the backward.

Only a complete group is rewritten: the scaled value read only by the shift, the vectors of x's
dtype; a broadcast of a vector also read elsewhere stays for those readers. A normalized value
also read elsewhere (a weight's cotangent under grad) is still computed for those readers: the
kernel's pass replaces the affine's two. The call is emitted at the group's last equation, where
every operand exists."""

from __future__ import annotations

from thunderx.executors.patterns_norm import _channel_vector, _index, _other
from thunderx.ir import Jaxpr, Var


def channel_norm_affine(jaxpr: Jaxpr) -> tuple[dict, set]:
    """({index: (outs, template, operands)}, skipped indices), in
    `patterns_norm.layer_norm_affine`'s form. Batch norms whose running buffers are updated
    (a `batch_norm_stats` of the same input) are left to `patterns_norm.batch_norm_training`."""
    from thunderx.primitives.composite_channel_norm import (
        batch_norm_backward_p,
        batch_norm_p,
        batch_norm_stats_p,
        bn_backward_source,
        gn_backward_source,
        gn_sizes,
        group_norm_backward_p,
        group_norm_p,
    )
    from thunderx.primitives.higher_order import stop_gradient_p

    uses, producer = _index(jaxpr)
    eqns = jaxpr.eqns
    with_stats, backwards = set(), {}
    for j, e in enumerate(eqns):
        if e.prim is batch_norm_stats_p and isinstance(e.inputs[0], Var):
            p = producer.get(id(e.inputs[0]))
            detached = p is not None and eqns[p].prim is stop_gradient_p
            with_stats.add(id(eqns[p].inputs[0] if detached else e.inputs[0]))
        elif e.prim in (batch_norm_backward_p, group_norm_backward_p):
            if isinstance(e.inputs[1], Var):
                backwards.setdefault((e.prim, id(e.inputs[1]), _key(e.params)), []).append(j)
    emit: dict = {}
    skip: set = set()
    for i, e in enumerate(eqns):
        x = e.inputs[0] if e.prim in (batch_norm_p, group_norm_p) else None
        if not isinstance(x, Var) or x.aval.ndim < 2 or id(x) in with_stats:
            continue
        eps = e.params["eps"]
        instance = _instance(jaxpr, uses, producer, i) if e.prim is batch_norm_p else None
        if instance is not None:
            src, back, j_back, j_merge = instance
            found = channel_affine(jaxpr, uses, producer, back)
            if found is None:
                continue
            out, w, b, group, shared = found
            if not shared:  # else the normalized value stays for its other readers
                group |= {i, j_back} | ({j_merge} if uses.get(id(x)) == [i] else set())
            call = f"torch.instance_norm({{0}}, {_wb(w, b)}, None, None, True, 0.0, {eps!r}, False)"
            emit_at = max(group)
            emit[emit_at] = ([out], call, [src, *_vectors(w, b)])
            skip |= group - {emit_at}
            continue
        found = channel_affine(jaxpr, uses, producer, e.outputs[0])
        bwd_prim = batch_norm_backward_p if e.prim is batch_norm_p else group_norm_backward_p
        bwd = [j for j in backwards.get((bwd_prim, id(x), _key(e.params)), []) if j > i]
        if found is None and not bwd:
            continue
        # no affine: the kernel call alone, for the statistics its backward reads
        out, w, b, group, shared = found or (e.outputs[0], None, None, set(), False)
        saved = f"_cn_saved{i}"
        if e.prim is batch_norm_p:
            call = f"torch.native_batch_norm({{0}}, {_wb(w, b)}, None, None, True, 0.0, {eps!r})"
            backward = bn_backward_source("{0}", "{1}", f"{saved}[1]", f"{saved}[2]", eps)
        else:
            sizes = ", ".join(map(str, gn_sizes(x.aval.shape, e.params["groups"])))
            call = f"torch.native_group_norm({{0}}.contiguous(), {_wb(w, b)}, {sizes}, {eps!r})"
            g, x_ = "{0}.contiguous()", "{1}.contiguous()"
            backward = gn_backward_source(g, x_, f"{saved}[1]", f"{saved}[2]", sizes)
        group |= set() if shared else {i}  # else the normalized value stays for its readers
        emit_at = max(group)
        emit[emit_at] = ([out, None, None], f"({saved} := {call})", [x, *_vectors(w, b)])
        skip |= group - {emit_at}
        for j in bwd:
            if j > emit_at:
                emit[j] = ([eqns[j].outputs[0]], backward, list(eqns[j].inputs))
    return emit, skip


def _wb(w, b) -> str:
    """The weight and bias arguments: the operands {1} and {2} that exist, else None."""
    names = iter(("{1}", "{2}"))
    return ", ".join(next(names) if v is not None else "None" for v in (w, b))


def _vectors(w, b) -> list:
    return [v for v in (w, b) if v is not None]


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def _instance(jaxpr, uses, producer, i):
    """For batch norm `i` of x reshaped from (N, C, ...) to (1, N * C, ...) and back (how
    instance norm is written): (the (N, C, ...) input, the value reshaped back, the indices of
    that reshape and of the first); None for any other batch norm."""
    from thunderx.primitives.shape import reshape_p

    eqns = jaxpr.eqns
    merged, y = eqns[i].inputs[0], eqns[i].outputs[0]
    p = producer.get(id(merged))
    readers = uses.get(id(y), [])
    if p is None or eqns[p].prim is not reshape_p or len(readers) != 1:
        return None
    if readers[0] >= len(eqns) or eqns[readers[0]].prim is not reshape_p:
        return None
    src, back = eqns[p].inputs[0], eqns[readers[0]].outputs[0]
    if not isinstance(src, Var) or src.aval.ndim < 2:
        return None
    shp = tuple(src.aval.shape)
    if tuple(back.aval.shape) != shp:
        return None
    if tuple(merged.aval.shape) != (1, shp[0] * shp[1]) + shp[2:]:
        return None
    return src, back, readers[0], p


def channel_affine(jaxpr, uses, producer, y):
    """(the affine's output, weight or None, bias or None, the group's equation indices, whether
    y is read outside the group) for `y * w + b`, `y * w` or `y + b` applied to `y`, with (C,)
    vectors broadcast along dim 1 and the scaled value read only by the shift; None where y has
    no such affine."""
    from thunderx.primitives.binary import add_p, mul_p

    eqns = jaxpr.eqns
    out, found, group = y, {}, set()
    for prim in (mul_p, add_p):
        readers = uses.get(id(out), [])
        if out is not y and len(readers) != 1:
            break
        for r in readers:
            e = eqns[r] if r < len(eqns) else None
            other = _other(e, out) if e is not None and e.prim is prim else None
            vec = _channel_vector(jaxpr, other, producer, out.aval) if other is not None else None
            if vec is not None:
                found[prim] = vec[1]
                # a broadcast also read elsewhere (the weight, by the input's cotangent) stays
                group |= {r} | ({vec[0]} if uses.get(id(other), []) == [r] else set())
                out = e.outputs[0]
                break
    if not found:
        return None
    shared = len(uses.get(id(y), [])) > 1  # y is also read elsewhere (a weight's cotangent)
    return out, found.get(mul_p), found.get(add_p), group, shared
