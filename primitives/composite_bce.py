"""F.binary_cross_entropy's elementwise loss as a composite operation: torch's kernel forward
(its logs clamped at -100) and torch's derivatives, each the formula torch's backward uses:

- in the input: `binary_cross_entropy_backward`, g (x - t) / max(x (1 - x), 1e-12), one torch
  kernel. The product rule of the logs' clamped form, -(t / x - (1 - t) / (1 - x)), cancels where
  x is near t (2.6e-4 relative in float32) and gives nan at x = 0 or 1 (a saturated sigmoid),
  where torch's denominator clamp gives 5e11 g;
- in the target: -logit(x) g, unclamped (+-inf at x = 0 or 1, as torch).

The reduction (and a class weight) stay with the language layer: torch's kernel reduces the same
elementwise loss with the same `mean` / `sum` kernels."""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero, instantiate
from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import unary as U
from thunderx.primitives.composite import declare_elementwise_composite

# torch's EPSILON in binary_cross_entropy_backward's denominator
_EPS = 1e-12


def binary_cross_entropy(x, t):
    """F.binary_cross_entropy(x, t, reduction='none') of operands of one shape and dtype."""
    return bce_p.bind(x, t)


def _bce_decomposition(x, t):
    log_p = B.maximum(U.log(x), -100.0)
    log_1mp = B.maximum(U.log1p(U.neg(x)), -100.0)
    return U.neg(B.add(B.mul(t, log_p), B.mul(B.sub(1.0, t), log_1mp)))


def _backward_decomposition(g, x, t):
    return B.div(B.mul(g, B.sub(x, t)), B.maximum(B.mul(B.sub(1.0, x), x), _EPS))


def target_derivative(g, x):
    # torch: -logit(x) * g, where logit(x) = log(x / (1 - x))
    return B.mul(U.neg(U.log(B.div(x, B.sub(1.0, x)))), g)


def _bce_jvp(primals, tangents):
    x, t = primals
    tx, tt = tangents
    y = bce_p.bind(x, t)
    out = None
    if type(tx) is not Zero:
        out = bce_backward_p.bind(instantiate(tx), x, t)
    if type(tt) is not Zero:
        moved = target_derivative(tt, x)
        out = moved if out is None else B.add(out, moved)
    return y, Zero(get_aval(y)) if out is None else out


bce_p = declare_elementwise_composite(
    "binary_cross_entropy",
    decomposition=_bce_decomposition,
    impl=lambda x, t: torch.ops.aten.binary_cross_entropy(x, t, None, 0),
    jvp=_bce_jvp,
    call="torch.ops.aten.binary_cross_entropy",
    codegen_extra=", None, 0",
)
bce_backward_p = declare_elementwise_composite(
    "binary_cross_entropy_backward",
    # its derivatives in x and t (a Hessian's) come from the decomposition
    decomposition=_backward_decomposition,
    impl=lambda g, x, t: torch.ops.aten.binary_cross_entropy_backward(g, x, t, None, 0),
    call="torch.ops.aten.binary_cross_entropy_backward",
    codegen_extra=", None, 0",
    linear=True,
    nonlinear=(1, 2),
    differentiate_decomposition=True,
    transposes_itself=True,
)
