"""torch.nn.functional losses: mse, l1, smooth_l1, huber, nll, cross_entropy (class indices or
probabilities, label smoothing, weights, ignore_index), bce (with logits), kl_div, poisson_nll."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.avals import is_float
from thunderx.lang._base import convert, dtype, ndim, promote, register, shape
from thunderx.lang.complex import abs_complex
from thunderx.lang.nn import log_softmax, logsigmoid
from thunderx.primitives import binary as B
from thunderx.primitives import composite_bce as KB
from thunderx.primitives import composite_losses as KL
from thunderx.primitives import indexing as I
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U

# ---------------------------------------------------------------------------------- losses


def _reduce(loss, reduction):
    if reduction == "mean":
        # the mean of no elements is nan (0 / 0), as in torch
        return B.div(R.reduce_sum(loss, tuple(range(ndim(loss)))), float(math.prod(shape(loss))))
    if reduction == "sum":
        return R.reduce_sum(loss, tuple(range(ndim(loss))))
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', not {reduction!r}")


def _pair(input, target):  # noqa: A002
    (a, b), _ = promote(input, target)
    return a, b


@register(F.mse_loss)
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):  # noqa: A002
    a, b = _pair(input, target)
    d = B.sub(a, b)
    return _reduce(B.mul(d, d), reduction)


@register(F.l1_loss)
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):  # noqa: A002
    a, b = _pair(input, target)
    d = B.sub(a, b)
    if dtype(d).is_complex:  # the moduli of the differences (real, as torch's)
        return _reduce(abs_complex(d), reduction)
    return _reduce(U.abs(d), reduction)


@register(F.smooth_l1_loss)
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):  # noqa: A002
    # The quadratic piece squares the difference itself, not |difference| (whose sign(0) would
    # zero the second derivative at 0). At |d| == beta the linear piece: both have the first
    # derivative +-1 there, and torch's double backward counts the bound out (d < beta).
    a, b = _pair(input, target)
    diff = B.sub(a, b)
    d = U.abs(diff)
    if beta == 0:
        return _reduce(d, reduction)
    # At nan the linear piece too (d < beta is false): torch's double backward gives 0 there.
    inside = B.lt(d, beta)
    near = _near(B.ge(d, beta), diff)
    quad = B.div(B.mul(B.mul(near, near), 0.5), beta)
    return _reduce(U.select(inside, quad, B.sub(d, 0.5 * beta)), reduction)


def _near(outside, diff):
    # the difference, 0 where the linear piece applies: an infinite difference must not reach
    # the square, whose derivative there (inf times the zero cotangent the select sends the
    # piece not taken) is NaN where torch's backward gives +-delta; a NaN one does, for the NaN
    # torch's backward gives (huber_loss takes it in the square, for torch's NaN forward too)
    return U.select(outside, 0.0, diff)


@register(F.huber_loss)
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):  # noqa: A002
    # the square of the difference itself (as smooth_l1_loss); quadratic up to |d| == delta
    # included, as torch's huber double backward
    a, b = _pair(input, target)
    diff = B.sub(a, b)
    d = U.abs(diff)
    outside = B.gt(d, delta)
    near = _near(outside, diff)
    quad = B.mul(B.mul(near, near), 0.5)
    lin = B.mul(B.sub(d, 0.5 * delta), delta)
    return _reduce(U.select(outside, lin, quad), reduction)


@register(F.nll_loss)
def nll_loss(
    input,
    target,
    weight=None,
    size_average=None,
    ignore_index=-100,
    reduce=None,  # noqa: A002
    reduction="mean",
):
    x = input
    if (
        weight is None
        and ndim(x) in (1, 2)
        and is_float(dtype(x))
        and not isinstance(target, int)
        and dtype(target) is torch.int64
        and reduction in ("none", "mean", "sum")
    ):
        # torch's kernel, with nll_loss_backward as its transpose (primitives/composite_losses.py)
        return KL.nll_loss(x, target, reduction, ignore_index)
    if ndim(x) == 1:
        x = S.expand_dims(x, (0,))
        target = S.expand_dims(target, (0,)) if not isinstance(target, int) else target
    # move the class dim last: [N, d1..., C]
    xm = S.moveaxis(x, 1, ndim(x) - 1)
    valid = B.ne(target, ignore_index)
    safe_t = U.select(valid, target, 0)
    picked = S.squeeze(
        I.gather(xm, S.expand_dims(safe_t, (ndim(xm) - 1,)), ndim(xm) - 1), (ndim(xm) - 1,)
    )
    w = U.convert(valid, dtype(x))
    if weight is not None:
        w = B.mul(w, I.take(convert(weight, dtype(x)), safe_t, 0))
    loss = U.neg(B.mul(picked, w))
    if ndim(input) == 1:
        loss = S.squeeze(loss, (0,))
        w = S.squeeze(w, (0,))
    if reduction == "mean":
        axes = tuple(range(ndim(loss)))
        return B.div(R.reduce_sum(loss, axes), R.reduce_sum(w, axes))
    return _reduce(loss, reduction)


@register(F.cross_entropy)
def cross_entropy(
    input,
    target,
    weight=None,
    size_average=None,
    ignore_index=-100,
    reduce=None,  # noqa: A002
    reduction="mean",
    label_smoothing=0.0,
):
    class_dim = 0 if ndim(input) == 1 else 1
    logp = log_softmax(input, class_dim)
    if is_float(dtype(target)):
        # class probabilities
        t = target
        if label_smoothing:
            c = shape(input)[class_dim]
            t = B.add(B.mul(t, 1.0 - label_smoothing), label_smoothing / c)
        prod = B.mul(logp, t)
        if weight is not None:
            shp = shape(logp)
            prod = B.mul(prod, S.broadcast_in_dim(weight, shp, (class_dim,)))
        return _reduce(U.neg(R.reduce_sum(prod, (class_dim,))), reduction)
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if not label_smoothing:
        return nll
    c = shape(input)[class_dim]
    lw = (
        logp
        if weight is None
        else B.mul(logp, S.broadcast_in_dim(weight, shape(logp), (class_dim,)))
    )
    smooth = U.neg(R.reduce_sum(lw, (class_dim,)))
    valid = B.ne(target, ignore_index)
    smooth = U.select(valid, smooth, 0.0)
    if reduction == "mean":
        if weight is None:
            denom = R.reduce_sum(U.convert(valid, dtype(logp)), tuple(range(ndim(valid))))
        else:
            safe_t = U.select(valid, target, 0)
            wt = B.mul(I.take(weight, safe_t, 0), U.convert(valid, dtype(logp)))
            denom = R.reduce_sum(wt, tuple(range(ndim(wt))))
        smooth = B.div(R.reduce_sum(smooth, tuple(range(ndim(smooth)))), denom)
    else:
        smooth = _reduce(smooth, reduction)
    return B.add(B.mul(nll, 1.0 - label_smoothing), B.mul(smooth, label_smoothing / c))


@register(F.binary_cross_entropy)
def binary_cross_entropy(
    input,
    target,
    weight=None,
    size_average=None,
    reduce=None,  # noqa: A002
    reduction="mean",
):
    a, b = _pair(input, target)
    if shape(a) != shape(b):
        raise ValueError(
            f"binary_cross_entropy: target of shape {shape(target)} does not match the input's "
            f"{shape(input)} (torch requires the same size)"
        )
    if weight is None and reduction == "mean" and 0 not in shape(a):
        return _mean_binary_cross_entropy(a, b)
    # torch's kernel and its backward formulas (primitives/composite_bce.py)
    loss = KB.binary_cross_entropy(a, b)
    if weight is not None:
        (loss, w), _ = promote(loss, weight)
        loss = B.mul(loss, w)
    return _reduce(loss, reduction)


def _mean_binary_cross_entropy(a, b):
    """The mean of the elementwise loss, whose derivatives divide by n last, as torch's
    backward with reduction='mean' does: ((g (x - t)) / max(x (1 - x), 1e-12)) / n and
    (-logit(x) g) / n. Each tangent is divided by n first: a transpose runs the tangent's
    operations in reverse order."""
    from thunderx.transforms.custom import custom_jvp

    n = float(math.prod(shape(a)))
    axes = tuple(range(ndim(a)))

    @custom_jvp
    def f(x, t):
        return _reduce(KB.binary_cross_entropy(x, t), "mean")

    f.defjvps(
        lambda tx, ans, x, t: R.reduce_sum(KB.bce_backward_p.bind(B.div(tx, n), x, t), axes),
        lambda tt, ans, x, t: R.reduce_sum(KB.target_derivative(B.div(tt, n), x), axes),
    )
    return f(a, b)


@register(F.binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits(
    input,
    target,
    weight=None,
    size_average=None,
    reduce=None,  # noqa: A002
    reduction="mean",
    pos_weight=None,
):
    # torch's form, (1 - y) x - w log(sigmoid(x)) with w = (pos_weight - 1) y + 1 (or 1), for
    # its values bit for bit: -(y log(sigmoid(x)) + (1 - y) log(sigmoid(-x))), equal in exact
    # arithmetic, gave -inf where torch gives nan (x = -inf, y > 1) and cost a second logsigmoid
    x, y = _pair(input, target)
    if weight is None and pos_weight is None and 0 not in shape(x):
        return _bce_with_logits(x, y, reduction)
    return _reduce(_bce_with_logits_loss(x, y, weight, pos_weight), reduction)


def _bce_with_logits_loss(x, y, weight=None, pos_weight=None):
    log_sig = logsigmoid(x)
    if pos_weight is not None:
        (pw, _), _ = promote(pos_weight, x)
        pw = S.broadcast_to(pw, shape(x)) if shape(pw) != shape(x) else pw
        log_sig = B.mul(B.add(B.mul(B.sub(pw, 1.0), y), 1.0), log_sig)
    loss = B.sub(B.mul(B.sub(1.0, y), x), log_sig)
    if weight is not None:
        (loss, w), _ = promote(loss, weight)
        loss = B.mul(loss, w)
    return loss


def _bce_with_logits(x, y, reduction):
    """The loss with torch's derivatives (binary_cross_entropy_with_logits_backward and its
    target backward): (sigmoid(x) - y) g in the input, -x g in the target, divided by n last
    for the mean (each tangent divided first: a transpose runs the tangent's operations in
    reverse). Differentiating (1 - y) x - logsigmoid(x) gave (1 - y) - sigmoid(-x), one ulp
    off torch's in a few entries of every hundred."""
    from thunderx.transforms.custom import custom_jvp

    n = float(math.prod(shape(x)))
    axes = tuple(range(ndim(x)))
    reduce_ = (lambda v: v) if reduction == "none" else (lambda v: R.reduce_sum(v, axes))
    scale = (lambda v: B.div(v, n)) if reduction == "mean" else (lambda v: v)
    if reduction not in ("none", "mean", "sum"):
        _reduce(x, reduction)  # the error for an unknown reduction

    @custom_jvp
    def f(x, y):
        return _reduce(_bce_with_logits_loss(x, y), reduction)

    f.defjvps(
        lambda tx, ans, x, y: reduce_(B.mul(scale(tx), B.sub(U.logistic(x), y))),
        lambda ty, ans, x, y: reduce_(B.mul(scale(ty), U.neg(x))),
    )
    return f(x, y)


@register(F.kl_div)
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):  # noqa: A002
    x, t = _pair(input, target)
    if log_target:
        loss = B.mul(U.exp(t), B.sub(t, x))
    else:
        from thunderx.lang.elementwise_rules import _xlogy

        loss = B.sub(_xlogy(t, t), B.mul(t, x))
    if reduction == "batchmean":
        return B.div(R.reduce_sum(loss, tuple(range(ndim(loss)))), float(shape(loss)[0]))
    return _reduce(loss, reduction)


@register(F.poisson_nll_loss)
def _poisson_nll_loss(
    input,
    target,
    log_input=True,
    full=False,
    size_average=None,
    eps=1e-8,  # noqa: A002
    reduce=None,
    reduction="mean",
):
    x, t = _pair(input, target)
    if log_input:
        loss = B.sub(U.exp(x), B.mul(t, x))
    else:
        loss = B.sub(x, B.mul(t, U.log(B.add(x, eps))))
    if full:
        # torch's Stirling term, where target > 1: t log t - t + log(2 pi t) / 2 (no gradient
        # reaches the input through it)
        big = torch.gt(t, 1)
        safe = torch.where(big, t, 1.0)
        stirling = safe * torch.log(safe) - safe + 0.5 * torch.log(2 * math.pi * safe)
        loss = loss + torch.where(big, stirling, 0.0)
    return _reduce(loss, reduction)
