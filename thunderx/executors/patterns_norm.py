"""layer_norm's affine part in torch's kernels: the language layer writes `F.layer_norm(x, s, w,
b)` as `layer_norm(x) * w + b` (so transforms see an affine map of a normalization), and its
gradient as `layer_norm_backward(g * w, x)`, `sum(g * y)` and `sum(g)`. The torch executor
puts the group back together as torch runs it: `native_layer_norm(x, s, w, b)` forward and one
`native_layer_norm_backward(g, x, s, mean, rstd, w, b, mask)` for the cotangents there are
(also with a weight or a bias alone, and for the weight's cotangent without the input's). The
numbers are then eager torch's own (its kernels, its rounding).

Only a complete group is rewritten: the normalized value `y` read by nothing but the affine and
the weight's cotangent, each product and broadcast read only inside the group, all operands of
one dtype, the gradient after the forward. Anything else keeps the primitives' lowering. A
bias's cotangent alone (no weight, the input not differentiated) is a sum like any other: nothing
marks it as the norm's. The channel norms need no such pass: the language layer gives their
affine to torch's kernel itself (primitives/composite_channel_affine.py), and an affine written
out after one stays the user's product and sum, as eager evaluation rounds it."""

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


def layer_norm_affine(jaxpr: Jaxpr) -> tuple[dict, set]:
    """({equation index: (output vars (None: not wanted), source template of the input vars as
    {0}, {1}, ..., the input vars)}, indices to skip): forward groups are emitted at their last
    equation, backward groups at their first."""
    from thunderx.primitives.composite_norm import layer_norm_backward_p, layer_norm_p

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
        # forward: y * broadcast(w) + broadcast(b), y * broadcast(w) or y + broadcast(b)
        found = norm_affine(uses, eqns, y, lambda v: _broadcast_of(jaxpr, v, producer, aval, k))
        if found is None:
            vector = lambda v: _broadcast_of(jaxpr, v, producer, aval, k)  # noqa: E731
            _backward_only(emit, skip, (eqns, uses, producer), ln, i, vector, shape)
            continue
        out, w, b, group, shared, affine = found
        if len({v.aval.dtype for v in (x, w, b) if v is not None}) != 1:
            continue
        # backward: layer_norm_backward(g * broadcast(w), x), sum(y * g) and sum(g)
        full = full_backward(
            eqns, uses, producer, ln, i, group, affine, layer_norm_backward_p, lead
        )
        if full is not None:
            shared, group = False, group | full["forward"]
        if shared:
            continue  # y is read outside the group: keep the primitives
        group |= {i}
        emit_at, stats = max(group), f"_ln_affine{i}"
        call = f"torch.native_layer_norm({{0}}, {shape}, {wb_source(w, b)}, {eps!r})"
        emit[emit_at] = ([out], f"({stats} := {call})[0]", [x, *vectors(w, b)])
        skip |= group - {emit_at}
        if full is not None:
            call = (
                f"torch.ops.aten.native_layer_norm_backward({{0}}, {{1}}, {shape}, {stats}[1], "
                f"{stats}[2], {wb_source(w, b, 2)}, {backward_mask(full)})"
            )
            emit_backward(emit, skip, full, call, [full["g"], x, *vectors(w, b)])
    return emit, skip


def _backward_only(emit, skip, index, ln, i, vector, shape) -> None:
    """A gradient whose forward value is dead (the loss linear in the norm's output): no affine
    reads y, but the backward `layer_norm_backward(g * broadcast(w), x)` and the weight's
    cotangent `sum(y * g)` are there. They become one `native_layer_norm_backward` with the
    weight (torch's bits, the bias's `sum(g)` included), after the statistics' forward call."""
    from thunderx.primitives.binary import mul_p
    from thunderx.primitives.composite_norm import layer_norm_backward_p

    eqns, uses, producer = index
    x, eps = ln.inputs[0], ln.params["eps"]
    lead = tuple(range(ln.outputs[0].aval.ndim - len(shape)))
    for j in uses.get(id(x), []):
        e = eqns[j] if j < len(eqns) else None
        if e is None or e.prim is not layer_norm_backward_p or e.params != ln.params:
            continue
        p = producer.get(id(e.inputs[0]))
        if p is None or eqns[p].prim is not mul_p:
            continue
        found = next((vector(v) for v in eqns[p].inputs if vector(v) is not None), None)
        if found is None or found[1].aval.dtype != x.aval.dtype:
            continue
        affine = (found[0], None)
        full = full_backward(
            eqns, uses, producer, ln, i, set(), affine, layer_norm_backward_p, lead
        )
        if full is None:
            continue
        stats = f"_ln_affine{i}"
        call = f"torch.native_layer_norm({{0}}, {shape}, None, None, {eps!r})"
        emit[i] = ([ln.outputs[0]], f"({stats} := {call})[0]", [x])
        skip.add(found[0])
        call = (
            f"torch.ops.aten.native_layer_norm_backward({{0}}, {{1}}, {shape}, {stats}[1], "
            # the kernel reads its bias only for the shape of the bias's cotangent: the
            # weight, of the same shape and dtype, stands in for it
            f"{stats}[2], {{2}}, {{2}}, {backward_mask(full)})"
        )
        emit_backward(emit, skip, full, call, [full["g"], x, found[1]])
        return


def wb_source(w, b, first: int = 1) -> str:
    """The weight and bias arguments of a kernel call: the operands {first} and {first + 1} that
    exist (in `vectors`' order), else None."""
    names = iter((f"{{{first}}}", f"{{{first + 1}}}"))
    return ", ".join(next(names) if v is not None else "None" for v in (w, b))


def vectors(w, b) -> list:
    return [v for v in (w, b) if v is not None]


def backward_mask(full: dict) -> list:
    """The output mask of a norm's backward kernel for the cotangents `full` has."""
    return [full["gx"] is not None, "gw" in full, "gb" in full]


def emit_backward(emit: dict, skip: set, full: dict, call: str, operands: list) -> None:
    """The backward kernel `call` of `full`'s cotangents, at the group's first equation."""
    first = min(full["eqns"])
    emit[first] = ([full["gx"], full.get("gw"), full.get("gb")], call, operands)
    skip.update(set(full["eqns"]) - {first})


def norm_backward(eqns, uses, producer, where, p_wb, others, axes, backward_p, params):
    """The gradient group of a normalization `where` = (x, y) with the weight broadcast
    at `p_wb` (None: no weight), or None: `backward_p(g * broadcast(w), x)` (or
    `backward_p(g, x)`) with the norm's `params` (the input's cotangent), y's `others` readers
    all `y * g` summed over `axes` (the weight's), and the first sum of g over `axes` (the
    bias's): {"g", "gx", "gw", "gb", "eqns", "scaled"}, without the cotangents that are not
    there."""
    from thunderx.primitives.binary import mul_p

    x, y = where
    # (g, the equations before the backward, the backward's index)
    candidates = []
    if p_wb is None:  # the backward's own operand is g
        for j in uses.get(id(x), []):
            e = eqns[j] if j < len(eqns) else None
            if e is None or e.prim is not backward_p or not isinstance(e.inputs[0], Var):
                continue
            candidates.append((e.inputs[0], [], j))
    else:
        wb = eqns[p_wb].outputs[0]
        for j in uses.get(id(wb), []):
            e = eqns[j] if j < len(eqns) else None
            if e is None or e.prim is not mul_p or _other(e, wb) is None:
                continue
            v, chain = e.outputs[0], [j]
            readers = uses.get(id(v), [])
            if len(readers) == 1 and readers[0] < len(eqns):
                candidates.append((_other(e, wb), chain, readers[0]))
    for g, chain, j in candidates:
        group = _gx(eqns, uses, where, g, chain, j, backward_p, params)
        if group is not None:
            group["scaled"] = chain[0] if p_wb is not None else None
            return _cotangents(eqns, uses, y, g, others, axes, group)
    if p_wb is not None and others:  # the input's cotangent is not there (or not this norm's)
        e = eqns[others[0]] if others[0] < len(eqns) else None
        g = _other(e, y) if e is not None and e.prim is mul_p else None
        if isinstance(g, Var) and g.aval.dtype == x.aval.dtype:
            group = {"g": g, "gx": None, "eqns": [], "scaled": None}
            return _cotangents(eqns, uses, y, g, others, axes, group)
    return None


def _gx(eqns, uses, where, g, chain, j, backward_p, params):
    """{"g", "gx", "eqns"} for the input's cotangent made by the backward at j, or None."""
    x, _ = where
    lnb = eqns[j]
    operand = eqns[chain[-1]].outputs[0] if chain else g
    if (
        lnb.prim is not backward_p
        or lnb.inputs[0] is not operand
        or lnb.inputs[1] is not x
        or lnb.params != params
    ):
        return None
    chain = [*chain, j]
    gx = lnb.outputs[0]
    if not isinstance(g, Var) or g.aval.dtype != x.aval.dtype:
        return None
    return {"g": g, "gx": gx, "eqns": chain}


def _cotangents(eqns, uses, y, g, others, axes, group):
    """`group` with the weight's cotangent (y's `others` readers: `y * g` summed over axes) and
    the bias's (the first sum of g over axes), or None where another reader of y is not the
    weight's cotangent."""
    from thunderx.primitives.binary import mul_p
    from thunderx.primitives.reductions import reduce_sum_p

    for r in others:
        e2 = eqns[r] if r < len(eqns) else None
        if e2 is None or e2.prim is not mul_p or _other(e2, y) is not g:
            return None
        sums = uses.get(id(e2.outputs[0]), [])
        if len(sums) != 1 or sums[0] >= len(eqns) or "gw" in group:
            return None
        s = eqns[sums[0]]
        if s.prim is not reduce_sum_p or s.params.get("axes") != axes:
            return None
        group["gw"] = s.outputs[0]
        group["eqns"] += [r, sums[0]]
    for r in uses.get(id(g), []):
        e3 = eqns[r] if r < len(eqns) else None
        if e3 is not None and e3.prim is reduce_sum_p and e3.params.get("axes") == axes:
            group["gb"] = e3.outputs[0]
            group["eqns"].append(r)
            break
    return group


def full_backward(eqns, uses, producer, e, i, group, affine, backward_p, axes):
    """The gradient group of the norm `e` at i (cotangents summed over `axes`) with the affine
    `affine` = (the weight
    broadcast's index or None, the index of the affine's equation reading y):
    `patterns_norm.norm_backward`'s dict, with the indices of the forward the kernel calls then
    replace ("forward"), or None. Only where every other reader of the normalized value is the
    weight's cotangent, the broadcast weight is read by the affine and the scaled cotangent
    alone, and the whole gradient comes after the forward's group (where the saved statistics
    exist)."""
    if affine is None:
        return None
    p_w, j_first = affine
    x, y = e.inputs[0], e.outputs[0]
    others = [r for r in uses.get(id(y), []) if r != j_first]
    where = (x, y)
    full = norm_backward(eqns, uses, producer, where, p_w, others, axes, backward_p, e.params)
    if full is None or min(full["eqns"]) <= max(group | {i}):
        return None
    if p_w is not None and not set(uses.get(id(eqns[p_w].outputs[0]), [])) <= {
        j_first,
        full["scaled"],
    }:
        return None
    full["forward"] = set() if p_w is None else {p_w}
    return full


def norm_affine(uses, eqns, y, vector):
    """(the affine's output, weight or None, bias or None, the group's equation indices, whether
    y is read outside the group, (the weight broadcast's index or None, the index of the
    affine's equation reading y)) for `y * w + b`, `y * w` or `y + b` applied to `y`, with the
    scaled value read only by the shift and `vector(v)` the (index, source) of the broadcast
    parameter vector in v (or None); None where y has no such affine."""
    from thunderx.primitives.binary import add_p, mul_p

    out, found, group, p_w, first = y, {}, set(), None, None
    for prim in (mul_p, add_p):
        readers = uses.get(id(out), [])
        if out is not y and len(readers) != 1:
            break
        for r in readers:
            e = eqns[r] if r < len(eqns) else None
            other = _other(e, out) if e is not None and e.prim is prim else None
            vec = vector(other) if other is not None else None
            if vec is not None:
                found[prim] = vec[1]
                p_w = vec[0] if prim is mul_p else p_w
                first = r if first is None else first
                # a broadcast also read elsewhere (the weight, by the input's cotangent) stays
                group |= {r} | ({vec[0]} if uses.get(id(other), []) == [r] else set())
                out = e.outputs[0]
                break
    if not found:
        return None
    shared = len(uses.get(id(y), [])) > 1  # y is also read elsewhere (a weight's cotangent)
    return out, found.get(mul_p), found.get(add_p), group, shared, (p_w, first)


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
    from thunderx.primitives import composite_channel_affine as CA
    from thunderx.primitives.composite_channel_norm import (
        batch_norm_backward_p,
        batch_norm_p,
        batch_norm_stats_p,
        bn_backward_source,
    )
    from thunderx.primitives.higher_order import stop_gradient_p

    uses, producer = _index(jaxpr)
    eqns = jaxpr.eqns
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
    cotangents: dict = {}  # of a batch norm with its affine (composite_channel_affine.py)
    for j, e in enumerate(eqns):
        if e.prim is batch_norm_backward_p and isinstance(e.inputs[1], Var):
            backwards.setdefault((id(e.inputs[1]), e.params["eps"]), []).append(j)
        elif e.prim is CA.cotangent_p and e.params["groups"] == 0:
            key = (id(e.inputs[0]), id(e.inputs[1]), e.params["eps"])
            cotangents.setdefault(key, []).append(j)
    emit: dict = {}
    skip: set = set()
    for i, bn in enumerate(eqns):
        x = bn.inputs[0] if bn.prim in (batch_norm_p, CA.channel_affine_p) else None
        if x is None or id(x) not in stats or x.aval.ndim < 2:
            continue
        if bn.prim is CA.channel_affine_p:
            if bn.params["groups"] == 0:
                _affine_training(emit, skip, eqns, producer, i, stats, cotangents)
            continue
        j_stats, detached = stats.pop(id(x))
        y, eps = bn.outputs[0], bn.params["eps"]
        mean, var = eqns[j_stats].outputs
        outs, operands, group = [y, mean, var], [x], {i, j_stats} | detached
        # the affine (y read by nothing else, or by the weight's cotangent of its backward),
        # its vectors defined before the call, which is emitted at the group's first equation
        w = b = full = None
        found = norm_affine(uses, eqns, y, lambda v: _channel_vector(jaxpr, v, producer, y.aval))
        if found is not None:
            out, w, b, affine_group, shared, affine = found
            axes = (0, *range(2, y.aval.ndim))
            args = (eqns, uses, producer, bn, i, group | affine_group, affine)
            full = full_backward(*args, batch_norm_backward_p, axes)
            defined = all(producer.get(id(v), -1) < min(group) for v in vectors(w, b))
            if defined and (full is not None or not shared):
                outs[0] = out
                operands += vectors(w, b)
                group |= affine_group | (full["forward"] if full else set())
            else:
                w = b = full = None
        first, saved = min(group), f"_bn_train{i}"
        call = f"({saved} := _batch_norm_train({{0}}, {wb_source(w, b)}, {eps!r}))"
        emit[first] = (outs + [None, None], call, operands)
        skip |= group - {first}
        if full is not None:
            weight = "None" if w is None else "{2}"  # the backward's operands: g, x, w
            call = bn_backward_source(
                "{0}", "{1}", f"{saved}[3]", f"{saved}[4]", eps, weight, backward_mask(full)
            )
            emit_backward(emit, skip, full, call, [full["g"], x, *vectors(w, None)])
        # the backward of the normalization reads the saved mean and invstd of this call
        for j in backwards.get((id(x), eps), []):
            if j > first and (full is None or j not in full["eqns"]):
                template = bn_backward_source("{0}", "{1}", f"{saved}[3]", f"{saved}[4]", eps)
                emit[j] = ([eqns[j].outputs[0]], template, list(eqns[j].inputs))
    return emit, skip


def _affine_training(emit, skip, eqns, producer, i, stats, cotangents) -> None:
    """`batch_norm_training` of a batch norm with its weight (and bias) inside the kernel
    (composite_channel_affine.py): the forward, the running statistics' batch statistics and
    the backward calls on the same x and weight reading the saved mean and invstd."""
    from thunderx.primitives import composite_channel_affine as CA

    bn = eqns[i]
    x, vecs, eps = bn.inputs[0], bn.inputs[1:], bn.params["eps"]
    j_stats, detached = stats[id(x)]
    group = {i, j_stats} | detached
    if any(producer.get(id(v), -1) >= min(group) for v in vecs):
        return  # a weight computed between the statistics and the norm: separate calls
    del stats[id(x)]
    first, saved = min(group), f"_bn_train{i}"
    bias = "{2}" if bn.params["has_bias"] else "None"
    call = f"({saved} := _batch_norm_train({{0}}, {{1}}, {bias}, {eps!r}))"
    outs = [bn.outputs[0], *eqns[j_stats].outputs, None, None]
    emit[first] = (outs, call, [x, *vecs])
    skip |= group - {first}
    for j in cotangents.get((id(x), id(vecs[0]), eps), []):
        if j > first:
            e = eqns[j]
            mean, invstd = f"{saved}[3]", f"{saved}[4]"
            mask = e.params["mask"]
            template = CA.backward_source(
                "{2}", "{0}", "{1}", x.aval.shape, mean, invstd, 0, eps, mask
            )
            emit[j] = (list(e.outputs), template, list(e.inputs))


def batch_norm_train_call(x, w, b, eps):
    """(normalized and affine x, batch mean, unbiased batch variance, and the saved mean and
    invstd a backward reads) from one kernel call: with momentum 1 the kernel writes the batch
    statistics into the fresh running buffers."""
    import torch

    mean, var = x.new_zeros(x.shape[1]), x.new_ones(x.shape[1])
    out, save_mean, save_invstd = torch.native_batch_norm(x, w, b, mean, var, True, 1.0, eps)
    return out, mean, var, save_mean, save_invstd
