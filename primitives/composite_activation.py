"""SiLU and Mish as composite operations: torch's forward kernels (`F.silu` computes
x / (1 + exp(-x)), not x * sigmoid(x)) and their fused backward kernels (`silu_backward`,
`mish_backward`) as both jvp and transpose, as for gelu (primitives/composite.py).

Besides torch's numbers, the backward kernel multiplies the gradient by the derivative once,
where the product rule of the decomposition x * s(x) gives it to both factors: at an infinite
cotangent (a later division by 0) that is inf - inf = nan where torch gives +-inf.

Hardswish is torch's kernel too, (x * clamp(x + 3, 0, 6)) / 6 in that order (x * hardsigmoid(x)
rounds differently in a quarter of the entries), with torch's backward formula as its jvp: the
tangent is selected by piece (0 at x <= -3, t at x >= 3, t (x / 3 + 1/2) between), so that in
reverse mode the flat piece gets 0 whatever the cotangent (a nan one after a later overflow:
the product rule gave 0 * nan). It is written in primitives rather than calling
`hardswish_backward`, whose answer at a nan input depends on the kernel path (the scalar loop
passes the gradient, the vectorized kernel gives nan): the selects give nan there everywhere.

`softplus` (F.softplus, and mish's inner function) is written in primitives here."""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero
from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import unary as U
from thunderx.primitives.composite import backward_kernel_jvp, declare_elementwise_composite


def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    """F.softplus in primitives (also mish's inner function, whose kernel computes
    log1p(exp(x)): above 20 that is x to double precision). torch's formula: log1p(exp(beta x))
    / beta, and x itself above the threshold (so exp never overflows where its branch is used).
    It is smooth at 0, so every derivative is right there (a max(x, 0) + log1p(exp(-|x|)) form
    has sign(x) terms whose derivatives vanish at 0)."""
    bx = B.mul(x, beta) if beta != 1 else x
    above = B.gt(bx, threshold)
    # the unused branch gets 0 instead of a large bx: exp(bx) = inf there would make its
    # (discarded) derivative 0 * inf = nan in reverse mode
    soft = U.log1p(U.exp(U.select(above, 0.0, bx)))
    if beta != 1:
        soft = B.div(soft, beta)
    return U.select(above, x, soft)


def _softplus_backward_decomposition(g, x, *, beta, threshold):
    """torch's softplus_backward formula: g above the threshold, else (g z) / (z + 1) with
    z = exp(beta x) (taken at 0 where unselected, so that its derivative stays finite). Its
    derivative in x is torch's softplus_double_backward, which is 0 at the threshold itself."""
    from thunderx.primitives.higher_order import stop_gradient

    bx = B.mul(x, beta) if beta != 1 else x
    above = B.gt(bx, threshold)
    z = U.exp(U.select(above, 0.0, bx))
    z = U.select(B.lt(bx, threshold), z, stop_gradient(z))
    return U.select(above, g, B.div(B.mul(g, z), B.add(z, 1.0)))


def _scalars(**params):
    return f", {params['beta']!r}, {params['threshold']!r}"


softplus_p = declare_elementwise_composite(
    "softplus",
    decomposition=lambda x, *, beta, threshold: softplus(x, beta, threshold),
    impl=lambda x, *, beta, threshold: torch.nn.functional.softplus(x, beta, threshold),
    jvp=backward_kernel_jvp(lambda: softplus_p, lambda: softplus_backward_p),
    call="torch.nn.functional.softplus",
    codegen_extra=_scalars,
)
softplus_backward_p = declare_elementwise_composite(
    "softplus_backward",
    # its jvp in x (a Hessian's) comes from the decomposition
    decomposition=_softplus_backward_decomposition,
    impl=lambda g, x, *, beta, threshold: torch.ops.aten.softplus_backward(g, x, beta, threshold),
    call="torch.ops.aten.softplus_backward",
    codegen_extra=_scalars,
    linear=True,
    nonlinear=(1,),
    differentiate_decomposition=True,
    transposes_itself=True,
)


def softplus_kernel(x, beta: float = 1.0, threshold: float = 20.0):
    """F.softplus as torch's kernel, with torch's softplus_backward as its derivative (the
    formula in primitives rounds differently: exp and log1p are separate kernels)."""
    return softplus_p.bind(x, beta=float(beta), threshold=float(threshold))


def _log_sigmoid_decomposition(x):
    """torch's formula: min(x, 0) - log1p(exp(-|x|)) (a nan x takes the 0)."""
    return B.sub(U.select(B.lt(x, 0.0), x, 0.0), U.log1p(U.exp(U.neg(U.abs(x)))))


def _log_sigmoid_backward_decomposition(g, x):
    """g * sigmoid(-x) by pieces, each of an exponential at most 1 (as torch's kernel), written
    so that its derivative in x keeps every digit: 1 / (1 + e^x) for x < 0 and
    e^-x / (1 + e^-x) elsewhere (the derivative of logistic(-x), s (1 - s), loses 3 digits to
    cancellation at x = -30; through |x| it would be 0 at x = 0, where it is -1/4)."""
    neg = B.lt(x, 0.0)
    # each piece sees 0 where it is unused, so that no exponential overflows there
    left = U.reciprocal(B.add(U.exp(U.select(neg, x, 0.0)), 1.0))
    ex = U.exp(U.neg(U.select(neg, 0.0, x)))
    right = B.div(ex, B.add(ex, 1.0))
    return B.mul(g, U.select(neg, left, right))


def _log_sigmoid_backward_impl(g, x):
    # the kernel reads the forward's buffer exp(-|x|), computed by the forward kernel itself
    return torch.ops.aten.log_sigmoid_backward(g, x, torch.ops.aten.log_sigmoid_forward(x)[1])


log_sigmoid_p = declare_elementwise_composite(
    "log_sigmoid",
    decomposition=_log_sigmoid_decomposition,
    impl=torch.nn.functional.logsigmoid,
    jvp=backward_kernel_jvp(lambda: log_sigmoid_p, lambda: log_sigmoid_backward_p),
    call="torch.nn.functional.logsigmoid",
)
log_sigmoid_backward_p = declare_elementwise_composite(
    "log_sigmoid_backward",
    # its jvp in x (a Hessian's) comes from the decomposition
    decomposition=_log_sigmoid_backward_decomposition,
    impl=_log_sigmoid_backward_impl,
    linear=True,
    nonlinear=(1,),
    differentiate_decomposition=True,
    transposes_itself=True,
    torch_codegen=lambda args, avals: (
        f"torch.ops.aten.log_sigmoid_backward({args[0]}, {args[1]}, "
        f"torch.ops.aten.log_sigmoid_forward({args[1]})[1])"
    ),
)


def log_sigmoid(x):
    """F.logsigmoid as torch's kernel, with torch's log_sigmoid_backward as its derivative."""
    return log_sigmoid_p.bind(x)


def _elu_coefficient(x, alpha, scale):
    """alpha * scale rounded in x's precision (float for float32), as torch's kernels take it."""
    dt = get_aval(x).dtype
    cdt = torch.float64 if dt == torch.float64 else torch.float32
    return (torch.tensor(alpha, dtype=cdt) * torch.tensor(scale, dtype=cdt)).item()


def _elu_safe_inner(x, input_scale):
    # the exponential sees 0 where the negative piece is unused: exp(x) = inf there would make
    # the discarded derivative 0 * inf = nan in reverse mode
    v = U.select(B.le(x, 0.0), x, 0.0)
    return v if input_scale == 1.0 else B.mul(v, input_scale)


def _elu_decomposition(x, *, alpha, scale, input_scale):
    """torch's elu formula: expm1(x * input_scale) * (alpha * scale) for x <= 0, x * scale
    elsewhere (a nan takes the latter)."""
    neg = B.mul(U.expm1(_elu_safe_inner(x, input_scale)), _elu_coefficient(x, alpha, scale))
    return U.select(B.le(x, 0.0), neg, x if scale == 1.0 else B.mul(x, scale))


def _elu_backward_decomposition(g, x, *, alpha, scale, input_scale):
    """torch's elu_backward formula in its order: ((g * input_scale) * (alpha * scale)) *
    exp(x * input_scale) for x <= 0 (at the kink the negative side's slope), g * scale
    elsewhere (a nan x too). Its derivative in x is 0 at the kink (torch's double backward
    masks x < 0)."""
    from thunderx.primitives.higher_order import stop_gradient

    e = U.exp(_elu_safe_inner(x, input_scale))
    e = U.select(B.lt(x, 0.0), e, stop_gradient(e))
    gi = g if input_scale == 1.0 else B.mul(g, input_scale)
    neg = B.mul(B.mul(gi, _elu_coefficient(x, alpha, scale)), e)
    return U.select(B.le(x, 0.0), neg, g if scale == 1.0 else B.mul(g, scale))


def _elu_params(**p):
    return f"{p['alpha']!r}, {p['scale']!r}, {p['input_scale']!r}"


def _elu_backward_impl(g, x, *, alpha, scale, input_scale):
    # torch's kernel; at a nan x its vectorized path gives nan and its scalar loop g * scale:
    # g * scale everywhere
    kernel = torch.ops.aten.elu_backward(g, alpha, scale, input_scale, False, x)
    return torch.where(x.isnan(), g * scale, kernel)


elu_p = declare_elementwise_composite(
    "elu",
    decomposition=_elu_decomposition,
    impl=lambda x, *, alpha, scale, input_scale: torch.ops.aten.elu(x, alpha, scale, input_scale),
    jvp=backward_kernel_jvp(lambda: elu_p, lambda: elu_backward_p),
    call="torch.ops.aten.elu",
    codegen_extra=lambda **p: ", " + _elu_params(**p),
)
elu_backward_p = declare_elementwise_composite(
    "elu_backward",
    # its jvp in x (a Hessian's) comes from the decomposition
    decomposition=_elu_backward_decomposition,
    impl=_elu_backward_impl,
    linear=True,
    nonlinear=(1,),
    differentiate_decomposition=True,
    transposes_itself=True,
    torch_codegen=lambda args, avals, **p: (
        f"torch.where({args[1]}.isnan(), {args[0]} * {p['scale']!r}, "
        f"torch.ops.aten.elu_backward({args[0]}, {_elu_params(**p)}, False, {args[1]}))"
    ),
)


def elu(x, alpha: float, scale: float = 1.0, input_scale: float = 1.0):
    """torch's elu kernel (F.elu, F.selu, F.celu) with elu_backward as its derivative."""
    return elu_p.bind(x, alpha=float(alpha), scale=float(scale), input_scale=float(input_scale))


def _mish_derivative(x):
    """torch's mish_backward formula without the gradient: t + x * s * (1 - t * t)."""
    t, s = U.tanh(softplus(x)), U.logistic(x)
    return B.add(t, B.mul(B.mul(x, s), B.sub(1.0, B.mul(t, t))))


def _silu_backward_decomposition(g, x):
    """torch's silu_backward formula, in its order: (g * s) * (1 + x * (1 - s))."""
    s = U.logistic(x)
    return B.mul(B.mul(g, s), B.add(B.mul(x, B.sub(1.0, s)), 1.0))


def _activation(name, decomposition, kernel, backward_name, backward_decomposition, kernel_bwd):
    """An elementwise activation `name` and its backward `g * f'(x)`, each one torch kernel
    (with an out= overload where aten has one: mish_backward has none)."""
    out_overload = {"inplace_out": f"{backward_name}.grad_input"}
    if "grad_input" not in getattr(torch.ops.aten, backward_name).overloads():
        out_overload = {}

    backward_p = declare_elementwise_composite(
        backward_name,
        # its jvp (in x: f'' times g) comes from the decomposition
        decomposition=backward_decomposition,
        impl=kernel_bwd,
        call=f"torch.ops.aten.{backward_name}",
        linear=True,
        nonlinear=(1,),
        differentiate_decomposition=True,
        transposes_itself=True,
        # silu_backward and mish_backward have no derivative in torch
        kernel_differentiable=False,
        **out_overload,
    )

    prim = declare_elementwise_composite(
        name,
        decomposition=decomposition,
        impl=kernel,
        jvp=backward_kernel_jvp(lambda: prim, lambda: backward_p),
        call=f"torch.nn.functional.{name}",
        inplace_out=f"{name}.out",
    )
    return prim, backward_p


silu_p, silu_backward_p = _activation(
    "silu",
    lambda x: B.mul(x, U.logistic(x)),
    torch.nn.functional.silu,
    "silu_backward",
    _silu_backward_decomposition,
    torch.ops.aten.silu_backward,
)
mish_p, mish_backward_p = _activation(
    "mish",
    lambda x: B.mul(x, U.tanh(softplus(x))),
    torch.nn.functional.mish,
    "mish_backward",
    lambda g, x: B.mul(g, _mish_derivative(x)),
    torch.ops.aten.mish_backward,
)


def _hardswish_jvp(primals, tangents):
    """torch's hardswish_backward as selects on the tangent. The middle piece's slope is x / 3
    + 1/2 strictly inside (-3, 3) (its derivative 1/3 there: torch's double backward), 0 outside,
    so that the unselected product stays finite at an infinite x (its transpose multiplies a
    zero cotangent by the slope), and a constant nan at a nan x: the middle piece, nan, as
    torch's vectorized kernel, with no second derivative (torch's is 0 there)."""
    from thunderx.primitives.higher_order import stop_gradient

    (x,), (t,) = primals, tangents
    y = hardswish_p.bind(x)
    if type(t) is Zero:
        return y, Zero(get_aval(y))
    inside = B.and_p.bind(B.gt(x, -3.0), B.lt(x, 3.0))
    edge = stop_gradient(U.select(B.ge(U.abs(x), 3.0), 0.0, x))  # 0, or nan at nan
    slope = U.select(inside, B.add(B.div(x, 3.0), 0.5), edge)
    middle = B.mul(t, slope)
    return y, U.select(B.le(x, -3.0), 0.0, U.select(B.ge(x, 3.0), t, middle))


hardswish_p = declare_elementwise_composite(
    "hardswish",
    decomposition=lambda x: B.div(B.mul(x, B.minimum(B.maximum(B.add(x, 3.0), 0.0), 6.0)), 6.0),
    impl=torch.nn.functional.hardswish,
    jvp=_hardswish_jvp,
    call="torch.nn.functional.hardswish",
    inplace_out="hardswish.out",
)


def hardswish(x):
    """F.hardswish as one kernel; its derivative is torch's hardswish_backward formula."""
    return hardswish_p.bind(x)


def silu(x):
    """F.silu as one kernel; its derivative is torch's silu_backward."""
    return silu_p.bind(x)


def mish(x):
    """F.mish as one kernel; its derivative is torch's mish_backward."""
    return mish_p.bind(x)
