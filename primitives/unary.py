"""Unary elementwise primitives, plus select and convert_element_type."""

from __future__ import annotations

import math

import torch

from thunderx.ad_util import Zero, is_undefined
from thunderx.avals import ShapedArray, is_float
from thunderx.core import declare, get_aval
from thunderx.primitives import binary as B
from thunderx.primitives._elementwise import elementwise_batch, nary_abstract_eval

# name -> (torch function, nvFuser op, derivative(x, y) -> dy/dx or None for zero, domain)
# The domain names the inputs the tests draw: "real", "positive", "unit" (-1, 1), "ge1".


def _same(x: ShapedArray) -> ShapedArray:
    return x.strip_weak()


def _bool_out(x: ShapedArray) -> ShapedArray:
    return ShapedArray(x.shape, torch.bool, x.device)


def def_unary(
    name,
    torch_fn,
    nvf_op,
    derivative,
    domain="real",
    out=_same,
    float_only=True,
    inplace=None,
    tangent=None,
    **declared,
):
    """Declare a unary elementwise primitive from a table row: `nvf_op=None` leaves it to torch
    under nvFuser; `derivative=None` means it has no jvp rule (a bool output); `inplace` names
    its in-place Tensor method; `tangent(t, x, y)`, where given, is the tangent itself in place
    of `t * derivative(x, y)` (torch's `grad / x` rounds once where `grad * (1 / x)` rounds
    twice; linear in t, its transpose is torch's backward); other keywords go to `declare` (a
    jvp or transpose of its own)."""

    def abstract_eval(x):
        if float_only and not is_float(x.dtype):
            raise TypeError(f"{name} needs a floating operand, got {x.str_short()}")
        return out(x)

    def jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        y = prim.bind(x)
        if type(t) is Zero:
            return y, t
        if tangent is not None:
            return y, tangent(t, x, y)
        d = derivative(x, y)
        return y, (Zero(get_aval(y)) if d is None else B.mul(t, d))

    qual = f"torch.{torch_fn.__name__}"
    declared.setdefault("jvp", jvp if derivative is not None else None)
    prim = declare(
        name,
        impl=torch_fn,
        abstract_eval=abstract_eval,
        batch=lambda args, dims: elementwise_batch(prim, args, dims),
        torch_codegen=lambda args, avals: f"{qual}({args[0]})",
        nvfuser=(lambda fd, x: getattr(fd.ops, nvf_op)(x)) if nvf_op is not None else None,
        elementwise=True,
        inplace=inplace,
        **declared,
    )
    prim_domains[prim] = domain
    return prim


# The input domain the tests draw from for each primitive; read by tests and thunderx.testing.
prim_domains: dict = {}


def _zero(x, y):
    return None


mul, add, sub, div = B.mul, B.add, B.sub, B.div


def _neg_jvp(primals, tangents):
    y = neg(primals[0])
    return y, tangents[0] if type(tangents[0]) is Zero else neg(tangents[0])


neg_p = def_unary(
    "neg",
    torch.neg,
    "neg",
    None,
    float_only=False,
    inplace="neg_",
    jvp=_neg_jvp,
    linear=True,
    transpose=lambda ct, x: [neg(ct)],
)
abs_p = def_unary("abs", torch.abs, "abs", lambda x, y: sign(x), float_only=False, inplace="abs_")
sign_p = def_unary("sign", torch.sign, "sign", _zero, float_only=False, inplace="sign_")
exp_p = def_unary("exp", torch.exp, "exp", lambda x, y: y, inplace="exp_")
expm1_p = def_unary("expm1", torch.expm1, "expm1", lambda x, y: add(y, 1.0), inplace="expm1_")
# torch's log10 derivative divides by 2.3025850929940456, one ulp below ln(10) in float64
_TORCH_LN10 = 2.3025850929940456
# torch's formulas, derivatives.yaml: grad / self, grad / (self + 1), grad / (self * ln b),
# grad / (2 * result), grad / (1 - self ** 2)
log_p = def_unary(
    "log",
    torch.log,
    "log",
    lambda x, y: reciprocal(x),
    "positive",
    inplace="log_",
    tangent=lambda t, x, y: div(t, x),
)
log1p_p = def_unary(
    "log1p",
    torch.log1p,
    "log1p",
    lambda x, y: reciprocal(add(x, 1.0)),
    "positive",
    inplace="log1p_",
    tangent=lambda t, x, y: div(t, add(x, 1.0)),
)
# log2 and log10 as primitives: log(x) * (1 / ln b) is one ulp off torch's (log10(0.1) gives
# -0.9999999999999998), which a later floor or ceil turns into a different value
log2_p = def_unary(
    "log2",
    torch.log2,
    "log2",
    lambda x, y: reciprocal(mul(x, math.log(2.0))),
    "positive",
    inplace="log2_",
    tangent=lambda t, x, y: div(t, mul(x, math.log(2.0))),
)
log10_p = def_unary(
    "log10",
    torch.log10,
    "log10",
    lambda x, y: reciprocal(mul(x, _TORCH_LN10)),
    "positive",
    inplace="log10_",
    tangent=lambda t, x, y: div(t, mul(x, _TORCH_LN10)),
)
sqrt_p = def_unary(
    "sqrt",
    torch.sqrt,
    "sqrt",
    lambda x, y: div(0.5, y),
    "positive",
    inplace="sqrt_",
    tangent=lambda t, x, y: div(t, mul(2.0, y)),
)
# torch's formula, -0.5 y^3 (y / x rounds differently, and at -0.0 gives -inf where it is +inf)
rsqrt_p = def_unary(
    "rsqrt",
    torch.rsqrt,
    "rsqrt",
    lambda x, y: mul(mul(mul(y, y), y), -0.5),
    "positive",
    inplace="rsqrt_",
)
reciprocal_p = def_unary(
    "reciprocal",
    torch.reciprocal,
    "reciprocal",
    lambda x, y: neg(mul(y, y)),
    "nonzero",
    inplace="reciprocal_",
)
sin_p = def_unary("sin", torch.sin, "sin", lambda x, y: cos(x), inplace="sin_")
cos_p = def_unary("cos", torch.cos, "cos", lambda x, y: neg(sin(x)), inplace="cos_")
tan_p = def_unary("tan", torch.tan, "tan", lambda x, y: add(mul(y, y), 1.0), "unit", inplace="tan_")
sinh_p = def_unary("sinh", torch.sinh, "sinh", lambda x, y: cosh(x), inplace="sinh_")
cosh_p = def_unary("cosh", torch.cosh, "cosh", lambda x, y: sinh(x), inplace="cosh_")


def _fused_backward_jvp(name):
    """The jvp `kernel(t, y)` of tanh / sigmoid: torch's tanh_backward / sigmoid_backward, so
    derivatives have torch's numbers (`1 - y*y` in two float32 ops rounds differently)."""

    def jvp(primals, tangents):
        from thunderx.primitives import composite

        (x,), (t,) = primals, tangents
        y = (tanh_p if name == "tanh" else logistic_p).bind(x)
        if type(t) is Zero:
            return y, t
        if get_aval(y).dtype.is_complex:
            # torch's backward kernels multiply by the conjugate derivative (a vjp in torch's
            # convention), so a tangent is t times the derivative itself
            d = sub(1.0, mul(y, y)) if name == "tanh" else mul(y, sub(1.0, y))
            return y, mul(t, d)
        return y, getattr(composite, f"{name}_backward")(t, y)

    return jvp


tanh_p = def_unary(
    "tanh",
    torch.tanh,
    "tanh",
    lambda x, y: sub(1.0, mul(y, y)),
    inplace="tanh_",
    jvp=_fused_backward_jvp("tanh"),
)
asin_p = def_unary(
    "asin", torch.asin, "asin", lambda x, y: rsqrt(sub(1.0, mul(x, x))), "unit", inplace="asin_"
)
acos_p = def_unary(
    "acos",
    torch.acos,
    "acos",
    lambda x, y: neg(rsqrt(sub(1.0, mul(x, x)))),
    "unit",
    inplace="acos_",
)
atan_p = def_unary(
    "atan", torch.atan, "atan", lambda x, y: reciprocal(add(mul(x, x), 1.0)), inplace="atan_"
)
asinh_p = def_unary(
    "asinh", torch.asinh, "asinh", lambda x, y: rsqrt(add(mul(x, x), 1.0)), inplace="asinh_"
)


def _acosh_derivative(x):
    # 1 / sqrt(z^2 - 1) takes the other branch for some complex z: 1 / (sqrt(z - 1) sqrt(z + 1))
    if get_aval(x).dtype.is_complex:
        return mul(rsqrt(sub(x, 1.0)), rsqrt(add(x, 1.0)))
    return rsqrt(sub(mul(x, x), 1.0))


acosh_p = def_unary(
    "acosh", torch.acosh, "acosh", lambda x, y: _acosh_derivative(x), "gt1", inplace="acosh_"
)
atanh_p = def_unary(
    "atanh",
    torch.atanh,
    "atanh",
    lambda x, y: reciprocal(sub(1.0, mul(x, x))),
    "unit",
    inplace="atanh_",
    tangent=lambda t, x, y: div(t, sub(1.0, mul(x, x))),
)
logistic_p = def_unary(
    "logistic",
    torch.sigmoid,
    "sigmoid",
    lambda x, y: mul(y, sub(1.0, y)),
    inplace="sigmoid_",
    jvp=_fused_backward_jvp("sigmoid"),
)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
erf_p = def_unary(
    "erf",
    torch.erf,
    "erf",
    lambda x, y: mul(exp(neg(mul(x, x))), _TWO_OVER_SQRT_PI),
    inplace="erf_",
)
erfc_p = def_unary(
    "erfc",
    torch.erfc,
    "erfc",
    lambda x, y: mul(exp(neg(mul(x, x))), -_TWO_OVER_SQRT_PI),
    inplace="erfc_",
)
erfinv_p = def_unary(
    "erfinv",
    torch.erfinv,
    "erfinv",
    lambda x, y: mul(exp(mul(y, y)), math.sqrt(math.pi) / 2),
    "unit",
    inplace="erfinv_",
)
lgamma_p = def_unary(
    "lgamma", torch.lgamma, "lgamma", lambda x, y: digamma(x), "positive", inplace="lgamma_"
)
digamma_p = def_unary(
    "digamma", torch.digamma, None, lambda x, y: polygamma(x, 1), "positive", inplace="digamma_"
)
floor_p = def_unary("floor", torch.floor, "floor", _zero, inplace="floor_")
ceil_p = def_unary("ceil", torch.ceil, "ceil", _zero, inplace="ceil_")
round_p = def_unary("round", torch.round, "round", _zero, inplace="round_")
trunc_p = def_unary("trunc", torch.trunc, "trunc", _zero, inplace="trunc_")
logical_not_p = def_unary(
    "logical_not", torch.logical_not, "logical_not", None, out=_bool_out, float_only=False
)
isfinite_p = def_unary(
    "isfinite", torch.isfinite, "isfinite", None, out=_bool_out, float_only=False
)
# The integer-valued elementwise ops round; their derivative is zero almost everywhere.
# nvfuser_direct has no digamma (checked against its op bindings): it runs through torch.


def _unary_fn(prim):
    def fn(x):
        return prim.bind(x)

    fn.__name__ = prim.name
    return fn


neg, abs, sign, exp, expm1, log, log1p = map(  # noqa: A001
    _unary_fn, (neg_p, abs_p, sign_p, exp_p, expm1_p, log_p, log1p_p)
)
sqrt, rsqrt, reciprocal, sin, cos, tan = map(
    _unary_fn, (sqrt_p, rsqrt_p, reciprocal_p, sin_p, cos_p, tan_p)
)
sinh, cosh, tanh, asin, acos, atan = map(
    _unary_fn, (sinh_p, cosh_p, tanh_p, asin_p, acos_p, atan_p)
)
asinh, acosh, atanh, logistic, erf, erfc = map(
    _unary_fn, (asinh_p, acosh_p, atanh_p, logistic_p, erf_p, erfc_p)
)
erfinv, lgamma, digamma, floor, ceil = map(
    _unary_fn, (erfinv_p, lgamma_p, digamma_p, floor_p, ceil_p)
)
round, trunc, logical_not, isfinite = map(  # noqa: A001
    _unary_fn, (round_p, trunc_p, logical_not_p, isfinite_p)
)
log2, log10 = map(_unary_fn, (log2_p, log10_p))

# ------------------------------------------------------------------------------------ polygamma


def polygamma(x, n: int):
    return polygamma_p.bind(x, n=n)


def _polygamma_jvp(primals, tangents, *, n):
    (x,), (t,) = primals, tangents
    y = polygamma(x, n)
    return y, (t if type(t) is Zero else mul(t, polygamma(x, n + 1)))


polygamma_p = declare(
    "polygamma",
    impl=lambda x, *, n: torch.polygamma(n, x),
    abstract_eval=lambda x, *, n: x.strip_weak(),
    jvp=_polygamma_jvp,
    batch=lambda args, dims, *, n: elementwise_batch(polygamma_p, args, dims, n=n),
    torch_codegen=lambda args, avals, *, n: f"torch.polygamma({n}, {args[0]})",
    elementwise=True,
)
prim_domains[polygamma_p] = "positive"

# ------------------------------------------------------------------------------ select (where)


def _select_abstract_eval(pred, on_true, on_false):
    if pred.dtype is not torch.bool:
        raise TypeError(f"select: predicate must be bool, got {pred.str_short()}")
    out = nary_abstract_eval("select", on_true, on_false)
    if pred.shape != out.shape:
        raise TypeError(f"select: predicate {pred.str_short()} vs operands {out.str_short()}")
    return out


def select(pred, on_true, on_false):
    return select_p.bind(pred, on_true, on_false)


def _select_jvp(primals, tangents):
    pred, a, b = primals
    out = select(pred, a, b)
    _, ta, tb = tangents
    if type(ta) is Zero and type(tb) is Zero:
        return out, Zero(get_aval(out))
    ta = 0.0 if type(ta) is Zero else ta
    tb = 0.0 if type(tb) is Zero else tb
    return out, select(pred, ta, tb)


def _select_transpose(ct, pred, a, b):
    if is_undefined(pred):
        raise TypeError("select is not linear in its predicate")
    return [
        None,
        select(pred, ct, 0.0) if is_undefined(a) else None,
        select(pred, 0.0, ct) if is_undefined(b) else None,
    ]


select_p = declare(
    "select",
    impl=torch.where,
    abstract_eval=_select_abstract_eval,
    jvp=_select_jvp,
    linear=True,
    transpose=_select_transpose,
    batch=lambda args, dims: elementwise_batch(select_p, args, dims),
    torch_codegen=lambda args, avals: f"torch.where({args[0]}, {args[1]}, {args[2]})",
    nvfuser=lambda fd, p, a, b: fd.ops.where(p, a, b),
    elementwise=True,
)

# ------------------------------------------------------------------------ convert_element_type


def convert(x, new_dtype: torch.dtype):
    return convert_p.bind(x, new_dtype=new_dtype)


def _convert_jvp(primals, tangents, *, new_dtype):
    (x,), (t,) = primals, tangents
    y = convert(x, new_dtype)
    if type(t) is Zero or not is_float(new_dtype):
        return y, Zero(ShapedArray(y.shape, new_dtype))
    return y, convert(t, new_dtype)


def _convert_impl(x, *, new_dtype):
    if not isinstance(x, torch.Tensor):  # a Python scalar operand
        return torch.tensor(x, dtype=new_dtype)
    if x.dtype.is_complex and not new_dtype.is_complex:
        x = torch.real(x)  # what the cast keeps, without torch's warning
    return x.to(new_dtype)


def _convert_transpose(ct, x, *, new_dtype):
    # real -> complex: the pairing Re(ct * t) keeps the real part of the cotangent
    if ct.dtype.is_complex and not x.aval.dtype.is_complex:
        from thunderx.primitives.complex import real

        ct = real(ct)
    return [convert(ct, x.aval.dtype)]


convert_p = declare(
    "convert_element_type",
    impl=_convert_impl,
    abstract_eval=lambda x, *, new_dtype: ShapedArray(x.shape, new_dtype, x.device),
    jvp=_convert_jvp,
    linear=True,
    transpose=_convert_transpose,
    batch=lambda args, dims, *, new_dtype: (convert(args[0], new_dtype), dims[0]),
    torch_codegen=lambda args, avals, *, new_dtype: f"{args[0]}.to({new_dtype})",
    nvfuser=lambda fd, x, *, new_dtype: fd.ops.cast(x, fd.dtype_of(new_dtype)),
    elementwise=True,
    aliases=(0,),  # `x.to(dtype)` is `x` itself when the dtype already matches
)

# ------------------------------------------------------------------------------------ device_put


def device_put(x, device: torch.device):
    """x on `device`: torch moves a 0-dim CPU tensor that meets tensors on another device there
    (a learning rate, a loop counter); lang's promotion makes that move explicit."""
    return device_put_p.bind(x, device=torch.device(device))


device_put_p = declare(
    "device_put",
    impl=lambda x, *, device: x.to(device=device),
    abstract_eval=lambda x, *, device: ShapedArray(x.shape, x.dtype, device),
    linear=True,
    transpose=lambda ct, x, *, device: [device_put(ct, x.aval.device)],
    batch=lambda args, dims, *, device: (device_put(args[0], device), dims[0]),
    torch_codegen=lambda args, avals, *, device: f"{args[0]}.to(device={str(device)!r})",
    aliases=(0,),  # `x.to(device)` is `x` itself when it is already there
)
