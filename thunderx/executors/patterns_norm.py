"""layer_norm's affine part in torch's kernels: the language layer writes `F.layer_norm(x, s, w,
b)` as `layer_norm(x) * w + b` (so transforms see an affine map of a normalization), and its
gradient as `layer_norm_backward(g * w, x)`, `sum(g * y)` and `sum(g)`. The torch executor
puts the group back together as torch runs it: `native_layer_norm(x, s, w, b)` forward and one
`native_layer_norm_backward(g, x, s, mean, rstd, w, b, mask)` for the three cotangents. The
numbers are then eager torch's own (its kernels, its rounding).

Only a complete group is rewritten: the normalized value `y` read by nothing but the scale and
the weight's cotangent, each product and broadcast read only inside the group, all operands of
one dtype. Anything else keeps the primitives' lowering."""

from __future__ import annotations

from thunderx.ir import Jaxpr, Var


def _index(jaxpr):
    uses: dict[int, list[int]] = {}
    producer: dict[int, int] = {}
    for i, e in enumerate(jaxpr.eqns):
        for x in e.inputs:
            if isinstance(x, Var):
                uses.setdefault(id(x), []).append(i)
        for v in e.outputs:
            producer[id(v)] = i
    for x in jaxpr.outvars:
        if isinstance(x, Var):
            uses.setdefault(id(x), []).append(len(jaxpr.eqns))
    return uses, producer


def _broadcast_of(jaxpr, v, producer, out_aval, k):
    """The vector broadcast into `v` along the trailing k dims of out_aval, or None."""
    from thunderx.primitives.shape import broadcast_in_dim_p

    p = producer.get(id(v)) if isinstance(v, Var) else None
    if p is None or jaxpr.eqns[p].prim is not broadcast_in_dim_p:
        return None
    e = jaxpr.eqns[p]
    src = e.inputs[0]
    n = out_aval.ndim
    if not isinstance(src, Var) or src.aval.dtype != out_aval.dtype:
        return None
    if e.params["broadcast_dimensions"] != tuple(range(n - k, n)):
        return None
    if src.aval.shape != tuple(out_aval.shape[n - k :]):
        return None
    return p, src


def _other(e, v):
    """The operand of binary `e` that is not `v` (None when v is not exactly one operand)."""
    a, b = e.inputs
    if a is v and b is not v:
        return b
    if b is v and a is not v:
        return a
    return None


def _affine_after(jaxpr, uses, j_mul, y, vector):
    """`y * v(w)` at j_mul read only by `+ v(b)`: (j_add, (p_w, w), (p_b, b)), or None. `vector(v)`
    is the (equation index, source) of the parameter vector broadcast into v, or None."""
    from thunderx.primitives.binary import add_p, mul_p

    eqns = jaxpr.eqns
    e = eqns[j_mul]
    scale = _other(e, y) if e.prim is mul_p else None
    wb = vector(scale) if scale is not None else None
    adds = uses.get(id(e.outputs[0]), [])
    if wb is None or len(adds) != 1 or adds[0] >= len(eqns) or eqns[adds[0]].prim is not add_p:
        return None
    bb = vector(_other(eqns[adds[0]], e.outputs[0]))
    return None if bb is None else (adds[0], wb, bb)


def layer_norm_affine(jaxpr: Jaxpr) -> tuple[dict, set]:
    """({equation index: (output vars (None: not wanted), source template of the input vars as
    {0}, {1}, ..., the input vars)}, indices to skip): forward groups are emitted at their
    layer_norm, backward groups at their first equation."""
    from thunderx.primitives.binary import mul_p
    from thunderx.primitives.composite_norm import layer_norm_p

    uses, producer = _index(jaxpr)
    emit: dict = {}
    skip: set = set()
    eqns = jaxpr.eqns
    for i, ln in enumerate(eqns):
        if ln.prim is not layer_norm_p or not isinstance(ln.inputs[0], Var):
            continue
        x, y = ln.inputs[0], ln.outputs[0]
        k, eps = ln.params["normalized_ndim"], ln.params["eps"]
        aval = y.aval
        lead = tuple(range(aval.ndim - k))
        shape = tuple(aval.shape[aval.ndim - k :])
        # forward: m = y * broadcast(w); o = m + broadcast(b)
        y_uses = uses.get(id(y), [])
        n_eqns = len(eqns)  # a use at n_eqns is an output of the program
        scale = [
            j
            for j in y_uses
            if j < n_eqns and eqns[j].prim is mul_p and _other(eqns[j], y) is not None
        ]
        if not scale:
            continue
        j_mul = scale[0]
        found = _affine_after(
            jaxpr, uses, j_mul, y, lambda v: _broadcast_of(jaxpr, v, producer, aval, k)
        )
        if found is None:
            continue
        j_add, wb, bb = found
        bias = eqns[bb[0]].outputs[0]
        # one tensor as weight and bias: one broadcast feeds the scale and the shift
        shared = bias is _other(eqns[j_mul], y)
        if len(uses.get(id(bias), [])) != 1 and not shared:
            continue
        (p_w, w), (p_b, b) = wb, bb
        o = eqns[j_add].outputs[0]
        # backward: gx = layer_norm_backward(g * broadcast(w), x); gw = sum(y * g); gb = sum(g)
        others = [j for j in y_uses if j != j_mul]
        bwd = _backward(eqns, uses, x, y, wb[0], others, lead, ln.params)
        if bwd is None and others:
            continue  # y is read outside the group: keep the primitives
        wb_var = eqns[p_w].outputs[0]
        wb_readers = set(uses.get(id(wb_var), []))
        group_readers = (
            {j_mul} | ({bwd["scaled"]} if bwd else set()) | ({j_add} if shared else set())
        )
        if not wb_readers <= group_readers:
            continue
        if len({v.aval.dtype for v in (x, w, b)}) != 1:
            continue
        stats = f"_ln_affine{i}"
        emit[i] = (
            [o],
            f"({stats} := torch.native_layer_norm({{0}}, {shape}, {{1}}, {{2}}, {eps!r}))[0]",
            [x, w, b],
        )
        skip |= {p_w, j_mul, p_b, j_add}
        if bwd is not None and min(bwd["eqns"]) > i:
            mask = [True, "gw" in bwd, "gb" in bwd]
            call = (
                f"torch.ops.aten.native_layer_norm_backward({{0}}, {{1}}, {shape}, {stats}[1], "
                f"{stats}[2], {{2}}, {{3}}, {mask})"
            )
            first = min(bwd["eqns"])
            emit[first] = ([bwd["gx"], bwd.get("gw"), bwd.get("gb")], call, [bwd["g"], x, w, b])
            skip |= set(bwd["eqns"]) - {first}
        elif bwd is not None:
            del emit[i]  # the gradient comes first: keep the primitives
            skip -= {p_w, j_mul, p_b, j_add}
    return emit, skip


def _backward(eqns, uses, x, y, p_wb, others, lead, params):
    """The gradient group reading y (see the module docstring), or None."""
    from thunderx.primitives.binary import mul_p
    from thunderx.primitives.composite_norm import layer_norm_backward_p
    from thunderx.primitives.reductions import reduce_sum_p

    wb = eqns[p_wb].outputs[0]
    # g * broadcast(w) feeding layer_norm_backward(., x)
    for j in uses.get(id(wb), []):
        e = eqns[j] if j < len(eqns) else None
        if e is None or e.prim is not mul_p or _other(e, wb) is None:
            continue
        g, gw_b = _other(e, wb), e.outputs[0]
        readers = uses.get(id(gw_b), [])
        if len(readers) != 1 or readers[0] >= len(eqns):
            continue
        lnb = eqns[readers[0]]
        if (
            lnb.prim is not layer_norm_backward_p
            or lnb.inputs[0] is not gw_b
            or lnb.inputs[1] is not x
            or lnb.params != params
        ):
            continue
        group = {"g": g, "gx": lnb.outputs[0], "eqns": [j, readers[0]], "scaled": j}
        # y's other reader: y * g, summed over the leading dims (the weight's cotangent)
        for r in others:
            e2 = eqns[r] if r < len(eqns) else None
            if e2 is None or e2.prim is not mul_p or _other(e2, y) is not g:
                return None
            prod = e2.outputs[0]
            sums = uses.get(id(prod), [])
            if len(sums) != 1 or sums[0] >= len(eqns) or "gw" in group:
                return None
            s = eqns[sums[0]]
            if s.prim is not reduce_sum_p or s.params.get("axes") != lead:
                return None
            group["gw"] = s.outputs[0]
            group["eqns"] += [r, sums[0]]
        # sum(g) over the leading dims: the bias's cotangent (the first such sum)
        for r in uses.get(id(g), []):
            e3 = eqns[r] if r < len(eqns) else None
            if e3 is not None and e3.prim is reduce_sum_p and e3.params.get("axes") == lead:
                group["gb"] = e3.outputs[0]
                group["eqns"].append(r)
                break
        if g.aval.dtype != x.aval.dtype or not isinstance(g, Var):
            return None
        return group
    return None


def _channel_vector(jaxpr, v, producer, out_aval):
    """(equation index, source) of a (C,) vector broadcast along dim 1 of out_aval into `v`, or
    None."""
    from thunderx.primitives.shape import broadcast_in_dim_p

    p = producer.get(id(v)) if isinstance(v, Var) else None
    if p is None or jaxpr.eqns[p].prim is not broadcast_in_dim_p:
        return None
    e = jaxpr.eqns[p]
    src = e.inputs[0]
    ok = (
        isinstance(src, Var)
        and src.aval.dtype == out_aval.dtype
        and e.params["broadcast_dimensions"] == (1,)
        and tuple(src.aval.shape) == (out_aval.shape[1],)
    )
    return (p, src) if ok else None


def batch_norm_training(jaxpr: Jaxpr) -> tuple[dict, set]:
    """batch_norm's training forward in one torch kernel: the language layer writes
    `F.batch_norm(x, ..., training=True)` as the normalized value, the batch statistics for the
    running buffers (`batch_norm_stats`, a second pass over x) and the affine `y * w + b` (two
    more). `torch.native_batch_norm(x, w, b, mean, var, True, 1.0, eps)` computes all of them
    in one pass, with eager torch's rounding; returns the same ({index: (outs, template,
    operands)}, skipped indices) as `layer_norm_affine`."""
    from thunderx.primitives.composite_channel_norm import (
        batch_norm_backward_p,
        batch_norm_p,
        batch_norm_stats_p,
        bn_backward_source,
    )
    from thunderx.primitives.higher_order import stop_gradient_p

    uses, producer = _index(jaxpr)
    eqns = jaxpr.eqns
    n_eqns = len(eqns)
    # the statistics of x, or of stop_gradient(x) (read by nothing else): x -> (index, skipped)
    stats = {}
    for i, e in enumerate(eqns):
        v = e.inputs[0] if e.prim is batch_norm_stats_p else None
        if not isinstance(v, Var):
            continue
        p = producer.get(id(v))
        if p is not None and eqns[p].prim is stop_gradient_p and uses.get(id(v)) == [i]:
            stats[id(eqns[p].inputs[0])] = (i, {p})
        else:
            stats[id(v)] = (i, set())
    backwards: dict = {}
    for j, e in enumerate(eqns):
        if e.prim is batch_norm_backward_p and isinstance(e.inputs[1], Var):
            backwards.setdefault((id(e.inputs[1]), e.params["eps"]), []).append(j)
    emit: dict = {}
    skip: set = set()
    for i, bn in enumerate(eqns):
        x = bn.inputs[0] if bn.prim is batch_norm_p else None
        if x is None or id(x) not in stats or x.aval.ndim < 2:
            continue
        j_stats, detached = stats.pop(id(x))
        y, eps = bn.outputs[0], bn.params["eps"]
        mean, var = eqns[j_stats].outputs
        outs, operands, group = [y, mean, var], [x], {i, j_stats} | detached
        # the affine, when y is read by nothing but y * broadcast(w), read only by + broadcast(b)
        readers = uses.get(id(y), [])
        found = None
        if len(readers) == 1 and readers[0] < n_eqns:
            j_mul = readers[0]
            found = _affine_after(
                jaxpr, uses, j_mul, y, lambda v: _channel_vector(jaxpr, v, producer, y.aval)
            )
        if found is not None:
            j_add, wb, bb = found
            only = all(
                uses.get(id(eqns[p].outputs[0]), []) == [r]
                for p, r in ((wb[0], j_mul), (bb[0], j_add))
            )
            if only:
                outs[0] = eqns[j_add].outputs[0]
                operands += [wb[1], bb[1]]
                group |= {wb[0], j_mul, bb[0], j_add}
        w_b = "{1}, {2}" if len(operands) == 3 else "None, None"
        first, saved = min(group), f"_bn_train{i}"
        call = f"({saved} := _batch_norm_train({{0}}, {w_b}, {eps!r}))"
        emit[first] = (outs + [None, None], call, operands)
        skip |= group - {first}
        # the backward of the normalization reads the saved mean and invstd of this call
        for j in backwards.get((id(x), eps), []):
            if j > first:
                template = bn_backward_source("{0}", "{1}", f"{saved}[3]", f"{saved}[4]", eps)
                emit[j] = ([eqns[j].outputs[0]], template, list(eqns[j].inputs))
    return emit, skip


def batch_norm_train_call(x, w, b, eps):
    """(normalized and affine x, batch mean, unbiased batch variance, and the saved mean and
    invstd a backward reads) from one kernel call: with momentum 1 the kernel writes the batch
    statistics into the fresh running buffers."""
    import torch

    mean, var = x.new_zeros(x.shape[1]), x.new_ones(x.shape[1])
    out, save_mean, save_invstd = torch.native_batch_norm(x, w, b, mean, var, True, 1.0, eps)
    return out, mean, var, save_mean, save_invstd
