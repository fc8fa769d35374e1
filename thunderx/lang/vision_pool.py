"""max_unpool and fractional max pooling (adaptive max pooling: lang/adaptive_max.py), decomposed onto
gathers, scatters and reductions.

Pooling windows are static index tables built from the shapes (adaptive: torch's
start = floor(i * in / out), end = ceil((i + 1) * in / out); a short window repeats its last
position, which never changes a maximum nor its first index). Each window is gathered in torch's
visiting order (row-major), `argmax` picks the first maximum as ATen's kernels do, and the value is
gathered at that flat index, so the derivative goes exactly where torch sends it."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.lang._base import ndim, register, shape


def _sizes(v, n: int, what: str, fn: str) -> tuple:
    if isinstance(v, (tuple, list)):
        v = tuple(v) * n if len(v) == 1 else tuple(v)
    else:
        v = (v,) * n
    if len(v) != n:
        raise ValueError(f"{fn}: {what} must be an int or {n} ints, got {v}")
    return v


def _window_max(x, nsp: int, tables):
    """Max over windows given per-dim position tables (out_d, k_d) or (*lead, out_d, k_d).

    Returns (values, flat indices over x's spatial dims) with torch's first-maximum index."""
    lead = ndim(x) - nsp
    sp = shape(x)[lead:]
    lead_shape = shape(x)[:lead]
    # flat position of each window tap: (*lead_or_1, out_1..out_n, k_1*...*k_n)
    pos = None
    for d, t in enumerate(tables):
        tl = t.dim() - 2  # leading dims of the table (0 for static tables)
        o, k = t.shape[-2], t.shape[-1]
        view = [1] * nsp * 2
        view[d], view[nsp + d] = o, k
        t = t.reshape(tuple(t.shape[:tl]) + (1,) * (lead - tl) + tuple(view))
        term = t * math.prod(sp[d + 1 :])
        pos = term if pos is None else pos + term
    outs = tuple(pos.shape[lead : lead + nsp])
    ks = tuple(pos.shape[lead + nsp :])
    pos = pos.reshape(tuple(pos.shape[:lead]) + outs + (math.prod(ks),))
    pos = pos.expand(lead_shape + outs + (math.prod(ks),))
    flat_x = x.reshape(lead_shape + (math.prod(sp),))
    taps = torch.gather(flat_x, -1, pos.reshape(lead_shape + (math.prod(outs) * math.prod(ks),)))
    taps = taps.reshape(lead_shape + outs + (math.prod(ks),))
    which = torch.argmax(taps, -1, keepdim=True)
    idx = torch.gather(pos, -1, which)
    values = torch.gather(taps, -1, which).squeeze(-1)
    return values, idx.squeeze(-1)


def _max_unpool(nsp: int):
    fn = f"max_unpool{nsp}d"

    def impl(x, indices, kernel_size, stride=None, padding=0, output_size=None):
        if ndim(x) not in (nsp + 1, nsp + 2):
            raise ValueError(f"{fn}: input must have {nsp + 1} or {nsp + 2} dims")
        if tuple(shape(indices)) != tuple(shape(x)):
            raise ValueError(f"{fn}: indices shape {shape(indices)} must match input {shape(x)}")
        kernel = _sizes(kernel_size, nsp, "kernel_size", fn)
        stride = _sizes(stride if stride is not None else kernel, nsp, "stride", fn)
        padding = _sizes(padding, nsp, "padding", fn)
        sp = shape(x)[-nsp:]
        default = tuple((n - 1) * s - 2 * p + k for n, s, p, k in zip(sp, stride, padding, kernel))
        if output_size is None:
            out_sp = default
        else:
            out_sp = tuple(int(o) for o in output_size)
            if len(out_sp) == nsp + 2 or len(out_sp) == ndim(x):
                out_sp = out_sp[-nsp:]
            if len(out_sp) != nsp:
                raise ValueError(f"{fn}: output_size must have {nsp} spatial sizes")
            for o, dflt, s in zip(out_sp, default, stride):
                if not dflt - s < o < dflt + s:
                    raise ValueError(f"{fn}: output_size {out_sp} out of range near {default}")
        lead = shape(x)[:-nsp]
        flat_x = x.reshape(lead + (-1,))
        flat_i = indices.reshape(lead + (-1,))
        size = math.prod(out_sp)
        # torch's kernel writes in input order, so of repeated indices the last one wins; its
        # derivative still gathers the output's cotangent at every index (losers included).
        # Losers contribute x - x = 0 exactly, and the gradient reaches every position.
        pos = torch.arange(shape(flat_i)[-1], device=x.device).expand(shape(flat_i))
        last = torch.full(lead + (size,), -1, dtype=torch.int64, device=x.device)
        last = last.scatter_reduce(-1, flat_i, pos, "amax", include_self=True)
        winner = torch.gather(last, -1, flat_i) == pos
        src = flat_x - torch.where(winner, torch.zeros_like(flat_x), flat_x).detach()
        out = torch.zeros(lead + (size,), dtype=x.dtype, device=x.device)
        out = out.scatter_add(-1, flat_i, src)
        return out.reshape(lead + out_sp)

    impl.__name__ = fn
    return impl


register(F.max_unpool1d)(_max_unpool(1))
register(F.max_unpool2d)(_max_unpool(2))
register(F.max_unpool3d)(_max_unpool(3))


def _fractional_starts(u, n_in: int, n_out: int, k: int):
    """ATen's generate_intervals for samples u (any shape): the (..., n_out) window starts."""
    last = torch.full(tuple(u.shape) + (1,), n_in - k, dtype=torch.int64, device=u.device)
    if n_out == 1:
        return last
    alpha = torch.tensor(n_in - k, dtype=u.dtype) / (n_out - 1)  # in the samples' dtype, as ATen
    i = torch.arange(n_out - 1, dtype=u.dtype, device=u.device)
    u = u.unsqueeze(-1)
    starts = torch.trunc((i + u) * alpha) - torch.trunc(u * alpha)
    return torch.cat([starts.to(torch.int64), last], -1)


def _fractional_max(nsp: int):
    fn = f"fractional_max_pool{nsp}d"

    def impl(
        x,
        kernel_size,
        output_size=None,
        output_ratio=None,
        return_indices=False,
        _random_samples=None,
    ):
        if ndim(x) not in (nsp + 1, nsp + 2):
            raise ValueError(f"{fn}: input must have {nsp + 1} or {nsp + 2} dims")
        kernel = _sizes(kernel_size, nsp, "kernel_size", fn)
        sp = shape(x)[-nsp:]
        if output_size is None:
            if output_ratio is None:
                raise ValueError(f"{fn} requires specifying either an output_size or output_ratio")
            ratio = _sizes(output_ratio, nsp, "output_ratio", fn)
            output_size = tuple(int(n * r) for n, r in zip(sp, ratio))
        outs = _sizes(output_size, nsp, "output_size", fn)
        for n, o, k in zip(sp, outs, kernel):
            if o + k - 1 > n:
                raise ValueError(
                    f"{fn}: output_size {outs} + kernel_size {kernel} - 1 exceeds input {sp}"
                )
        unbatched = ndim(x) == nsp + 1
        n_batch = 1 if unbatched else shape(x)[0]
        channels = shape(x)[-nsp - 1]
        samples = _random_samples
        if samples is None:
            samples = torch.rand(n_batch, channels, nsp, dtype=x.dtype, device=x.device)
        if tuple(shape(samples)) != (n_batch, channels, nsp):
            raise ValueError(
                f"{fn}: _random_samples must have shape {(n_batch, channels, nsp)}, "
                f"got {tuple(shape(samples))}"
            )
        if unbatched:
            samples = samples[0]
        # ATen reads the samples as (W, H) in 2-D and (T, H, W) in 3-D
        order = (1, 0) if nsp == 2 else tuple(range(nsp))
        tables = []
        for d in range(nsp):
            starts = _fractional_starts(samples[..., order[d]], sp[d], outs[d], kernel[d])
            tables.append(starts.unsqueeze(-1) + torch.arange(kernel[d], device=x.device))
        values, idx = _window_max(x, nsp, tables)
        return (values, idx) if return_indices else values

    impl.__name__ = fn
    return impl


for _n in (2, 3):
    _f = _fractional_max(_n)
    register(getattr(F, f"fractional_max_pool{_n}d"))(_f)
    register(getattr(F, f"fractional_max_pool{_n}d_with_indices"))(
        lambda x, *a, _f=_f, **k: _f(x, *a, **{**k, "return_indices": True})
    )
