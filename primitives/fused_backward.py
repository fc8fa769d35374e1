"""Derivative kernels torch fuses: tanh_backward, sigmoid_backward, threshold_backward.

A derivative spelled in primitives (`t * (1 - y * y)`) rounds differently from torch's kernels,
which evaluate `1 - y * y` with a fused multiply-add: results then differ from torch.autograd by
an ulp, and where tanh saturates by more than `allclose`'s default tolerance. The jvp rules of
tanh, logistic and relu emit these primitives instead; the torch executor calls the aten kernel
(so the numbers are torch's), nvFuser gets the decomposition. Each is linear in the incoming
tangent or cotangent `g` (operand 0) and differentiable in the saved output `y` (operand 1), so
higher derivatives still work.
"""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero, add_tangents, is_undefined
from thunderx.avals import ShapedArray
from thunderx.core import declare, get_aval
from thunderx.primitives import binary as B
from thunderx.primitives._elementwise import elementwise_batch, is_scalar, nary_abstract_eval


def _as_tensors(g, y):
    like = y if not is_scalar(y) else g
    if is_scalar(g):
        g = torch.full_like(like, g)
    if is_scalar(y):
        y = torch.full_like(like, y)
    return g, y


def _declare(name: str, derivative_in_y, decomposition, **params_doc):
    """Declare `name(g, y, **params)`: aten's kernel of that name, linear in g."""
    aten = getattr(torch.ops.aten, name)

    def impl(g, y, **params):
        return aten(*_as_tensors(g, y), *params.values())

    def codegen(args, avals, **params):
        extra = "".join(f", {v!r}" for v in params.values())
        if any(a.weak_type for a in avals):  # a literal operand: the impl makes it a tensor
            return f"_impl_{name}({args[0]}, {args[1]}{extra})"
        return f"torch.ops.aten.{name}({args[0]}, {args[1]}{extra})"

    def abstract_eval(g: ShapedArray, y: ShapedArray, **params) -> ShapedArray:
        return nary_abstract_eval(name, g, y)

    def jvp(primals, tangents, **params):
        (g, y), (tg, ty) = primals, tangents
        out = prim.bind(g, y, **params)
        t_out = Zero(get_aval(out).strip_weak())
        if type(tg) is not Zero:
            t_out = add_tangents(t_out, prim.bind(tg, y, **params))
        if type(ty) is not Zero and derivative_in_y is not None:
            t_out = add_tangents(t_out, B.mul(ty, derivative_in_y(g, y)))
        return out, t_out

    def transpose(ct, g, y, **params):
        if is_undefined(y):
            raise TypeError(f"{name} is linear only in its first operand")
        if type(ct) is Zero:
            return [None, None]
        return [prim.bind(ct, y, **params), None]

    prim = declare(
        name,
        impl=impl,
        abstract_eval=abstract_eval,
        jvp=jvp,
        transpose=transpose,
        linear=True,
        nonlinear=(1,),
        batch=lambda args, dims, **params: elementwise_batch(prim, args, dims, **params),
        torch_codegen=codegen,
        nvfuser=decomposition,
        elementwise=True,
    )
    return prim


tanh_backward_p = _declare(
    "tanh_backward",
    lambda g, y: B.mul(g, B.mul(y, -2.0)),
    lambda fd, g, y: fd.ops.mul(g, fd.ops.sub(1.0, fd.ops.mul(y, y))),
)
sigmoid_backward_p = _declare(
    "sigmoid_backward",
    lambda g, y: B.mul(g, B.sub(1.0, B.mul(y, 2.0))),
    lambda fd, g, y: fd.ops.mul(g, fd.ops.mul(fd.ops.sub(1.0, y), y)),
)
# where(y <= threshold, 0, g): relu's derivative from its output; piecewise constant in y
threshold_backward_p = _declare(
    "threshold_backward",
    None,
    lambda fd, g, y, threshold: fd.ops.where(fd.ops.le(y, threshold), 0.0, g),
)


def tanh_backward(g, y):
    """g * (1 - y * y), as torch's `tanh_backward` computes it."""
    return tanh_backward_p.bind(g, y)


def sigmoid_backward(g, y):
    """g * (1 - y) * y, as torch's `sigmoid_backward` computes it."""
    return sigmoid_backward_p.bind(g, y)


def threshold_backward(g, y, threshold: float = 0.0):
    """g where y > threshold, else 0 (torch's `threshold_backward`; relu's is threshold 0)."""
    return threshold_backward_p.bind(g, y, threshold=float(threshold))
