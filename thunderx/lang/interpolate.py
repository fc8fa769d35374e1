"""Adaptive average pooling (any output size) and the F.upsample* spellings of interpolate.

F.interpolate itself lives in thunderx/lang/vision.py; an adaptive average pool is its "area"
mode over the trailing dims, a reshape and a sum where every window has the same length."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunderx.lang._base import in_opmath, ndim, register, shape
from thunderx.lang.vision import upsample
from thunderx.primitives import binary as B
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S


def _adaptive_avg(k):
    def impl(x, output_size):
        sizes = [output_size] * k if isinstance(output_size, int) else list(output_size)
        if len(sizes) != k:
            raise ValueError(f"adaptive_avg_pool{k}d: output_size must have {k} elements")
        dims = range(ndim(x) - k, ndim(x))
        sizes = [shape(x)[d] if n is None else int(n) for d, n in zip(dims, sizes)]
        if any(shape(x)[d] % n for d, n in zip(dims, sizes)):
            if ndim(x) == k + 1:  # unbatched (C, *spatial)
                return S.squeeze(upsample(S.expand_dims(x, (0,)), "area", sizes, None), (0,))
            return upsample(x, "area", sizes, None)
        out = x
        for d, n in zip(dims, sizes):  # equal windows: a reshape and a sum per dim
            shp = shape(out)
            r = S.reshape(out, shp[:d] + (n, shp[d] // n) + shp[d + 1 :])
            out = B.div(R.reduce_sum(r, (d + 1,)), float(shp[d] // n))
        return out

    impl.__name__ = f"adaptive_avg_pool{k}d"
    return impl


register(F.adaptive_avg_pool1d, torch.adaptive_avg_pool1d)(in_opmath(_adaptive_avg(1)))
register(F.adaptive_avg_pool2d)(in_opmath(_adaptive_avg(2)))
register(F.adaptive_avg_pool3d)(in_opmath(_adaptive_avg(3)))


@register(F.upsample)
def _upsample(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return F.interpolate(x, size, scale_factor, mode, align_corners)


@register(F.upsample_nearest)
def _upsample_nearest(x, size=None, scale_factor=None):
    return F.interpolate(x, size, scale_factor, "nearest")


@register(F.upsample_bilinear)
def _upsample_bilinear(x, size=None, scale_factor=None):
    return F.interpolate(x, size, scale_factor, "bilinear", align_corners=True)
