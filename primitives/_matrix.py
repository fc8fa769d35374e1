"""Matrix building blocks on primitives, for the rules of the linear algebra primitives: batched
matmul, transposes, triangles, diagonals. Every operand is (*batch, m, n) with equal batch dims."""

from __future__ import annotations

import torch

from thunderx.core import get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import complex as X
from thunderx.primitives import creation as C
from thunderx.primitives import linalg as L
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives.shape import batch_to_front  # noqa: F401 (re-exported for the matrix rules)


def shape(x) -> tuple:
    return tuple(get_aval(x).shape)


def mT(x):
    """Swap the last two dimensions."""
    n = len(shape(x))
    perm = list(range(n))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return S.transpose(x, tuple(perm))


def is_complex(x) -> bool:
    return get_aval(x).dtype.is_complex


def conj(x):
    return X.conj(x) if is_complex(x) else x


def mH(x):
    """The conjugate transpose (mT for real x)."""
    return conj(mT(x))


def real_part(x):
    return X.real(x) if is_complex(x) else x


def imaginary(v):
    """i v, complex, for a real v."""
    return X.complex_(B.mul(v, 0.0), v)


def like(v, x):
    """Real `v` in x's dtype (complex where x is): for a real factor in a complex rule."""
    dt = get_aval(x).dtype
    return v if get_aval(v).dtype == dt else U.convert(v, dt)


def mm(a, b):
    """(*batch, m, k) @ (*batch, k, n) as one dot_general with batch dimensions."""
    nb = len(shape(a)) - 2
    batch = tuple(range(nb))
    return L.dot_general(a, b, (((nb + 1,), (nb,)), (batch, batch)))


def _mask(x, keep):
    rows, cols = shape(x)[-2:]
    dev = get_aval(x).device
    r = C.iota(torch.int64, (rows, cols), 0, dev)
    c = C.iota(torch.int64, (rows, cols), 1, dev)
    return S.broadcast_to(keep(B.sub(c, r)), shape(x))


def tril(x, k: int = 0):
    return U.select(_mask(x, lambda d: B.le(d, k)), x, 0.0)


def triu(x, k: int = 0):
    return U.select(_mask(x, lambda d: B.ge(d, k)), x, 0.0)


def eye_mask(x):
    """A bool (*batch, m, n) mask of the main diagonal."""
    return _mask(x, lambda d: B.eq(d, 0))


def diagonal(x):
    """The main diagonal of a square (*batch, n, n) matrix, shape (*batch, n)."""
    return R.reduce_sum(U.select(eye_mask(x), x, 0.0), (len(shape(x)) - 1,))


def diag_embed(v):
    """(*batch, n) -> (*batch, n, n) with v on the diagonal."""
    s = shape(v)
    n = len(s)
    full = S.broadcast_in_dim(v, s + (s[-1],), tuple(range(n)))
    return U.select(eye_mask(full), full, 0.0)


def eye_like(x):
    """The identity of x's (square) shape and dtype."""
    return U.convert(eye_mask(x), get_aval(x).dtype)


def row_vector(v):
    """(*batch, n) -> (*batch, 1, n) broadcast to (*batch, n, n): entry [i, j] = v[j]."""
    s = shape(v)
    nb = len(s) - 1
    return S.broadcast_in_dim(v, s[:-1] + (s[-1], s[-1]), tuple(range(nb)) + (nb + 1,))


def scale_cols(x, v):
    """x (*batch, m, k) with column j divided by v[..., j]."""
    s = shape(x)
    nb = len(s) - 2
    return B.div(x, S.broadcast_in_dim(v, s, tuple(range(nb)) + (nb + 1,)))


def col_vector(v, cols: int | None = None):
    """(*batch, m) -> (*batch, m, cols): entry [i, j] = v[i]."""
    s = shape(v)
    nb = len(s) - 1
    cols = s[-1] if cols is None else cols
    return S.broadcast_in_dim(v, s[:-1] + (s[-1], cols), tuple(range(nb)) + (nb,))


def sym(x):
    """(x + x^H) / 2: the tangent of a symmetric (Hermitian) operand read from one triangle
    (torch's convention for cholesky and eigh, whose gradients are symmetric, Hermitian)."""
    return B.mul(B.add(x, mH(x)), 0.5)
