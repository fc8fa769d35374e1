"""torch.lerp as a composite operation: torch's kernel forward, torch's forward-mode formula
lerp(ds, de, w) + (e - s) dw, and its transpose (1 - w) ct, w ct: torch's backward.

Written as s + w (e - s), lerp's transpose gave the start ct - w ct: at an infinite cotangent
(a later overflow) that is inf - inf = nan where torch's backward gives (1 - w) ct. The kernel
also rounds as torch does: its vectorized path is one fused multiply-add, base + c (e - s), with
(base, c) = (s, w) where |w| < 0.5 and (e, w - 1) elsewhere; the decomposition (for the fusing
executors) is that formula in two roundings, torch's scalar loop."""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero, instantiate, is_undefined
from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import unary as U
from thunderx.primitives._elementwise import elementwise_batch, is_scalar
from thunderx.primitives.composite import _elementwise_abstract_eval, declare_composite


def _one_minus(w):
    return 1.0 - w if is_scalar(w) else B.sub(1.0, w)


def _decomposition(s, e, w):
    d = B.sub(e, s)
    near_start = B.add(s, B.mul(w, d))
    near_end = B.sub(e, B.mul(d, _one_minus(w)))
    if is_scalar(w):
        return near_start if abs(w) < 0.5 else near_end
    return U.select(B.lt(U.abs(w), 0.5), near_start, near_end)


def _jvp(primals, tangents):
    """torch's forward-mode formula: lerp(ts, te, w) + tw (e - s), the tangents' lerp by the
    kernel (linear in them); its transpose is torch's backward, (1 - w) ct and w ct."""
    s, e, w = primals
    ts, te, tw = tangents
    y = lerp_p.bind(s, e, w)
    out = None
    if type(ts) is not Zero or type(te) is not Zero:
        out = lerp_p.bind(instantiate(ts), instantiate(te), w)
    if type(tw) is not Zero and not is_scalar(w):
        moved = B.mul(tw, B.sub(e, s))
        out = moved if out is None else B.add(out, moved)
    return y, Zero(get_aval(y)) if out is None else out


def _transpose(ct, s, e, w):
    if is_undefined(w):
        raise TypeError("lerp is linear in its start and end, not in its weight")
    if type(ct) is Zero:
        return [None, None, None]
    return [
        B.mul(ct, _one_minus(w)) if is_undefined(s) else None,
        B.mul(ct, w) if is_undefined(e) else None,
        None,
    ]


lerp_p = declare_composite(
    "lerp",
    decomposition=_decomposition,
    impl=lambda s, e, w: torch.lerp(s, e, w),
    abstract_eval=_elementwise_abstract_eval("lerp"),
    jvp=_jvp,
    # linear in (start, end) together for a fixed weight: the tangents' lerp transposes
    linear=True,
    nonlinear=(2,),
    transpose=_transpose,
    batch=lambda args, dims: elementwise_batch(lerp_p, args, dims),
    torch_codegen=lambda args, avals: f"torch.lerp({args[0]}, {args[1]}, {args[2]})",
    # no out= form: aten's lerp.Scalar_out and lerp.Tensor_out differ by the weight's type
    elementwise=True,
)


def lerp(start, end, weight):
    """torch.lerp of operands of one shape and dtype (weight may be a Python scalar)."""
    return lerp_p.bind(start, end, weight)
