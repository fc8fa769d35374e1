"""Channel normalizations with their affine in torch's kernels. With a weight, or a bias alone
(given a weight of ones), the language layer already puts the affine inside the kernel
(primitives/composite_channel_affine.py, lang/norms.py); an affine written out,
`F.batch_norm(x, None, None, training=True) * w + b`, is the normalized value times a broadcast
weight plus a broadcast bias in the program, which this pass gives back to the kernel (so under
jit such code rounds as the kernel does, not as its eager product and sum). Torch's
kernels fold the affine into the normalization (`x * (w * invstd) + (b - mean * w * invstd)`),
which rounds differently: at a constant channel of 30s with weight 30 and bias -30, eager torch
gives -30.0000000000073 and the
product-then-sum -29.99999999997, and a `trunc` after it turns that into -30 against -29. The
torch executor puts each group back together as torch runs it, so that the numbers are eager
torch's own:

- batch norm without running buffers: `torch.native_batch_norm(x, w, b, None, None, True, 0.0,
  eps)`, its saved mean and invstd read by `native_batch_norm_backward(g, x, w, ...)` for the
  input's, weight's and bias's cotangents (batch norm with running buffers:
  patterns_norm.batch_norm_training);
- instance norm: `torch.instance_norm(x, w, b, None, None, True, 0.0, eps, False)`, the call
  `F.instance_norm` makes (batch norm of x seen as one sample of N * C channels); under grad,
  what that call runs, `native_batch_norm` of the (1, N * C, ...) view with w and b repeated N
  times, so that its statistics serve the backward (`instance_norm_backward_call`, torch
  autograd's order: the weight's cotangent summed over N last);
- group norm: `torch.native_group_norm(x, w, b, N, C, HxW, G, eps)` with its saved statistics for
  `native_group_norm_backward(g, x, mean, rstd, w, ...)` (not without a weight: torch's kernel
  then fails, "tensor does not have a device", and the bias's cotangent stays a sum).

The gradient groups are `patterns_norm.full_backward`'s: the weight's cotangent `sum(y * g)`
and the bias's `sum(g)` join the backward call, so the gradients are torch.autograd's bit for
bit, and the normalized value is no longer computed a second time for the weight's cotangent.
Only a complete group is rewritten: the scaled value read only by the shift, the vectors of x's
dtype; a broadcast of a vector also read elsewhere stays for those readers. A normalized value
read elsewhere is still computed for those readers. The forward call is emitted at the group's
last equation, where every operand exists."""

from __future__ import annotations

from thunderx.executors.patterns_norm import (
    _channel_vector,
    _index,
    backward_mask,
    emit_backward,
    full_backward,
    norm_affine,
    vectors,
    wb_source,
)
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
        forward_source,
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
            out, w, b, group, shared, affine = found
            where = (src, back, x)  # instance norm's input, normalized value, merged input
            axes = (0, *range(2, src.aval.ndim))
            full = full_backward(
                eqns, uses, producer, e, i, group, affine, batch_norm_backward_p, axes, where
            )
            if full is not None:  # y's other readers are the weight's cotangent
                shared = False
                group |= full["forward"]
            if not shared:  # else the normalized value stays for its other readers
                readers = set(uses.get(id(x), [])) - set(full["eqns"] if full else ())
                group |= {i, j_back} | ({j_merge} if readers == {i} else set())
            emit_at = max(group)
            skip |= group - {emit_at}
            if full is None:
                wb = wb_source(w, b)
                call = f"torch.instance_norm({{0}}, {wb}, None, None, True, 0.0, {eps!r}, False)"
                emit[emit_at] = ([out], call, [src, *vectors(w, b)])
                continue
            # torch.instance_norm's own computation, its statistics kept for the backward
            saved, n = f"_in_saved{i}", src.aval.shape[0]
            wb = (
                wb_source(w, b)
                .replace("{1}", f"{{1}}.repeat({n})")
                .replace("{2}", f"{{2}}.repeat({n})")
            )
            call = (
                f"({saved} := torch.native_batch_norm({{0}}.reshape({tuple(x.aval.shape)}), {wb}, "
                f"None, None, True, 0.0, {eps!r}))[0].reshape({tuple(src.aval.shape)})"
            )
            emit[emit_at] = ([out], call, [src, *vectors(w, b)])
            weight = "None" if w is None else "{2}"  # the backward's operands: g, x, w
            mask = backward_mask(full)
            call = (
                f"_instance_norm_backward({{0}}, {{1}}, {weight}, {saved}[1], {saved}[2], {eps!r}, "
                f"{mask})"
            )
            emit_backward(emit, skip, full, call, [full["g"], src, *vectors(w, None)])
            continue
        found = channel_affine(jaxpr, uses, producer, e.outputs[0])
        bwd_prim = batch_norm_backward_p if e.prim is batch_norm_p else group_norm_backward_p
        bwd = [j for j in backwards.get((bwd_prim, id(x), _key(e.params)), []) if j > i]
        if found is None and not bwd:
            continue
        # no affine: the kernel call alone, for the statistics its backward reads
        out, w, b, group, shared, affine = found or (e.outputs[0], None, None, set(), False, None)
        fw, fb = w, b  # the forward call's weight and bias
        if found is None:  # a gradient whose forward value is dead: the weight of its backward
            affine, w = _backward_weight(jaxpr, producer, x, [eqns[j] for j in bwd])
        # torch's group norm backward fails without a weight ("tensor does not have a device")
        no_kernel = e.prim is group_norm_p and (affine is None or affine[0] is None)
        axes = (0, *range(2, x.aval.ndim))
        args = (eqns, uses, producer, e, i, group, affine, bwd_prim, axes)
        full = None if no_kernel else full_backward(*args)
        if full is not None:  # y's other readers are the weight's cotangent: in the backward
            shared = False
            group |= full["forward"]
        saved = f"_cn_saved{i}"
        groups = e.params.get("groups", 0)
        call = forward_source("{0}", *wb_source(fw, fb).split(", "), x.aval.shape, groups, eps)
        if e.prim is batch_norm_p:
            backward = bn_backward_source("{0}", "{1}", f"{saved}[1]", f"{saved}[2]", eps)
        else:
            sizes = ", ".join(map(str, gn_sizes(x.aval.shape, groups)))
            backward = gn_backward_source("{0}", "{1}", f"{saved}[1]", f"{saved}[2]", sizes)
        group |= set() if shared else {i}  # else the normalized value stays for its readers
        emit_at = max(group)
        emit[emit_at] = ([out, None, None], f"({saved} := {call})", [x, *vectors(fw, fb)])
        skip |= group - {emit_at}
        if full is not None:
            mask = backward_mask(full)
            weight = "None" if w is None else "{2}"  # the backward's operands: g, x, w
            stats = (f"{saved}[1]", f"{saved}[2]")
            if e.prim is batch_norm_p:
                call = bn_backward_source("{0}", "{1}", *stats, eps, weight, mask)
            else:
                call = gn_backward_source("{0}", "{1}", *stats, sizes, weight, mask)
            emit_backward(emit, skip, full, call, [full["g"], x, *vectors(w, None)])
        for j in bwd:
            if j > emit_at and (full is None or j not in full["eqns"]):
                emit[j] = ([eqns[j].outputs[0]], backward, list(eqns[j].inputs))
    return emit, skip


def _backward_weight(jaxpr, producer, x, backwards) -> tuple:
    """((the broadcast's index, None), the weight) for a backward of x's norm whose cotangent is
    `g * broadcast(w)` of a (C,) vector w, else (None, None)."""
    from thunderx.primitives.binary import mul_p

    for e in backwards:
        p = producer.get(id(e.inputs[0]))
        if p is None or jaxpr.eqns[p].prim is not mul_p:
            continue
        for v in jaxpr.eqns[p].inputs:
            vec = _channel_vector(jaxpr, v, producer, x.aval)
            if vec is not None:
                return (vec[0], None), vec[1]
    return None, None


def instance_norm_backward_call(g, x, w, mean, invstd, eps, mask):
    """torch.instance_norm's backward as torch's autograd runs it: batch norm's backward of the
    (1, N * C, ...) view with the weight repeated N times, the repeat's backward a sum over N."""
    import torch

    n, c = x.shape[:2]
    merged = (1, n * c, *x.shape[2:])
    w = None if w is None else w.repeat(n)
    gx, gw, gb = torch.ops.aten.native_batch_norm_backward(
        g.reshape(merged), x.reshape(merged), w, None, None, mean, invstd, True, eps, mask
    )
    gw = None if gw is None else gw.reshape(n, c).sum(0)
    gx = None if gx is None else gx.reshape(x.shape)
    return gx, gw, None if gb is None else gb.reshape(n, c).sum(0)


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
    """`patterns_norm.norm_affine` with (C,) vectors broadcast along dim 1."""
    return norm_affine(uses, jaxpr.eqns, y, lambda v: _channel_vector(jaxpr, v, producer, y.aval))
