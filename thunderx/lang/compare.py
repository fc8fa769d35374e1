"""Comparisons, logical ops and floating-point classification (isnan, isinf, nan_to_num)."""

from __future__ import annotations

import math

import torch

from thunderx.lang._base import (
    SCALARS,
    binary,
    compare,
    dtype,
    full_like,
    isnan,
    promote,
    register,
    torch_dtype_name,
    where,
)
from thunderx.primitives import binary as B
from thunderx.primitives import bitwise as BW
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


@register(torch.logical_not, methods=("logical_not",))
def _logical_not(x):
    return U.logical_not(_as_bool(x))


@register(torch.logical_and, methods=("logical_and",))
def _logical_and(x, y):
    return binary(B.and_p.bind, _as_bool(x), _as_bool(y))


@register(torch.logical_or, methods=("logical_or",))
def _logical_or(x, y):
    return binary(B.or_p.bind, _as_bool(x), _as_bool(y))


@register(torch.logical_xor, methods=("logical_xor",))
def _logical_xor(x, y):
    return binary(B.ne, _as_bool(x), _as_bool(y))


# ---------------------------------------------------------------------------- bitwise ops
# torch's `&`, `|`, `^` and `~` are bitwise on integers and logical on bools


def _bitwise(name, prim, on_bools=None):
    def impl(x, y):
        if type(x) in SCALARS and type(y) in SCALARS:
            x = torch.tensor(x)
        (x, y), dt = promote(x, y)
        if dt.is_floating_point or dt.is_complex:
            raise RuntimeError(f'"{name}_cpu" not implemented for {torch_dtype_name(dt)!r}')
        return (on_bools if on_bools is not None and dt is torch.bool else prim.bind)(x, y)

    return impl


_and = _bitwise("bitwise_and", BW.bitwise_and_p, B.and_p.bind)
_or = _bitwise("bitwise_or", BW.bitwise_or_p, B.or_p.bind)
_xor = _bitwise("bitwise_xor", BW.bitwise_xor_p, B.ne)
_lshift = _bitwise("lshift", BW.shift_left_p)
_rshift = _bitwise("rshift", BW.shift_right_p)
register(torch.bitwise_and, torch.Tensor.__and__, methods=("bitwise_and",))(_and)
register(torch.bitwise_or, torch.Tensor.__or__, methods=("bitwise_or",))(_or)
register(torch.bitwise_xor, torch.Tensor.__xor__, methods=("bitwise_xor",))(_xor)
register(torch.Tensor.__rand__)(lambda x, y: _and(y, x))
register(torch.Tensor.__ror__)(lambda x, y: _or(y, x))
register(torch.Tensor.__rxor__)(lambda x, y: _xor(y, x))
register(torch.bitwise_left_shift, torch.Tensor.__lshift__, methods=("bitwise_left_shift",))(
    _lshift
)
register(torch.bitwise_right_shift, torch.Tensor.__rshift__, methods=("bitwise_right_shift",))(
    _rshift
)
register(torch.Tensor.__rlshift__)(lambda x, y: _lshift(y, x))
register(torch.Tensor.__rrshift__)(lambda x, y: _rshift(y, x))


@register(torch.bitwise_not, torch.Tensor.__invert__, methods=("bitwise_not",))
def _bitwise_not(x):
    dt = dtype(x)
    if dt is torch.bool:
        return U.logical_not(x)
    if dt.is_floating_point or dt.is_complex:
        raise RuntimeError(f'"bitwise_not_cpu" not implemented for {torch_dtype_name(dt)!r}')
    return BW.bitwise_not_p.bind(x)


@register(torch.signbit, methods=("signbit",))
def _signbit(x):
    """x < 0, and -0.0 (whose reciprocal is -inf). A nan's sign bit is not read (traced values
    have no bit reinterpretation): signbit of -nan is False here, True in torch."""
    if not dtype(x).is_floating_point:
        return B.lt(x, 0) if dtype(x).is_signed else B.ne(x, x)
    negative_zero = B.and_p.bind(B.eq(x, 0.0), B.lt(B.div(1.0, x), 0.0))
    return B.or_p.bind(B.lt(x, 0.0), negative_zero)


@register(torch.isreal, methods=("isreal",))
def _isreal(x):
    from thunderx.lang.complex import imag

    if dtype(x).is_complex:
        return B.eq(imag(x), 0.0)
    return full_like(x, True, torch.bool)  # every entry of a real tensor is real


@register(torch.heaviside, methods=("heaviside",))
def _heaviside(x, values):
    (a, v), dt = promote(x, values)
    step = U.convert(B.gt(a, 0), dt)
    return U.select(B.eq(a, 0), v, step)


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
