"""A concatenation of tensors that were each reshaped to merge dims: `cat([t.reshape(..)], a)`
where every reshape merges dims [a, a + k) of same-shaped tensors t. Each reshape of a
transposed t copies it, and cat copies again; `torch.stack(ts, a)` reads the t views once into
the result, whose reshape is a view. (Attention's backward concatenates the q, k and v
gradients this way: the per-head (B, H, S, D) gradients, permuted to (S, B, H, D), merged to
(S, B, H * D).) Only reshapes read by nothing but the concatenation are replaced."""

from __future__ import annotations

import math

from thunderx.executors.patterns_norm import _index
from thunderx.ir import Jaxpr, Var


def _merges(src_shape, out_shape, axis) -> bool:
    """Whether reshaping src_shape to out_shape merges dims [axis, axis + k) of it."""
    k = len(src_shape) - len(out_shape) + 1
    return (
        k >= 2
        and tuple(src_shape[:axis]) == tuple(out_shape[:axis])
        and math.prod(src_shape[axis : axis + k]) == out_shape[axis]
        and tuple(src_shape[axis + k :]) == tuple(out_shape[axis + 1 :])
    )


def stacked_cats(jaxpr: Jaxpr) -> tuple[dict, set]:
    """({concatenate index: ([output], template, [the tensors before their reshapes])},
    {the reshapes' indices}), in `layer_norm_affine`'s form."""
    from thunderx.primitives.shape import reshape_p
    from thunderx.primitives.slicing import concatenate_p

    uses, producer = _index(jaxpr)
    eqns = jaxpr.eqns
    emit: dict = {}
    skip: set = set()
    for i, e in enumerate(eqns):
        if e.prim is not concatenate_p or len(e.inputs) < 2:
            continue
        axis, sources, reshapes = e.params["dimension"], [], []
        for v in e.inputs:
            p = producer.get(id(v)) if isinstance(v, Var) else None
            r = eqns[p] if p is not None else None
            if r is None or r.prim is not reshape_p or uses.get(id(v)) != [i]:
                break
            src = r.inputs[0]
            if not isinstance(src, Var) or not _merges(src.aval.shape, v.aval.shape, axis):
                break
            sources.append(src)
            reshapes.append(p)
        if len(sources) != len(e.inputs) or len({s.aval.shape for s in sources}) != 1:
            continue
        out = e.outputs[0]
        names = ", ".join(f"{{{n}}}" for n in range(len(sources)))
        template = f"torch.stack([{names}], {axis}).reshape({tuple(out.aval.shape)})"
        emit[i] = ([out], template, sources)
        skip |= set(reshapes)
    return emit, skip
