"""Composite operations in the random programs (thunderx.testing.programs): steps that reach the
channel normalizations (shape-preserving, defined for every input shape, with eps = 1 so that
their derivatives stay well conditioned for finite differences) and the elementwise composites,
and the composites no step can reach, with the reason."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _affine(x, n, parity):
    """A weight and bias for n channels made from x (grad reaches all three cotangents of the
    kernel) where x's number of values has this parity; None for the others (the plain norm)."""
    if x.numel() % 2 != parity:
        return None, None
    flat = x.reshape(-1)
    return flat[:n].cos() + 1.5, flat[-n:] * 0.5


def _group_norm(x):
    # the whole tensor as one group of one sample (torch refuses a group of one value), with a
    # weight and bias per value (its channel)
    if x.numel() <= 1:
        return x
    w, b = _affine(x, x.numel(), 1)
    return F.group_norm(x.reshape(1, -1, 1), 1, w, b, eps=1.0).reshape(x.shape)


def _batch_norm(x):
    # x and sin(x) as two samples: each element is a channel with two values
    both = torch.stack([x, x.sin()]).reshape(2, -1)
    w, b = _affine(x, both.shape[1], 0)
    return F.batch_norm(both, None, None, w, b, training=True, eps=1.0)[0].reshape(x.shape)


def _batch_norm_eval(x):
    # x and cos(x) as two samples of channels normalized with running statistics made from x
    both = torch.stack([x, x.cos()]).reshape(2, -1)
    flat = x.reshape(-1)
    w, b = _affine(x, flat.numel(), 0)
    out = F.batch_norm(both, flat.sin(), flat.cos() + 1.5, w, b, training=False, eps=1.0)
    return out[1].reshape(x.shape)


def _instance_norm(x):
    both = torch.stack([x, x.cos()]).reshape(1, 2, -1)
    return F.instance_norm(both, eps=1.0)[0, 1].reshape(x.shape) if x.numel() > 1 else x


def _layer_norm(x):
    # a weight and bias made from x, so that grad reaches all three cotangents of the kernel
    if x.ndim == 0 or x.shape[-1] < 2:
        return x
    rows = x.reshape(-1, x.shape[-1])
    return F.layer_norm(x, x.shape[-1:], rows[0].cos() + 1.5, rows[-1] * 0.5, eps=1.0)


NORM_STEPS = {
    "group_norm": _group_norm,
    "batch_norm": _batch_norm,
    "batch_norm_eval": _batch_norm_eval,
    "instance_norm": _instance_norm,
    "layer_norm": _layer_norm,
}

# elementwise composites with torch's kernels (their backward kernels reached through grad)
ACTIVATION_STEPS = {
    "silu": F.silu,
    "mish": F.mish,
    "hardswish": lambda x: F.hardswish(x * 2),
    "logsigmoid": F.logsigmoid,
    "selu": F.selu,
    "bce": lambda x: F.binary_cross_entropy(
        torch.sigmoid(x), torch.sigmoid(x * 0.5 + 1), reduction="none"
    ),
    "lerp": lambda x: torch.lerp(x, torch.tanh(x), 0.7),
    "sinc": lambda x: torch.sinc(x * 0.7),
    "addcmul": lambda x: torch.addcmul(x, torch.tanh(x), x, value=0.3),
    "add_scaled": lambda x: torch.sub(torch.sin(x), x, alpha=0.3),
    # a clone mutated in place: the copy primitive, the original left alone
    "clone": lambda x: x.clone().mul_(0.5) + x,
    "addcdiv": lambda x: torch.addcdiv(x, torch.sin(x), x * x + 1.0, value=-0.5),
}

# tangents that appear only in forward mode, which random programs do not stage (grad transposes
# them away)
FORWARD_ONLY = {
    "log_softmax_jvp": "log_softmax's tangent appears only in forward mode, which random "
    "programs do not stage; tests/test_composite.py checks it",
    "max_pool_gather": "max_pool's tangent appears only in forward mode, which random programs "
    "do not stage; tests/test_composite.py and tests/test_composite_cnn.py check it",
    "layer_norm_affine_tangent": "layer_norm's tangent with its affine appears only in forward "
    "mode, which random programs do not stage; tests/test_composite.py and "
    "tests/test_layer_norm_affine.py check it",
    "channel_norm_affine_tangent": "batch and group norm's tangent with their affine appears "
    "only in forward mode, which random programs do not stage; tests/test_composite.py and "
    "tests/test_channel_norm_affine.py check it",
}
