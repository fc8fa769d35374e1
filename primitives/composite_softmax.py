"""The softmax family as composite operations: `softmax` and `log_softmax` run torch's kernels,
their derivatives torch's backward kernels (`_softmax_backward_data`,
`_log_softmax_backward_data`); see primitives/composite.py for what a composite declares.

softmax's Jacobian diag(y) - y y^T is symmetric: its jvp and its vjp are both torch's
_softmax_backward_data. log_softmax's is I - 1 softmax^T: torch's kernel is the vjp
(g - exp(y) sum(g)), and the jvp (t - sum(exp(y) t)) is its transpose, another primitive.
"""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero, is_undefined
from thunderx.avals import is_float
from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives._elementwise import nary_abstract_eval
from thunderx.primitives.composite import declare_composite


def _dim_abstract_eval(name, n_ops):
    def abstract_eval(*avals, dim):
        out = nary_abstract_eval(name, *avals[:n_ops])
        if not is_float(out.dtype):
            raise TypeError(f"{name} needs floating operands, got {out.str_short()}")
        if not 0 <= dim < max(len(out.shape), 1):
            raise TypeError(f"{name}: dim {dim} out of range for {out.str_short()}")
        return out

    return abstract_eval


def _dim_batch(get_prim):
    """The kernel's own batching: every operand gets its batch dim first, and `dim` moves by
    one (`get_prim()` names the primitive, declared after its rule)."""

    def batch(args, dims, *, dim):
        size = next(get_aval(a).shape[d] for a, d in zip(args, dims) if d is not None)
        moved = [
            S.broadcast_batch(a, size, 0) if d is None else S.moveaxis(a, d, 0)
            for a, d in zip(args, dims)
        ]
        return get_prim().bind(*moved, dim=dim + 1), 0

    return batch


def _sum_keep(x, dim):
    return S.broadcast_to(R.reduce_sum(x, (dim,), keepdims=True), S._shape(x))


def _softmax_decomposition(x, *, dim):
    from thunderx.primitives.higher_order import stop_gradient

    m = stop_gradient(R.reduce_max(x, (dim,)))
    kept = tuple(i for i in range(len(S._shape(x))) if i != dim)
    e = U.exp(B.sub(x, S.broadcast_in_dim(m, S._shape(x), kept)))
    return B.div(e, _sum_keep(e, dim))


def _log_softmax_decomposition(x, *, dim):
    from thunderx.primitives.higher_order import stop_gradient

    kept = tuple(i for i in range(len(S._shape(x))) if i != dim)
    m = S.broadcast_in_dim(stop_gradient(R.reduce_max(x, (dim,))), S._shape(x), kept)
    shifted = B.sub(x, m)
    lse = U.log(R.reduce_sum(U.exp(shifted), (dim,)))
    return B.sub(shifted, S.broadcast_in_dim(lse, S._shape(x), kept))


def softmax(x, dim: int):
    """torch.softmax over a non-negative `dim` of a tensor of rank >= 1."""
    return softmax_p.bind(x, dim=dim)


def log_softmax(x, dim: int):
    """torch.log_softmax over a non-negative `dim` of a tensor of rank >= 1."""
    return log_softmax_p.bind(x, dim=dim)


def softmax_backward(g, y, dim: int):
    """`y * (g - sum(g * y, dim))` as torch's _softmax_backward_data (y = softmax(x))."""
    return softmax_backward_p.bind(g, y, dim=dim)


def log_softmax_backward(g, y, dim: int):
    """`g - exp(y) * sum(g, dim)` as torch's _log_softmax_backward_data (y = log_softmax(x))."""
    return log_softmax_backward_p.bind(g, y, dim=dim)


def log_softmax_jvp(t, y, dim: int):
    """`t - sum(exp(y) * t, dim)`: the tangent of log_softmax, log_softmax_backward's transpose."""
    return log_softmax_jvp_p.bind(t, y, dim=dim)


def _softmax_jvp(primals, tangents, *, dim):
    (x,), (t,) = primals, tangents
    y = softmax(x, dim)
    return y, Zero(get_aval(y)) if type(t) is Zero else softmax_backward(t, y, dim)


def _log_softmax_jvp(primals, tangents, *, dim):
    (x,), (t,) = primals, tangents
    y = log_softmax(x, dim)
    return y, Zero(get_aval(y)) if type(t) is Zero else log_softmax_jvp(t, y, dim)


def _linear_in_grad_transpose(partner):
    """The transpose of a primitive linear in operand 0 is `partner` (itself when symmetric)."""

    def transpose(ct, g, y, *, dim):
        if is_undefined(y):
            raise TypeError(f"{partner().name} is linear only in its gradient operand")
        return [partner().bind(ct, y, dim=dim), None]

    return transpose


def _normalizer(name, decomposition, jvp):
    """softmax or log_softmax over `dim`: torch.<name> as one kernel."""
    prim = None
    kernel = getattr(torch, name)
    prim = declare_composite(
        name,
        decomposition=decomposition,
        impl=lambda x, *, dim: kernel(x, dim),
        batch=_dim_batch(lambda: prim),
        abstract_eval=_dim_abstract_eval(name, 1),
        jvp=jvp,
        torch_codegen=lambda args, avals, *, dim: f"torch.{name}({args[0]}, {dim})",
    )
    return prim


softmax_p = _normalizer("softmax", _softmax_decomposition, _softmax_jvp)
log_softmax_p = _normalizer("log_softmax", _log_softmax_decomposition, _log_softmax_jvp)


def _linear_in_grad(name, decomposition, partner=None, *, kernel=None, impl=None):
    """A composite linear in its gradient operand `g` (operand 0) given the saved output `y`:
    torch's backward `kernel` (aten name) or `impl`; its transpose is `partner` (or itself)."""
    prim = None

    def call(g, y, *, dim):
        return getattr(torch.ops.aten, kernel)(g, y, dim, y.dtype)

    def source(args, avals, *, dim):
        return f"torch.ops.aten.{kernel}({args[0]}, {args[1]}, {dim}, {avals[1].dtype})"

    prim = declare_composite(
        name,
        decomposition=decomposition,
        impl=call if kernel else impl,
        batch=_dim_batch(lambda: prim),
        abstract_eval=_dim_abstract_eval(name, 2),
        linear=True,
        nonlinear=(1,),
        differentiate_decomposition=True,
        transpose=_linear_in_grad_transpose(partner or (lambda: prim)),
        torch_codegen=source if kernel else None,
    )
    return prim


softmax_backward_p = _linear_in_grad(
    "softmax_backward",
    lambda g, y, *, dim: B.mul(y, B.sub(g, _sum_keep(B.mul(g, y), dim))),
    kernel="_softmax_backward_data",
)
log_softmax_backward_p = _linear_in_grad(
    "log_softmax_backward",
    lambda g, y, *, dim: B.sub(g, B.mul(U.exp(y), _sum_keep(g, dim))),
    lambda: log_softmax_jvp_p,
    kernel="_log_softmax_backward_data",
)
log_softmax_jvp_p = _linear_in_grad(
    "log_softmax_jvp",
    lambda t, y, *, dim: B.sub(t, _sum_keep(B.mul(U.exp(y), t), dim)),
    lambda: log_softmax_backward_p,
    impl=lambda t, y, *, dim: t - (y.exp() * t).sum(dim, keepdim=True),
)
