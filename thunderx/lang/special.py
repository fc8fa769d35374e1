"""torch.special functions: the Bessel functions, erfcx and ndtri bind primitives of their own
(primitives/special.py); ndtr, log_ndtr, entr, xlog1py and multigammaln are torch's formulas
(aten/src/ATen/native/Math.h) written with primitives, so every rule comes with them; sinc is
torch's kernel (a composite) with a series for its derivative near 0."""

from __future__ import annotations

import math

import torch

from thunderx.lang._base import SCALARS, float_operand, full_like, in_opmath, promote, register
from thunderx.lang.elementwise_rules import x_times_log
from thunderx.primitives import binary as B
from thunderx.primitives import composite_sinc as KS
from thunderx.primitives import special as SP
from thunderx.primitives import unary as U

_SQRT1_2 = math.sqrt(0.5)


def _unary(fn):
    def impl(x, *, out=None):
        if out is not None:
            raise TypeError(f"torch.special.{fn.__name__}: out= is not supported under tracing")
        return fn(float_operand(x))

    impl.__name__ = fn.__name__
    return impl


register(torch.i0, torch.special.i0, methods=("i0",))(_unary(SP.i0))
register(torch.special.i0e)(_unary(SP.i0e))
register(torch.special.i1)(_unary(SP.i1))
register(torch.special.i1e)(_unary(SP.i1e))
register(torch.special.erfcx)(_unary(SP.erfcx))
register(torch.special.ndtri)(_unary(SP.ndtri))


def ndtr(x):
    # Phi(x) = erfc(-x / sqrt 2) / 2
    return B.mul(U.erfc(B.mul(x, -_SQRT1_2)), 0.5)


register(torch.special.ndtr)(_unary(ndtr))


def log_ndtr(x):
    # torch's two branches: log(erfcx(-t) / 2) - t^2 below -1 (no underflow), else
    # log1p(-erfc(t) / 2), t = x / sqrt 2. Each branch sees only inputs of its own side, so the
    # other's derivative stays finite.
    low = B.lt(x, -1.0)
    t_lo = B.mul(U.select(low, x, -1.0), _SQRT1_2)
    t_hi = B.mul(U.select(low, -1.0, x), _SQRT1_2)
    lo = B.sub(U.log(B.mul(SP.erfcx(U.neg(t_lo)), 0.5)), B.mul(t_lo, t_lo))
    hi = U.log1p(B.mul(U.erfc(t_hi), -0.5))
    return U.select(low, lo, hi)


register(torch.special.log_ndtr)(_unary(log_ndtr))


def entr(x):
    # -x log x for x > 0, 0 at 0, -inf below 0 (nan stays nan). Its derivative is
    # -(1 + log x) for x > 0 and nan below 0, as torch's; at 0 it is nan (torch: inf).
    inner = U.select(B.eq(x, 0.0), 0.0, U.neg(B.mul(x, U.log(x))))
    return U.select(B.lt(x, 0.0), -math.inf, inner)


register(torch.special.entr)(_unary(entr))


@register(torch.special.xlog1py)
def _xlog1py(x, y, *, out=None):
    # x * log1p(y), 0 where x == 0 unless y is nan; like xlogy (see x_times_log).
    if out is not None:
        raise TypeError("torch.special.xlog1py: out= is not supported under tracing")
    if type(x) in SCALARS and type(y) in SCALARS:
        x = torch.tensor(x)
    (a, b), _ = promote(x, y, to_float=True)
    if type(b) in SCALARS:
        b = full_like(a, b)
    return x_times_log(a, b, U.log1p(b))


@register(torch.mvlgamma, torch.special.multigammaln, methods=("mvlgamma",))
def _mvlgamma(x, p: int):
    """log of the multivariate gamma function of dimension p: sum_j lgamma(x - j/2) plus
    p (p - 1) / 4 log(pi). torch raises where an element is <= (p - 1) / 2, a check on values a
    trace cannot make; those elements are nan here."""
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"mvlgamma: p must be an int >= 1, got {p!r}")
    x = float_operand(x)
    total = U.lgamma(x)
    for j in range(1, p):
        total = B.add(total, U.lgamma(B.sub(x, j / 2.0)))
    total = B.add(total, p * (p - 1) / 4.0 * math.log(math.pi))
    return U.select(B.gt(x, (p - 1) / 2.0), total, math.nan)


@register(torch.sinc, torch.special.sinc, methods=("sinc",))
@in_opmath
def _sinc(x):
    """sin(pi x) / (pi x), 1 at 0: torch's kernel, with a derivative that keeps its digits near
    0 (primitives/composite_sinc.py)."""
    return KS.sinc(float_operand(x))
