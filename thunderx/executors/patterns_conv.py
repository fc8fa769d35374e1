"""A convolution's bias in torch's kernel: the language layer writes `F.conv2d(x, w, b)` as
`conv(x, w) + broadcast(b)` (transforms see a linear map plus a shift); the torch executor gives
the bias back to the convolution call, which adds it without another pass over the output (as
eager torch runs it). Only when the convolution's result is read by nothing but that add and the
broadcast by nothing but it, with one dtype."""

from __future__ import annotations

from thunderx.executors.patterns_norm import _channel_vector, _index, _other
from thunderx.ir import Jaxpr


def conv_bias(jaxpr: Jaxpr) -> tuple[dict, set]:
    """({conv index: ([the add's output], template, [x, w, b])}, {the broadcast's and the add's
    indices}), in `layer_norm_affine`'s form."""
    from thunderx.primitives.binary import add_p
    from thunderx.primitives.conv import conv_p

    uses, producer = _index(jaxpr)
    eqns = jaxpr.eqns
    emit: dict = {}
    skip: set = set()
    for i, e in enumerate(eqns):
        if e.prim is not conv_p:
            continue
        y = e.outputs[0]
        readers = uses.get(id(y), [])
        if len(readers) != 1 or readers[0] >= len(eqns) or eqns[readers[0]].prim is not add_p:
            continue
        j_add = readers[0]
        vec = _channel_vector(jaxpr, _other(eqns[j_add], y), producer, y.aval)
        if vec is None or uses.get(id(eqns[vec[0]].outputs[0]), []) != [j_add]:
            continue
        if len({v.aval.dtype for v in (*e.inputs, vec[1])}) != 1:
            continue
        if producer.get(id(vec[1]), -1) > i:  # the bias must exist at the convolution
            continue
        params = ", ".join(f"{k}={v!r}" for k, v in e.params.items())
        emit[i] = (
            [eqns[j_add].outputs[0]],
            f"_impl_conv({{0}}, {{1}}, bias={{2}}, {params})",
            [*e.inputs, vec[1]],
        )
        skip |= {vec[0], j_add}
    return emit, skip
