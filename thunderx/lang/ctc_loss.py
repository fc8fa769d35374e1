"""F.ctc_loss as the CTC forward (alpha) recursion in log space over every time step, written with
gathers and masks so input and target lengths may be traced values: steps past an input's length
keep its alphas, and the loss reads the alphas at 2 * target_length and the one before. Reverse mode
through the recursion gives the alpha-beta gradient of torch's kernel; torch adds
exp(log_probs) to it (see below)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunderx.lang._base import aval, ndim, register, shape


def _logsumexp(*xs):
    """log(sum(exp(x))) with -inf where every term is -inf, and no nan in its derivative."""
    m = xs[0]
    for x in xs[1:]:
        m = torch.maximum(m, x)
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m).detach()
    total = sum(torch.exp(x - shift) for x in xs)
    alive = total > 0
    safe = torch.where(alive, total, torch.ones_like(total))
    return torch.where(alive, shift + torch.log(safe), torch.full_like(total, -torch.inf))


def _lengths(v, n: int, dev, what: str):
    if isinstance(v, (list, tuple)):
        v = torch.tensor(v, dtype=torch.int64, device=dev)
    elif isinstance(v, int):
        v = torch.tensor([v], dtype=torch.int64, device=dev)
    v = v.reshape(-1)
    if shape(v)[0] != n:
        raise ValueError(f"ctc_loss: {what} must have {n} entries, got {shape(v)[0]}")
    return v.to(torch.int64)


@register(F.ctc_loss)
def ctc_loss(
    log_probs,
    targets,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
):
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"ctc_loss: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    unbatched = ndim(log_probs) == 2
    if unbatched:
        log_probs = log_probs.unsqueeze(1)
        if ndim(targets) == 1 and not isinstance(target_lengths, (list, tuple)):
            targets = targets.unsqueeze(0)
    if ndim(log_probs) != 3:
        raise ValueError(f"ctc_loss: log_probs must be (T, N, C) or (T, C), got {shape(log_probs)}")
    steps, batch, classes = shape(log_probs)
    if not 0 <= blank < classes:
        raise ValueError(f"ctc_loss: blank {blank} must be in [0, {classes})")
    dev = aval(log_probs).device
    if isinstance(input_lengths, (list, tuple)) and any(n > steps for n in input_lengths):
        raise ValueError(f"ctc_loss: input_lengths {input_lengths} exceed the {steps} steps")
    if (
        isinstance(target_lengths, (list, tuple))
        and ndim(targets) == 2
        and any(n > shape(targets)[1] for n in target_lengths)
    ):
        raise ValueError(f"ctc_loss: target_lengths {target_lengths} exceed targets' width")
    in_len = _lengths(input_lengths, batch, dev, "input_lengths")
    tg_len = _lengths(target_lengths, batch, dev, "target_lengths")
    if ndim(targets) == 2:
        width = shape(targets)[1]
        labels = targets.to(torch.int64)
    elif ndim(targets) == 1:
        # concatenated targets: row n starts at the sum of the earlier lengths
        width = max(shape(targets)[0], 1)
        starts = torch.cumsum(tg_len, 0) - tg_len
        idx = starts.unsqueeze(1) + torch.arange(width, device=dev)
        idx = idx.clamp(max=max(shape(targets)[0] - 1, 0))
        labels = torch.take(targets.to(torch.int64), idx) if shape(targets)[0] else idx * 0
    else:
        raise ValueError(f"ctc_loss: targets must be 1-D or 2-D, got {shape(targets)}")
    ext = 2 * width + 1
    s = torch.arange(ext, device=dev)
    label_at = torch.gather(labels, 1, ((s - 1) // 2).clamp(min=0).unsqueeze(0).expand(batch, ext))
    ext_labels = torch.where((s % 2 == 1).unsqueeze(0), label_at, torch.full_like(label_at, blank))
    # s - 2 may be skipped into s where s holds a label that differs from the one at s - 2
    prev2 = torch.cat([ext_labels[:, :2], ext_labels[:, :-2]], 1)
    skip = (ext_labels != blank) & (ext_labels != prev2) & (s >= 2).unsqueeze(0)
    lp = torch.gather(log_probs, 2, ext_labels.unsqueeze(0).expand(steps, batch, ext))
    neg_inf = torch.full((batch, ext), -torch.inf, dtype=log_probs.dtype, device=dev)
    first = (s < 2).unsqueeze(0) & ((s == 0).unsqueeze(0) | (tg_len > 0).unsqueeze(1))
    alpha = torch.where(first, lp[0], neg_inf)
    pad1 = torch.full((batch, 1), -torch.inf, dtype=log_probs.dtype, device=dev)
    pad2 = torch.full((batch, 2), -torch.inf, dtype=log_probs.dtype, device=dev)
    for t in range(1, steps):
        a1 = torch.cat([pad1, alpha[:, :-1]], 1)
        a2 = torch.cat([pad2, alpha[:, :-2]], 1)
        a2 = torch.where(skip, a2, neg_inf)
        new = _logsumexp(alpha, a1, a2) + lp[t]
        alpha = torch.where((t < in_len).unsqueeze(1), new, alpha)
    last = (2 * tg_len).unsqueeze(1)
    end = torch.gather(alpha, 1, last).squeeze(1)
    before = torch.gather(alpha, 1, (last - 1).clamp(min=0)).squeeze(1)
    before = torch.where(tg_len > 0, before, torch.full_like(before, -torch.inf))
    loss = -_logsumexp(end, before)
    # torch's kernel returns the gradient for log_softmax's *input*: its derivative w.r.t.
    # log_probs carries an extra exp(log_probs) * grad per live step (ATen LossCTC.cpp, "grad =
    # exp(lp) - ..."). A term of value exactly 0 (x - x) with that derivative reproduces it.
    live = (torch.arange(steps, device=dev).unsqueeze(1) < in_len.unsqueeze(0)).unsqueeze(2)
    plain = log_probs.detach()
    extra = torch.where(live, torch.exp(plain) * (log_probs - plain), torch.zeros_like(plain))
    loss = loss + extra.sum((0, 2))
    if zero_infinity:
        loss = torch.where(torch.isinf(loss), torch.zeros_like(loss), loss)
    if reduction == "mean":
        return (loss / tg_len.clamp(min=1).to(loss.dtype)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss.squeeze(0) if unbatched else loss
