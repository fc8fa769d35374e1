"""Diagonals and triangles: torch.diagonal, diag_embed, tril and triu as strided slices and
masked selects of primitives."""

from __future__ import annotations

import torch

from thunderx.lang._base import canon_dim, dtype, ndim, register, shape, where
from thunderx.lang.shape_ops import _movedim
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import shape as S


@register(torch.diagonal, methods=("diagonal",))
def _diagonal(x, offset=0, dim1=0, dim2=1):
    n = ndim(x)
    d1, d2 = canon_dim(dim1, n), canon_dim(dim2, n)
    x = _movedim(x, [d1, d2], [n - 2, n - 1])
    shp = shape(x)
    rows, cols = shp[-2], shp[-1]
    if offset >= 0:
        length = max(0, min(rows, cols - offset))
        r0, c0 = 0, offset
    else:
        length = max(0, min(rows + offset, cols))
        r0, c0 = -offset, 0
    # flatten the two dims; the diagonal is a strided slice of the flat axis
    flat = S.reshape(x, shp[:-2] + (rows * cols,))
    start = r0 * cols + c0
    if length == 0:
        return S.slice_in_dim(flat, 0, 0, 1, n - 2)
    return S.slice_in_dim(flat, start, start + (length - 1) * (cols + 1) + 1, cols + 1, n - 2)


@register(torch.diag_embed)
def _diag_embed(x, offset=0, dim1=-2, dim2=-1):
    if offset != 0 or (dim1, dim2) != (-2, -1):
        rank = ndim(x) + 1
        d1, d2 = canon_dim(dim1, rank), canon_dim(dim2, rank)
        if d1 == d2:
            raise RuntimeError(f"diag_embed: dim1 and dim2 are both {dim1}")
        out = _diag_embed(x)
        k = abs(offset)  # the k-th diagonal of the padded (n + k)-square matrix
        if k:
            out = torch.nn.functional.pad(out, (k, 0, 0, k) if offset > 0 else (0, k, k, 0))
        return torch.movedim(out, (-2, -1), (d1, d2))
    n = shape(x)[-1]
    eye = B.eq(C.iota(torch.int64, (n, n), 0), C.iota(torch.int64, (n, n), 1))
    xb = S.broadcast_in_dim(x, shape(x) + (n,), tuple(range(ndim(x))))
    return where(S.broadcast_to(eye, shape(xb)), xb, _zero_of(x))


def _tri_mask(x, diagonal, lower):
    rows, cols = shape(x)[-2:]
    r = C.iota(torch.int64, (rows, cols), 0)
    c = C.iota(torch.int64, (rows, cols), 1)
    diff = B.sub(c, r)
    keep = B.le(diff, diagonal) if lower else B.ge(diff, diagonal)
    return S.broadcast_to(keep, shape(x))


def _zero_of(x):
    return False if dtype(x) is torch.bool else (0 if not dtype(x).is_floating_point else 0.0)


@register(torch.tril, methods=("tril",))
def _tril(x, diagonal=0):
    from thunderx.primitives import unary as U

    return U.select(_tri_mask(x, diagonal, True), x, _zero_of(x))


@register(torch.triu, methods=("triu",))
def _triu(x, diagonal=0):
    from thunderx.primitives import unary as U

    return U.select(_tri_mask(x, diagonal, False), x, _zero_of(x))
