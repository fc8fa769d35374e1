"""scatter_reduce for the reductions a scatter_add cannot express: amax, amin and prod
(torch.scatter_reduce; sum and mean are scatter_adds, in the language layer).

`scatter_reduce(x, idx, src, axis, reduce, include_self)`: position p of the output reduces the
`src` elements scattered to p, and x[p] where `include_self` or where nothing is scattered.

Derivatives are torch's (FunctionsManual's scatter_reduce_backward), written as one linear map
of the tangents so that reverse mode is its transpose:
- amax/amin: the tangent is spread evenly over the elements equal to the result, the count
  including x[p] whenever it equals the result (also where `include_self` is False and x[p]
  itself takes no share, as torch counts it);
- prod: each element's tangent times the product of the others, exact where elements are zero
  (one zero: the others' product; two or more: 0), the others' product y / v otherwise.
"""

from __future__ import annotations

import math

import torch

from thunderx.ad_util import Zero, instantiate
from thunderx.core import declare, get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import unary as U
from thunderx.primitives.indexing import _check_index, gather, scatter_add
from thunderx.primitives.shape import batch_to_front

REDUCTIONS = ("amax", "amin", "prod")


def _impl(x, idx, src, *, axis, reduce, include_self):
    return torch.scatter_reduce(x, axis, idx, src, reduce, include_self=include_self)


def _abstract_eval(x, idx, src, *, axis, reduce, include_self):
    _check_index("scatter_reduce", idx)
    if reduce not in REDUCTIONS:
        raise TypeError(f"scatter_reduce: reduce must be one of {REDUCTIONS}, got {reduce!r}")
    if idx.shape != src.shape or src.dtype != x.dtype or idx.ndim != x.ndim:
        raise TypeError(
            f"scatter_reduce: operand {x.str_short()}, index {idx.str_short()}, "
            f"source {src.str_short()} do not agree"
        )
    return x.strip_weak()


def scatter_reduce(x, idx, src, axis: int, reduce: str, include_self: bool = True):
    return scatter_reduce_p.bind(
        x, idx, src, axis=axis, reduce=reduce, include_self=bool(include_self)
    )


def _counts(x, idx, mask, axis):
    """Per output position, how many scattered elements satisfy `mask` (in x's dtype)."""
    return scatter_add(C.zeros_like(x), idx, U.convert(mask, get_aval(x).dtype), axis)


def _jvp(primals, tangents, *, axis, reduce, include_self):
    x, idx, src = primals
    tx, _, ts = tangents
    y = scatter_reduce(x, idx, src, axis, reduce, include_self)
    if type(tx) is Zero and type(ts) is Zero:
        return y, Zero(get_aval(y))
    tx, ts = instantiate(tx), instantiate(ts)
    a = get_aval(x)
    # 1.0 where x[p] takes part: everywhere with include_self, else where nothing is scattered
    if include_self:
        self_in = C.full(a.shape, 1.0, a.dtype, a.device)
    else:
        ones_src = C.full(get_aval(src).shape, 1.0, a.dtype, a.device)
        self_in = U.convert(B.eq(scatter_add(C.zeros_like(x), idx, ones_src, axis), 0.0), a.dtype)
    if reduce == "prod":
        return y, _prod_tangent(x, idx, src, y, tx, ts, self_in, axis)
    # a nan result is attained nowhere (nan != nan): every element taking part is counted in
    # and the count is nan, so that the derivative is nan there in both modes (torch's)
    y_nan, yg = B.ne(y, y), gather(y, idx, axis)
    self_hit = U.convert(B.or_p.bind(B.eq(x, y), y_nan), a.dtype)
    src_hit = B.or_p.bind(B.eq(src, yg), B.ne(yg, yg))
    n = U.select(y_nan, math.nan, B.add(self_hit, _counts(x, idx, src_hit, axis)))
    share_self = U.select(B.gt(B.mul(self_hit, self_in), 0.5), tx, 0.0)
    share_src = scatter_add(C.zeros_like(x), idx, U.select(src_hit, ts, 0.0), axis)
    return y, B.div(B.add(share_self, share_src), n)


def _prod_tangent(x, idx, src, y, tx, ts, self_in, axis):
    dt = get_aval(x).dtype
    x_zero = B.mul(U.convert(B.eq(x, 0.0), dt), self_in)  # 1.0 where a taking-part x is 0
    s_zero = B.eq(src, 0.0)
    zeros = B.add(x_zero, _counts(x, idx, s_zero, axis))
    # the product of the nonzero elements taking part
    x_nz = U.select(B.gt(B.sub(self_in, x_zero), 0.5), x, 1.0)
    p_nz = scatter_reduce(x_nz, idx, U.select(s_zero, 1.0, src), axis, "prod", True)

    def others(v, v_zero, z, y_, p):
        """The product of the other elements of v's group: for a zero v the product of the
        nonzero ones when v is the group's only zero, else 0; for any other v, y / v (0 where
        the group holds a zero, whose derivative in that zero torch autograd then takes through
        this eager formula: MAML's outer step), as torch's backward formula divides."""
        # every zero divisor replaced, also an x[p] taking no part (masked below), so that
        # torch autograd never multiplies a masked branch's zero cotangent by 1 / 0
        no_zero = B.div(y_, U.select(B.eq(v, 0.0), 1.0, v))
        return U.select(v_zero, U.select(B.eq(z, 1.0), p, 0.0), no_zero)

    o_self = others(x, B.gt(x_zero, 0.5), zeros, y, p_nz)
    o_src = others(
        src, s_zero, gather(zeros, idx, axis), gather(y, idx, axis), gather(p_nz, idx, axis)
    )
    # where x[p] takes no part its derivative is a structural zero: the coefficient is masked
    # (y / x[p] may be 0 / 0 there) and so is the product, so that neither mode multiplies a
    # zero by a nan or inf (co)tangent (torch gives 0 there too)
    part = B.gt(self_in, 0.5)
    t_self = U.select(part, B.mul(tx, U.select(part, o_self, 0.0)), 0.0)
    return B.add(t_self, scatter_add(C.zeros_like(x), idx, B.mul(ts, o_src), axis))


def _batch(args, dims, *, axis, reduce, include_self):
    x, idx, src = batch_to_front(args, dims)
    return scatter_reduce(x, idx, src, axis + 1, reduce, include_self), 0


def _codegen(args, avals, *, axis, reduce, include_self):
    return (
        f"torch.scatter_reduce({args[0]}, {axis}, {args[1]}, {args[2]}, {reduce!r}, "
        f"include_self={include_self})"
    )


scatter_reduce_p = declare(
    "scatter_reduce",
    impl=_impl,
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    nonlinear=(1,),
    batch=_batch,
    torch_codegen=_codegen,
)
