"""Composite operations: torch kernels kept whole (`relu`, `gelu`, `softmax`, ...), each with a
decomposition into other primitives and direct rules that call torch's fused kernels.

A composite is declared like any primitive (`declare_composite` is `core.declare` plus the
decomposition): its forward runs torch's kernel, its jvp produces a tangent with torch's
backward kernel (`threshold_backward`, `gelu_backward`, `_softmax_backward_data`, ...), itself a
primitive linear in the incoming gradient whose transpose is again a kernel, so reverse mode
computes exactly what torch's autograd computes. The derivative of a backward kernel in its
other operands comes from its decomposition, so second derivatives (hessians) work. A rule a
composite does not give is derived from its decomposition: jvp by differentiating it, batching
by vmapping it; `core.decomposition_rules` holds it for executors that want primitives
(a fuser) and for the tests, which check that it equals the kernel.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from thunderx.ad_util import Zero, is_undefined
from thunderx.avals import is_float
from thunderx.core import declare, get_aval, impl_rules, new_trace
from thunderx.primitives import binary as B
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives._elementwise import elementwise_batch, nary_abstract_eval
from thunderx.primitives.kernel_autograd import torch_autograd_impl


def declare_composite(
    name: str, *, decomposition: Callable, differentiate_decomposition: bool = False, **declared
):
    """`core.declare` for a composite operation: rules not given (`jvp`, `batch`) are derived
    from `decomposition(*arrays, **params)`, written with other primitives. A linear one gets
    `core.linear_jvp` unless `differentiate_decomposition` (a backward kernel, linear in the
    gradient but not in the saved values it also reads)."""
    prim = None

    def jvp_from_decomposition(primals, tangents, **params):
        return decomposition_jvp(decomposition, primals, tangents, params)

    def batch_from_decomposition(args, dims, **params):
        return decomposition_batch(prim, decomposition, args, dims, params)

    if not declared.get("linear") or differentiate_decomposition:
        # a linear composite's own jvp applies it to the tangents (core.linear_jvp)
        declared.setdefault("jvp", jvp_from_decomposition)
    declared.setdefault("batch", batch_from_decomposition)
    prim = declare(name, decomposition=decomposition, **declared)
    if not prim.props.kernel_differentiable or prim.props.kernel_constant_outputs:
        # torch autograd takes thunderx's derivative of the kernel
        impl_rules[prim] = torch_autograd_impl(prim, impl_rules[prim])
    return prim


def decomposition_jvp(decomposition, primals, tangents, params):
    """The jvp of a composite through its decomposition (run by the current trace)."""
    from thunderx.transforms.jvp import jvp_flat

    multiple = []

    def flat(*xs):
        out = decomposition(*xs, **params)
        multiple.append(isinstance(out, list))
        return out if multiple[0] else [out]

    ts = [None if type(t) is Zero else t for t in tangents]
    outs, t_outs = jvp_flat(flat, list(primals), ts)
    return (outs, t_outs) if multiple[0] else (outs[0], t_outs[0])


def decomposition_batch(prim, decomposition, args, dims, params):
    """The batching of a composite through its decomposition: vmap of the decomposition."""
    from thunderx.transforms.vmap import BatchTrace, BatchTracer

    size = next(get_aval(a).shape[d] for a, d in zip(args, dims) if d is not None)
    with new_trace(BatchTrace, size) as trace:
        ins = [a if d is None else BatchTracer(trace, a, d) for a, d in zip(args, dims)]
        out = decomposition(*ins, **params)
        unpacked = [trace.unpack(o) for o in (out if prim.multiple_results else [out])]
    vals = [S.broadcast_batch(v, size, 0) if d is None else v for v, d in unpacked]
    dims = [0 if d is None else d for _, d in unpacked]
    return (vals, dims) if prim.multiple_results else (vals[0], dims[0])


def _elementwise_abstract_eval(name):
    def abstract_eval(*avals, **params):
        out = nary_abstract_eval(name, *avals)
        if not is_float(out.dtype):
            raise TypeError(f"{name} needs floating operands, got {out.str_short()}")
        return out

    return abstract_eval


def _elementwise_batch(prim):
    return lambda args, dims, **params: elementwise_batch(prim, args, dims, **params)


# ------------------------------------------------------------------- elementwise backward kernels
# Each is `grad * f'(...)` as one torch kernel, linear in `grad` (operand 0); its transpose is
# itself (a diagonal Jacobian), and its derivative in the other operand is written out.


def declare_elementwise_composite(
    name,
    *,
    decomposition,
    impl,
    call: str | None = None,
    codegen_extra: str | Callable = "",
    transposes_itself: bool = False,
    **declared,
):
    """An elementwise composite generated as `call(*operands<codegen_extra>)` (a function of
    the params for a parametrized one; or by a `torch_codegen` rule given instead): its
    abstract eval and batching are the elementwise ones. A backward kernel linear in its first
    operand, a diagonal map of it, `transposes_itself`."""

    def source(args, avals, **params):
        extra = codegen_extra(**params) if callable(codegen_extra) else codegen_extra
        return f"{call}({', '.join(args)}{extra})"

    if transposes_itself:
        declared["transpose"] = lambda ct, *args, **params: _grad_transpose(prim)(
            ct, *args, **params
        )

    prim = declare_composite(
        name,
        decomposition=decomposition,
        impl=impl,
        abstract_eval=_elementwise_abstract_eval(name),
        batch=lambda args, dims, **params: elementwise_batch(prim, args, dims, **params),
        torch_codegen=declared.pop("torch_codegen", source),
        elementwise=True,
        **declared,
    )
    return prim


def backward_kernel_jvp(get_prim, get_backward):
    """The jvp of a one-operand composite whose tangent is its backward kernel applied to the
    incoming tangent (a diagonal or symmetric Jacobian): `get_backward()(t, x, **params)`."""

    def jvp(primals, tangents, **params):
        (x,), (t,) = primals, tangents
        y = get_prim().bind(x, **params)
        if type(t) is Zero:
            return y, Zero(get_aval(y))
        return y, get_backward().bind(t, x, **params)

    return jvp


def _grad_transpose(prim):
    def transpose(ct, g, *rest, **params):
        if any(is_undefined(r) for r in rest):
            raise TypeError(f"{prim.name} is linear only in its gradient operand")
        return [prim.bind(ct, *rest, **params)] + [None] * len(rest)

    return transpose


def tanh_backward(g, y):
    """`g * (1 - y*y)` as torch's tanh_backward (y = tanh(x))."""
    return tanh_backward_p.bind(g, y)


def _tanh_backward_jvp(primals, tangents):
    (g, y), (tg, ty) = primals, tangents
    out = tanh_backward(g, y)
    t = Zero(get_aval(out)) if type(tg) is Zero else tanh_backward(tg, y)
    if type(ty) is not Zero:  # d/dy g (1 - y^2) = -2 g y
        t = _add(t, B.mul(B.mul(g, y), B.mul(ty, -2.0)))
    return out, t


tanh_backward_p = declare_composite(
    "tanh_backward",
    decomposition=lambda g, y: B.mul(g, B.sub(1.0, B.mul(y, y))),
    impl=torch.ops.aten.tanh_backward,
    abstract_eval=_elementwise_abstract_eval("tanh_backward"),
    jvp=_tanh_backward_jvp,
    linear=True,
    transpose=lambda ct, g, y: _grad_transpose(tanh_backward_p)(ct, g, y),
    batch=lambda args, dims: elementwise_batch(tanh_backward_p, args, dims),
    torch_codegen=lambda args, avals: f"torch.ops.aten.tanh_backward({args[0]}, {args[1]})",
    elementwise=True,
    inplace_out="tanh_backward.grad_input",
)


def sigmoid_backward(g, y):
    """`g * y * (1 - y)` as torch's sigmoid_backward (y = sigmoid(x))."""
    return sigmoid_backward_p.bind(g, y)


def _sigmoid_backward_jvp(primals, tangents):
    (g, y), (tg, ty) = primals, tangents
    out = sigmoid_backward(g, y)
    t = Zero(get_aval(out)) if type(tg) is Zero else sigmoid_backward(tg, y)
    if type(ty) is not Zero:  # d/dy g y (1 - y) = g (1 - 2y)
        t = _add(t, B.mul(B.mul(g, B.sub(1.0, B.mul(y, 2.0))), ty))
    return out, t


sigmoid_backward_p = declare_composite(
    "sigmoid_backward",
    decomposition=lambda g, y: B.mul(g, B.mul(y, B.sub(1.0, y))),
    impl=torch.ops.aten.sigmoid_backward,
    abstract_eval=_elementwise_abstract_eval("sigmoid_backward"),
    jvp=_sigmoid_backward_jvp,
    linear=True,
    transpose=lambda ct, g, y: _grad_transpose(sigmoid_backward_p)(ct, g, y),
    batch=lambda args, dims: elementwise_batch(sigmoid_backward_p, args, dims),
    torch_codegen=lambda args, avals: f"torch.ops.aten.sigmoid_backward({args[0]}, {args[1]})",
    elementwise=True,
    inplace_out="sigmoid_backward.grad_input",
)


def _add(a, b):
    if type(a) is Zero:
        return b
    return B.add(a, b)


def threshold_backward(g, x, threshold: float):
    """`0 where x <= threshold, else g` as torch's threshold_backward (NaN in x passes g)."""
    return threshold_backward_p.bind(g, x, threshold=float(threshold))


def _threshold_backward_jvp(primals, tangents, *, threshold):
    # piecewise constant in x: only the gradient's tangent passes
    (g, x), (tg, _) = primals, tangents
    out = threshold_backward(g, x, threshold)
    return out, Zero(get_aval(out)) if type(tg) is Zero else threshold_backward(tg, x, threshold)


threshold_backward_p = declare_composite(
    "threshold_backward",
    decomposition=lambda g, x, *, threshold: U.select(B.le(x, threshold), 0.0, g),
    impl=lambda g, x, *, threshold: torch.ops.aten.threshold_backward(g, x, threshold),
    abstract_eval=_elementwise_abstract_eval("threshold_backward"),
    jvp=_threshold_backward_jvp,
    linear=True,
    transpose=lambda ct, g, x, *, threshold: _grad_transpose(threshold_backward_p)(
        ct, g, x, threshold=threshold
    ),
    batch=lambda args, dims, *, threshold: elementwise_batch(
        threshold_backward_p, args, dims, threshold=threshold
    ),
    torch_codegen=lambda args, avals, *, threshold: (
        f"torch.ops.aten.threshold_backward({args[0]}, {args[1]}, {threshold!r})"
    ),
    elementwise=True,
    inplace_out="threshold_backward.grad_input",
)


_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


def _gelu_decomposition(x, *, approximate):
    if approximate == "tanh":
        inner = B.mul(B.add(x, B.mul(B.mul(B.mul(x, x), x), _GELU_C)), _SQRT_2_OVER_PI)
        return B.mul(B.mul(x, 0.5), B.add(U.tanh(inner), 1.0))
    return B.mul(B.mul(x, 0.5), B.add(U.erf(B.mul(x, _SQRT_HALF)), 1.0))


def _gelu_derivative(x, approximate):
    """d gelu / dx in primitives (torch's gelu_backward formulas)."""
    if approximate == "tanh":
        x2 = B.mul(x, x)
        inner = B.mul(B.add(x, B.mul(B.mul(x2, x), _GELU_C)), _SQRT_2_OVER_PI)
        th = U.tanh(inner)
        d_inner = B.mul(B.add(B.mul(x2, 3.0 * _GELU_C), 1.0), _SQRT_2_OVER_PI)
        left = B.mul(B.add(th, 1.0), 0.5)
        right = B.mul(B.mul(B.mul(x, 0.5), B.sub(1.0, B.mul(th, th))), d_inner)
        return B.add(left, right)
    cdf = B.mul(B.add(U.erf(B.mul(x, _SQRT_HALF)), 1.0), 0.5)
    pdf = B.mul(U.exp(B.mul(B.mul(x, x), -0.5)), _INV_SQRT_2PI)
    return B.add(cdf, B.mul(x, pdf))


def gelu_backward(g, x, approximate: str):
    """`g * gelu'(x)` as torch's gelu_backward."""
    return gelu_backward_p.bind(g, x, approximate=approximate)


def _gelu_check(approximate):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def _gelu_backward_abstract_eval(g, x, *, approximate):
    _gelu_check(approximate)
    return _elementwise_abstract_eval("gelu_backward")(g, x)


gelu_backward_p = declare_composite(
    "gelu_backward",
    # its jvp comes from this decomposition (the x-derivative is gelu'' which torch has no
    # kernel for)
    decomposition=lambda g, x, *, approximate: B.mul(g, _gelu_derivative(x, approximate)),
    impl=lambda g, x, *, approximate: torch.ops.aten.gelu_backward(g, x, approximate=approximate),
    abstract_eval=_gelu_backward_abstract_eval,
    linear=True,
    nonlinear=(1,),
    differentiate_decomposition=True,
    transpose=lambda ct, g, x, *, approximate: _grad_transpose(gelu_backward_p)(
        ct, g, x, approximate=approximate
    ),
    batch=lambda args, dims, *, approximate: elementwise_batch(
        gelu_backward_p, args, dims, approximate=approximate
    ),
    torch_codegen=lambda args, avals, *, approximate: (
        f"torch.ops.aten.gelu_backward({args[0]}, {args[1]}, approximate={approximate!r})"
    ),
    elementwise=True,
    inplace_out="gelu_backward.grad_input",
)

# ---------------------------------------------------------------------- elementwise activations


def relu(x):
    """torch.relu as one kernel; its derivative is torch's threshold_backward on the output."""
    return relu_p.bind(x)


def _relu_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    y = relu(x)
    # torch's relu backward reads the output: y <= 0 exactly where x <= 0 (NaN stays NaN)
    return y, Zero(get_aval(y)) if type(t) is Zero else threshold_backward(t, y, 0.0)


relu_p = declare_elementwise_composite(
    "relu",
    # x <= 0 picks 0, so NaN stays NaN
    decomposition=lambda x: U.select(B.le(x, 0.0), 0.0, x),
    impl=torch.relu,
    jvp=_relu_jvp,
    call="torch.relu",
    inplace="relu_",
)


def threshold(x, threshold: float, value: float):
    """torch.threshold: `value where x <= threshold, else x`."""
    return threshold_p.bind(x, threshold=float(threshold), value=float(value))


def _threshold_jvp(primals, tangents, *, threshold, value):
    (x,), (t,) = primals, tangents
    y = threshold_p.bind(x, threshold=threshold, value=value)
    return y, Zero(get_aval(y)) if type(t) is Zero else threshold_backward(t, x, threshold)


threshold_p = declare_composite(
    "threshold",
    decomposition=lambda x, *, threshold, value: U.select(B.le(x, threshold), value, x),
    impl=lambda x, *, threshold, value: torch.threshold(x, threshold, value),
    abstract_eval=lambda x, **params: _elementwise_abstract_eval("threshold")(x),
    jvp=_threshold_jvp,
    batch=lambda args, dims, **params: elementwise_batch(threshold_p, args, dims, **params),
    torch_codegen=lambda args, avals, *, threshold, value: (
        f"torch.threshold({args[0]}, {threshold!r}, {value!r})"
    ),
    elementwise=True,
)


def gelu(x, approximate: str = "none"):
    """F.gelu as one kernel; its derivative is torch's gelu_backward."""
    return gelu_p.bind(x, approximate=approximate)


def _gelu_jvp(primals, tangents, *, approximate):
    (x,), (t,) = primals, tangents
    y = gelu(x, approximate)
    return y, Zero(get_aval(y)) if type(t) is Zero else gelu_backward(t, x, approximate)


def _gelu_abstract_eval(x, *, approximate):
    _gelu_check(approximate)
    return _elementwise_abstract_eval("gelu")(x)


gelu_p = declare_composite(
    "gelu",
    decomposition=_gelu_decomposition,
    impl=lambda x, *, approximate: torch.nn.functional.gelu(x, approximate=approximate),
    abstract_eval=_gelu_abstract_eval,
    jvp=_gelu_jvp,
    batch=lambda args, dims, *, approximate: elementwise_batch(
        gelu_p, args, dims, approximate=approximate
    ),
    torch_codegen=lambda args, avals, *, approximate: (
        f"torch.nn.functional.gelu({args[0]}, approximate={approximate!r})"
    ),
    elementwise=True,
    inplace_out="gelu.out",
)
