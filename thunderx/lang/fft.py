"""torch.fft on the `fft` primitive: the transformed dims are moved last, padded or trimmed to
the requested lengths (`n`, `s`), transformed, scaled for `norm` and moved back. hfft/ihfft are
irfft/rfft of the conjugate with the opposite normalization, as torch defines them."""

from __future__ import annotations

import math

import torch

from thunderx.lang._base import aval, canon_dim, dtype, ndim, register, shape
from thunderx.primitives import binary as B
from thunderx.primitives import complex as X
from thunderx.primitives import fft as P
from thunderx.primitives import shape as S
from thunderx.primitives import slicing as L
from thunderx.primitives import unary as U

_COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def _float(x):
    dt = dtype(x)
    if dt.is_complex or dt.is_floating_point and dt in _COMPLEX_OF:
        return x
    return U.convert(x, torch.get_default_dtype())


def _to_complex(x):
    x = _float(x)
    if dtype(x).is_complex:
        return x
    from thunderx.primitives import creation as C

    a = shape(x)
    return X.complex_(x, C.full(a, 0.0, dtype(x), aval(x).device))


def _to_real(x, what):
    x = _float(x)
    if dtype(x).is_complex:
        raise RuntimeError(f"{what} expects a real input tensor, but got {dtype(x)}")
    return x


def _resize(x, dim: int, n: int):
    """x's dim `dim` zero-padded or trimmed at the end to length n (torch's `n` / `s`)."""
    m = shape(x)[dim]
    if n == m:
        return x
    if n < m:
        return L.slice_in_dim(x, 0, n, 1, dim)
    config = [(0, 0, 0)] * ndim(x)
    config[dim] = (0, n - m, 0)
    return L.pad(x, 0.0, tuple(config))


def _resize_dims(x, dims, s):
    """x resized along each of dims to its length in s (-1: left as it is; s None: all)."""
    for d, n in zip(dims, s or ()):
        if n != -1:
            x = _resize(x, d, n)
    return x


def _dims_and_lengths(x, s, dim, name, default_all=True):
    """Canonical transformed dims and their input lengths (before any irfft-style change)."""
    nd = ndim(x)
    if dim is None:
        if s is not None:
            dims = tuple(range(nd - len(s), nd))
        elif default_all:
            dims = tuple(range(nd))
        else:
            dims = (nd - 2, nd - 1)
    else:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        dims = tuple(canon_dim(d, nd) for d in dims)
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"{name}: dims must be unique, got {dims}")
    if s is not None:
        s = tuple(s)
        if len(s) != len(dims):
            raise RuntimeError(f"{name}: s has {len(s)} entries for {len(dims)} dims")
    if not dims:
        raise RuntimeError(f"{name}: at least one dim to transform")
    return dims, s


def _last(x, dims):
    """x with `dims` moved to the end, in order; and the permutation back."""
    nd = ndim(x)
    rest = [d for d in range(nd) if d not in dims]
    perm = rest + list(dims)
    inv = [perm.index(i) for i in range(nd)]
    return (S.transpose(x, tuple(perm)) if perm != list(range(nd)) else x), inv


def _back(y, inv):
    return S.transpose(y, tuple(inv)) if inv != list(range(len(inv))) else y


def _scale(y, n: int, norm, inverse: bool):
    """The primitive is torch's "backward" norm: forward unscaled, inverse 1/n."""
    norm = "backward" if norm is None else norm
    if norm not in ("backward", "forward", "ortho"):
        raise ValueError(f'Invalid normalization mode: "{norm}"')
    if norm == "backward":
        return y
    if norm == "ortho":
        factor = math.sqrt(n) if inverse else 1.0 / math.sqrt(n)
    else:
        factor = float(n) if inverse else 1.0 / n
    return B.mul(y, factor)


def _c2c(x, s, dim, norm, inverse, name, default_all=True):
    dims, s = _dims_and_lengths(x, s, dim, name, default_all)
    x = _to_complex(x)
    x = _resize_dims(x, dims, s)
    lengths = tuple(shape(x)[d] for d in dims)
    xl, inv = _last(x, dims)
    y = P.fft(xl, "ifft" if inverse else "fft", lengths)
    return _scale(_back(y, inv), math.prod(lengths), norm, inverse)


def _r2c(x, s, dim, norm, name, default_all=True, onesided_conj=False):
    """rfft family (and ihfft: the conjugate, inverse-normalized)."""
    dims, s = _dims_and_lengths(x, s, dim, name, default_all)
    x = _to_real(x, name)
    x = _resize_dims(x, dims, s)
    lengths = tuple(shape(x)[d] for d in dims)
    xl, inv = _last(x, dims)
    y = _back(P.fft(xl, "rfft", lengths), inv)
    if onesided_conj:  # ihfft: conj(rfft(x)) with the inverse's normalization
        return X.conj(_scale(y, math.prod(lengths), _flip(norm), False))
    return _scale(y, math.prod(lengths), norm, False)


def _c2r(x, s, dim, norm, name, default_all=True, hermitian_forward=False):
    """irfft family (and hfft: irfft of the conjugate, forward-normalized)."""
    dims, s = _dims_and_lengths(x, s, dim, name, default_all)
    x = _to_complex(x)
    last = dims[-1]
    if s is None or s[-1] == -1:
        n_last = 2 * (shape(x)[last] - 1)
    else:
        n_last = s[-1]
    if n_last < 1:
        raise RuntimeError(f"{name}: Invalid number of data points ({n_last}) specified")
    x = _resize_dims(x, dims[:-1], None if s is None else s[:-1])
    x = _resize(x, last, n_last // 2 + 1)
    lengths = tuple(shape(x)[d] for d in dims[:-1]) + (n_last,)
    if hermitian_forward:
        x = X.conj(x)
    xl, inv = _last(x, dims)
    y = _back(P.fft(xl, "irfft", lengths), inv)
    if hermitian_forward:  # hfft: a forward transform, so "backward" means unscaled
        return _scale(y, math.prod(lengths), _flip(norm), True)
    return _scale(y, math.prod(lengths), norm, True)


def _flip(norm):
    return {None: "forward", "backward": "forward", "forward": "backward", "ortho": "ortho"}[norm]


def _one(dim):
    return (dim,)


@register(torch.fft.fft)
def _fft(input, n=None, dim=-1, norm=None):  # noqa: A002 - torch's argument names
    return _c2c(input, None if n is None else (n,), _one(dim), norm, False, "fft")


@register(torch.fft.ifft)
def _ifft(input, n=None, dim=-1, norm=None):  # noqa: A002
    return _c2c(input, None if n is None else (n,), _one(dim), norm, True, "ifft")


@register(torch.fft.rfft)
def _rfft(input, n=None, dim=-1, norm=None):  # noqa: A002
    return _r2c(input, None if n is None else (n,), _one(dim), norm, "rfft")


@register(torch.fft.irfft)
def _irfft(input, n=None, dim=-1, norm=None):  # noqa: A002
    return _c2r(input, None if n is None else (n,), _one(dim), norm, "irfft")


@register(torch.fft.hfft)
def _hfft(input, n=None, dim=-1, norm=None):  # noqa: A002
    return _c2r(input, None if n is None else (n,), _one(dim), norm, "hfft", True, True)


@register(torch.fft.ihfft)
def _ihfft(input, n=None, dim=-1, norm=None):  # noqa: A002
    return _r2c(input, None if n is None else (n,), _one(dim), norm, "ihfft", True, True)


def _nd(fn, name, default_all, **extra):
    def impl(input, s=None, dim=None, norm=None):  # noqa: A002
        return fn(input, s, dim, norm, name=name, default_all=default_all, **extra)

    impl.__name__ = name
    return impl


def _c2c_named(inverse):
    def run(x, s, dim, norm, name, default_all):
        return _c2c(x, s, dim, norm, inverse, name, default_all)

    return run


for _all, _suffix in ((True, "n"), (False, "2")):
    register(getattr(torch.fft, "fft" + _suffix))(_nd(_c2c_named(False), "fft" + _suffix, _all))
    register(getattr(torch.fft, "ifft" + _suffix))(_nd(_c2c_named(True), "ifft" + _suffix, _all))
    register(getattr(torch.fft, "rfft" + _suffix))(_nd(_r2c, "rfft" + _suffix, _all))
    register(getattr(torch.fft, "irfft" + _suffix))(_nd(_c2r, "irfft" + _suffix, _all))
    register(getattr(torch.fft, "hfft" + _suffix))(
        _nd(_c2r, "hfft" + _suffix, _all, hermitian_forward=True)
    )
    register(getattr(torch.fft, "ihfft" + _suffix))(
        _nd(_r2c, "ihfft" + _suffix, _all, onesided_conj=True)
    )


def _shift(x, dim, sign):
    nd = ndim(x)
    dims = tuple(range(nd)) if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
    dims = tuple(canon_dim(d, nd) for d in dims)
    shifts = tuple(sign * (shape(x)[d] // 2) for d in dims)
    return torch.roll(x, shifts, dims)


@register(torch.fft.fftshift)
def _fftshift(input, dim=None):  # noqa: A002
    return _shift(input, dim, 1)


@register(torch.fft.ifftshift)
def _ifftshift(input, dim=None):  # noqa: A002
    return _shift(input, dim, -1)
