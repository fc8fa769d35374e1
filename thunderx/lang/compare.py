"""Comparisons, logical ops and floating-point classification (isnan, isinf, nan_to_num)."""

from __future__ import annotations

import math

import torch

from thunderx.lang._base import SCALARS, binary, compare, dtype, isnan, register, where
from thunderx.primitives import binary as B
from thunderx.primitives import unary as U

# -------------------------------------------------------------------------------- comparisons

for _names, _fn in (
    ((torch.eq, torch.Tensor.__eq__, "eq"), B.eq),
    ((torch.ne, torch.not_equal, torch.Tensor.__ne__, "ne", "not_equal"), B.ne),
    ((torch.lt, torch.less, torch.Tensor.__lt__, "lt", "less"), B.lt),
    ((torch.le, torch.less_equal, torch.Tensor.__le__, "le", "less_equal"), B.le),
    ((torch.gt, torch.greater, torch.Tensor.__gt__, "gt", "greater"), B.gt),
    ((torch.ge, torch.greater_equal, torch.Tensor.__ge__, "ge", "greater_equal"), B.ge),
):
    register(
        *[f for f in _names if not isinstance(f, str)],
        methods=tuple(f for f in _names if isinstance(f, str)),
    )((lambda fn: lambda x, y, *, out=None: compare(fn, x, y))(_fn))


def _as_bool(x):
    if type(x) in SCALARS:
        return bool(x)
    return x if dtype(x) is torch.bool else B.ne(x, 0)


@register(torch.logical_not, torch.Tensor.__invert__, methods=("logical_not", "bitwise_not"))
def _logical_not(x):
    return U.logical_not(_as_bool(x))


@register(torch.logical_and, torch.Tensor.__and__, torch.Tensor.__rand__, methods=("logical_and",))
def _logical_and(x, y):
    return binary(B.and_p.bind, _as_bool(x), _as_bool(y))


@register(torch.logical_or, torch.Tensor.__or__, torch.Tensor.__ror__, methods=("logical_or",))
def _logical_or(x, y):
    return binary(B.or_p.bind, _as_bool(x), _as_bool(y))


@register(torch.logical_xor, torch.Tensor.__xor__, methods=("logical_xor",))
def _logical_xor(x, y):
    return binary(B.ne, _as_bool(x), _as_bool(y))


@register(torch.isnan, methods=("isnan",))
def _isnan(x):
    return isnan(x)


@register(torch.isfinite, methods=("isfinite",))
def _isfinite(x):
    return U.isfinite(x)


@register(torch.isinf, methods=("isinf",))
def _isinf(x):
    return B.eq(U.abs(x), math.inf)


@register(torch.isposinf)
def _isposinf(x):
    return B.eq(x, math.inf)


@register(torch.isneginf)
def _isneginf(x):
    return B.eq(x, -math.inf)


@register(torch.nan_to_num, methods=("nan_to_num",))
def _nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    big = torch.finfo(dtype(x)).max
    x = where(isnan(x), nan, x)
    x = where(B.eq(x, math.inf), big if posinf is None else posinf, x)
    return where(B.eq(x, -math.inf), -big if neginf is None else neginf, x)
