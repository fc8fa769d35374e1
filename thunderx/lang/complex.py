"""Complex numbers: torch's functions on complex tensors, decomposed onto real/imag/conj/complex.

Values are torch's; derivatives follow torch's convention (see primitives/complex.py): `abs`
and `sgn` have derivative 0 at 0, `angle` is `atan2(imag, real)`.
"""

from __future__ import annotations

import math

import torch

from thunderx.lang._base import broadcast_shapes, broadcast_to, dtype, full_like, register, shape
from thunderx.primitives import binary as B
from thunderx.primitives import complex as X
from thunderx.primitives import shape as S
from thunderx.primitives import slicing as L
from thunderx.primitives import unary as U


def _is_complex(x) -> bool:
    return dtype(x).is_complex


@register(torch.real, methods=("real_part",))
def real(x):
    return X.real(x) if _is_complex(x) else x


@register(torch.imag, methods=("imag_part",))
def imag(x):
    if not _is_complex(x):
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return X.imag(x)


@register(torch.conj, torch.conj_physical, methods=("conj", "conj_physical"))
def conj(x):
    return X.conj(x) if _is_complex(x) else x


@register(torch.resolve_conj, torch.resolve_neg, methods=("resolve_conj", "resolve_neg"))
def _resolved(x):
    return x  # traced values are never lazily conjugated or negated


@register(methods=("is_conj", "is_neg"))
def _is_lazy(x):
    return False


@register(torch.is_complex, methods=("is_complex",))
def _is_complex_fn(x):
    return _is_complex(x)


def _broadcast(a, b):
    """torch.complex and torch.polar broadcast their two real operands (dtypes must agree)."""
    shp = broadcast_shapes(shape(a), shape(b))
    return broadcast_to(a, shp) if shape(a) != shp else a, (
        broadcast_to(b, shp) if shape(b) != shp else b
    )


@register(torch.complex)
def complex_(real, imag):
    return X.complex_(*_broadcast(real, imag))


@register(torch.view_as_real)
def view_as_real(x):
    if not _is_complex(x):
        raise RuntimeError("view_as_real is only supported for complex tensors")
    n = len(x.shape)
    parts = [S.expand_dims(X.real(x), (n,)), S.expand_dims(X.imag(x), (n,))]
    return L.concatenate(parts, n)


@register(torch.view_as_complex)
def view_as_complex(x):
    shp = tuple(x.shape)
    if not shp or shp[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    last = len(shp) - 1
    re = S.squeeze(L.slice_in_dim(x, 0, 1, 1, last), (last,))
    im = S.squeeze(L.slice_in_dim(x, 1, 2, 1, last), (last,))
    return X.complex_(re, im)


def modulus_squared(z):
    """|z|^2 = re^2 + im^2, real."""
    re, im = X.real(z), X.imag(z)
    return B.add(B.mul(re, re), B.mul(im, im))


def abs_complex(z):
    """|z| with derivative 0 at 0 (torch's), through the squared modulus."""
    sq = modulus_squared(z)
    zero = B.eq(sq, 0.0)
    return U.select(zero, 0.0, U.sqrt(U.select(zero, 1.0, sq)))


def sgn_complex(z):
    """z / |z|, 0 at 0 (torch.sgn)."""
    r = abs_complex(z)
    zero = B.eq(r, 0.0)
    safe = U.select(zero, 1.0, r)
    out = B.div(z, X.complex_(safe, full_like(safe, 0.0)))
    return U.select(zero, full_like(z, 0.0), out)


@register(torch.angle, methods=("angle",))
def angle(x):
    if _is_complex(x):
        return B.atan2_p.bind(X.imag(x), X.real(x))
    if not dtype(x).is_floating_point:
        x = U.convert(x, torch.get_default_dtype())
    # torch: pi for negative entries, 0 otherwise, nan stays nan; derivative 0
    from thunderx.primitives.higher_order import stop_gradient

    return stop_gradient(U.select(B.lt(x, 0.0), math.pi, B.mul(x, 0.0)))


@register(torch.polar)
def polar(abs, angle):  # noqa: A002  (torch's argument names)
    abs, angle = _broadcast(abs, angle)  # noqa: A001
    return X.complex_(B.mul(abs, U.cos(angle)), B.mul(abs, U.sin(angle)))
