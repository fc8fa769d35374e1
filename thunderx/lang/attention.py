"""F.scaled_dot_product_attention: torch's CPU flash kernel as a composite
(primitives/composite_attention.py) where torch itself calls it, torch's math path written
with primitives elsewhere (ranks other than 4, dropout, half precision, differing head sizes,
broadcast batch dims)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.lang._base import aval, dtype, in_opmath, ndim, promote, register, shape, where
from thunderx.lang.linalg import matmul
from thunderx.lang.nn import softmax
from thunderx.primitives import binary as B
from thunderx.primitives import composite_attention as KA
from thunderx.primitives import creation as C
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U


@register(F.scaled_dot_product_attention)
def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    if enable_gqa and shape(query)[-3:-2] != shape(key)[-3:-2]:
        from thunderx.errors import unsupported

        raise unsupported("scaled_dot_product_attention(enable_gqa=True) with grouped heads")
    e = shape(query)[-1]
    if scale is None:
        # with head dim 0 the scores are empty sums, 0: any scale gives uniform attention
        scale = 1.0 / math.sqrt(e) if e else 1.0
    if not dropout_p and _flash_applies(query, key, value, attn_mask):
        return _flash(query, key, value, attn_mask, bool(is_causal), float(scale))
    return math_attention(query, key, value, attn_mask, dropout_p, is_causal, scale)


@in_opmath(cpu_only=True)
def math_attention(q, k, v, attn_mask, dropout_p, is_causal, scale):
    """torch's math path (`_scaled_dot_product_attention_math`) in primitives."""
    lq, lk = shape(q)[-2], shape(k)[-2]
    scores = B.mul(matmul(q, S.moveaxis(k, ndim(k) - 1, ndim(k) - 2)), scale)
    if is_causal:
        r = C.iota(torch.int64, (lq, lk), 0)
        c = C.iota(torch.int64, (lq, lk), 1)
        scores = where(S.broadcast_to(B.le(c, r), shape(scores)), scores, -math.inf)
    if attn_mask is not None:
        if dtype(attn_mask) is torch.bool:
            scores = where(S.broadcast_to(attn_mask, shape(scores)), scores, -math.inf)
        else:
            (scores, m), _ = promote(scores, attn_mask)
            scores = B.add(
                scores, S.broadcast_to(m, shape(scores)) if shape(m) != shape(scores) else m
            )
    if lk:
        # a row whose scores are all -inf (masked out, or a query of -inf): 0, as torch's math
        # path gives with or without a mask (its _safe_softmax)
        weights = KA.safe_softmax(scores)
    else:
        weights = softmax(scores, -1)
    if dropout_p:
        weights = F.dropout(weights, p=dropout_p)  # under the randomness rules of lang/random.py
    return matmul(weights, v)


def _flash_applies(q, k, v, mask) -> bool:
    """torch's own choice of its CPU flash kernel (`use_flash_attention_cpp`), so that each
    call gives torch's answer: 4-D q, k, v of one floating dtype it computes in (float32/64 here)
    with equal batch, heads and head sizes, non-empty sequences, and a mask of q's dtype or bool,
    2-D or 4-D, that broadcasts to the scores. Other calls take torch's math path. The two paths
    differ beyond rounding: a query row whose scores are all NaN gives 0 from the flash kernel
    and NaN from the math path, and eager torch picks between them by rank as this does. (torch
    also refuses the kernel for an operand whose last dim is strided; traced values have no
    strides, so that case calls the kernel on a dense copy.)"""
    dt = dtype(q)
    if dt not in (torch.float32, torch.float64) or dtype(k) != dt or dtype(v) != dt:
        return False
    if ndim(q) != 4 or ndim(k) != 4 or ndim(v) != 4:
        return False
    (b, h, lq, e), (kb, kh, lk, ke), (vb, vh, lv, ve) = shape(q), shape(k), shape(v)
    if (kb, kh, ke) != (b, h, e) or (vb, vh, ve) != (b, h, e) or lk != lv:
        return False
    if 0 in (lq, lk, e) or any(aval(x).device.type != "cpu" for x in (q, k, v)):
        return False
    if mask is not None:
        if dtype(mask) not in (torch.bool, dt) or ndim(mask) not in (2, 4):
            return False
        full = (b, h, lq, lk)
        ms = shape(mask)
        if any(m not in (1, f) for m, f in zip(ms, full[len(full) - len(ms) :])):
            return False
    return True


def _flash(q, k, v, mask, is_causal, scale):
    if mask is not None:
        if dtype(mask) is torch.bool:
            a = aval(mask)
            mask = U.select(mask, C.full(a.shape, 0.0, dtype(q), a.device), -math.inf)
        if ndim(mask) == 2:
            mask = S.reshape(mask, (1, 1) + shape(mask))
    out, _ = KA.sdpa(q, k, v, mask, is_causal=is_causal, scale=scale)
    return out
