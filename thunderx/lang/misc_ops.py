"""Miscellaneous op_db functions written on the language layer: repeat_interleave with tensor
repeats, mode, frexp, nextafter, torch.gradient and the as_strided family."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

from thunderx.core import Tracer
from thunderx.errors import unsupported
from thunderx.lang._base import aval, canon_dim, known_value, ndim, register, shape
from thunderx.primitives import shape as S


def repeat_interleave_tensor(x, repeats, dim, output_size):
    """repeat_interleave with a tensor of repeats: a gather of x's slices at the source index of
    each output position. The output's length is the sum of the repeats: it must be known, from
    concrete repeats (their source indices computed now) or from `output_size` (traced repeats:
    position j comes from the first slice whose running total exceeds j)."""
    if dim is None:
        x = S.reshape(x, (math.prod(shape(x)),))
        dim = 0
    d = canon_dim(dim, ndim(x))
    concrete = known_value(repeats)
    if concrete is not None:
        if concrete.ndim == 0:
            concrete = concrete.expand(shape(x)[d])
        source = torch.repeat_interleave(torch.arange(shape(x)[d]), concrete.cpu())
        if output_size is not None and output_size != source.numel():
            raise RuntimeError(
                f"repeat_interleave: output_size {output_size} is not the sum of the repeats "
                f"({source.numel()})"
            )
        return torch.index_select(x, d, source.to(aval(x).device))
    if output_size is None:
        raise unsupported(
            "repeat_interleave with traced tensor repeats and no output_size",
            "the output's length is the repeats' sum, a value not known while tracing; pass "
            "output_size= or concrete repeats",
        )
    if ndim(repeats) == 0:
        repeats = repeats.expand(shape(x)[d])
    ends = torch.cumsum(repeats, 0)
    positions = torch.arange(output_size, device=aval(x).device, dtype=ends.dtype)
    source = torch.searchsorted(ends, positions, right=True)
    return torch.index_select(x, d, source)


# ------------------------------------------------------------------------------------ as_strided


def _strided_positions(x, size, stride, storage_offset):
    """The element of x's contiguous storage each position of as_strided(x, size, stride,
    storage_offset) reads: storage_offset + sum_k i_k * stride_k. A traced tensor has no strides
    of its own, so x is read as the contiguous tensor of its shape (as torch.func's batching of
    as_strided does)."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"as_strided: size {size} and stride {stride} differ in length")
    offset = 0 if storage_offset is None else int(storage_offset)
    positions = torch.full(size, offset, dtype=torch.int64)
    for k, (n, s) in enumerate(zip(size, stride)):
        if s < 0:
            raise RuntimeError(f"as_strided: negative stride {s} (dim {k})")
        positions = positions + torch.arange(n).reshape((n,) + (1,) * (len(size) - k - 1)) * s
    numel = math.prod(shape(x))
    if positions.numel() and int(positions.max()) >= numel:
        raise RuntimeError(
            f"as_strided: size {size}, stride {stride} and offset {offset} reach element "
            f"{int(positions.max())} of a tensor with {numel} elements"
        )
    return positions.to(aval(x).device)


@register(torch.as_strided, torch.as_strided_copy, methods=("as_strided",))
def _as_strided(x, size, stride, storage_offset=None):
    positions = _strided_positions(x, size, stride, storage_offset)
    return torch.take(x, positions)


@register(torch.as_strided_scatter, methods=("as_strided_scatter",))
def _as_strided_scatter(x, src, size, stride, storage_offset=None):
    """x with the elements as_strided(x, size, stride, storage_offset) reads replaced by src's.
    Positions read twice (overlapping windows) are refused, as torch's kernel leaves them
    unspecified."""
    positions = _strided_positions(x, size, stride, storage_offset).reshape(-1)
    if positions.unique().numel() != positions.numel():
        raise RuntimeError(
            "as_strided_scatter: the view overlaps itself (an element is written twice)"
        )
    flat = x.reshape(-1).index_copy(0, positions, src.reshape(-1).to(x.dtype))
    return flat.reshape(shape(x))


# --------------------------------------------------------------------------- mode, frexp, next


def _mode(x, dim=-1, keepdim=False):
    from thunderx.lang.reductions import MinMax
    from thunderx.primitives import indexing as I
    from thunderx.primitives import reductions as R

    d = canon_dim(dim, ndim(x))
    if ndim(x) == 0:
        return MinMax(x, torch.zeros((), dtype=torch.int64, device=aval(x).device))
    # the index is torch's own (its kernel picks among equal elements); the value is read there,
    # so the derivative goes to that element, as torch's mode backward does
    idx = R.mode_index(x, d)
    values = S.squeeze(I.gather(x, S.expand_dims(idx, (d,)), d), (d,))
    if keepdim:
        values, idx = S.expand_dims(values, (d,)), S.expand_dims(idx, (d,))
    return MinMax(values, idx)


register(torch.mode, methods=("mode",))(_mode)


@register(torch.frexp, methods=("frexp",))
def _frexp(x):
    """mantissa, exponent with x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1 (0, inf and nan:
    themselves and 0). The exponent comes from log2 and is corrected by one where log2 rounded;
    scaling by powers of two is exact, in two halves so that 2**-e never overflows."""
    if not aval(x).dtype.is_floating_point:
        raise RuntimeError(
            f"torch.frexp() only supports floating-point dtypes, got {aval(x).dtype}"
        )
    finite = torch.isfinite(x) & (x != 0)
    ax = torch.where(finite, x.abs(), torch.ones_like(x))
    e = torch.floor(torch.log2(ax)) + 1

    def scale(v, e):
        half = torch.floor(e / 2)
        return v * torch.pow(2.0, -half) * torch.pow(2.0, half - e)  # exact, unlike exp(e ln 2)

    m = scale(ax, e)
    e = torch.where(m >= 1, e + 1, torch.where(m < 0.5, e - 1, e))
    e = torch.where(finite, e, torch.zeros_like(e)).detach()
    return _Frexp(scale(x, e), e.to(torch.int32))


# torch.return_types.frexp's fields
_Frexp = NamedTuple("frexp", [("mantissa", Any), ("exponent", Any)])


@register(torch.nextafter, methods=("nextafter",))
def _nextafter(x, other):
    from thunderx.lang._base import binary
    from thunderx.primitives import binary as B

    return binary(B.nextafter_p.bind, x, other)


# ---------------------------------------------------------------------------------- gradient


def _gradient_along(f, d, h, edge_order):
    """One dim of torch.gradient: second-order central differences inside, one-sided differences
    of `edge_order` at the ends. `h` is a number (uniform spacing) or the 1-D coordinates."""
    n = shape(f)[d]
    if n < edge_order + 1:
        raise RuntimeError(
            f"torch.gradient expected each dimension size to be at least edge_order+1, got "
            f"size {n} along dim {d}"
        )

    def at(start, stop=n):  # f[start:stop] along d
        return f.narrow(d, start, stop - start)

    def along(v):  # a 1-D tensor of coefficients, broadcast along dim d
        return v.reshape((-1,) + (1,) * (ndim(f) - d - 1))

    if not isinstance(h, (Tracer, torch.Tensor)):
        center = (at(2) - at(0, n - 2)) / (2 * h)
        if edge_order == 1:
            first, last = (at(1, 2) - at(0, 1)) / h, (at(n - 1) - at(n - 2, n - 1)) / h
        else:
            first = (-1.5 * at(0, 1) + 2 * at(1, 2) - 0.5 * at(2, 3)) / h
            last = (0.5 * at(n - 3, n - 2) - 2 * at(n - 2, n - 1) + 1.5 * at(n - 1)) / h
        return torch.cat([first, center, last], d)
    dx = h[1:] - h[:-1]
    dx1, dx2 = dx[:-1], dx[1:]
    a = -dx2 / (dx1 * (dx1 + dx2))
    b = (dx2 - dx1) / (dx1 * dx2)
    c = dx1 / (dx2 * (dx1 + dx2))
    center = along(a) * at(0, n - 2) + along(b) * at(1, n - 1) + along(c) * at(2)
    if edge_order == 1:
        first = (at(1, 2) - at(0, 1)) / dx[0]
        last = (at(n - 1) - at(n - 2, n - 1)) / dx[-1]
    else:
        d0, d1 = dx[0], dx[1]
        first = (
            -(2.0 * d0 + d1) / (d0 * (d0 + d1)) * at(0, 1)
            + (d0 + d1) / (d0 * d1) * at(1, 2)
            - d0 / (d1 * (d0 + d1)) * at(2, 3)
        )
        e1, e0 = dx[-1], dx[-2]
        last = (
            e1 / (e0 * (e1 + e0)) * at(n - 3, n - 2)
            - (e1 + e0) / (e1 * e0) * at(n - 2, n - 1)
            + (2 * e1 + e0) / (e1 * (e1 + e0)) * at(n - 1)
        )
    return torch.cat([first, center, last], d)


@register(torch.gradient)
def _gradient(x, *, spacing=1, dim=None, edge_order=1):
    """torch.gradient: the derivative's estimate along each of `dim` (all dims by default), with
    uniform spacing (a number, or one per dim) or coordinates (a 1-D tensor per dim)."""
    if edge_order not in (1, 2):
        raise RuntimeError(
            f"torch.gradient only supports edge_order=1 and edge_order=2, got {edge_order}"
        )
    dims = (
        list(range(ndim(x)))
        if dim is None
        else [canon_dim(dim, ndim(x))]
        if isinstance(dim, int)
        else [canon_dim(d, ndim(x)) for d in dim]
    )
    if spacing is None:
        spacing = 1
    hs = list(spacing) if isinstance(spacing, (list, tuple)) else [spacing] * len(dims)
    if len(hs) != len(dims):
        raise RuntimeError(
            f"torch.gradient expected spacing to be unspecified, a scalar or a list of length "
            f"{len(dims)} (the dims), got a list of length {len(hs)}"
        )
    hs = [h.item() if isinstance(h, torch.Tensor) and h.ndim == 0 else h for h in hs]
    return tuple(_gradient_along(x, d, h, edge_order) for d, h in zip(dims, hs))
