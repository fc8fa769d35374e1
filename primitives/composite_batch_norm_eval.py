"""batch_norm in evaluation mode (normalizing with the running statistics) as a composite
operation: torch's kernel `torch.batch_norm(x, w, b, running_mean, running_var, False, ...)`,
the call F.batch_norm makes, so the values are eager torch's bits without jit as with it; its
decomposition is the kernel's own formula, per channel `alpha = w / sqrt(running_var + eps)`
and `beta = b - running_mean * alpha`, then `x * alpha + beta` (two passes over x where the
normalization written out took five, with the square root over the whole of x). Every
derivative comes from the decomposition: the function is affine in x per channel.

Under vmap the batch dim joins the kernel's channels: (N, B, C, ...) -> (N, B * C, ...), a
per-channel operand batched or repeated B times."""

from __future__ import annotations

import torch

from thunderx.avals import is_float
from thunderx.primitives import binary as B
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives.composite import declare_composite
from thunderx.primitives.composite_channel_norm import ChannelMerge


def batch_norm_eval(x, running_mean, running_var, weight, bias, eps: float):
    """F.batch_norm(x, running_mean, running_var, weight, bias, training=False, eps=eps); the
    weight and bias may be None."""
    args = [x, running_mean, running_var] + [v for v in (weight, bias) if v is not None]
    return batch_norm_eval_p.bind(
        *args, eps=float(eps), has_weight=weight is not None, has_bias=bias is not None
    )


def _vectors(rest, has_weight, has_bias):
    """(weight, bias) from the operands after the running statistics, None where absent."""
    it = iter(rest)
    return (next(it) if has_weight else None), (next(it) if has_bias else None)


def _abstract_eval(x, *vecs, eps, has_weight, has_bias):
    if not is_float(x.dtype) or x.ndim < 2 or 0 in x.shape:
        raise TypeError(f"batch_norm needs a non-empty floating (N, C, ...) operand, got {x}")
    for v in vecs:
        if tuple(v.shape) != (x.shape[1],) or v.dtype != x.dtype:
            raise TypeError(f"batch_norm: {v.str_short()} for {x.str_short()}'s channels")
    return x.strip_weak()


def _decomposition(x, mean, var, *rest, eps, has_weight, has_bias):
    w, b = _vectors(rest, has_weight, has_bias)
    alpha = U.rsqrt(B.add(var, eps))
    if w is not None:
        alpha = B.mul(alpha, w)
    beta = B.neg(B.mul(mean, alpha))
    if b is not None:
        beta = B.add(b, beta)
    shp = S._shape(x)
    return B.add(
        B.mul(x, S.broadcast_in_dim(alpha, shp, (1,))), S.broadcast_in_dim(beta, shp, (1,))
    )


def _impl(x, mean, var, *rest, eps, has_weight, has_bias):
    w, b = _vectors(rest, has_weight, has_bias)
    return torch.batch_norm(x, w, b, mean, var, False, 0.0, eps, False)


def _codegen(args, avals, *, eps, has_weight, has_bias):
    x, mean, var = args[:3]
    w, b = _vectors(args[3:], has_weight, has_bias)
    return f"torch.batch_norm({x}, {w}, {b}, {mean}, {var}, False, 0.0, {eps!r}, False)"


def _batch(args, dims, **params):
    m = ChannelMerge(args, dims)
    x = m.operand(args[0], dims[0])
    vecs = [m.vector(v, d) for v, d in zip(args[1:], dims[1:])]
    return m.unmerge(batch_norm_eval_p.bind(x, *vecs, **params))


batch_norm_eval_p = declare_composite(
    "batch_norm_eval",
    decomposition=_decomposition,
    impl=_impl,
    abstract_eval=_abstract_eval,
    batch=_batch,
    torch_codegen=_codegen,
)
