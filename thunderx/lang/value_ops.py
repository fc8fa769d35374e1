"""torch.frexp, torch.nextafter, torch.mode, torch.gradient and repeat_interleave with tensor
repeats, with torch's values and derivatives."""

from __future__ import annotations

import torch

from thunderx.core import Tracer
from thunderx.errors import concretization
from thunderx.lang._base import aval, canon_dim, is_tensor, ndim, promote, register, shape
from thunderx.primitives.higher_order import stop_gradient
from thunderx.primitives.nextafter import nextafter_p


@register(torch.nextafter, methods=("nextafter",))
def _nextafter(x, y):
    (x, y), dt = promote(x, y)
    if not dt.is_floating_point:
        raise RuntimeError(f"nextafter: expected floating-point inputs, got {dt}")
    return nextafter_p.bind(x, y)


@register(torch.frexp, methods=("frexp",))
def _frexp(x):
    """(mantissa, exponent) with x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1 (0, inf and
    nan: the value itself and exponent 0). The exponent comes from log2 and is corrected by one
    where log2 rounded across a power of two; the mantissa's derivative is 2**-exponent."""
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"torch.frexp() only supports floating-point dtypes, got {x.dtype}")
    ax = stop_gradient(x).abs()
    regular = (ax > 0) & torch.isfinite(ax)
    e = torch.where(regular, torch.floor(torch.log2(torch.where(regular, ax, 1.0))) + 1, 0.0)
    m = ax * torch.exp2(-e)
    e = torch.where(m >= 1.0, e + 1, torch.where(m < 0.5, e - 1, e))
    e = torch.where(regular, e, 0.0)
    return x * torch.exp2(-e), e.to(torch.int32)


@register(torch.mode, methods=("mode",))
def _mode(x, dim=-1, keepdim=False):
    """The most frequent value along dim (the smallest among equally frequent ones) and the last
    index holding it, as torch returns them; the gradient goes to that element."""
    if ndim(x) == 0:
        return x * 1, torch.zeros((), dtype=torch.int64)
    d = canon_dim(dim, ndim(x))
    xm = x.movedim(d, -1)
    n = xm.shape[-1]
    counts = (xm.unsqueeze(-1) == xm.unsqueeze(-2)).sum(-1)
    best = counts.amax(-1, keepdim=True)
    candidates = torch.where(counts == best, xm, float("inf"))
    value = candidates.amin(-1, keepdim=True)
    pos = torch.arange(n, device=aval(x).device)
    index = torch.where(xm == value, pos, -1).amax(-1, keepdim=True)
    values = torch.take_along_dim(xm, index, -1)
    values, index = values.movedim(-1, d), index.movedim(-1, d)
    if not keepdim:
        values, index = values.squeeze(d), index.squeeze(d)
    return torch.return_types.mode((values, index))


def _concrete_list(t, what):
    value = t.to_concrete() if isinstance(t, Tracer) else t
    if value is None:
        raise concretization(f"{what} (the output shape depends on them)", aval(t))
    return value.reshape(-1).tolist()


@register(torch.repeat_interleave, methods=("repeat_interleave",))
def _repeat_interleave(x, repeats=None, dim=None, *, output_size=None):
    if repeats is None:  # repeat_interleave(repeats): each index repeated repeats[i] times
        reps = _concrete_list(x, "repeat_interleave's repeats")
        idx = [i for i, r in enumerate(reps) for _ in range(int(r))]
        return torch.tensor(idx, dtype=torch.int64, device=aval(x).device)
    if dim is None:
        x, dim = x.reshape(-1), 0
    d = canon_dim(dim, ndim(x))
    n = shape(x)[d]
    if is_tensor(repeats) and output_size is not None and shape(repeats) == (n,):
        # the output length is given: the source of output j is the first i whose cumulative
        # repeat count exceeds j (JAX's total_repeat_length), known or traced repeats alike
        ends = torch.cumsum(repeats, 0)
        j = torch.arange(output_size, device=aval(x).device)
        return torch.index_select(x, d, torch.searchsorted(ends, j, right=True))
    if is_tensor(repeats):
        reps = _concrete_list(repeats, "repeat_interleave's repeats (or pass output_size)")
        if len(reps) == 1:
            reps = reps * n
    else:
        reps = [int(repeats)] * n
    if len(reps) != n:
        raise RuntimeError(f"repeats must have the same size as input along dim, got {len(reps)}")
    if any(r < 0 for r in reps):
        raise RuntimeError("repeats can not be negative")
    if output_size is not None and output_size != sum(reps):
        raise RuntimeError(f"allocated size does not match required size {sum(reps)}")
    idx = torch.tensor(
        [i for i, r in enumerate(reps) for _ in range(int(r))],
        dtype=torch.int64,
        device=aval(x).device,
    )
    return torch.index_select(x, d, idx)


@register(torch.gradient)
def _gradient(x, *, spacing=1, dim=None, edge_order=1):
    """Second-order central differences inside, first- or second-order one-sided ones at the
    edges (edge_order), with uniform spacing per dim (a number each, as torch's scalar or list
    form; coordinate tensors are refused)."""
    dims = tuple(range(ndim(x))) if dim is None else ((dim,) if isinstance(dim, int) else dim)
    dims = tuple(canon_dim(d, ndim(x)) for d in dims)
    if spacing is None:
        spacing = 1.0
    if isinstance(spacing, (int, float)):
        hs = [float(spacing)] * len(dims)
    else:
        hs = list(spacing)
        if len(hs) != len(dims):
            raise RuntimeError(
                f"torch.gradient expected spacing to be unspecified, a scalar or "
                f"a list of length {len(dims)}, got {len(hs)}"
            )
        hs = [h if is_tensor(h) else float(h) for h in hs]
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    out = []
    for d, h in zip(dims, hs):
        n = shape(x)[d]
        if n < edge_order + 1:
            raise RuntimeError(
                "torch.gradient expected each dimension size to be at least edge_order+1"
            )
        f = lambda a, b: x.narrow(d, a, b - a)  # noqa: E731
        if is_tensor(h):
            out.append(_gradient_coordinates(x, d, h, edge_order, f))
            continue
        inner = (f(2, n) - f(0, n - 2)) / (2 * h)
        if edge_order == 1:
            first = (f(1, 2) - f(0, 1)) / h
            last = (f(n - 1, n) - f(n - 2, n - 1)) / h
        else:
            first = (-1.5 * f(0, 1) + 2 * f(1, 2) - 0.5 * f(2, 3)) / h
            last = (0.5 * f(n - 3, n - 2) - 2 * f(n - 2, n - 1) + 1.5 * f(n - 1, n)) / h
        out.append(torch.cat([first, inner, last], d))
    return tuple(out)


def _gradient_coordinates(x, d, coords, edge_order, f):
    """torch.gradient along d with sample coordinates: the three-point formulas for unequal
    steps (ATen's gradient_helper)."""
    n = shape(x)[d]
    if ndim(coords) != 1 or shape(coords)[0] != n:
        raise RuntimeError(f"torch.gradient expected each coordinate tensor to have {n} entries")
    dx = coords[1:] - coords[:-1]

    def along(v):  # a 1-d coefficient vector laid along dim d
        s = [1] * ndim(x)
        s[d] = -1
        return v.reshape(s)

    dx1, dx2 = dx[:-1], dx[1:]
    a = -dx2 / (dx1 * (dx1 + dx2))
    b = (dx2 - dx1) / (dx1 * dx2)
    c = dx1 / (dx2 * (dx1 + dx2))
    inner = along(a) * f(0, n - 2) + along(b) * f(1, n - 1) + along(c) * f(2, n)
    if edge_order == 1:
        first = (f(1, 2) - f(0, 1)) / along(dx[:1])
        last = (f(n - 1, n) - f(n - 2, n - 1)) / along(dx[-1:])
    else:
        h0, h1 = dx[0], dx[1]
        a0 = -(2.0 * h0 + h1) / (h0 * (h0 + h1))
        b0 = (h0 + h1) / (h0 * h1)
        c0 = -h0 / (h1 * (h0 + h1))
        first = a0 * f(0, 1) + b0 * f(1, 2) + c0 * f(2, 3)
        g1, g0 = dx[-1], dx[-2]
        a1 = g1 / (g0 * (g1 + g0))
        b1 = -(g1 + g0) / (g1 * g0)
        c1 = (2 * g1 + g0) / (g1 * (g1 + g0))
        last = a1 * f(n - 3, n - 2) + b1 * f(n - 2, n - 1) + c1 * f(n - 1, n)
    return torch.cat([first, inner, last], d)
