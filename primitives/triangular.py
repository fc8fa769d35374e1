"""Triangular solves (JAX's `lax.linalg.triangular_solve`) and the helpers the matrix
decompositions' rules share (primitives/linalg_decomp.py, eig.py, matrix_functions.py)."""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero, add_tangents, instantiate, is_undefined
from thunderx.avals import ShapedArray, is_float
from thunderx.core import declare, get_aval
from thunderx.primitives import _matrix as M
from thunderx.primitives import binary as B
from thunderx.primitives import shape as S


def _matrix_aval(name, x: ShapedArray, square: bool = False) -> None:
    if x.ndim < 2:
        raise TypeError(f"{name}: expected a (*batch, m, n) matrix, got {x.str_short()}")
    if square and x.shape[-1] != x.shape[-2]:
        raise TypeError(f"{name}: expected square matrices, got {x.str_short()}")
    if not is_float(x.dtype):
        raise TypeError(f"{name}: expected a floating dtype, got {x.str_short()}")


def _aval(x: ShapedArray, shape, dtype=None) -> ShapedArray:
    return ShapedArray(tuple(shape), x.dtype if dtype is None else dtype, x.device)


def _real_aval(x: ShapedArray, shape) -> ShapedArray:
    """Eigenvalues of a Hermitian matrix and singular values are real for complex x too."""
    return _aval(x, shape, x.dtype.to_real() if x.dtype.is_complex else x.dtype)


def _batch_front(prim):
    """Batching of a one-operand primitive: the batch dim becomes one more leading dim."""

    def rule(args, dims, **params):
        out = prim.bind(S.moveaxis(args[0], dims[0], 0), **params)
        return out, ([0] * len(out) if prim.multiple_results else 0)

    return rule


# ------------------------------------------------------------------------------ triangular_solve


def triangular_solve(
    a,
    b,
    *,
    left_side: bool = True,
    lower: bool = True,
    transpose_a: bool = False,
    unit_diagonal: bool = False,
):
    """op(a) x = b (left_side) or x op(a) = b, op(a) = a^T when transpose_a; only the triangle of
    `a` named by `lower` is read (and not its diagonal when unit_diagonal)."""
    return triangular_solve_p.bind(
        a,
        b,
        left_side=left_side,
        lower=lower,
        transpose_a=transpose_a,
        unit_diagonal=unit_diagonal,
    )


def _ts_impl(a, b, *, left_side, lower, transpose_a, unit_diagonal):
    upper = not lower
    if transpose_a:
        a, upper = a.mT, not upper
    return torch.linalg.solve_triangular(
        a, b, upper=upper, left=left_side, unitriangular=unit_diagonal
    )


def _ts_codegen(args, avals, *, left_side, lower, transpose_a, unit_diagonal):
    a, b = args
    upper = lower if transpose_a else not lower
    a = f"{a}.mT" if transpose_a else a
    return (
        f"torch.linalg.solve_triangular({a}, {b}, upper={upper}, left={left_side}, "
        f"unitriangular={unit_diagonal})"
    )


def _ts_abstract_eval(a, b, *, left_side, lower, transpose_a, unit_diagonal):
    _matrix_aval("triangular_solve", a, square=True)
    _matrix_aval("triangular_solve", b)
    n = a.shape[-1]
    if a.shape[:-2] != b.shape[:-2] or a.dtype != b.dtype:
        raise TypeError(f"triangular_solve: {a.str_short()} and {b.str_short()} do not agree")
    if (b.shape[-2] if left_side else b.shape[-1]) != n:
        side = "rows" if left_side else "columns"
        raise TypeError(f"triangular_solve: {b.str_short()} needs {n} {side}")
    return b.strip_weak()


def _ts_jvp(primals, tangents, **params):
    a, b = primals
    ta, tb = tangents
    x = triangular_solve(a, b, **params)
    if type(ta) is Zero and type(tb) is Zero:
        return x, Zero(get_aval(x))
    rhs = Zero(get_aval(x)) if type(tb) is Zero else tb
    if type(ta) is not Zero:
        k = 1 if params["unit_diagonal"] else 0
        ta = M.tril(ta, -k) if params["lower"] else M.triu(ta, k)
        ta = M.mT(ta) if params["transpose_a"] else ta
        prod = M.mm(ta, x) if params["left_side"] else M.mm(x, ta)
        rhs = add_tangents(rhs, B.neg(prod))
    return x, triangular_solve(a, instantiate(rhs), **params)


def _ts_transpose(ct, a, b, **params):
    if is_undefined(a):
        raise TypeError("triangular_solve is linear in b only; a must be known when transposing")
    ct = instantiate(ct)
    flipped = dict(params, transpose_a=not params["transpose_a"])
    return [None, triangular_solve(a, ct, **flipped)]


def _ts_batch(args, dims, **params):
    (a, b), (da, db) = args, dims
    if da is None:
        # the batch of right-hand sides folds into b's columns (left) or rows (right): one solve
        b = S.moveaxis(b, db, len(M.shape(b)) - (1 if params["left_side"] else 3))
        s = M.shape(b)
        flat = (
            S.reshape(b, s[:-3] + (s[-3], s[-2] * s[-1]))
            if params["left_side"]
            else S.reshape(b, s[:-3] + (s[-3] * s[-2], s[-1]))
        )
        out = S.reshape(triangular_solve(a, flat, **params), s)
        return out, len(s) - (1 if params["left_side"] else 3)
    a, b = M.batch_to_front([a, b], [da, db])
    return triangular_solve(a, b, **params), 0


triangular_solve_p = declare(
    "triangular_solve",
    impl=_ts_impl,
    abstract_eval=_ts_abstract_eval,
    torch_codegen=_ts_codegen,
    jvp=_ts_jvp,
    transpose=_ts_transpose,
    batch=_ts_batch,
    linear=True,  # in b
)
