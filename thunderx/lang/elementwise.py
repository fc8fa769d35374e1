"""Elementwise torch functions: math, arithmetic operators, comparisons, where/clamp."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.avals import is_float
from thunderx.errors import unsupported
from thunderx.lang._base import (
    SCALARS,
    binary,
    broadcast_shapes,
    broadcast_to,
    compare,
    convert,
    dtype,
    float_operand,
    full_like,
    is_tensor,
    isnan,
    promote,
    register,
    shape,
    where,
)
from thunderx.primitives import binary as B
from thunderx.primitives import composite_addc as KAC
from thunderx.primitives import composite_lerp as KL
from thunderx.primitives import unary as U

# ------------------------------------------------------------------------------------ unary math

_FLOAT_UNARY = {
    "exp": U.exp,
    "expm1": U.expm1,
    "log": U.log,
    "log1p": U.log1p,
    "sqrt": U.sqrt,
    "rsqrt": U.rsqrt,
    "sin": U.sin,
    "cos": U.cos,
    "tan": U.tan,
    "sinh": U.sinh,
    "cosh": U.cosh,
    "tanh": U.tanh,
    "asin": U.asin,
    "acos": U.acos,
    "atan": U.atan,
    "asinh": U.asinh,
    "acosh": U.acosh,
    "atanh": U.atanh,
    "sigmoid": U.logistic,
    "erf": U.erf,
    "erfc": U.erfc,
    "erfinv": U.erfinv,
    "lgamma": U.lgamma,
    "digamma": U.digamma,
    "reciprocal": U.reciprocal,
}
_ALIASES = {
    "asin": ("arcsin",),
    "acos": ("arccos",),
    "atan": ("arctan",),
    "asinh": ("arcsinh",),
    "acosh": ("arccosh",),
    "atanh": ("arctanh",),
}


def _def_float_unary(name, prim_fn):
    def impl(x, *, out=None):
        _no_out(name, out)
        return prim_fn(float_operand(x))

    impl.__name__ = name
    fns = [getattr(torch, name)]
    for alias in _ALIASES.get(name, ()):
        fns.append(getattr(torch, alias))
    if name == "sigmoid":
        fns += [torch.special.expit, F.sigmoid]
    if name == "tanh":
        fns.append(F.tanh)
    register(*fns, methods=(name,) + _ALIASES.get(name, ()))(impl)


def _no_out(name, out):
    if out is not None:
        raise unsupported(f"torch.{name}(..., out=...)", "out= arguments mutate; return the result")


for _n, _f in _FLOAT_UNARY.items():
    _def_float_unary(_n, _f)


def _int_preserving(name, prim_fn, int_fn=None):
    def impl(x, *, out=None):
        _no_out(name, out)
        if not is_float(dtype(x)):
            return x if int_fn is None else int_fn(x)
        return prim_fn(x)

    register(getattr(torch, name), methods=(name,))(impl)


_int_preserving("floor", U.floor)
_int_preserving("ceil", U.ceil)
_int_preserving("trunc", U.trunc)
_int_preserving("fix", U.trunc)


@register(torch.round, methods=("round",))
def _round(x, *, decimals=0, out=None):
    _no_out("round", out)
    if not is_float(dtype(x)):
        return x
    if decimals == 0:
        return U.round(x)
    scale = 10.0**decimals
    return B.div(U.round(B.mul(x, scale)), scale)


@register(torch.neg, torch.negative, torch.Tensor.__neg__, methods=("neg", "negative"))
def _neg(x):
    if dtype(x) is torch.bool:
        raise TypeError("negation of a bool tensor is not supported; use ~ or logical_not")
    return U.neg(x)


@register(torch.abs, torch.absolute, torch.Tensor.__abs__, methods=("abs", "absolute"))
def _abs(x):
    if dtype(x).is_complex:
        from thunderx.lang.complex import abs_complex

        return abs_complex(x)
    return x if dtype(x) is torch.bool else U.abs(x)


@register(torch.sign, torch.sgn, methods=("sign", "sgn"))
def _sign(x):
    if dtype(x).is_complex:  # torch.sgn (torch.sign refuses complex inputs)
        from thunderx.lang.complex import sgn_complex

        return sgn_complex(x)
    return x if dtype(x) is torch.bool else U.sign(x)


@register(torch.exp2, torch.special.exp2, methods=("exp2",))
def _exp2(x):
    # pow(2, x), as torch's kernel: exact powers of two at integers, unlike exp(x log 2)
    return B.pow(2.0, float_operand(x))


@register(torch.log2, methods=("log2",))
def _log2(x):
    return U.log2(float_operand(x))


@register(torch.log10, methods=("log10",))
def _log10(x):
    return U.log10(float_operand(x))


@register(torch.square, methods=("square",))
def _square(x):
    if dtype(x) is torch.bool:  # torch squares bools as int64
        x = convert(x, torch.int64)
    return B.mul(x, x)


@register(torch.frac, methods=("frac",))
def _frac(x):
    return B.sub(x, U.trunc(x))


@register(torch.logit, torch.special.logit, methods=("logit",))
def _logit(x, eps=None):
    """torch's kernel, log(x / (1 - x)) of x (clamped to [eps, 1 - eps] with eps), and its
    logit_backward: g / (x (1 - x)) on [0, 1] (+-inf at the ends), nan outside; with eps, 0
    outside [eps, 1 - eps]. The quotient's own chain rule gave nan at 0 and a finite slope
    outside [0, 1], where the value is nan."""
    from thunderx.transforms.custom import custom_jvp

    x = float_operand(x)
    lo, hi = (0.0, 1.0) if eps is None else (eps, 1.0 - eps)

    @custom_jvp
    def f(x):
        v = x if eps is None else _clamp(x, lo, hi)
        return U.log(B.div(v, B.sub(1.0, v)))

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        outside = B.or_p.bind(B.lt(x, lo), B.gt(x, hi))
        denom = B.mul(x, B.sub(1.0, x))
        if eps is None:  # t / nan outside: nan in both modes, only there
            return f(x), B.div(t, U.select(outside, math.nan, denom))
        # 0 outside whatever the tangent; the unselected quotient kept finite (x (1 - x) may
        # be 0 there, and its transpose divides a zero cotangent by it)
        return f(x), U.select(outside, 0.0, B.div(t, U.select(outside, 1.0, denom)))

    return f(x)


@register(torch.polygamma, torch.special.polygamma)
def _polygamma(n, x):
    return U.polygamma(float_operand(x), int(n))


# ------------------------------------------------------------------------------------- binary


def _addc_operands(*xs):
    """The operands in their promoted floating dtype and broadcast shape, or None."""
    if not all(is_tensor(v) for v in xs):
        return None
    ops, dt = promote(*xs)
    if not is_float(dt) or dt.is_complex:
        return None
    shp = broadcast_shapes(*(shape(v) for v in ops))
    return [broadcast_to(v, shp) for v in ops]


def _alpha(y, alpha):
    return y if alpha == 1 else binary(B.mul, y, alpha)


def _scaled_sum(x, y, alpha, sign, op):
    """x + alpha y (sign 1) or x - alpha y (sign -1): torch's kernel (composite_addc.py) for
    floating tensors with alpha != 1, else `op` of x and alpha y."""
    if alpha != 1 and type(alpha) in (int, float):
        ops = _addc_operands(x, y)
        if ops is not None:
            return KAC.add_scaled(*ops, sign * alpha)
    return binary(op, x, _alpha(y, alpha))


@register(torch.add, torch.Tensor.__add__, torch.Tensor.__radd__, methods=("add",))
def _add(x, y, *, alpha=1, out=None):
    _no_out("add", out)
    return _scaled_sum(x, y, alpha, 1, B.add)


@register(torch.sub, torch.subtract, torch.Tensor.__sub__, methods=("sub", "subtract"))
def _sub(x, y, *, alpha=1, out=None):
    _no_out("sub", out)
    if dtype(x) is torch.bool and (type(y) in SCALARS or dtype(y) is torch.bool):
        raise TypeError("subtraction of bool tensors is not supported; use logical_xor")
    return _scaled_sum(x, y, alpha, -1, B.sub)


@register(torch.Tensor.__rsub__, torch.rsub)
def _rsub(x, y, *, alpha=1):
    return _scaled_sum(y, x, alpha, -1, B.sub)


@register(
    torch.mul,
    torch.multiply,
    torch.Tensor.__mul__,
    torch.Tensor.__rmul__,
    methods=("mul", "multiply"),
)
def _mul(x, y, *, out=None):
    _no_out("mul", out)
    if dtype(x) is torch.bool and (type(y) is bool or dtype(y) is torch.bool):
        return binary(B.and_p.bind, x, y)
    return binary(B.mul, x, y)


@register(
    torch.div,
    torch.divide,
    torch.true_divide,
    torch.Tensor.__truediv__,
    methods=("div", "divide", "true_divide"),
)
def _div(x, y, *, rounding_mode=None, out=None):
    _no_out("div", out)
    if rounding_mode is None:
        return binary(B.div, x, y, to_float=True)
    (a, b), dt = promote(x, y)
    if rounding_mode == "trunc":
        return U.trunc(B.div(a, b)) if is_float(dt) else B.div(a, b)
    if rounding_mode == "floor":
        return _floor_divide(a, b)
    raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")


@register(torch.Tensor.__rtruediv__)
def _rtruediv(x, y):
    return binary(B.div, y, x, to_float=True)


@register(torch.floor_divide, torch.Tensor.__floordiv__, methods=("floor_divide",))
def _floor_divide(x, y):
    (a, b), dt = promote(x, y)
    if dt in (torch.float16, torch.bfloat16):
        # in float32, rounding once, as torch's scalar loop (its vectorized loop rounds every
        # step to dt and can pass the quotient: pytorch#193754); a Python scalar operand stays
        # a float32 as in torch, not rounded to dt
        a, b = (v if type(v) in SCALARS else U.convert(v, torch.float32) for v in (a, b))
        return U.convert(B.floor_divide_float(a, b), dt)
    if is_float(dt):
        return B.floor_divide_float(a, b)
    if dt is torch.uint8:
        # torch casts a negative Python int to uint8 (it wraps: // -7 is // 249); unsigned
        # quotients truncate and floor alike
        return B.div(*(v % 256 if type(v) is int else v for v in (a, b)))
    q = B.div(a, b)  # truncates
    adjust = B.and_p.bind(B.ne(B.rem_p.bind(a, b), 0), B.ne(B.lt(a, 0), B.lt(b, 0)))
    return U.select(adjust, B.sub(q, 1), q)


@register(torch.Tensor.__rfloordiv__)
def _rfloordiv(x, y):
    return _floor_divide(y, x)


@register(torch.pow, torch.Tensor.__pow__, methods=("pow",))
def _pow(x, y):
    if type(x) in SCALARS:
        return _rpow(y, x)
    if type(y) in SCALARS and not is_float(dtype(x)) and isinstance(y, float):
        x = float_operand(x)
    return binary(B.pow, x, y)


@register(torch.Tensor.__rpow__)
def _rpow(x, y):
    # y ** x; a tensor y (the unbound `Tensor.__rpow__(x, y)`) broadcasts and promotes as pow
    if is_tensor(y):
        return torch.pow(y, x)
    if not is_float(dtype(x)) and isinstance(y, float):
        x = float_operand(x)
    (xx,), dt = promote(x)
    return B.pow(convert(y, dt), xx)


@register(torch.float_power, methods=("float_power",))
def _float_power(x, y):
    x = convert(x, torch.float64) if is_tensor(x) else float(x)
    y = convert(y, torch.float64) if is_tensor(y) else float(y)
    return _pow(x, y) if is_tensor(x) else _rpow(y, x)


@register(torch.atan2, torch.arctan2, methods=("atan2", "arctan2"))
def _atan2(x, y):
    return binary(B.atan2_p.bind, x, y, to_float=True)


@register(torch.maximum, methods=("maximum",))
def _maximum(x, y):
    return binary(B.maximum, x, y)


@register(torch.minimum, methods=("minimum",))
def _minimum(x, y):
    return binary(B.minimum, x, y)


@register(torch.fmax, methods=("fmax",))
def _fmax(x, y):
    # x where x >= y (ties included: torch sends the whole derivative to x there) or y is nan
    (a, b), _ = promote(x, y)
    return where(B.or_p.bind(B.ge(a, b), isnan(b)), a, b)


@register(torch.fmin, methods=("fmin",))
def _fmin(x, y):
    (a, b), _ = promote(x, y)
    return where(B.or_p.bind(B.le(a, b), isnan(b)), a, b)


@register(torch.fmod, methods=("fmod",))
def _fmod(x, y):
    return binary(B.rem_p.bind, x, y)


@register(torch.remainder, torch.Tensor.__mod__, methods=("remainder",))
def _remainder(x, y):
    return binary(B.remainder_p.bind, x, y)


@register(torch.Tensor.__rmod__)
def _rmod(x, y):
    return _remainder(y, x)


@register(torch.hypot, methods=("hypot",))
def _hypot(x, y):
    return binary(B.hypot_p.bind, x, y, to_float=True)


def _clamp(x, lo=None, hi=None):
    """NaN-propagating clamp with gradient 1 inside [lo, hi] (boundaries included), as torch."""
    out = x
    if lo is not None:
        (out_, lo_), _ = promote(out, lo)
        out = where(compare(B.lt, out_, lo_), lo_, out_)
    if hi is not None:
        (out_, hi_), _ = promote(out, hi)
        out = where(compare(B.gt, out_, hi_), hi_, out_)
    if not is_float(dtype(out)):
        return out
    # nan in x or in a bound gives nan with derivative 0 (torch's clamp backward passes the
    # derivative only where lo <= x <= hi): the comparisons above let x (and its tangent) through
    if any(type(v) in SCALARS and math.isnan(v) for v in (lo, hi) if v is not None):
        return full_like(out, math.nan)
    for v in (x, lo, hi):
        if is_tensor(v) and is_float(dtype(v)):
            out = where(isnan(v), math.nan, out)
    return out


@register(torch.clamp, torch.clip, methods=("clamp", "clip"))
def _clamp_fn(x, min=None, max=None, *, out=None):  # noqa: A002 - torch's names
    _no_out("clamp", out)
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    return _clamp(x, min, max)


@register(torch.clamp_min, methods=("clamp_min",))
def _clamp_min(x, min):  # noqa: A002
    return _clamp(x, min, None)


@register(torch.clamp_max, methods=("clamp_max",))
def _clamp_max(x, max):  # noqa: A002
    return _clamp(x, None, max)


@register(torch.where, methods=("where",))
def _where(condition, input=None, other=None):  # noqa: A002
    if input is None and other is None:
        raise unsupported(
            "torch.where(condition) with one argument",
            "its output shape depends on the data; use the three-argument form",
        )
    if type(condition) in SCALARS:
        raise TypeError("where: the condition must be a bool tensor")
    if dtype(condition) is not torch.bool:
        condition = B.ne(condition, 0)
    return where(condition, input, other)


@register(torch.lerp, methods=("lerp",))
def _lerp(start, end, weight):
    (s, e, w), dt = promote(start, end, weight)
    if not is_float(dt):
        raise TypeError(f"lerp needs floating operands, got {dt}")
    return KL.lerp(s, e, w)


@register(torch.addcmul, methods=("addcmul",))
def _addcmul(x, t1, t2, *, value=1):
    ops = _addc_operands(x, t1, t2)
    if ops is not None:  # torch's kernel and derivative formulas (composite_addc.py)
        return KAC.addcmul(*ops, value)
    return binary(B.add, x, binary(B.mul, binary(B.mul, t1, t2), value))


@register(torch.addcdiv, methods=("addcdiv",))
def _addcdiv(x, t1, t2, *, value=1):
    ops = _addc_operands(x, t1, t2)
    if ops is not None:
        return KAC.addcdiv(*ops, value)
    return binary(B.add, x, binary(B.mul, binary(B.div, t1, t2, to_float=True), value))
