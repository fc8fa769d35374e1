"""Random-program steps (thunderx.testing.programs) that reach the channel normalizations:
shape-preserving and defined for every input shape, with eps = 1 so that their derivatives stay
well conditioned for finite differences."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _group_norm(x):
    # the whole tensor as one group of one sample
    return F.group_norm(x.reshape(1, 1, -1), 1, eps=1.0).reshape(x.shape)


def _batch_norm(x):
    # x and sin(x) as two samples: each element is a channel with two values
    both = torch.stack([x, x.sin()]).reshape(2, -1)
    return F.batch_norm(both, None, None, training=True, eps=1.0)[0].reshape(x.shape)


def _instance_norm(x):
    both = torch.stack([x, x.cos()]).reshape(1, 2, -1)
    return F.instance_norm(both, eps=1.0)[0, 1].reshape(x.shape) if x.numel() > 1 else x


NORM_STEPS = {"group_norm": _group_norm, "batch_norm": _batch_norm, "instance_norm": _instance_norm}
