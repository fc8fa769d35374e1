"""The matmul family: matmul/@, mm, bmm, mv, dot, outer, addmm, baddbmm, einsum, tensordot,
linear. Each is one dot_general (plus broadcasts and adds)."""

from __future__ import annotations

import string

import torch
import torch.nn.functional as F

from thunderx.errors import ShapeError
from thunderx.lang._base import (
    broadcast_shapes,
    canon_dim,
    in_opmath,
    ndim,
    promote,
    register,
    shape,
)
from thunderx.lang.complex import conj
from thunderx.primitives import binary as B
from thunderx.primitives import linalg as L
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S


def _check_contract(a, b, i, j, name):
    if shape(a)[i] != shape(b)[j]:
        raise ShapeError(
            f"{name}: shapes {shape(a)} and {shape(b)} cannot be multiplied "
            f"({shape(a)[i]} vs {shape(b)[j]})"
        )


def matmul(a, b):
    if type(a) in (int, float) or type(b) in (int, float):
        raise TypeError("matmul: both operands must be tensors")
    a, b = _same_dtype_noshape(a, b)
    na, nb = ndim(a), ndim(b)
    if na == 0 or nb == 0:
        raise ShapeError("matmul: both arguments need at least one dimension")
    if na == 1 and nb == 1:
        _check_contract(a, b, 0, 0, "matmul")
        return L.dot_general(a, b, (((0,), (0,)), ((), ())))
    if nb == 1:
        _check_contract(a, b, na - 1, 0, "matmul")
        return L.dot_general(a, b, (((na - 1,), (0,)), ((), ())))
    if na == 1:
        _check_contract(a, b, 0, nb - 2, "matmul")
        out = L.dot_general(a, b, (((0,), (nb - 2,)), ((), ())))
        return out  # batch dims of b stay in front, then b's last dim
    _check_contract(a, b, na - 1, nb - 2, "matmul")
    if nb == 2:
        return L.dot_general(a, b, (((na - 1,), (0,)), ((), ())))
    batch = broadcast_shapes(shape(a)[:-2], shape(b)[:-2])
    a = S.broadcast_to(a, batch + shape(a)[-2:])
    b = S.broadcast_to(b, batch + shape(b)[-2:])
    nbat = len(batch)
    bd = tuple(range(nbat))
    return L.dot_general(a, b, (((nbat + 1,), (nbat,)), (bd, bd)))


def _same_dtype_noshape(a, b):
    return tuple(_promote_all([a, b]))


register(torch.matmul, torch.linalg.matmul, torch.Tensor.__matmul__, methods=("matmul",))(
    lambda a, b, *, out=None: matmul(a, b)
)
register(torch.Tensor.__rmatmul__)(lambda a, b: matmul(b, a))


@register(torch.mm, methods=("mm",))
def _mm(a, b, *, out=None):
    if ndim(a) != 2 or ndim(b) != 2:
        raise ShapeError(f"Shape mismatch: mm expects 2-D tensors, got {shape(a)} and {shape(b)}")
    return matmul(a, b)


@register(torch.bmm, methods=("bmm",))
def _bmm(a, b, *, out=None):
    if ndim(a) != 3 or ndim(b) != 3:
        raise ShapeError(f"Shape mismatch: bmm expects 3-D tensors, got {shape(a)} and {shape(b)}")
    return matmul(a, b)


@register(torch.mv, methods=("mv",))
def _mv(a, v, *, out=None):
    if ndim(a) != 2 or ndim(v) != 1:
        raise ShapeError(
            f"Shape mismatch: mv expects a 2-D matrix and a 1-D vector, got {shape(a)} and "
            f"{shape(v)}"
        )
    return matmul(a, v)


@register(torch.dot, methods=("dot",))
def _dot(a, b, *, out=None):
    if ndim(a) != 1 or ndim(b) != 1:
        raise ShapeError(f"dot: expected 1-D tensors, got {shape(a)} and {shape(b)}")
    return matmul(a, b)


@register(torch.vdot, methods=("vdot",))
def _vdot(a, b):
    """sum(conj(a) * b): torch conjugates the first vector."""
    return _dot(conj(a), b)


@register(torch.outer, torch.ger, methods=("outer", "ger"))
def _outer(a, b):
    if ndim(a) != 1 or ndim(b) != 1:
        raise ShapeError(f"outer: expected 1-D tensors, got {shape(a)} and {shape(b)}")
    a, b = _same_dtype_noshape(a, b)
    return L.dot_general(a, b, (((), ()), ((), ())))


def _scaled_add(inp, prod, beta, alpha):
    if alpha != 1:
        prod = B.mul(prod, alpha)
    if beta == 0:
        return prod
    inp = inp if beta == 1 else B.mul(inp, beta)
    (inp, prod), _ = promote(inp, prod)
    return B.add(inp, prod)


@register(torch.addmm, methods=("addmm",))
@in_opmath(cpu_only=True)
def _addmm(inp, m1, m2, *, beta=1, alpha=1):
    return _scaled_add(inp, _mm(m1, m2), beta, alpha)


@register(torch.addmv, methods=("addmv",))
def _addmv(inp, m, v, *, beta=1, alpha=1):
    return _scaled_add(inp, _mv(m, v), beta, alpha)


@register(torch.baddbmm, methods=("baddbmm",))
@in_opmath(cpu_only=True)
def _baddbmm(inp, b1, b2, *, beta=1, alpha=1):
    return _scaled_add(inp, _bmm(b1, b2), beta, alpha)


@register(torch.addbmm, methods=("addbmm",))
def _addbmm(inp, b1, b2, *, beta=1, alpha=1):
    return _scaled_add(inp, R.reduce_sum(_bmm(b1, b2), (0,)), beta, alpha)


@register(F.linear)
def linear(x, weight, bias=None):
    x, weight = _same_dtype_noshape(x, weight)
    n = ndim(x)
    if ndim(weight) == 1:
        out = L.dot_general(x, weight, (((n - 1,), (0,)), ((), ())))
    else:
        _check_contract(x, weight, n - 1, 1, "linear")
        out = L.dot_general(x, weight, (((n - 1,), (1,)), ((), ())))
    if bias is not None:
        (out, bias), _ = promote(out, bias)
        out = B.add(out, bias)
    return out


@register(F.bilinear)
def _bilinear(x1, x2, weight, bias=None):
    out = einsum("...i,oij,...j->...o", x1, weight, x2)
    if bias is not None:
        (out, bias), _ = promote(out, bias)
        out = B.add(out, bias)
    return out


@register(torch.tensordot)
def _tensordot(a, b, dims=2, out=None):
    na, nb = ndim(a), ndim(b)
    if isinstance(dims, int):
        da, db = tuple(range(na - dims, na)), tuple(range(dims))
    else:
        da, db = dims
        da = (da,) if isinstance(da, int) else tuple(da)
        db = (db,) if isinstance(db, int) else tuple(db)
    da = tuple(canon_dim(d, na) for d in da)
    db = tuple(canon_dim(d, nb) for d in db)
    a, b = _same_dtype_noshape(a, b)
    # torch broadcasts a contracted dim of size 1 against its partner
    sa, sb = list(shape(a)), list(shape(b))
    for i, j in zip(da, db):
        if sa[i] == 1 and sb[j] != 1:
            sa[i] = sb[j]
        elif sb[j] == 1 and sa[i] != 1:
            sb[j] = sa[i]
    a = S.broadcast_to(a, tuple(sa)) if tuple(sa) != shape(a) else a
    b = S.broadcast_to(b, tuple(sb)) if tuple(sb) != shape(b) else b
    return L.dot_general(a, b, ((da, db), ((), ())))


def _parse_einsum(equation, operands):
    eq = equation.replace(" ", "")
    lhs, out = eq.split("->") if "->" in eq else (eq, None)
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ShapeError(f"einsum: {len(terms)} terms but {len(operands)} operands")
    free = [c for c in string.ascii_letters if c not in eq]
    ell_rank = max(
        (ndim(x) - (len(t) - 3) for t, x in zip(terms, operands) if "..." in t), default=0
    )
    ell = "".join(free[:ell_rank])
    expanded = []
    for t, x in zip(terms, operands):
        if "..." in t:
            k = ndim(x) - (len(t) - 3)
            t = t.replace("...", ell[ell_rank - k :])
        if len(t) != ndim(x):
            raise ShapeError(f"einsum: term {t!r} does not match an operand of rank {ndim(x)}")
        expanded.append(t)
    if out is None:
        counts: dict[str, int] = {}
        for t in expanded:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
    return expanded, out


@register(torch.einsum)
def einsum(equation, *operands):
    """Pairwise contraction, left to right; letters seen in one operand only are summed first."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    terms, out = _parse_einsum(equation, operands)
    ops = _promote_all(list(operands))
    for i, t in enumerate(terms):
        while len(set(t)) != len(t):
            # a letter twice in one operand ('ii', 'iji'): its diagonal, moved last by torch
            c = next(c for c in t if t.count(c) > 1)
            a, b = t.index(c), t.index(c, t.index(c) + 1)
            if shape(ops[i])[a] != shape(ops[i])[b]:
                raise RuntimeError(
                    f"einsum {equation!r}: subscript {c!r} repeated for dimensions of sizes "
                    f"{shape(ops[i])[a]} and {shape(ops[i])[b]}"
                )
            ops[i] = torch.diagonal(ops[i], 0, a, b)
            t = "".join(x for k, x in enumerate(t) if k not in (a, b)) + c
            terms[i] = t
        others = "".join(terms[:i] + terms[i + 1 :]) + out
        lone = tuple(k for k, c in enumerate(t) if c not in others)
        if lone:
            ops[i] = R.reduce_sum(ops[i], lone)
            terms[i] = "".join(c for c in t if c in others)
    acc, acc_t = ops[0], terms[0]
    for k in range(1, len(ops)):
        x, t = ops[k], terms[k]
        keep = set(out).union(*[set(u) for u in terms[k + 1 :]])
        merged = acc_t + "".join(c for c in t if c not in acc_t)
        target = "".join(c for c in merged if c in keep)
        acc, acc_t = L.contract(acc, acc_t, x, t, target), target
    missing = set(out) - set(acc_t)
    if missing:
        raise ShapeError(f"einsum {equation!r}: output letters {sorted(missing)} are not inputs")
    return S.transpose(acc, tuple(acc_t.index(c) for c in out))


def _promote_all(ops):
    from thunderx.avals import ShapedArray, result_dtype
    from thunderx.lang._base import convert, dtype

    dt = result_dtype(*[ShapedArray(shape(o), dtype(o)) for o in ops])
    return [convert(o, dt) for o in ops]
