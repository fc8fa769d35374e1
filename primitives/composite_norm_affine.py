"""layer_norm with its weight (and bias) inside torch's kernel, as three composite operations:
the forward `native_layer_norm(x, shape, w, b)`, its tangent (linear in the tangents of x, w
and b) and that tangent's transpose, one call of `native_layer_norm_backward(ct, x, ..., w, b,
mask)` returning the cotangents of x, w and b that are wanted. The kernel folds the affine into
the normalization (x * scale + shift per row) and multiplies the cotangent by the weight inside
its reductions, so the value and every reverse-mode derivative are torch.autograd's own bits,
without jit as with it (with the affine outside the kernel, layer_norm rounded differently:
0.2% off torch where a row's values cancel). The tangent and its transpose are each other's
transpose; their derivatives in x and w come from their decompositions (hessians work)."""

from __future__ import annotations

import functools

import torch

from thunderx.ad_util import Zero, is_undefined
from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives.composite import declare_composite, decomposition_batch
from thunderx.primitives.composite_norm import _backward_decomposition, _check, _stats


def layer_norm_affine(x, w, b, normalized_ndim: int, eps: float):
    """F.layer_norm(x, x.shape[-normalized_ndim:], w, b) with a weight (`b` may be None)."""
    args = [x, w] if b is None else [x, w, b]
    return layer_norm_affine_p.bind(
        *args, normalized_ndim=int(normalized_ndim), eps=float(eps), has_bias=b is not None
    )


def _shape(a, normalized_ndim):
    """The normalized (trailing) shape of an aval or a tensor."""
    return tuple(a.shape[len(a.shape) - normalized_ndim :])


def _abstract_eval(x, w, *b, normalized_ndim, eps, has_bias):
    _check("layer_norm", x, normalized_ndim)
    for p in (w, *b):
        if tuple(p.shape) != _shape(x, normalized_ndim) or p.dtype != x.dtype:
            raise TypeError(f"layer_norm: weight or bias {p.str_short()} for {x.str_short()}")
    return x.strip_weak()


def _lead(x, normalized_ndim):
    return tuple(range(len(S._shape(x)) - normalized_ndim))


def _slots(values, present) -> list:
    """The values given for the present slots (of x, w, b) as three slots, None where absent."""
    it = iter(values)
    return [next(it) if p else None for p in present]


def _sum(terms):
    return functools.reduce(B.add, terms)


def affine_norm_rules(name, get_forward, get_tangent, get_cotangent):
    """(jvp, tangent's transpose, cotangent's transpose) of a norm with its affine inside the
    kernel, as three primitives taking (x, w, ...) and the same params: the forward (x, w[, b]),
    its tangent (x, w, the present tangents of x, w, b) and its cotangent (x, w, ct) giving
    the cotangents `mask` asks for (layer norm here, batch and group norm in
    composite_channel_affine.py)."""

    def jvp(primals, tangents, *, has_bias, **params):
        x, w = primals[:2]
        y = get_forward().bind(*primals, has_bias=has_bias, **params)
        present = tuple(type(t) is not Zero for t in tangents) + ((False,) if not has_bias else ())
        if not any(present):
            return y, Zero(get_aval(y))
        ts = [t for t in tangents if type(t) is not Zero]
        return y, get_tangent().bind(x, w, *ts, present=present, **params)

    def tangent_transpose(ct, x, w, *ts, present, **params):
        if is_undefined(x) or is_undefined(w):
            raise TypeError(f"{name}_tangent is linear in its tangents only")
        mask = tuple(t is not None and is_undefined(t) for t in _slots(ts, present))
        if type(ct) is Zero or not any(mask):
            return [None] * (2 + len(ts))
        by_slot = _slots(get_cotangent().bind(x, w, ct, mask=mask, **params), mask)
        return [None, None] + [by_slot[i] for i, p in enumerate(present) if p]

    def cotangent_transpose(cts, x, w, ct, *, mask, **params):
        if is_undefined(x) or is_undefined(w):
            raise TypeError(f"{name}_cotangent is linear in its cotangent only")
        by_slot = _slots(cts, mask)
        present = tuple(c is not None and type(c) is not Zero for c in by_slot)
        if not any(present):
            return [None, None, None]
        ts = [c for c, p in zip(by_slot, present) if p]
        return [None, None, get_tangent().bind(x, w, *ts, present=present, **params)]

    return jvp, tangent_transpose, cotangent_transpose


_jvp, _tangent_transpose, _cotangent_transpose = affine_norm_rules(
    "layer_norm_affine", lambda: layer_norm_affine_p, lambda: tangent_p, lambda: cotangent_p
)


def _decomposition(x, w, *b, normalized_ndim, eps, has_bias):
    xc, rstd, _, _ = _stats(x, normalized_ndim, eps)
    y = B.mul(B.mul(xc, rstd), S.broadcast_to(w, S._shape(x)))
    return B.add(y, S.broadcast_to(b[0], S._shape(x))) if has_bias else y


def _impl(x, w, *b, normalized_ndim, eps, has_bias):
    return torch.native_layer_norm(x, _shape(x, normalized_ndim), w, b[0] if b else None, eps)[0]


def _codegen(args, avals, *, normalized_ndim, eps, has_bias):
    bias = args[2] if has_bias else "None"
    shape = _shape(avals[0], normalized_ndim)
    return f"torch.native_layer_norm({args[0]}, {shape}, {args[1]}, {bias}, {eps!r})[0]"


def _batch_forward(args, dims, **params):
    if any(d is not None for d in dims[1:]):  # a weight per example: the decomposition
        return decomposition_batch(layer_norm_affine_p, _decomposition, args, dims, params)
    x = S.moveaxis(args[0], dims[0], 0)
    return layer_norm_affine_p.bind(x, *args[1:], **params), 0


# ------------------------------------------------------------------ the tangent (linear map)


def _tangent_decomposition(x, w, *ts, normalized_ndim, eps, present):
    """w * J t_x + y_hat * t_w + t_b, J the normalization's (symmetric) Jacobian."""
    shp = S._shape(x)
    tx, tw, tb = _slots(ts, present)
    out = []
    if tx is not None:
        jt = _backward_decomposition(tx, x, normalized_ndim=normalized_ndim, eps=eps)
        out.append(B.mul(jt, S.broadcast_to(w, shp)))
    if tw is not None:
        xc, rstd, _, _ = _stats(x, normalized_ndim, eps)
        out.append(B.mul(B.mul(xc, rstd), S.broadcast_to(tw, shp)))
    if tb is not None:
        out.append(S.broadcast_to(tb, shp))
    return _sum(out)


def _tangent_impl(x, w, *ts, normalized_ndim, eps, present):
    shape = _shape(x, normalized_ndim)
    _, mean, rstd = torch.native_layer_norm(x, shape, None, None, eps)
    # the normalized value as the backward kernel forms it, (x - mean) * rstd: the forward
    # kernel's x * rstd - mean * rstd cancels where the row's spread is far below its mean
    y = (x - mean) * rstd
    tx, tw, tb = _slots(ts, present)
    total = torch.zeros_like(x)
    if tx is not None:
        mask = [True, False, False]
        jt = torch.ops.aten.native_layer_norm_backward(tx, x, shape, mean, rstd, None, None, mask)
        total = total + jt[0] * w
    if tw is not None:
        total = total + y * tw
    if tb is not None:
        total = total + tb
    return total


def _tangent_abstract_eval(x, w, *ts, normalized_ndim, eps, present):
    _check("layer_norm_affine_tangent", x, normalized_ndim)
    return x.strip_weak()


def _tangent_batch(args, dims, **params):
    """Each term on its own: the kernel's rows take any leading batch dim of x and its
    tangent; a batched weight or bias tangent scales the normalized value the kernel's
    statistics give (a tangent of ones for the weight: torch's (x - mean) * rstd, which a
    decomposition's own mean would round differently where a row's spread is far below its
    mean). A weight per example goes through the decomposition."""
    if dims[1] is not None:
        return decomposition_batch(tangent_p, _tangent_decomposition, args, dims, params)
    present, x, w = params["present"], args[0], args[1]
    size = next(get_aval(a).shape[d] for a, d in zip(args, dims) if d is not None)
    x = _front(x, dims[0], size)
    shp = S._shape(x)
    nd, eps = params["normalized_ndim"], params["eps"]
    slots = _slots(zip(args[2:], dims[2:]), present)

    def one(slot, t):
        only = tuple(i == slot for i in range(3))
        return tangent_p.bind(x, w, t, normalized_ndim=nd, eps=eps, present=only)

    def scaled(t, d, slot):  # a weight or bias tangent (batched: per example)
        if d is None:
            return one(slot, t) if slot == 1 else S.broadcast_to(t, shp)
        t = S.moveaxis(t, d, 0)
        t = S.broadcast_in_dim(t, shp, (0, *range(len(shp) - nd, len(shp))))
        if slot == 2:
            return t
        return B.mul(one(1, S.broadcast_to(B.add(B.mul(w, 0.0), 1.0), S._shape(w))), t)

    terms = [one(0, _front(*slots[0], size))] if slots[0] is not None else []
    terms += [scaled(*slots[k], k) for k in (1, 2) if slots[k] is not None]
    return _sum(terms), 0


def _front(a, d, size):
    return S.broadcast_batch(a, size, 0) if d is None else S.moveaxis(a, d, 0)


# ---------------------------------------------------------- its transpose: torch's backward


def _cotangent_decomposition(x, w, ct, *, normalized_ndim, eps, mask):
    shp = S._shape(x)
    lead = _lead(x, normalized_ndim)
    out = []
    if mask[0]:
        g = B.mul(ct, S.broadcast_to(w, shp))
        out.append(_backward_decomposition(g, x, normalized_ndim=normalized_ndim, eps=eps))
    if mask[1]:
        xc, rstd, _, _ = _stats(x, normalized_ndim, eps)
        out.append(R.reduce_sum(B.mul(ct, B.mul(xc, rstd)), lead))
    if mask[2]:
        out.append(R.reduce_sum(ct, lead))
    return out


def _cotangent_impl(x, w, ct, *, normalized_ndim, eps, mask):
    shape = _shape(x, normalized_ndim)
    # the statistics as torch's forward computes them (so the numbers are torch's); the weight
    # stands in for the bias, which the kernel reads only to know that its cotangent is wanted
    _, mean, rstd = torch.native_layer_norm(x, shape, None, None, eps)
    bias = w if mask[2] else None
    outs = torch.ops.aten.native_layer_norm_backward(ct, x, shape, mean, rstd, w, bias, list(mask))
    return [o for o, m in zip(outs, mask) if m]


def backward_source(x: str, w: str, ct: str, shape: tuple, mean: str, rstd: str, mask) -> str:
    """torch's backward kernel reading the statistics `mean` and `rstd` (sources), as the list
    of the wanted cotangents."""
    bias = w if mask[2] else "None"
    call = (
        f"torch.ops.aten.native_layer_norm_backward({ct}, {x}, {shape}, {mean}, {rstd}, {w}, "
        f"{bias}, {list(mask)})"
    )
    return picked_outputs(call, mask)


def picked_outputs(call: str, mask) -> str:
    """The source of a norm backward kernel's `call` as the list of the cotangents `mask`
    wants (the kernel's own tuple when it wants all three)."""
    if all(mask):
        return call
    picked = ", ".join(f"_o[{i}]" for i, m in enumerate(mask) if m)
    return f"(lambda _o: [{picked}])({call})"


def _cotangent_codegen(args, avals, *, normalized_ndim, eps, mask):
    x, w, ct = args
    shape = _shape(avals[0], normalized_ndim)
    # the statistics once, named by an assignment expression (generated names never start
    # with an underscore)
    mean = f"(_ln_stats := torch.native_layer_norm({x}, {shape}, None, None, {eps!r}))[1]"
    return backward_source(x, w, ct, shape, mean, "_ln_stats[2]", mask)


def _cotangent_abstract_eval(x, w, ct, *, normalized_ndim, eps, mask):
    _check("layer_norm_affine_cotangent", x, normalized_ndim)
    outs = [x.strip_weak()] if mask[0] else []
    return outs + [w.strip_weak() for m in mask[1:] if m]


def _cotangent_batch(args, dims, **params):
    mask = params["mask"]
    if dims[1] is not None or mask[1] or mask[2]:
        # a weight per example, or per-example reductions over the rows: the decomposition
        return decomposition_batch(cotangent_p, _cotangent_decomposition, args, dims, params)
    size = next(get_aval(a).shape[d] for a, d in zip(args, dims) if d is not None)
    x, ct = (_front(args[k], dims[k], size) for k in (0, 2))
    return cotangent_p.bind(x, args[1], ct, **params), [0]


layer_norm_affine_p = declare_composite(
    "layer_norm_affine",
    decomposition=_decomposition,
    impl=_impl,
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    batch=_batch_forward,
    torch_codegen=_codegen,
)
tangent_p = declare_composite(
    "layer_norm_affine_tangent",
    decomposition=_tangent_decomposition,
    impl=_tangent_impl,
    abstract_eval=_tangent_abstract_eval,
    linear=True,
    nonlinear=(0, 1),
    differentiate_decomposition=True,
    transpose=_tangent_transpose,
    batch=_tangent_batch,
)
cotangent_p = declare_composite(
    "layer_norm_affine_cotangent",
    decomposition=_cotangent_decomposition,
    impl=_cotangent_impl,
    abstract_eval=_cotangent_abstract_eval,
    linear=True,
    nonlinear=(0, 1),
    differentiate_decomposition=True,
    transpose=_cotangent_transpose,
    batch=_cotangent_batch,
    torch_codegen=_cotangent_codegen,
    multiple_results=True,
)
