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


def _safe(x):
    """x with its zeros replaced by 1: a divisor whose untaken branch stays finite."""
    return U.select(B.eq(x, 0.0), 1.0, x)


def _di1(x, y):
    # i1'(x) = i0(x) - i1(x)/x, 1/2 at 0
    return U.select(B.eq(x, 0.0), _HALF, B.sub(i0_p.bind(x), B.div(y, _safe(x))))


def _di1e(x, y):
    # i1e'(x) = i0e(x) - i1e(x) (sign(x) + 1/x), 1/2 at 0
    d = B.sub(i0e_p.bind(x), B.mul(y, B.add(U.sign(x), U.reciprocal(_safe(x)))))
    return U.select(B.eq(x, 0.0), _HALF, d)


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
