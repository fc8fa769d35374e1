"""torch.addcmul, torch.addcdiv and torch.add with alpha as composite operations: torch's kernels forward, and
torch's derivative formulas (derivatives.yaml) as the tangents, so that each transpose is
torch's backward: `g * (t2 * value)`, `g * (t1 * value)` for addcmul; `g * (value / t2)` and
`-g * (value * t1 / (t2 * t2))` for addcdiv.

Written as `x + value * t1 * t2`, the values rounded differently from the kernel in a quarter
of the float32 entries: its vectorized loop is `x + (value * t1) * t2` with a fused multiply-
add, and in float16 and bfloat16 it computes in float32 and rounds once (an optimizer's step,
Adam's `addcdiv_`, then differed from eager torch's). The decomposition (for the fusing
executors) is the scalar loop's order, `x + (value * t1) * t2` and `x + (value * t1) / t2`,
in two or three roundings."""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero
from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives._elementwise import elementwise_batch
from thunderx.primitives.composite import _elementwise_abstract_eval, declare_composite


def _sum_tangents(y, terms):
    terms = [t for t in terms if t is not None]
    if not terms:
        return y, Zero(get_aval(y))
    out = terms[0]
    for t in terms[1:]:
        out = B.add(out, t)
    return y, out


def _addcmul_jvp(primals, tangents, *, value):
    x, t1, t2 = primals
    dx, d1, d2 = (None if type(t) is Zero else t for t in tangents)
    y = addcmul_p.bind(x, t1, t2, value=value)
    return _sum_tangents(
        y,
        [
            dx,
            None if d1 is None else B.mul(d1, B.mul(t2, value)),
            None if d2 is None else B.mul(d2, B.mul(t1, value)),
        ],
    )


def _true_div(value, y):
    """value / y rounded once, as torch's C++ `value / tensor2` (a Python `value / y` is
    y.reciprocal() * value, two roundings): the constant as a tensor broadcast to y."""
    a = get_aval(y)
    return B.div(S.broadcast_to(C.full((), value, a.dtype, a.device), a.shape), y)


def _addcdiv_jvp(primals, tangents, *, value):
    x, t1, t2 = primals
    dx, d1, d2 = (None if type(t) is Zero else t for t in tangents)
    y = addcdiv_p.bind(x, t1, t2, value=value)
    quotient = None if d2 is None else U.neg(B.div(B.mul(value, t1), B.mul(t2, t2)))
    return _sum_tangents(
        y,
        [
            dx,
            None if d1 is None else B.mul(d1, _true_div(value, t2)),
            None if d2 is None else B.mul(d2, quotient),
        ],
    )


def _declare(name, kernel, combine, jvp):
    prim = None

    def batch(args, dims, *, value):
        return elementwise_batch(prim, args, dims, value=value)

    prim = declare_composite(
        name,
        decomposition=lambda x, t1, t2, *, value: B.add(x, combine(B.mul(value, t1), t2)),
        impl=lambda x, t1, t2, *, value: kernel(x, t1, t2, value=value),
        abstract_eval=_elementwise_abstract_eval(name),
        jvp=jvp,
        batch=batch,
        torch_codegen=lambda args, avals, *, value: (
            f"torch.{name}({args[0]}, {args[1]}, {args[2]}, value={value!r})"
        ),
        elementwise=True,
    )
    return prim


def _add_scaled_jvp(primals, tangents, *, alpha):
    """torch's forward-mode formula, dx + dy * alpha (two roundings; the kernel's one fused
    multiply-add is its value only); its transpose is torch's backward, ct and ct * alpha."""
    x, y = primals
    dx, dy = (None if type(t) is Zero else t for t in tangents)
    out = add_scaled_p.bind(x, y, alpha=alpha)
    return _sum_tangents(out, [dx, None if dy is None else B.mul(dy, alpha)])


def _add_scaled_batch(args, dims, *, alpha):
    return elementwise_batch(add_scaled_p, args, dims, alpha=alpha)


# torch.add(x, y, alpha=a) (and torch.sub with -a): `x + a * y` in one kernel, a fused
# multiply-add in its vectorized loop (x + y * a as two ops differed in up to a quarter of the
# entries; an SGD step's `p.add_(g, alpha=-lr)`)
add_scaled_p = declare_composite(
    "add_scaled",
    decomposition=lambda x, y, *, alpha: B.add(x, B.mul(y, alpha)),
    impl=lambda x, y, *, alpha: torch.add(x, y, alpha=alpha),
    abstract_eval=_elementwise_abstract_eval("add_scaled"),
    jvp=_add_scaled_jvp,
    batch=_add_scaled_batch,
    torch_codegen=lambda args, avals, *, alpha: f"torch.add({args[0]}, {args[1]}, alpha={alpha!r})",
    elementwise=True,
)
addcmul_p = _declare("addcmul", torch.addcmul, B.mul, _addcmul_jvp)
addcdiv_p = _declare("addcdiv", torch.addcdiv, B.div, _addcdiv_jvp)


def add_scaled(x, y, alpha):
    """torch.add(x, y, alpha=alpha) of floating operands of one shape and dtype."""
    return add_scaled_p.bind(x, y, alpha=alpha)


def addcmul(x, t1, t2, value):
    """torch.addcmul of floating operands of one shape and dtype."""
    return addcmul_p.bind(x, t1, t2, value=value)


def addcdiv(x, t1, t2, value):
    """torch.addcdiv of floating operands of one shape and dtype."""
    return addcdiv_p.bind(x, t1, t2, value=value)
