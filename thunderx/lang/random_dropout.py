"""The dropout family under transforms (dropout, dropout1d/2d/3d, feature_dropout, alpha and
feature-alpha dropout): a keep-mask of torch's own bernoulli_ noise, batch first under eager
vmap(randomness="different") as torch.func draws it (eager grad, vjp or jvp levels between
included), or where such a vmap is staged a uniform draw per batch element."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.core import get_aval
from thunderx.lang import random_exact as exact
from thunderx.lang.random import _vmap_mode, draw, register_random, runtime_draw


def _torch_bernoulli(shape, p, *, dtype, device, generator=None):
    # torch's kernel itself, past the RandomnessMode that routes user code's bernoulli_
    with torch._C.DisableTorchFunction():
        return torch.empty(shape, dtype=dtype, device=device).bernoulli_(p, generator=generator)


def _keep(shape, p, dtype, device, name):
    """1.0 with probability 1 - p, else 0.0: torch's own `empty(shape).bernoulli_(1 - p)`, the
    noise torch's dropouts draw, so with the same seed the masks are eager torch's; under eager
    vmaps with randomness="different" the same draw with the batch in front, as torch.func
    draws it (its masks, batched or not: `vmap(F.dropout)` over 4 examples of shape (10,) is
    `empty(4, 10).bernoulli_(1 - p)`), eager grad, vjp or jvp levels between included. Where a
    "different" vmap is staged (jit), uniform draws compared with `p` (the distribution, not
    torch.func's numbers)."""
    if _vmap_mode(name):
        noise = exact.factory(
            name,
            lambda prefix: _torch_bernoulli(
                prefix + tuple(shape), 1.0 - p, dtype=dtype, device=device
            ),
        )
        if noise is not exact.NOT_EXACT:
            return noise
        return (draw("uniform", shape, dtype, device, name) >= p).to(dtype)
    return runtime_draw(_torch_bernoulli, (tuple(shape), 1.0 - p), dtype, device)


def _dropout(x, p=0.5, training=True, inplace=False):
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    a = get_aval(x)
    return x * (_keep(a.shape, p, a.dtype, a.device, "dropout") / (1.0 - p))


def _feature_shape(shape, name):
    """The noise shape of channel-wise dropout: one draw per (batch, channel), as torch picks
    it (dropout1d/3d treat a rank-2/4 input as unbatched; dropout2d treats rank 3 as (N, C, L))."""
    n = len(shape)
    unbatched = {"dropout1d": 2, "dropout3d": 4}.get(name)
    if n < 2:
        raise ValueError(f"{name}: expected an input of rank >= 2, got shape {tuple(shape)}")
    if n == unbatched:
        return shape[:1] + (1,) * (n - 1)
    return shape[:2] + (1,) * (n - 2)


def _keep_mask(x, p, name, feature):
    a = get_aval(x)
    shape = _feature_shape(a.shape, name) if feature else a.shape
    return _keep(shape, p, a.dtype, a.device, name)


def _feature_dropout(name):
    def impl(x, p=0.5, training=True, inplace=False):
        if not training or p == 0.0:
            return x
        if p == 1.0:
            return x * 0.0
        return x * (_keep_mask(x, p, name, True).to(get_aval(x).dtype) / (1.0 - p))

    return impl


_SELU_ALPHA = 1.7580993408473766  # -selu's lower limit: alpha * scale


def _alpha_dropout(name, feature):
    """torch's alpha dropout: dropped units are set to selu's saturation value, then an affine
    map restores the mean and variance."""

    def impl(x, p=0.5, training=False, inplace=False):
        if not training or p == 0.0:
            return x
        if p == 1.0:
            return x * 0.0
        keep = _keep_mask(x, p, name, feature).to(get_aval(x).dtype)
        a = 1.0 / math.sqrt((_SELU_ALPHA**2 * p + 1) * (1 - p))
        b = (keep - 1.0) * (_SELU_ALPHA * a) + _SELU_ALPHA * a * p
        return x * (keep * a) + b

    return impl


DROPOUTS = {
    F.dropout: _dropout,
    torch.dropout: lambda x, p, train: _dropout(x, p, train),
    F.dropout1d: _feature_dropout("dropout1d"),
    F.dropout2d: _feature_dropout("dropout2d"),
    F.dropout3d: _feature_dropout("dropout3d"),
    torch.feature_dropout: lambda x, p, train: _feature_dropout("feature_dropout")(x, p, train),
    F.alpha_dropout: _alpha_dropout("alpha_dropout", False),
    torch.alpha_dropout: lambda x, p, train: _alpha_dropout("alpha_dropout", False)(x, p, train),
    F.feature_alpha_dropout: _alpha_dropout("feature_alpha_dropout", True),
    torch.feature_alpha_dropout: lambda x, p, train: _alpha_dropout("feature_alpha_dropout", True)(
        x, p, train
    ),
}
for _fn, _impl in DROPOUTS.items():
    register_random(_fn, _impl)
