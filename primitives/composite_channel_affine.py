"""batch_norm and group_norm (training statistics) with their weight and bias inside torch's
kernels, as three composite operations: the forward `native_batch_norm(x, w, b, ...)` /
`native_group_norm(x, w, b, ...)`, its tangent (linear in the tangents of x, w and b) and that
tangent's transpose, one call of `native_batch_norm_backward` / `native_group_norm_backward`
with the weight and an output mask, returning the cotangents of x, w and b that are wanted.

The kernels fold the affine into the normalization (`x * (w * rstd) + (b - mean * w * rstd)`
per channel) and multiply the cotangent by the weight inside their reductions; with the affine
written outside them (a product then a sum) the value rounded differently (-30.00000000000728
against -29.99999999997 at a constant channel of 30s with weight 30 and bias -30, which a
later `trunc` or tie turned into another answer). So the value and every reverse-mode
derivative are torch.autograd's own bits without jit as with it; instance_norm is batch_norm
of x seen as one sample of N * C channels with the weight repeated N times (lang/norms.py), as
torch computes it. `groups` 0 is batch norm (per channel, over every other dim), else group
norm (per sample and group of channels). The weight is per channel (dim 1) in both.

Under vmap the batch dim joins the kernel's channels (group norm's groups multiplied by the batch
size): a weight per example is then just more channels, and the kernel's weight and bias
cotangents are the per-example ones."""

from __future__ import annotations

import torch

from thunderx.primitives import binary as B
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives.composite import declare_composite
from thunderx.primitives.composite_channel_norm import (
    ChannelMerge,
    _bn_backward_decomposition,
    _bn_decomposition,
    _check,
    _gn_backward_decomposition,
    _gn_decomposition,
    bn_backward_source,
    forward_source,
    gn_backward_source,
    gn_sizes,
)
from thunderx.primitives.composite_norm_affine import (
    _slots,
    _sum,
    affine_norm_rules,
    picked_outputs,
)


def channel_norm_affine(x, w, b, groups: int, eps: float):
    """batch_norm (groups 0, training statistics, no running buffers) or group_norm of x with a
    per-channel weight `w` and bias `b` (None: no bias)."""
    args = [x, w] if b is None else [x, w, b]
    return channel_affine_p.bind(*args, groups=int(groups), eps=float(eps), has_bias=b is not None)


def _name(groups):
    return "group_norm" if groups else "batch_norm"


def _abstract_eval(x, w, *b, groups, eps, has_bias):
    _check(_name(groups), x, groups or None)
    for p in (w, *b):
        if tuple(p.shape) != (x.shape[1],) or p.dtype != x.dtype:
            raise TypeError(f"{_name(groups)}: weight or bias {p.str_short()} for {x.str_short()}")
    return x.strip_weak()


def _channel(v, shp):
    """A (C,) vector broadcast along dim 1."""
    return S.broadcast_in_dim(v, shp, (1,))


def _reduced(x):
    """The dims a channel's weight and bias cotangents sum over: all but the channels."""
    return tuple(d for d in range(len(S._shape(x))) if d != 1)


# ------------------------------------------------------------ decompositions (in primitives)


def _normalized(x, groups, eps):
    if groups:
        return _gn_decomposition(x, groups=groups, eps=eps)
    return _bn_decomposition(x, eps=eps)


def _jacobian(g, x, groups, eps):
    """The normalization's (symmetric) Jacobian at x applied to g."""
    if groups:
        return _gn_backward_decomposition(g, x, groups=groups, eps=eps)
    return _bn_backward_decomposition(g, x, eps=eps)


def _decomposition(x, w, *b, groups, eps, has_bias):
    shp = S._shape(x)
    y = B.mul(_normalized(x, groups, eps), _channel(w, shp))
    return B.add(y, _channel(b[0], shp)) if has_bias else y


def _tangent_decomposition(x, w, *ts, groups, eps, present):
    """w * J t_x + y_hat * t_w + t_b."""
    shp = S._shape(x)
    tx, tw, tb = _slots(ts, present)
    out = []
    if tx is not None:
        out.append(B.mul(_jacobian(tx, x, groups, eps), _channel(w, shp)))
    if tw is not None:
        out.append(B.mul(_normalized(x, groups, eps), _channel(tw, shp)))
    if tb is not None:
        out.append(_channel(tb, shp))
    return _sum(out)


def _cotangent_decomposition(x, w, ct, *, groups, eps, mask):
    shp = S._shape(x)
    out = []
    if mask[0]:
        out.append(_jacobian(B.mul(ct, _channel(w, shp)), x, groups, eps))
    if mask[1]:
        out.append(R.reduce_sum(B.mul(ct, _normalized(x, groups, eps)), _reduced(x)))
    if mask[2]:
        out.append(R.reduce_sum(ct, _reduced(x)))
    return out


# ------------------------------------------------------------------------------ torch kernels


def forward_kernel(x, w, b, groups, eps):
    """torch's (out, mean, rstd) for x with weight w and bias b (None: without)."""
    if groups:
        # torch's group norm kernels read the weight and bias as contiguous (a strided one, a
        # vmapped slice, gave other values)
        x, w, b = (None if a is None else a.contiguous() for a in (x, w, b))
        return torch.native_group_norm(x, w, b, *gn_sizes(x.shape, groups), eps)
    return torch.native_batch_norm(x, w, b, None, None, True, 0.0, eps)


def backward_kernel(ct, x, w, mean, rstd, groups, eps, mask):
    """torch's backward kernel: the cotangents of (x, w, b), None where `mask` is False."""
    if groups:
        sizes = gn_sizes(x.shape, groups)
        ct, x, w = (None if a is None else a.contiguous() for a in (ct, x, w))
        return torch.ops.aten.native_group_norm_backward(ct, x, mean, rstd, w, *sizes, list(mask))
    return torch.ops.aten.native_batch_norm_backward(
        ct, x, w, None, None, mean, rstd, True, eps, list(mask)
    )


def _impl(x, w, *b, groups, eps, has_bias):
    return forward_kernel(x, w, b[0] if b else None, groups, eps)[0]


def _tangent_impl(x, w, *ts, groups, eps, present):
    _, mean, rstd = forward_kernel(x, None, None, groups, eps)
    tx, tw, tb = _slots(ts, present)
    per_channel = [1, -1] + [1] * (x.ndim - 2)
    total = torch.zeros_like(x)
    if tx is not None:
        jt = backward_kernel(tx, x, None, mean, rstd, groups, eps, (True, False, False))[0]
        total = total + jt * w.view(per_channel)
    if tw is not None:
        # the normalized value as the backward kernels form it, (x - mean) * rstd
        if groups:
            xg = x.reshape(x.shape[0], groups, -1)
            y = ((xg - mean[..., None]) * rstd[..., None]).reshape(x.shape)
        else:
            y = (x - mean.view(per_channel)) * rstd.view(per_channel)
        total = total + y * tw.view(per_channel)
    if tb is not None:
        total = total + tb.view(per_channel)
    return total


def _cotangent_impl(x, w, ct, *, groups, eps, mask):
    # the statistics as torch's forward computes them (so the numbers are torch's)
    _, mean, rstd = forward_kernel(x, None, None, groups, eps)
    outs = backward_kernel(ct, x, w, mean, rstd, groups, eps, mask)
    return [o for o, m in zip(outs, mask) if m]


def backward_source(ct, x, w, shape, mean, rstd, groups: int, eps: float, mask) -> str:
    """torch source of the backward kernel reading the statistics `mean` and `rstd`, as the
    list of the wanted cotangents."""
    if groups:
        sizes = ", ".join(map(str, gn_sizes(shape, groups)))
        call = gn_backward_source(ct, x, mean, rstd, sizes, w, list(mask))
    else:
        call = bn_backward_source(ct, x, mean, rstd, eps, w, list(mask))
    return picked_outputs(call, mask)


def _codegen(args, avals, *, groups, eps, has_bias):
    bias = args[2] if has_bias else "None"
    return forward_source(args[0], args[1], bias, avals[0].shape, groups, eps) + "[0]"


def _cotangent_codegen(args, avals, *, groups, eps, mask):
    x, w, ct = args
    shape = avals[0].shape
    # the statistics once, named by an assignment expression (generated names never start
    # with an underscore)
    stats = f"(_cn_stats := {forward_source(x, 'None', 'None', shape, groups, eps)})"
    return backward_source(ct, x, w, shape, f"{stats}[1]", "_cn_stats[2]", groups, eps, mask)


# ---------------------------------------------------------------------------- derivative rules


_jvp, _tangent_transpose, _cotangent_transpose = affine_norm_rules(
    "channel_norm_affine", lambda: channel_affine_p, lambda: tangent_p, lambda: cotangent_p
)


# ------------------------------------------------------------------------------- batching


def _merged(args, dims, params):
    """The batch dim joined with the kernel's channels (ChannelMerge), and group norm's groups
    times the batch size: each example's channels are B consecutive blocks of its own groups."""
    m = ChannelMerge(args, dims)
    m.x = m.operand(args[0], dims[0])
    return m, dict(params, groups=params["groups"] * m.size)


def _forward_batch(args, dims, **params):
    m, params = _merged(args, dims, params)
    vectors = [m.vector(v, d) for v, d in zip(args[1:], dims[1:])]
    return m.unmerge(channel_affine_p.bind(m.x, *vectors, **params))


def _tangent_batch(args, dims, **params):
    m, merged = _merged(args, dims, params)
    slots = _slots(zip(args[2:], dims[2:]), params["present"])
    ts = [m.operand(*slots[0])] if slots[0] else []
    ts += [m.vector(*s) for s in slots[1:] if s]
    w = m.vector(args[1], dims[1])
    return m.unmerge(tangent_p.bind(m.x, w, *ts, **merged))


def _cotangent_batch(args, dims, **params):
    m, merged = _merged(args, dims, params)
    ct = m.operand(args[2], dims[2])
    outs = cotangent_p.bind(m.x, m.vector(args[1], dims[1]), ct, **merged)
    by_slot = _slots(outs, params["mask"])
    results = [m.unmerge(by_slot[0])] if by_slot[0] is not None else []
    results += [m.per_example(v) for v in by_slot[1:] if v is not None]
    return [r for r, _ in results], [d for _, d in results]


channel_affine_p = declare_composite(
    "channel_norm_affine",
    decomposition=_decomposition,
    impl=_impl,
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    batch=_forward_batch,
    torch_codegen=_codegen,
)


def _tangent_abstract_eval(x, w, *ts, groups, eps, present):
    _check("channel_norm_affine_tangent", x, groups or None)
    return x.strip_weak()


def _cotangent_abstract_eval(x, w, ct, *, groups, eps, mask):
    _check("channel_norm_affine_cotangent", x, groups or None)
    outs = [x.strip_weak()] if mask[0] else []
    return outs + [w.strip_weak() for m in mask[1:] if m]


tangent_p = declare_composite(
    "channel_norm_affine_tangent",
    decomposition=_tangent_decomposition,
    impl=_tangent_impl,
    abstract_eval=_tangent_abstract_eval,
    linear=True,
    nonlinear=(0, 1),
    differentiate_decomposition=True,
    transpose=_tangent_transpose,
    batch=_tangent_batch,
    kernel_differentiable=False,  # native_group_norm_backward has no derivative in torch
)
cotangent_p = declare_composite(
    "channel_norm_affine_cotangent",
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
    kernel_differentiable=False,  # native_group_norm_backward has no derivative in torch
)
