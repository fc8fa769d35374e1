"""Special-function primitives that have no exact decomposition onto the others: the modified
Bessel functions i0, i0e, i1, i1e, the scaled complementary error function erfcx and the
inverse of the normal cdf ndtri. Each derivative is torch's (tools/autograd/derivatives.yaml),
written with primitives so that it is differentiable again."""

from __future__ import annotations

import math

import torch

from thunderx.primitives import binary as B
from thunderx.primitives import unary as U

_HALF = 0.5


# Below this |x|, i1(x) / x is its series 1/2 sum_k (x^2/4)^k / (k! (k+1)!), k <= 3 (the next
# term is 1e-22 relative): y / x loses digits to cancellation in its own derivative there
# ((y' x - y) / x^2), and i1(x) underflows where x is subnormal (i1e(x) * (1 / x) was 0 * inf)
_SERIES_BELOW = 1e-2


def horner(z, coeffs):
    """sum_k coeffs[k] z^k (coeffs lowest power first) in Horner's form, with primitives."""
    acc = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = B.add(B.mul(z, acc), c)
    return acc


def _over_x(x, y, scaled):
    """y / x for y = i1(x) (or i1e(x) = exp(-|x|) i1(x), `scaled`): 1/2 at 0."""
    small = B.lt(U.abs(x), _SERIES_BELOW)
    near = U.select(small, x, 0.0)  # the series where taken only: its derivatives stay finite
    series = horner(B.mul(near, near), [_HALF, 1 / 16, 1 / 384, 1 / 18432])
    if scaled:
        series = B.mul(U.exp(U.neg(U.abs(near))), series)
    return U.select(small, series, B.div(y, U.select(small, 1.0, x)))


def _di1(x, y):
    # i1'(x) = i0(x) - i1(x)/x, 1/2 at 0
    return B.sub(i0_p.bind(x), _over_x(x, y, scaled=False))


def _di1e(x, y):
    # i1e'(x) = i0e(x) - i1e(x) sign(x) - i1e(x)/x, 1/2 at 0
    return B.sub(B.sub(i0e_p.bind(x), B.mul(y, U.sign(x))), _over_x(x, y, scaled=True))


def _def(name, torch_fn, derivative, domain="real"):
    """A unary primitive printed as `torch.special.<name>` in generated code."""
    prim = U.def_unary(name, torch_fn, None, derivative, domain)
    from thunderx.core import torch_codegen_rules

    torch_codegen_rules[prim] = lambda args, avals: f"torch.special.{name}({args[0]})"
    return prim


i0_p = _def("i0", torch.special.i0, lambda x, y: i1_p.bind(x))
i1_p = _def("i1", torch.special.i1, _di1)
i0e_p = _def("i0e", torch.special.i0e, lambda x, y: B.sub(i1e_p.bind(x), B.mul(U.sign(x), y)))
i1e_p = _def("i1e", torch.special.i1e, _di1e)
erfcx_p = _def(
    "erfcx",
    torch.special.erfcx,
    lambda x, y: B.sub(B.mul(B.mul(x, y), 2.0), 2.0 / math.sqrt(math.pi)),
)
# ndtri'(p) = sqrt(2 pi) exp(ndtri(p)^2 / 2); its domain is (0, 1) ("probability")
ndtri_p = _def(
    "ndtri",
    torch.special.ndtri,
    lambda x, y: B.mul(U.exp(B.mul(B.mul(y, y), 0.5)), math.sqrt(2.0 * math.pi)),
    "probability",
)


def i0(x):
    return i0_p.bind(x)


def i0e(x):
    return i0e_p.bind(x)


def i1(x):
    return i1_p.bind(x)


def i1e(x):
    return i1e_p.bind(x)


def erfcx(x):
    return erfcx_p.bind(x)


def ndtri(x):
    return ndtri_p.bind(x)
