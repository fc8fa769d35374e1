"""scaled_dot_product_attention as a composite operation: torch's CPU flash-attention kernel
forward (`[out, logsumexp]`), and its backward kernel as the transpose of the attention's
tangent map. Operands are 4-D `(B, H, L, E)` (the language layer folds other leading dims), an
optional additive float mask broadcastable to `(B, H, L, S)`; `is_causal` and `scale` are params.

Three primitives: `sdpa` (forward), `sdpa_jvp` (the tangent map, linear in `tq, tk, tv`, giving
the tangents of `out` and of `logsumexp`) and `sdpa_backward` (torch's backward kernel, linear in
the output gradient). `sdpa_jvp` and `sdpa_backward` are each other's transpose, so reverse mode
runs exactly torch's kernels; every derivative beyond the first comes from the decompositions.
"""

from __future__ import annotations

import math

import torch

from thunderx.ad_util import Zero, instantiate, is_undefined
from thunderx.avals import is_float
from thunderx.core import get_aval
from thunderx.primitives import _matrix as M
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives.composite import declare_composite

_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def sdpa(q, k, v, mask=None, *, is_causal: bool, scale: float):
    """[out, logsumexp] of attention over 4-D q (B, H, L, E), k (B, H, S, E), v (B, H, S, E)."""
    ops = (q, k, v) if mask is None else (q, k, v, mask)
    return sdpa_p.bind(*ops, is_causal=bool(is_causal), scale=float(scale))


# ----------------------------------------------------------------------------- decompositions


def _scores(q, k, mask, is_causal, scale):
    """q k^T * scale with the causal and additive masks applied, (B, H, L, S)."""
    s = B.mul(M.mm(q, M.mT(k)), scale)
    shp = S._shape(s)
    if is_causal:
        lq, lk = shp[-2:]
        r = C.iota(torch.int64, (lq, lk), 0, get_aval(q).device)
        c = C.iota(torch.int64, (lq, lk), 1, get_aval(q).device)
        a = get_aval(s)
        s = U.select(S.broadcast_to(B.le(c, r), shp), s, C.full(shp, -math.inf, a.dtype, a.device))
    if mask is not None:
        s = B.add(s, S.broadcast_to(mask, shp))
    return s


def _probs(q, k, lse, mask, is_causal, scale):
    """softmax of the scores, from the saved logsumexp."""
    s = _scores(q, k, mask, is_causal, scale)
    return U.exp(B.sub(s, S.broadcast_in_dim(lse, S._shape(s), (0, 1, 2))))


def _sum_last(x):
    return R.reduce_sum(x, (3,))


def _row_max(s):
    from thunderx.primitives.higher_order import stop_gradient

    return stop_gradient(R.reduce_max(s, (len(S._shape(s)) - 1,)))


def dead_rows(s, m=None):
    """The rows of scores `s` (..., L, S), S > 0, whose every score is -inf (masked out): a
    bool (..., L), and the same broadcast to `s`'s shape. `m`: the rows' maxima, if at hand."""
    shp = S._shape(s)
    m = _row_max(s) if m is None else m
    dead = B.eq(m, C.full(S._shape(m), -math.inf, get_aval(m).dtype, get_aval(m).device))
    return dead, S.broadcast_in_dim(dead, shp, tuple(range(len(shp) - 1)))


def safe_softmax(s):
    """softmax over the last dim of scores `s`, 0 on a fully masked row, where softmax gives
    NaN: torch's `_safe_softmax`, what its attention paths (flash kernels and math) give there,
    with zero gradients on that row. Other rows are the softmax kernel's."""
    from thunderx.primitives.composite_softmax import softmax

    _, dead = dead_rows(s)
    zeros = C.zeros_like(s)
    return U.select(dead, zeros, softmax(U.select(dead, zeros, s), len(S._shape(s)) - 1))


def _decomposition(q, k, v, *mask, is_causal, scale):
    from thunderx.primitives.composite_softmax import softmax

    s = _scores(q, k, mask[0] if mask else None, is_causal, scale)
    shp = S._shape(s)
    m = _row_max(s)
    # a row whose scores are all -inf (fully masked; a causal mask alone leaves each row its
    # first key; or a query of -inf without a mask): output 0 and logsumexp 0, as the kernels
    # give; its scores and maximum become 0
    dead, dead_b = dead_rows(s, m)
    s, m = U.select(dead_b, C.zeros_like(s), s), U.select(dead, C.zeros_like(m), m)
    shifted = B.sub(s, S.broadcast_in_dim(m, shp, (0, 1, 2)))
    lse = B.add(U.log(_sum_last(U.exp(shifted))), m)
    p = softmax(s, 3)
    p, lse = U.select(dead_b, C.zeros_like(p), p), U.select(dead, C.zeros_like(lse), lse)
    return [M.mm(p, v), lse]


def _jvp_decomposition(tq, tk, tv, q, k, v, out, lse, *mask, is_causal, scale):
    p = _probs(q, k, lse, mask[0] if mask else None, is_causal, scale)
    shp = S._shape(p)
    ds = B.mul(B.add(M.mm(tq, M.mT(k)), M.mm(q, M.mT(tk))), scale)
    t_lse = _sum_last(B.mul(p, ds))
    dp = B.mul(p, B.sub(ds, S.broadcast_in_dim(t_lse, shp, (0, 1, 2))))
    return [B.add(M.mm(dp, v), M.mm(p, tv)), t_lse]


def _backward_decomposition(g, q, k, v, out, lse, *mask, is_causal, scale):
    p = _probs(q, k, lse, mask[0] if mask else None, is_causal, scale)
    shp = S._shape(p)
    gv = M.mm(M.mT(p), g)
    d = S.broadcast_in_dim(_sum_last(B.mul(g, out)), shp, (0, 1, 2))
    ds = B.mul(B.mul(p, B.sub(M.mm(g, M.mT(v)), d)), scale)
    return [M.mm(ds, k), M.mm(M.mT(ds), q), gv]


# ---------------------------------------------------------------------------------- kernels


# The kernels read the last dim as dense (stride 1) without checking; torch's dispatcher makes
# such operands contiguous first, and so do these.


def _dense(x):
    return x if x.stride(-1) == 1 else x.contiguous()


def _impl(q, k, v, *mask, is_causal, scale):
    q, k, v, *mask = (_dense(x) for x in (q, k, v, *mask))
    m = mask[0] if mask else None
    out, lse = _FLASH(q, k, v, 0.0, is_causal, attn_mask=m, scale=scale)
    return [out, lse]


def _backward_impl(g, q, k, v, out, lse, *mask, is_causal, scale):
    g, q, k, v, out, lse, *mask = (_dense(x) for x in (g, q, k, v, out, lse, *mask))
    m = mask[0] if mask else None
    return list(_FLASH_BACKWARD(g, q, k, v, out, lse, 0.0, is_causal, attn_mask=m, scale=scale))


def _dense_source(a):
    return f"({a} if {a}.stride(-1) == 1 else {a}.contiguous())"


def _operands_source(args, n):
    """The array operands, dense in the last dim, then the optional mask at position `n`."""
    ops = ", ".join(_dense_source(a) for a in args[:n])
    return ops, (f", attn_mask={_dense_source(args[n])}" if len(args) > n else "")


def _codegen(args, avals, *, is_causal, scale):
    ops, mask = _operands_source(args, 3)
    return (
        f"torch.ops.aten._scaled_dot_product_flash_attention_for_cpu({ops}, 0.0, "
        f"{is_causal}{mask}, scale={scale!r})"
    )


def _backward_codegen(args, avals, *, is_causal, scale):
    ops, mask = _operands_source(args, 6)
    return (
        "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward("
        f"{ops}, 0.0, {is_causal}{mask}, scale={scale!r})"
    )


# ------------------------------------------------------------------------------ abstract eval


def _check(q, k, v, mask):
    for name, a in (("query", q), ("key", k), ("value", v)):
        if len(a.shape) != 4 or not is_float(a.dtype) or a.dtype != q.dtype:
            raise TypeError(
                f"sdpa: {name} must be 4-D of query's floating dtype, got {a.str_short()}"
            )
    b, h, _, e = q.shape
    if k.shape[:2] != (b, h) or v.shape[:2] != (b, h) or k.shape[3] != e or v.shape[3] != e:
        raise TypeError(
            f"sdpa: query {q.str_short()}, key {k.str_short()}, value {v.str_short()} must share "
            "batch, heads and head size"
        )
    if k.shape[2] != v.shape[2]:
        raise TypeError(f"sdpa: key {k.str_short()} and value {v.str_short()} lengths differ")
    if mask is not None:
        want = (b, h, q.shape[2], k.shape[2])
        if (
            len(mask.shape) != 4
            or mask.dtype != q.dtype
            or any(m not in (1, w) for m, w in zip(mask.shape, want))
        ):
            raise TypeError(f"sdpa: attn_mask {mask.str_short()} must broadcast to {want}")


def _lse_aval(q):
    return q.update(shape=tuple(q.shape[:3]), dtype=q.dtype).strip_weak()


def _abstract_eval(q, k, v, *mask, is_causal, scale):
    _check(q, k, v, mask[0] if mask else None)
    return [q.strip_weak(), _lse_aval(q)]


def _jvp_abstract_eval(tq, tk, tv, q, k, v, out, lse, *mask, is_causal, scale):
    _check(q, k, v, mask[0] if mask else None)
    for t, a in ((tq, q), (tk, k), (tv, v)):
        if t.shape != a.shape or t.dtype != a.dtype:
            raise TypeError(f"sdpa_jvp: tangent {t.str_short()} vs operand {a.str_short()}")
    return [q.strip_weak(), _lse_aval(q)]


def _backward_abstract_eval(g, q, k, v, out, lse, *mask, is_causal, scale):
    _check(q, k, v, mask[0] if mask else None)
    if g.shape != q.shape or g.dtype != q.dtype:
        raise TypeError(f"sdpa_backward: gradient {g.str_short()} vs output {q.str_short()}")
    return [q.strip_weak(), k.strip_weak(), v.strip_weak()]


# ------------------------------------------------------------------------------------ rules


def _jvp(primals, tangents, *, is_causal, scale):
    from thunderx.primitives.composite import decomposition_jvp

    q, k, v, *mask = primals
    tq, tk, tv, *tmask = tangents
    if tmask and type(tmask[0]) is not Zero:
        # torch's kernels give no mask derivative: differentiate the decomposition
        return decomposition_jvp(
            _decomposition, primals, tangents, dict(is_causal=is_causal, scale=scale)
        )
    out, lse = sdpa_p.bind(*primals, is_causal=is_causal, scale=scale)
    if all(type(t) is Zero for t in (tq, tk, tv)):
        return [out, lse], [Zero(get_aval(out)), Zero(get_aval(lse))]
    ts = [instantiate(t) for t in (tq, tk, tv)]
    t_out, t_lse = sdpa_jvp_p.bind(*ts, q, k, v, out, lse, *mask, is_causal=is_causal, scale=scale)
    return [out, lse], [t_out, t_lse]


def _jvp_transpose(cts, tq, tk, tv, q, k, v, out, lse, *mask, is_causal, scale):
    if any(is_undefined(x) for x in (q, k, v, out, lse, *mask)):
        raise TypeError("sdpa_jvp is linear in its tangent operands only")
    ct_out, ct_lse = cts
    saved = (q, k, v, out, lse, *mask)
    gq, gk, gv = sdpa_backward_p.bind(instantiate(ct_out), *saved, is_causal=is_causal, scale=scale)
    if type(ct_lse) is not Zero:
        # d lse = sum(p * ds): its cotangent reaches the scores as p * ct_lse
        p = _probs(q, k, lse, mask[0] if mask else None, is_causal, scale)
        dsc = B.mul(B.mul(p, S.broadcast_in_dim(ct_lse, S._shape(p), (0, 1, 2))), scale)
        gq, gk = B.add(gq, M.mm(dsc, k)), B.add(gk, M.mm(M.mT(dsc), q))
    return [gq, gk, gv] + [None] * len(saved)


def _backward_transpose(cts, g, q, k, v, out, lse, *mask, is_causal, scale):
    if any(is_undefined(x) for x in (q, k, v, out, lse, *mask)):
        raise TypeError("sdpa_backward is linear in its gradient operand only")
    saved = (q, k, v, out, lse, *mask)
    ts = [instantiate(c) for c in cts]
    ct_g, _ = sdpa_jvp_p.bind(*ts, *saved, is_causal=is_causal, scale=scale)
    return [ct_g] + [None] * len(saved)


def _fold_batch(get_prim, n_arrays):
    """The kernel's own batch: the vmapped dim folds into B (operand 0's leading dim). The
    optional mask (operand `n_arrays`) keeps a size-1 B dim when it is unbatched."""

    def batch(args, dims, **params):
        size = next(get_aval(a).shape[d] for a, d in zip(args, dims) if d is not None)
        a0, d0 = args[0], dims[0]
        bsz = [s for i, s in enumerate(get_aval(a0).shape) if i != d0][0]
        moved = []
        for i, (a, d) in enumerate(zip(args, dims)):
            if i >= n_arrays and d is None and get_aval(a).shape[0] == 1:
                moved.append(a)  # a mask broadcast over B stays broadcast
                continue
            a = S.broadcast_batch(a, size, 0) if d is None else S.moveaxis(a, d, 0)
            shp = S._shape(a)
            if shp[1] != bsz:  # a batched mask with a size-1 B dim
                shp = (shp[0], bsz) + shp[2:]
                a = S.broadcast_in_dim(a, shp, tuple(range(len(shp))))
            moved.append(S.reshape(a, (size * bsz,) + shp[2:]))
        outs = get_prim().bind(*moved, **params)
        res = [S.reshape(o, (size, bsz) + S._shape(o)[1:]) for o in outs]
        return res, [0] * len(res)

    return batch


sdpa_p = declare_composite(
    "sdpa",
    decomposition=_decomposition,
    impl=_impl,
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    batch=_fold_batch(lambda: sdpa_p, 3),
    torch_codegen=_codegen,
    multiple_results=True,
    # torch's derivative of the fused kernel ignores its logsumexp (thunderx's own backward
    # reads it): where that is read under torch autograd, the decomposition runs
    kernel_constant_outputs=(1,),
)
sdpa_jvp_p = declare_composite(
    "sdpa_jvp",
    decomposition=_jvp_decomposition,
    # forward mode has no torch kernel: the decomposition, run eagerly
    impl=_jvp_decomposition,
    abstract_eval=_jvp_abstract_eval,
    linear=True,
    nonlinear=lambda i: i >= 3,
    differentiate_decomposition=True,
    transpose=_jvp_transpose,
    batch=_fold_batch(lambda: sdpa_jvp_p, 8),
    multiple_results=True,
)
sdpa_backward_p = declare_composite(
    "sdpa_backward",
    decomposition=_backward_decomposition,
    impl=_backward_impl,
    abstract_eval=_backward_abstract_eval,
    linear=True,
    nonlinear=lambda i: i >= 1,
    differentiate_decomposition=True,
    transpose=_backward_transpose,
    batch=_fold_batch(lambda: sdpa_backward_p, 6),
    torch_codegen=_backward_codegen,
    multiple_results=True,
    # torch has no derivative for its fused attention backward kernels
    kernel_differentiable=False,
)
