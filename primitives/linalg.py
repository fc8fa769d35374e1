"""Contractions: dot_general (with batch dimensions, so vmap of matmul stays one equation)."""

from __future__ import annotations

import functools
import math
import string

import torch

from thunderx.ad_util import Zero, add_tangents, is_undefined
from thunderx.avals import ShapedArray
from thunderx.core import declare, get_aval
from thunderx.primitives import shape as S


def _free(n, contract, batch):
    return [i for i in range(n) if i not in contract and i not in batch]


def _einsum_spec(xn, yn, dimension_numbers) -> str:
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter(string.ascii_letters)
    xl = [next(letters) for _ in range(xn)]
    yl = [None] * yn
    for i, j in zip(lc, rc):
        yl[j] = xl[i]
    for i, j in zip(lb, rb):
        yl[j] = xl[i]
    yl = [c if c is not None else next(letters) for c in yl]
    out = (
        [xl[i] for i in lb]
        + [xl[i] for i in _free(xn, lc, lb)]
        + [yl[j] for j in _free(yn, rc, rb)]
    )
    return f"{''.join(xl)},{''.join(yl)}->{''.join(out)}"


def _dot_impl(x, y, *, dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    if not lb:
        # the torch executor's own kernel choice (mm, matmul, a flattened mm), so that eager
        # transforms compute the bits jit does, at mm's cost rather than tensordot's reshapes
        return _unbatched_dot(tuple(x.shape), tuple(y.shape), dimension_numbers)(x, y)
    return torch.einsum(_einsum_spec(x.ndim, y.ndim, dimension_numbers), x, y)


@functools.lru_cache(maxsize=1024)
def _unbatched_dot(x_shape: tuple, y_shape: tuple, dimension_numbers):
    """`lambda x, y: <_dot_codegen's expression>` for operands of these shapes."""
    avals = [ShapedArray(x_shape, torch.float32), ShapedArray(y_shape, torch.float32)]
    src = _dot_codegen(["x", "y"], avals, dimension_numbers=dimension_numbers)
    return eval(f"lambda x, y: {src}", {"torch": torch})  # noqa: S307 - source made above


def _dot_codegen(args, avals, *, dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    x, y = args
    xn, yn = avals[0].ndim, avals[1].ndim
    dn = ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))
    outer = _outer_product_codegen(x, y, avals, dn)
    if outer is not None:
        return outer
    if xn == 2 and yn == 2 and not lb:
        pattern = {
            # torch.mm is what `@` reaches for two matrices, without matmul's dispatch on
            # ranks; `.t()` is the cheapest transposed view
            ((1,), (0,)): f"torch.mm({x}, {y})",
            ((1,), (1,)): f"torch.mm({x}, {y}.t())",
            ((0,), (0,)): f"torch.mm({x}.t(), {y})",
            ((0,), (1,)): f"torch.mm({x}.t(), {y}.t())",
        }
        if dn[0] in pattern:
            return pattern[dn[0]]
    if xn == 3 and yn == 3 and dn[1] == ((0,), (0,)):
        pattern = {
            ((2,), (1,)): f"torch.bmm({x}, {y})",
            ((2,), (2,)): f"torch.bmm({x}, {y}.mT)",
            ((1,), (1,)): f"torch.bmm({x}.mT, {y})",
        }
        if dn[0] in pattern:
            return pattern[dn[0]]
    if xn == 1 and yn == 2 and not lb and dn[0] == ((0,), (0,)):
        return f"{x} @ {y}"
    if xn == 2 and yn == 1 and not lb and dn[0] == ((1,), (0,)):
        return f"{x} @ {y}"
    if not lb and xn == 2 and yn > 2 and dn[0] == ((1,), (yn - 2,)):
        # matmul broadcasts x over y's leading dims without copying y (tensordot would)
        perm = (yn - 2,) + tuple(range(yn - 2)) + (yn - 1,)
        return f"torch.matmul({x}, {y}).permute{perm}"
    if not lb and yn == 2 and xn > 2 and dn[0] == ((xn - 1,), (0,)):
        return f"torch.matmul({x}, {y})"
    if not lb and yn == 2 and xn > 2 and dn[0] == ((xn - 1,), (1,)):
        # rows times a transposed matrix (a linear layer's input cotangent under vmap): the same
        # GEMM as tensordot's, without its reshapes, and a form the oneDNN rewrite knows
        return f"torch.matmul({x}, {y}.t())"
    if not lb:
        flat = _flat_contraction_codegen(x, y, avals, lc, rc)
        return flat or f"torch.tensordot({x}, {y}, dims=({list(lc)}, {list(rc)}))"
    return f"torch.einsum({_einsum_spec(xn, yn, dimension_numbers)!r}, {x}, {y})"


def _flat_contraction_codegen(x: str, y: str, avals, lc, rc) -> str | None:
    """A contraction over leading dims of both operands (the weight gradient of a linear layer
    applied to (batch, seq, features): both operands contract (0, 1)) as one `mm` of the
    flattened operands, the first transposed: a view for a contiguous operand, where
    `tensordot` copies the operand it permutes so that its contracting dims come last. When
    the two orders differ, the smaller operand is permuted (and copied) to the other's order.
    None for other contractions."""
    xa, ya = avals
    k = len(lc)
    if not k or sorted(lc) != list(range(k)) or sorted(rc) != list(range(k)):
        return None
    if min(xa.ndim, ya.ndim) == k:
        return None  # nothing left free on one side: a vector result, tensordot's
    if tuple(lc) != tuple(rc):
        # contract x's dim lc[i] with y's dim rc[i]: put the smaller operand in the other's order
        if math.prod(xa.shape) <= math.prod(ya.shape):
            order = [lc[rc.index(i)] for i in range(k)] + list(range(k, xa.ndim))
            x = f"{x}.permute{tuple(order)}"
        else:
            order = [rc[lc.index(i)] for i in range(k)] + list(range(k, ya.ndim))
            y = f"{y}.permute{tuple(order)}"
    contracted = math.prod(xa.shape[:k])
    xm, yn = math.prod(xa.shape[k:]), math.prod(ya.shape[k:])
    out = tuple(xa.shape[k:]) + tuple(ya.shape[k:])
    res = f"torch.mm({x}.reshape(({contracted}, {xm})).t(), {y}.reshape(({contracted}, {yn})))"
    return res if len(out) == 2 else f"{res}.reshape({out})"


def _outer_product_codegen(x: str, y: str, avals, dn) -> str | None:
    """A contraction whose contracting dims all have size 1 (or none) is an outer product
    (per-example weight gradients: `bmm(a.mT, b)` with K=1). Each output element is one product, so a broadcast multiply
    gives the same values without a batched GEMM call (the sign of a zero product aside: -0.0 as
    eager torch's per-example loop gives, where torch.func's batched GEMM adds it to +0.0). None
    when another lowering is better: an unbatched outer product stays one GEMM (a K=1 `tensordot`
    measured 2x faster than the multiply on CPU). Which of multiply and batched GEMM runs a batched
    one on CPU is measured per machine and shape (executors/cpu_outer.py)."""
    lay = outer_product_layout(avals, dn)
    if lay is None:
        return None
    perms, batch, xf, yf = lay
    xs = batch + xf + [1] * len(yf)
    ys = batch + [1] * len(xf) + yf
    return f"({_layout(x, perms[0], xs)} * {_layout(y, perms[1], ys)})"


def outer_product_layout(avals, dn):
    """For a batched outer product (see `_outer_product_codegen`): the permutations putting each
    operand's batch dims first, then its free dims, then its contracting ones, and the batch,
    x-free and y-free sizes; None for any other contraction."""
    (lc, rc), (lb, rb) = dn
    xa, ya = avals
    if not lb:
        return None
    if any(xa.shape[i] != 1 for i in lc) or xa.dtype == torch.bool:
        return None
    xf, yf = _free(xa.ndim, lc, lb), _free(ya.ndim, rc, rb)
    if not yf:
        return None
    perms = (tuple(lb) + tuple(xf) + tuple(lc), tuple(rb) + tuple(rc) + tuple(yf))
    batch = [xa.shape[i] for i in lb]
    return perms, batch, [xa.shape[i] for i in xf], [ya.shape[j] for j in yf]


def _layout(name: str, perm: tuple, shape: list) -> str:
    src = name if perm == tuple(range(len(perm))) else f"{name}.permute{perm}"
    return f"{src}.reshape({tuple(shape)})"


def _dot_abstract_eval(x, y, *, dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise TypeError("dot_general: contracting/batch dimension lists differ in length")
    for i, j in list(zip(lc, rc)) + list(zip(lb, rb)):
        if x.shape[i] != y.shape[j]:
            raise TypeError(
                f"dot_general: {x.str_short()} dim {i} does not match {y.str_short()} dim {j}"
            )
    if x.dtype != y.dtype:
        raise TypeError(f"dot_general: dtypes differ: {x.str_short()} vs {y.str_short()}")
    shape = (
        [x.shape[i] for i in lb]
        + [x.shape[i] for i in _free(x.ndim, lc, lb)]
        + [y.shape[j] for j in _free(y.ndim, rc, rb)]
    )
    return ShapedArray(shape, x.dtype, x.device)


def dot_general(x, y, dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    dn = ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))
    return dot_general_p.bind(x, y, dimension_numbers=dn)


def contract(a, al: str, b, bl: str, outl: str):
    """einsum(al,bl->outl) as one dot_general plus a transpose; every letter of al and bl must be
    in the other operand or in outl."""
    batch = [c for c in al if c in bl and c in outl]
    summed = [c for c in al if c in bl and c not in outl]
    dn = (
        (tuple(al.index(c) for c in summed), tuple(bl.index(c) for c in summed)),
        (tuple(al.index(c) for c in batch), tuple(bl.index(c) for c in batch)),
    )
    res = dot_general(a, b, dn)
    res_letters = batch + [c for c in al if c not in bl] + [c for c in bl if c not in al]
    return S.transpose(res, [res_letters.index(c) for c in outl])


def _letters(xn, yn, dimension_numbers):
    spec = _einsum_spec(xn, yn, dimension_numbers)
    ins, out = spec.split("->")
    xl, yl = ins.split(",")
    return xl, yl, out


def _dot_jvp(primals, tangents, *, dimension_numbers):
    x, y = primals
    tx, ty = tangents
    out = dot_general(x, y, dimension_numbers)
    t = Zero(get_aval(out))
    if type(tx) is not Zero:
        t = add_tangents(t, dot_general(tx, y, dimension_numbers))
    if type(ty) is not Zero:
        t = add_tangents(t, dot_general(x, ty, dimension_numbers))
    return out, t


def _dot_transpose(ct, x, y, *, dimension_numbers):
    if is_undefined(x) and is_undefined(y):
        raise TypeError("dot_general is not linear in both operands at once")
    xn = x.aval.ndim if is_undefined(x) else len(get_aval(x).shape)
    yn = y.aval.ndim if is_undefined(y) else len(get_aval(y).shape)
    xl, yl, outl = _letters(xn, yn, dimension_numbers)
    if is_undefined(x):
        return [contract(ct, outl, y, yl, xl), None]
    return [None, contract(ct, outl, x, xl, yl)]


def _dot_batch(args, dims, *, dimension_numbers):
    (x, y), (dx, dy) = args, dims
    (lc, rc), (lb, rb) = dimension_numbers

    def shift(ids, d):
        return tuple(i + (i >= d) for i in ids)

    if dx is not None and dy is not None:
        x, y = S.moveaxis(x, dx, 0), S.moveaxis(y, dy, 0)
        dn = ((shift(lc, 0), shift(rc, 0)), ((0,) + shift(lb, 0), (0,) + shift(rb, 0)))
        return dot_general(x, y, dn), 0
    if dx is not None:
        lc2, lb2 = shift(lc, dx), shift(lb, dx)
        free = _free(len(S._shape(x)), lc2, lb2)
        return dot_general(x, y, ((lc2, rc), (lb2, rb))), len(lb) + free.index(dx)
    rc2, rb2 = shift(rc, dy), shift(rb, dy)
    free = _free(len(S._shape(y)), rc2, rb2)
    nx = len(S._shape(x))
    return dot_general(x, y, ((lc, rc2), (lb, rb2))), len(lb) + (
        nx - len(lc) - len(lb)
    ) + free.index(dy)


def _dot_flops(in_avals, out_avals, *, dimension_numbers):
    """Multiply-adds, counted as 2 flops each."""
    (lc, _), _ = dimension_numbers
    return 2 * math.prod(out_avals[0].shape) * math.prod(in_avals[0].shape[i] for i in lc)


# No nvFuser rule: matmul runs through the torch executor (cuBLAS).
dot_general_p = declare(
    "dot_general",
    impl=_dot_impl,
    abstract_eval=_dot_abstract_eval,
    jvp=_dot_jvp,
    linear=True,
    transpose=_dot_transpose,
    batch=_dot_batch,
    torch_codegen=_dot_codegen,
    flops=_dot_flops,
)
