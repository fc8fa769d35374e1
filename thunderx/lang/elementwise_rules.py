"""Elementwise ops whose derivative is torch's formula rather than the derivative of how the
value is computed, each a `custom_jvp`: xlogy / xlog1py (a product, with torch's mask at
x == 0), logaddexp (sigmoid weights, smooth at ties) and copysign (result / x)."""

from __future__ import annotations

import math

import torch

from thunderx.lang._base import SCALARS, dtype, full_like, in_opmath, promote, register
from thunderx.primitives import binary as B
from thunderx.primitives import complex as X
from thunderx.primitives import unary as U


def _with_rule(value, tangent):
    """`value` as a custom_jvp function whose tangent is `tangent(primals, tangents, out)`."""
    from thunderx.transforms.custom import custom_jvp

    f = custom_jvp(value)

    @f.defjvp
    def f_jvp(primals, tangents):
        out = f(*primals)
        return out, tangent(primals, tangents, out)

    return f


@register(torch.xlogy, torch.special.xlogy, methods=("xlogy",))
def _xlogy(x, y):
    # x * log(y), 0 where x == 0 unless y is nan; its derivative in x is log(y) at x == 0 too
    # (torch's and JAX's derivative), but for y <= 0 (torch's: 0); see x_times_log.
    (a, b), _ = promote(x, y, to_float=True)
    if type(b) in SCALARS:
        b = full_like(a, b) if type(a) not in SCALARS else torch.tensor(b)
    return x_times_log(a, b, U.log(b))


def x_times_log(a, b, lg):
    """a * lg, lg the log of b, as torch's xlogy / xlog1py give it: where a == 0, +0.0 unless b
    is nan (a log that is infinite, or nan outside its domain, is replaced by 0; a zero times a
    negative log would be -0.0, which atan2 or 1 / v tells apart). Its derivative in a is torch's:
    lg, but 0 where a == 0 and b is at or below the log's domain (lg -inf, or nan for a number b);
    so +inf at (0, +inf), where the value is 0. `a` may be a Python scalar."""
    if type(a) in SCALARS:
        if a != 0:
            return B.mul(lg, a)
        return B.add(B.mul(U.select(_bad_log(b, lg), 0.0, lg), 0.0), 0.0)
    return _with_rule(_x_times_log_value, _x_times_log_tangent)(a, lg, b)


def _bad_log(b, lg):
    return B.and_p.bind(U.logical_not(U.isfinite(lg)), B.eq(b, b))


def _x_times_log_value(a, lg, b):
    zero = B.eq(a, 0.0)
    prod = B.mul(a, U.select(B.and_p.bind(zero, _bad_log(b, lg)), 0.0, lg))
    return U.select(zero, B.add(prod, 0.0), prod)


def _x_times_log_tangent(primals, tangents, out):
    # b only decides where the value and the derivative are replaced (a step function of it);
    # its derivative reaches the result through lg
    (a, lg, b), (da, dlg, _) = primals, tangents
    below = B.and_p.bind(U.logical_not(B.gt(lg, -math.inf)), B.eq(b, b))
    dlog = U.select(B.and_p.bind(B.eq(a, 0.0), below), 0.0, lg)
    return B.add(B.mul(da, dlog), B.mul(a, dlg))


@register(torch.logaddexp, methods=("logaddexp",))
@in_opmath
def _logaddexp(x, y):
    (a, b), _ = promote(x, y, to_float=True)
    if type(a) in SCALARS:
        a = full_like(b, a)
    if type(b) in SCALARS:
        b = full_like(a, b)
    if dtype(a).is_complex:
        # torch's complex form: the operand with the larger real part, plus log1p(exp(the
        # other's difference)); holomorphic, so the plain chain rule gives its derivative
        first = B.ge(X.real(a), X.real(b))
        hi, lo = U.select(first, a, b), U.select(first, b, a)
        return B.add(hi, U.log1p(U.exp(B.sub(lo, hi))))
    return _logaddexp_fn(a, b)


def _logaddexp_value(a, b):
    # hi + log1p(exp(lo - hi)), the larger operand picked by a select; the exponent is <= 0, so
    # exp never overflows. Equal infinities give that infinity (inf - inf would be nan), as
    # torch.logaddexp does.
    first = B.ge(a, b)
    diff = B.sub(b, a)
    low = U.select(first, diff, U.neg(diff))
    same_inf = B.and_p.bind(B.eq(a, b), B.eq(U.abs(a), math.inf))
    low = U.select(same_inf, 0.0, low)
    return B.add(U.select(first, a, b), U.log1p(U.exp(low)))


def _logaddexp_fn(a, b):
    """logaddexp with torch's derivative: d = da * sigmoid(a - b) + db * sigmoid(b - a). It is
    smooth at a == b (first derivative 1/2, second 1/4, where max's tie split and |a - b|'s
    sign(0) terms vanish), and an infinite tangent of the larger operand stays infinite (the
    value's own derivative multiplies it by sigmoid(lo - hi) = 0: nan)."""

    def tangent(primals, tangents, out):
        (a, b), (da, db) = primals, tangents
        return B.add(B.mul(da, U.logistic(B.sub(a, b))), B.mul(db, U.logistic(B.sub(b, a))))

    return _with_rule(_logaddexp_value, tangent)(a, b)


@register(torch.copysign, methods=("copysign",))
def _copysign(x, y):
    (a, b), _ = promote(x, y, to_float=True)
    if type(a) in SCALARS:
        return _copysign_value(a, b)
    return _copysign_fn(a, full_like(a, b) if type(b) in SCALARS else b)


def _copysign_value(a, b):
    if type(b) in SCALARS:
        return U.neg(U.abs(a)) if math.copysign(1.0, b) < 0 else U.abs(a)
    neg = B.or_p.bind(B.lt(b, 0.0), B.and_p.bind(B.eq(b, 0.0), B.lt(U.reciprocal(b), 0.0)))
    return U.select(neg, U.neg(U.abs(a)), U.abs(a))


def _copysign_fn(a, b):
    """copysign with torch's derivative in the magnitude: result / x, 0 where x == 0, so nan
    at x = +-inf (the sign's derivative would give +-1 there); none in the sign source."""

    def tangent(primals, tangents, out):
        (a, _), (da, _) = primals, tangents
        return B.mul(da, U.select(B.eq(a, 0.0), 0.0, B.div(out, a)))

    return _with_rule(_copysign_value, tangent)(a, b)
