"""Binary (and ternary) elementwise primitives. Operands share shape and dtype, except that a
Python scalar may stand for either operand (it prints as a literal)."""

from __future__ import annotations

import cmath
import math
import operator

import torch

from thunderx.ad_util import Zero, add_tangents, instantiate, is_undefined
from thunderx.avals import is_float
from thunderx.core import declare, get_aval
from thunderx.primitives._elementwise import (
    elementwise_batch,
    is_scalar,
    nary_abstract_eval,
    scalar_tensor,
)


def _tensor_args(fn):
    """Wrap a torch function that needs tensor operands, so a Python scalar operand works."""

    def impl(x, y):
        if is_scalar(x):
            x = scalar_tensor(x, y)
        elif is_scalar(y):
            y = scalar_tensor(y, x)
        return fn(x, y)

    impl.__name__ = fn.__name__
    return impl


def def_binary(name, impl, codegen, nvf_op, out_bool=False, partials=None, **declared):
    """Declare a binary elementwise primitive: impl, abstract eval, batching, codegen, nvFuser;
    `partials` (one function per operand, see `jvp_from_partials`) give its jvp; other keywords
    (jvp, linearity, transpose, in-place form) go to `declare`."""
    out_dtype = torch.bool if out_bool else None
    if partials is not None:
        declared["jvp"] = lambda primals, tangents: jvp_from_partials(
            prim, partials, primals, tangents
        )
    prim = declare(
        name,
        impl=impl,
        abstract_eval=lambda x, y: nary_abstract_eval(name, x, y, out_dtype=out_dtype),
        batch=lambda args, dims: elementwise_batch(prim, args, dims),
        torch_codegen=codegen,
        nvfuser=(lambda fd, x, y: getattr(fd.ops, nvf_op)(x, y)) if nvf_op else None,
        elementwise=True,
        **declared,
    )
    return prim


def jvp_from_partials(prim, partials, primals, tangents):
    """jvp from one function per operand: `partial(t, x, y, out) -> contribution to t_out`."""
    out = prim.bind(*primals)
    t_out = Zero(get_aval(out).strip_weak())
    for t, partial in zip(tangents, partials):
        if type(t) is not Zero and partial is not None:
            t_out = add_tangents(t_out, partial(t, *primals, out))
    return out, t_out


def _transpose(name, ct_x, ct_y, bilinear=False):
    """`ct_x(ct, y)` is the cotangent of x, `ct_y(ct, x)` that of y (None: not linear in y).
    A bilinear op (mul, div) is linear in one operand at a time."""

    def rule(ct, x, y):
        if bilinear and is_undefined(x) and is_undefined(y):
            raise TypeError(f"{name} is not linear in both operands at once")
        if ct_y is None and is_undefined(y):
            raise TypeError(f"{name} is linear only in its numerator")
        return [ct_x(ct, y) if is_undefined(x) else None, ct_y(ct, x) if is_undefined(y) else None]

    return rule


def _fmt(op):
    return lambda args, avals: f"({args[0]} {op} {args[1]})"


def _call(fn, name):
    # torch.maximum and friends need tensors; a literal operand goes through the impl wrapper
    def rule(args, avals):
        if any(a.weak_type for a in avals):
            return f"_impl_{name}({args[0]}, {args[1]})"
        return f"{fn}({args[0]}, {args[1]})"

    return rule


def _pow_dx(t, x, y, out):
    # d/dx x**y = y * x**(y-1), written without a select on y so that its own derivative in y
    # stays right (the Hessian of x**y at (4, 0) is symmetric). So at y == 0 a nan or infinite
    # tangent gives nan (JAX's answer) where torch selects 0 (a select whose derivative in y is
    # 0): docs/conventions.md, row pow-at-exponent-zero.
    if is_scalar(y):
        return Zero(get_aval(out).strip_weak()) if y == 0 else mul(t, mul(y, pow(x, y - 1)))
    from thunderx.primitives import unary

    jac = mul(y, pow(x, sub(y, 1)))
    if is_scalar(x):
        return mul(t, jac)
    # 0 * 0**-1 and 0 * nan**-1 would be nan where y == 0; torch's derivative there is 0 (the
    # derivative in y there is 0 either way), whatever the tangent: the Jacobian is 0 there
    # (for reverse mode, which multiplies the selected cotangent by it) and so is the product
    # (for forward mode, where a nan tangent times 0 is nan)
    zero = and_p.bind(or_p.bind(eq(x, 0), ne(x, x)), eq(y, 0))
    return unary.select(zero, 0.0, mul(t, unary.select(zero, 0.0, jac)))


def _pow_dy(t, x, y, out):
    from thunderx.primitives import unary

    if is_scalar(x):
        if x == 0:
            # torch: 0 where y >= 0, else out * log(0) = inf * -inf
            return mul(t, unary.select(ge(y, 0), 0.0, mul(out, -math.inf)))
        if isinstance(x, complex) or get_aval(out).dtype.is_complex:
            log_x = cmath.log(x)  # torch's complex log: log |x| + i arg(x)
        else:
            log_x = math.log(x) if x > 0 else math.nan
        return mul(t, mul(out, log_x))
    # torch's pow_backward_exponent: 0 where x == 0 and y >= 0, else out * log(x) (so 0 ** -1
    # gives -inf); a select, so the derivative in x there is 0 too, not inf * 0
    if is_scalar(y) and y < 0:
        return mul(t, mul(out, unary.log(x)))
    zero = eq(x, 0) if is_scalar(y) else and_p.bind(eq(x, 0), ge(y, 0))
    return mul(t, unary.select(zero, 0.0, mul(out, unary.log(x))))


def _minmax_jvp(prim, pick_x, primals, tangents):
    """Where operands tie, each gets half the tangent (JAX's convention; symmetric)."""
    from thunderx.primitives import unary

    x, y = primals
    out = prim.bind(x, y)
    tx, ty = tangents
    if type(tx) is Zero and type(ty) is Zero:
        return out, tx if not is_scalar(x) else ty
    aval = get_aval(out).strip_weak()
    tx = instantiate(tx) if type(tx) is not Zero else instantiate(Zero(aval))
    ty = instantiate(ty) if type(ty) is not Zero else instantiate(Zero(aval))
    half = mul(add(tx, ty), 0.5)
    t = unary.select(pick_x(x, y), tx, unary.select(pick_x(y, x), ty, half))
    return out, t


def neg(x):
    from thunderx.primitives import unary

    return unary.neg(x)


def _trunc(x):
    from thunderx.primitives import unary

    return unary.trunc(x)


def _atan2_recip(x, y):
    # 1 / (x^2 + y^2), 0 at the origin: torch's convention for atan2's derivative at (0, 0)
    from thunderx.primitives import unary

    denom = add(mul(x, x), mul(y, y))
    zero = eq(denom, 0.0)
    return unary.select(zero, 0.0, div(1.0, unary.select(zero, 1.0, denom)))


def _div_jvp(primals, tangents):
    """(tx - ty * out) / y, torch's forward formula: one division, so that at y == 0 a zero
    tangent of x does not add 0 / 0 = nan to ty's infinite contribution (the second derivative
    of x / y at y == 0 is 2x / y^3 = +-inf, as torch gives, not nan)."""
    x, y = primals
    out = div_p.bind(x, y)
    tx, ty = tangents
    if type(ty) is Zero:
        if type(tx) is Zero:
            return out, Zero(get_aval(out).strip_weak())
        return out, div(tx, y)
    moved = mul(ty, out)
    return out, div(neg(moved) if type(tx) is Zero else sub(tx, moved), y)


def _div_impl(x, y):
    dt = get_aval(x if not is_scalar(x) else y).dtype
    if not (dt.is_floating_point or dt.is_complex):
        return torch.div(x, y, rounding_mode="trunc")
    return x / y


def _div_codegen(args, avals):
    if any(is_float(a.dtype) for a in ([a for a in avals if not a.weak_type] or avals)):
        return f"({args[0]} / {args[1]})"
    return f"torch.div({args[0]}, {args[1]}, rounding_mode='trunc')"


add_p = def_binary(
    "add",
    operator.add,
    _fmt("+"),
    "add",
    partials=(lambda t, x, y, out: t, lambda t, x, y, out: t),
    linear=True,
    transpose=_transpose("add", lambda ct, y: ct, lambda ct, x: ct),
    inplace="add_",
    commutative=True,
)
sub_p = def_binary(
    "sub",
    operator.sub,
    _fmt("-"),
    "sub",
    partials=(lambda t, x, y, out: t, lambda t, x, y, out: neg(t)),
    linear=True,
    transpose=_transpose("sub", lambda ct, y: ct, lambda ct, x: neg(ct)),
    inplace="sub_",
)
mul_p = def_binary(
    "mul",
    operator.mul,
    _fmt("*"),
    "mul",
    partials=(lambda t, x, y, out: mul(t, y), lambda t, x, y, out: mul(x, t)),
    linear=True,
    transpose=_transpose("mul", lambda ct, y: mul(ct, y), lambda ct, x: mul(x, ct), True),
    inplace="mul_",
    commutative=True,
)
div_p = def_binary(
    "div",
    _div_impl,
    _div_codegen,
    "div",
    jvp=_div_jvp,
    linear=True,
    transpose=_transpose("div", lambda ct, y: div(ct, y), None, True),
    inplace="div_",
    inplace_floating_only=True,  # Tensor.div_ divides exactly; integer div truncates
)
pow_p = def_binary(
    "pow", operator.pow, _fmt("**"), "pow", partials=(_pow_dx, _pow_dy), inplace="pow_"
)
max_p = def_binary(
    "max",
    _tensor_args(torch.maximum),
    _call("torch.maximum", "max"),
    "maximum",
    jvp=lambda primals, tangents: _minmax_jvp(max_p, gt, primals, tangents),
)
min_p = def_binary(
    "min",
    _tensor_args(torch.minimum),
    _call("torch.minimum", "min"),
    "minimum",
    jvp=lambda primals, tangents: _minmax_jvp(min_p, lt, primals, tangents),
)
atan2_p = def_binary(
    "atan2",
    _tensor_args(torch.atan2),
    _call("torch.atan2", "atan2"),
    "atan2",
    # (t * recip) * y: its transpose is torch's atan2_backward, (ct * y) * recip
    partials=(
        lambda t, x, y, out: mul(mul(t, _atan2_recip(x, y)), y),
        lambda t, x, y, out: mul(mul(t, _atan2_recip(x, y)), neg(x)),
    ),
)
rem_p = def_binary(
    "rem",
    _tensor_args(torch.fmod),
    _call("torch.fmod", "rem"),
    "fmod",
    partials=(lambda t, x, y, out: t, lambda t, x, y, out: mul(t, neg(_trunc(div(x, y))))),
    inplace="fmod_",
)
# Python's remainder (the sign of the divisor), the kernel torch.remainder and nvFuser's
# remainder share: fmod, moved by one divisor where the signs differ. Its derivative in y is
# minus the floor quotient that the value itself used, as torch's: floor(x / y) rounds the other
# way where x / y rounds up to an integer (1.0 % 0.1 is 0.0999..., so the quotient is 9, not 10).
remainder_p = def_binary(
    "remainder",
    _tensor_args(torch.remainder),
    _call("torch.remainder", "remainder"),
    "remainder",
    partials=(
        lambda t, x, y, out: t,
        lambda t, x, y, out: mul(t, neg(floor_divide_float(x, y))),
    ),
    inplace="remainder_",
)


# sqrt(x^2 + y^2) without the squares' overflow and underflow (std::hypot); nvFuser has no
# such op, so it runs as torch's kernel there. Derivative x / out (y / out), torch's rule: nan
# at (0, 0), as the derivative of sqrt(x^2 + y^2) is there
hypot_p = def_binary(
    "hypot",
    _tensor_args(torch.hypot),
    _call("torch.hypot", "hypot"),
    None,
    partials=(lambda t, x, y, out: mul(t, div(x, out)), lambda t, x, y, out: mul(t, div(y, out))),
    inplace="hypot_",
)


def floor_divide_float(x, y):
    """torch's floating floor division (c10's div_floor_floating, Python's float //): the
    quotient of x - fmod(x, y), rounded to the integer it is, so that x == (x // y) * y +
    remainder(x, y) holds; floor(x / y) breaks that where x / y rounds up to an integer. IEEE's
    x / y where y is 0. No derivative (every branch ends in a floor)."""
    from thunderx.primitives import unary

    def both(p, q):  # a Python scalar operand makes its conditions Python bools
        if isinstance(p, bool) or isinstance(q, bool):
            return (q if p else False) if isinstance(p, bool) else (p if q else False)
        return and_p.bind(p, q)

    def pick(c, a, b):
        return (a if c else b) if isinstance(c, bool) else unary.select(c, a, b)

    if is_scalar(x) or is_scalar(y):  # torch rounds a Python scalar to the tensor's dtype first
        dt = get_aval(y if is_scalar(x) else x).dtype
        x, y = (float(torch.tensor(v, dtype=dt)) if is_scalar(v) else v for v in (x, y))
    mod = rem_p.bind(x, y)
    # where x / y overflows, fmod may be NaN (torch's vectorized fmod is): x alone is the
    # numerator then, as in torch's vectorized kernel
    over = both(
        eq(unary.abs(div(x, y)), math.inf), ne(abs(x) if is_scalar(x) else unary.abs(x), math.inf)
    )
    q = div(pick(over, x, sub(x, mod)), y)
    q = pick(both(ne(mod, 0.0), ne(lt(y, 0.0), lt(mod, 0.0))), sub(q, 1.0), q)
    fl = unary.floor(q)
    fl = pick(gt(sub(q, fl), 0.5), add(fl, 1.0), fl)
    # q == 0 (|x| < |y|, same signs) and y == 0: floor(x / y) is the signed zero, the inf or
    # the nan that torch returns there
    return pick(both(ne(q, 0.0), ne(y, 0.0)), fl, unary.floor(div(x, y)))


# the next representable value after x towards y; torch's derivative: 1 in x where x != y (0
# where they are equal and the value is y itself), 0 in y
nextafter_p = def_binary(
    "nextafter",
    _tensor_args(torch.nextafter),
    _call("torch.nextafter", "nextafter"),
    "nextafter",
    partials=(lambda t, x, y, out: _moved(t, x, y), None),
)


def _moved(t, x, y):
    from thunderx.primitives import unary

    return unary.select(ne(x, y), t, 0.0)


eq_p = def_binary("eq", operator.eq, _fmt("=="), "eq", out_bool=True)
ne_p = def_binary("ne", operator.ne, _fmt("!="), "ne", out_bool=True)
lt_p = def_binary("lt", operator.lt, _fmt("<"), "lt", out_bool=True)
le_p = def_binary("le", operator.le, _fmt("<="), "le", out_bool=True)
gt_p = def_binary("gt", operator.gt, _fmt(">"), "gt", out_bool=True)
ge_p = def_binary("ge", operator.ge, _fmt(">="), "ge", out_bool=True)
and_p = def_binary("logical_and", operator.and_, _fmt("&"), "logical_and")
or_p = def_binary("logical_or", operator.or_, _fmt("|"), "logical_or")


def add(x, y):
    if is_scalar(x) and is_scalar(y):
        return x + y
    return add_p.bind(x, y)


def sub(x, y):
    if is_scalar(x) and is_scalar(y):
        return x - y
    return sub_p.bind(x, y)


def mul(x, y):
    if is_scalar(x) and is_scalar(y):
        return x * y
    return mul_p.bind(x, y)


def div(x, y):
    if is_scalar(x) and is_scalar(y):
        return x / y
    return div_p.bind(x, y)


def pow(x, y):  # noqa: A001 - the primitive's name
    if is_scalar(x) and is_scalar(y):
        return x**y
    return pow_p.bind(x, y)


def maximum(x, y):
    if is_scalar(x) and is_scalar(y):
        return max(x, y)
    return max_p.bind(x, y)


def minimum(x, y):
    if is_scalar(x) and is_scalar(y):
        return min(x, y)
    return min_p.bind(x, y)


def eq(x, y):
    if is_scalar(x) and is_scalar(y):
        return x == y
    return eq_p.bind(x, y)


def ne(x, y):
    if is_scalar(x) and is_scalar(y):
        return x != y
    return ne_p.bind(x, y)


def lt(x, y):
    if is_scalar(x) and is_scalar(y):
        return x < y
    return lt_p.bind(x, y)


def gt(x, y):
    if is_scalar(x) and is_scalar(y):
        return x > y
    return gt_p.bind(x, y)


def le(x, y):
    if is_scalar(x) and is_scalar(y):
        return x <= y
    return le_p.bind(x, y)


def ge(x, y):
    if is_scalar(x) and is_scalar(y):
        return x >= y
    return ge_p.bind(x, y)
