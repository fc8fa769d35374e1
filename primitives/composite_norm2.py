"""The 2-norm over axes (torch.linalg.vector_norm(x, 2, dims)) as a composite operation: torch's
norm kernel forward, whose root is the C library's correctly rounded sqrt, where torch.sqrt of
the sum of squares is an approximation (1 ulp off in about 1% of float64 values on an AVX-512
build: 1.4142135623730949 for sqrt(2)); a later floor or ceil turns that ulp into a whole unit
(cosine_similarity of [0, 1, 1] and [0, 0.75, 0.75] rounded to 1 + 2e-16). Its derivatives are
the decomposition's, sqrt(sum(x * x)) with derivative 0 at the zero vector (torch's
convention), written as torch's backward: g * (x / y)."""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero
from thunderx.avals import is_float
from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives.composite import declare_composite


def norm2(x, axes: tuple):
    """sqrt(sum(x * x)) over `axes` (non-empty) of a real floating x."""
    return norm2_p.bind(x, axes=tuple(sorted(axes)))


def _decomposition(x, *, axes):
    v = R.reduce_sum(B.mul(x, x), axes)
    zero = B.eq(v, 0.0)
    # the root's derivative is infinite at 0: it sees 1 there, and the select gives 0
    return U.select(zero, 0.0, U.sqrt(U.select(zero, 1.0, v)))


def _abstract_eval(x, *, axes):
    if not is_float(x.dtype) or x.dtype.is_complex:
        raise TypeError(f"norm2 needs a real floating operand, got {x.str_short()}")
    if not axes:
        raise TypeError("norm2 needs at least one axis (torch reads no dims as every dim)")
    return R._reduced(x.strip_weak(), axes)


def _jvp(primals, tangents, *, axes):
    """sum(t * (x / y)), 0 where y == 0: its transpose is torch's backward,
    ct * (x / y) masked where the norm is 0."""
    (x,), (t,) = primals, tangents
    y = norm2_p.bind(x, axes=axes)
    if type(t) is Zero:
        return y, Zero(get_aval(y))
    zero = B.eq(y, 0.0)
    shape = get_aval(x).shape
    kept = tuple(i for i in range(len(shape)) if i not in axes)
    unit = B.div(x, S.broadcast_in_dim(U.select(zero, 1.0, y), shape, kept))
    return y, U.select(zero, 0.0, R.reduce_sum(B.mul(t, unit), axes))


norm2_p = declare_composite(
    "norm2",
    decomposition=_decomposition,
    impl=lambda x, *, axes: torch.linalg.vector_norm(x, 2, axes),
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    batch=lambda args, dims, *, axes: R._reduce_batch(norm2_p, args, dims, axes),
    torch_codegen=lambda args, avals, *, axes: f"torch.linalg.vector_norm({args[0]}, 2, {axes!r})",
)
