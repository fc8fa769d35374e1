"""Other spellings of functions the language layer already has: torch.special's aliases of torch
functions, torch.nn.functional's in-place variants (`F.relu_`, `F.elu_`, ...) and the power-average
pools (`F.lp_pool1d/2d/3d`, written with avg/max pooling as torch writes them)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.lang._base import register

_SPECIAL = {
    "digamma": torch.digamma,
    "psi": torch.digamma,
    "erf": torch.erf,
    "erfc": torch.erfc,
    "erfinv": torch.erfinv,
    "expm1": torch.expm1,
    "log1p": torch.log1p,
    "gammaln": torch.lgamma,
    "logsumexp": torch.logsumexp,
    "round": torch.round,
}


def _alias(target):
    def impl(*args, **kwargs):
        return target(*args, **kwargs)

    impl.__name__ = getattr(target, "__name__", "alias")
    return impl


for _name, _target in _SPECIAL.items():
    register(getattr(torch.special, _name))(_alias(_target))


_INPLACE = {
    "relu_": F.relu,
    "elu_": F.elu,
    "celu_": F.celu,
    "selu_": F.selu,
    "leaky_relu_": F.leaky_relu,
    "hardtanh_": F.hardtanh,
    "threshold_": F.threshold,
    "rrelu_": F.rrelu,
}


def _in_place(out_of_place):
    """`F.op_(x, ...)`: x holds op(x, ...) afterwards and is returned (an in-place write of a
    traced value, recorded as the language layer records `x.copy_`)."""

    def impl(x, *args, **kwargs):
        kwargs.pop("inplace", None)
        return x.copy_(out_of_place(x, *args, **kwargs))

    impl.__name__ = out_of_place.__name__ + "_"
    return impl


for _name, _target in _INPLACE.items():
    register(getattr(F, _name))(_in_place(_target))


def _lp_pool(avg_pool, max_pool, n: int):
    def impl(x, norm_type, kernel_size, stride=None, ceil_mode=False):
        ks = (kernel_size,) * n if isinstance(kernel_size, int) else tuple(kernel_size)
        if norm_type == math.inf:
            return max_pool(x.abs(), ks, stride, 0, 1, ceil_mode)
        if norm_type == -math.inf:
            return -max_pool(-x.abs(), ks, stride, 0, 1, ceil_mode)
        out = avg_pool(x.pow(norm_type), ks, stride if stride is not None else ks, 0, ceil_mode)
        return (torch.sign(out) * F.relu(torch.abs(out))).mul(math.prod(ks)).pow(1.0 / norm_type)

    impl.__name__ = f"lp_pool{n}d"
    return impl


register(F.lp_pool1d)(_lp_pool(F.avg_pool1d, F.max_pool1d, 1))
register(F.lp_pool2d)(_lp_pool(F.avg_pool2d, F.max_pool2d, 2))
register(F.lp_pool3d)(_lp_pool(F.avg_pool3d, F.max_pool3d, 3))
