"""torch.sinc as a composite operation: torch's kernel forward, so that torch's autograd
(through jit's program, an eager vmap, torch.func of a jitted function) differentiates
`torch.sinc` with torch's own formula; thunderx's transforms use the jvp below.

The decomposition sin(pi x) / (pi x) (1 at 0) is what the fusing executors run. Differentiating
it is wrong near 0: the quotient rule's (pi x cos(pi x) - sin(pi x)) / (pi x^2) cancels every
digit below |x| ~ 1e-6 and is 0 / 0 where x is subnormal (torch autograd of it gave 0.026 at
x = 1e-17, where the derivative is -3e-17). So the jvp is written out: below |x| = 1e-2 the
derivative is the Taylor series' (its second derivative near 0 is -pi^2 / 3, as finite
differences say), above it the ratio (cos(pi x) - sinc(x)) / x, and exactly 0 at x == 0 whatever
the tangent (a nan one too, as torch's forward mode), so that the second derivative there is
torch's 0."""

from __future__ import annotations

import math

import torch

from thunderx.ad_util import Zero
from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import special as SP
from thunderx.primitives import unary as U
from thunderx.primitives.composite import declare_elementwise_composite

SERIES_BELOW = 1e-2
# d/dx sum_k (-1)^k (pi x)^(2k) / (2k+1)! = x sum_k c_k x^(2k-2), k <= 5: the next term is below
# 1e-18 relative for |x| < 1e-2
_SERIES = [(-1) ** k * math.pi ** (2 * k) * 2 * k / math.factorial(2 * k + 1) for k in range(1, 6)]


def _decomposition(x):
    zero = B.eq(x, 0.0)
    pix = B.mul(U.select(zero, 1.0, x), math.pi)
    return U.select(zero, 1.0, B.div(U.sin(pix), pix))


def _jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    y = sinc_p.bind(x)
    if type(t) is Zero:
        return y, Zero(get_aval(y))
    small = B.lt(U.abs(x), SERIES_BELOW)
    safe = U.select(small, 1.0, x)
    # the ratio where it is taken (safe is x there); elsewhere finite (safe is 1)
    ratio = B.div(B.sub(U.cos(B.mul(safe, math.pi)), y), safe)
    near = U.select(small, x, 0.0)  # finite where the series is not taken
    series = B.mul(SP.horner(B.mul(near, near), _SERIES), near)
    return y, U.select(B.eq(x, 0.0), 0.0, B.mul(t, U.select(small, series, ratio)))


sinc_p = declare_elementwise_composite(
    "sinc", decomposition=_decomposition, impl=torch.sinc, jvp=_jvp, call="torch.sinc"
)


def sinc(x):
    """torch.sinc of a floating tensor, as torch's kernel."""
    return sinc_p.bind(x)
