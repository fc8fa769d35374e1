"""Losses op_db lists beyond lang/losses.py: margin, hinge, soft-margin, cosine-embedding,
triplet, Gaussian NLL and multi-class margin losses, in torch's formulas, written with torch calls
the language layer already decomposes."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.lang._base import ndim, register, shape
from thunderx.lang.losses import _reduce


@register(F.margin_ranking_loss)
def _margin_ranking_loss(
    x1, x2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"
):
    loss = torch.clamp_min(-target * (x1 - x2) + margin, 0.0)
    return _reduce(loss, reduction)


@register(F.hinge_embedding_loss)
def _hinge_embedding_loss(x, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    margin_part = torch.where(target != 1, torch.clamp_min(margin - x, 0.0), 0.0)
    self_part = torch.where(target != -1, x, 0.0)
    return _reduce(margin_part + self_part, reduction)


@register(F.soft_margin_loss)
def _soft_margin_loss(x, target, size_average=None, reduce=None, reduction="mean"):
    return _reduce(torch.log1p(torch.exp(-target * x)), reduction)


@register(F.multilabel_soft_margin_loss)
def _multilabel_soft_margin_loss(
    x, target, weight=None, size_average=None, reduce=None, reduction="mean"
):
    loss = -(target * F.logsigmoid(x) + (1 - target) * F.logsigmoid(-x))
    if weight is not None:
        loss = loss * weight
    loss = loss.sum(-1) / shape(x)[-1] if ndim(x) else loss
    return _reduce(loss, reduction)


@register(F.cosine_embedding_loss)
def _cosine_embedding_loss(
    x1, x2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"
):
    eps = 1e-12
    d = ndim(target)
    prod = (x1 * x2).sum(d)
    mag1 = (x1 * x1).sum(d) + eps
    mag2 = (x2 * x2).sum(d) + eps
    cos = prod / torch.sqrt(mag1 * mag2)
    pos = torch.where(target == 1, 1 - cos, 0.0)
    neg = torch.where(target == -1, torch.clamp_min(cos - margin, 0.0), 0.0)
    return _reduce(pos + neg, reduction)


@register(F.triplet_margin_loss)
def _triplet_margin_loss(
    anchor,
    positive,
    negative,
    margin=1.0,
    p=2.0,
    eps=1e-6,
    swap=False,
    size_average=None,
    reduce=None,
    reduction="mean",
):
    def dist(a, b):
        return F.pairwise_distance(a, b, p, eps)

    return _triplet(anchor, positive, negative, dist, margin, swap, reduction)


@register(F.triplet_margin_with_distance_loss)
def _triplet_margin_with_distance_loss(
    anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False, reduction="mean"
):
    return _triplet(
        anchor,
        positive,
        negative,
        distance_function or F.pairwise_distance,
        margin,
        swap,
        reduction,
    )


def _triplet(anchor, positive, negative, dist, margin, swap, reduction):
    d_pos = dist(anchor, positive)
    d_neg = dist(anchor, negative)
    if swap:
        d_neg = torch.minimum(d_neg, dist(positive, negative))
    return _reduce(torch.clamp_min(margin + d_pos - d_neg, 0.0), reduction)


@register(F.gaussian_nll_loss)
def _gaussian_nll_loss(x, target, var, full=False, eps=1e-6, reduction="mean"):
    if shape(var) != shape(x):
        if shape(x)[:-1] == shape(var):
            var = var.unsqueeze(-1)
        elif not (shape(x)[:-1] == shape(var)[:-1] and shape(var)[-1] == 1):
            raise ValueError("gaussian_nll_loss: var is of incorrect size")
    if isinstance(var, torch.Tensor) and bool((var < 0).any()):
        raise ValueError("gaussian_nll_loss: var has negative entry/entries")
    # torch clamps var in place under no_grad: the value is clamped, the gradient passes as is
    var = var + (torch.clamp_min(var, eps) - var).detach()
    loss = 0.5 * (torch.log(var) + (x - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


@register(F.multi_margin_loss)
def _multi_margin_loss(
    x, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"
):
    if p not in (1, 2):
        raise ValueError("multi_margin_loss: only p == 1 and p == 2 are supported")
    xs = x if ndim(x) == 2 else x.reshape(1, -1)
    t = target.reshape(-1, 1)
    picked = xs.gather(1, t)
    h = torch.clamp_min(margin - picked + xs, 0.0)
    if p == 2:
        h = h * h
    if weight is not None:
        h = h * weight[t]
    classes = torch.arange(shape(xs)[1], device=xs.device)
    h = torch.where(classes[None, :] == t, 0.0, h)
    loss = h.sum(1) / shape(xs)[1]
    return _reduce(loss if ndim(x) == 2 else loss.reshape(()), reduction)


@register(F.multilabel_margin_loss)
def _multilabel_margin_loss(x, target, size_average=None, reduce=None, reduction="mean"):
    xs = x if ndim(x) == 2 else x.reshape(1, -1)
    ts = target if ndim(target) == 2 else target.reshape(1, -1)
    c = shape(xs)[1]
    valid = torch.cumprod((ts != -1).to(torch.int64), 1)  # the targets before the first -1
    classes = torch.arange(c, device=xs.device)
    hit = (ts[:, :, None] == classes[None, None, :]) & (valid[:, :, None] > 0)
    count = hit.sum(1).to(xs.dtype)  # how often class j is listed
    is_target = hit.any(1)
    h = torch.clamp_min(1.0 - xs[:, :, None] + xs[:, None, :], 0.0)  # [n, j, i]
    h = h * count[:, :, None] * (~is_target)[:, None, :].to(xs.dtype)
    loss = h.sum((1, 2)) / c
    return _reduce(loss if ndim(x) == 2 else loss.reshape(()), reduction)
