"""Array functions op_db lists, in torch's formulas (torch/_refs, torch/_decomp) written with
torch calls the language layer already decomposes: trace, kron, masked_fill, masked_scatter,
cross, diff, rot90, trapezoid, block_diag, vander, cov and corrcoef."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunderx.lang._base import canon_dim, register


@register(torch.trace, methods=("trace",))
def _trace(x):
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, got a tensor of rank {x.ndim}")
    return x.diagonal().sum()


@register(torch.kron, methods=("kron",))
def _kron(a, b):
    n = max(a.ndim, b.ndim)
    sa = (1,) * (n - a.ndim) + tuple(a.shape)
    sb = (1,) * (n - b.ndim) + tuple(b.shape)
    ea = [d for s in sa for d in (s, 1)]
    eb = [d for s in sb for d in (1, s)]
    out = a.reshape(ea) * b.reshape(eb)
    return out.reshape([i * j for i, j in zip(sa, sb)])


@register(torch.masked_fill, methods=("masked_fill",))
def _masked_fill(x, mask, value):
    if mask.dtype != torch.bool:
        raise TypeError(f"masked_fill: mask must be a bool tensor, got {mask.dtype}")
    if isinstance(value, torch.Tensor) or hasattr(value, "shape"):
        if value.ndim != 0:
            raise RuntimeError("masked_fill: value must be a 0-dim tensor or a number")
        value = value.to(x.dtype)
    out = torch.where(mask, value, x)
    return out.to(x.dtype)


@register(torch.masked_scatter, methods=("masked_scatter",))
def _masked_scatter(x, mask, source):
    # Element k of `source` (flattened) goes to the k-th True of the broadcast mask: the index
    # is the running count of Trues. Too few source elements raise when the gather runs.
    if mask.dtype != torch.bool:
        raise TypeError(f"masked_scatter: mask must be a bool tensor, got {mask.dtype}")
    x, mask = torch.broadcast_tensors(x, mask)
    flat = mask.reshape(-1)
    idx = (torch.cumsum(flat.to(torch.int64), 0) - 1).clamp(min=0)
    if source.numel() == 0:
        return x
    picked = torch.index_select(source.reshape(-1), 0, idx).reshape(x.shape)
    return torch.where(mask, picked.to(x.dtype), x)


def _cross(a, b, dim):
    a, b = torch.broadcast_tensors(a, b)
    if dim is None:
        dim = next((i for i, s in enumerate(a.shape) if s == 3), None)
        if dim is None:
            raise RuntimeError("cross: no dimension of size 3 in input")
    d = canon_dim(dim, a.ndim)
    if a.shape[d] != 3:
        raise RuntimeError(f"cross: dimension {dim} does not have size 3")
    a1, a2, a3 = a.unbind(d)
    b1, b2, b3 = b.unbind(d)
    return torch.stack([a2 * b3 - a3 * b2, a3 * b1 - a1 * b3, a1 * b2 - a2 * b1], d)


@register(torch.cross, methods=("cross",))
def _torch_cross(a, b, dim=None):
    return _cross(a, b, dim)


@register(torch.linalg.cross)
def _linalg_cross(a, b, *, dim=-1):
    return _cross(a, b, dim)


@register(torch.diff, methods=("diff",))
def _diff(x, n=1, dim=-1, prepend=None, append=None):
    if x.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    d = canon_dim(dim, x.ndim)
    if n == 0:  # torch returns the input, prepend and append unused
        return x
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = torch.cat([p if hasattr(p, "shape") else torch.tensor(p) for p in parts], d)
    for _ in range(n):
        length = x.shape[d]
        if length == 0:
            break
        hi, lo = x.narrow(d, 1, length - 1), x.narrow(d, 0, length - 1)
        x = torch.logical_xor(hi, lo) if x.dtype == torch.bool else hi - lo
    return x


@register(torch.rot90, methods=("rot90",))
def _rot90(x, k=1, dims=(0, 1)):
    dims = tuple(dims)
    if len(dims) != 2:
        raise RuntimeError(f"rot90: expected two dims, got {len(dims)}")
    if x.ndim < 2:
        raise RuntimeError(f"rot90: expected a tensor of rank >= 2, got {x.ndim}")
    d0, d1 = (canon_dim(d, x.ndim) for d in dims)
    if d0 == d1:
        raise RuntimeError(f"rot90: the two dims must differ, got {dims}")
    k %= 4
    if k == 1:
        return x.flip(d1).transpose(d0, d1)
    if k == 2:
        return x.flip((d0, d1))
    if k == 3:
        return x.flip(d0).transpose(d0, d1)
    return x.clone()


def _spacing(y, x, dim):
    if x.ndim == 1:
        dx = _diff(x)
        shape = [1] * y.ndim
        shape[dim] = dx.shape[0]
        return dx.reshape(shape)
    return _diff(x, dim=dim)


def _trapezoid(y, x=None, *, dx=None, dim=-1):
    d = canon_dim(dim, y.ndim)
    if x is not None and not hasattr(x, "shape"):
        dx, x = x, None
    length = y.shape[d]
    if length == 0:
        return y.sum(d) * 0
    left, right = y.narrow(d, 0, length - 1), y.narrow(d, 1, length - 1)
    if x is not None:
        return (_spacing(y, x, d) * (left + right) * 0.5).sum(d)
    dx = 1.0 if dx is None else dx
    return (y.sum(d) - (y.select(d, 0) + y.select(d, -1)) * 0.5) * dx


@register(torch.trapezoid)
def _trapezoid_fn(y, x=None, *, dx=None, dim=-1):
    return _trapezoid(y, x, dx=dx, dim=dim)


@register(torch.trapz)
def _trapz(y, x=None, *, dx=None, dim=-1):
    return _trapezoid(y, x, dx=dx, dim=dim)


@register(torch.cumulative_trapezoid)
def _cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    d = canon_dim(dim, y.ndim)
    if x is not None and not hasattr(x, "shape"):
        dx, x = x, None
    length = y.shape[d]
    if length == 0:
        return y
    pair = y.narrow(d, 0, length - 1) + y.narrow(d, 1, length - 1)
    if x is not None:
        return (_spacing(y, x, d) * pair * 0.5).cumsum(d)
    return (pair * ((1.0 if dx is None else dx) * 0.5)).cumsum(d)


@register(torch.block_diag)
def _block_diag(*tensors):
    mats = []
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise RuntimeError(f"block_diag: input {i} has rank {t.ndim}; expected at most 2")
        mats.append(t.reshape(1, -1) if t.ndim < 2 else t)
    if not mats:
        return torch.empty(1, 0)
    dt = mats[0].dtype
    for m in mats[1:]:
        dt = torch.promote_types(dt, m.dtype)
    cols = sum(m.shape[1] for m in mats)
    rows, start = [], 0
    for m in mats:
        c = m.shape[1]
        rows.append(F.pad(m.to(dt), (start, cols - start - c, 0, 0)))
        start += c
    return torch.cat(rows, 0)


@register(torch.linalg.vander)
def _vander(x, *, N=None):
    if x.ndim == 0:  # torch treats a 0-d tensor as one element
        x = x.reshape(1)
    n = x.shape[-1] if N is None else N
    if n <= 1:
        raise RuntimeError("linalg.vander: N must be greater than 1.")
    if x.dtype == torch.bool:
        x = x.to(torch.int64)
    ones = torch.ones_like(x).unsqueeze(-1)
    xs = x.unsqueeze(-1).expand(*x.shape, n - 1)
    return torch.cat([ones, xs], -1).cumprod(-1)


@register(torch.cov, methods=("cov",))
def _cov(x, *, correction=1, fweights=None, aweights=None):
    """torch's formula, (x - mean) @ (x - mean)^H / (n - correction), conjugated for complex x.
    torch also checks that fweights are non-negative integers and aweights non-negative, checks on
    values that a trace cannot make."""
    if x.ndim > 2:
        raise RuntimeError(f"cov: expected input with at most 2 dimensions, got {x.ndim}")
    if x.ndim < 2:
        x = x.reshape(1, -1)
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        x = x.to(torch.get_default_dtype())
    n_obs = x.shape[1]
    w = fweights
    if aweights is not None:
        w = aweights if w is None else w * aweights
    if w is None:
        avg = x.mean(1)
        w_sum = n_obs
        norm = torch.tensor(float(n_obs - correction), dtype=x.dtype.to_real())
    else:
        w_sum = w.sum()
        avg = (x * w).sum(1) / w_sum
        if correction != 0 and aweights is not None:
            norm = w_sum - correction * (w * aweights).sum() / w_sum
        else:
            norm = w_sum - correction
    norm = torch.clamp(norm, min=0)
    xc = x - avg.unsqueeze(1)
    c = torch.mm(xc, (xc * w if w is not None else xc).t().conj())
    return (c / norm).squeeze()


@register(torch.corrcoef, methods=("corrcoef",))
def _corrcoef(x):
    """cov scaled by the standard deviations, clipped to [-1, 1]; for complex x the real and
    imaginary parts are clipped apart (torch's)."""
    c = _cov(x)
    if c.ndim == 0:
        return c / c
    d = torch.diagonal(c)
    s = torch.sqrt(d.real if d.is_complex() else d)
    c = c / s.unsqueeze(1)
    c = c / s.unsqueeze(0)
    if c.is_complex():
        return torch.complex(torch.clamp(c.real, -1, 1), torch.clamp(c.imag, -1, 1))
    return torch.clamp(c, -1, 1)


@register(torch.meshgrid, torch._VF.meshgrid)
def _meshgrid(*tensors, indexing=None):
    """torch.meshgrid: each 1-d (or 0-d) input broadcast along the others' dims ("ij"; "xy"
    swaps the first two, torch's default with a warning is "ij")."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in (None, "ij", "xy"):
        raise ValueError(f'torch.meshgrid: indexing must be "ij" or "xy", got {indexing!r}')
    if any(t.ndim > 1 for t in tensors):
        raise RuntimeError("torch.meshgrid: Expected 0D or 1D tensor in the tensor list")
    ts = [t.reshape(-1) for t in tensors]
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = [t.shape[0] for t in ts]
    n = len(ts)
    out = [
        t.reshape([-1 if j == i else 1 for j in range(n)]).expand(shape) for i, t in enumerate(ts)
    ]
    if swap:  # the "ij" grid of (t1, t0, ...) has the "xy" shape; its first two are swapped
        out[0], out[1] = out[1], out[0]
    return tuple(out)


@register(torch.cartesian_prod)
def _cartesian_prod(*tensors):
    if len(tensors) == 1:
        return tensors[0]
    grids = _meshgrid(*tensors, indexing="ij")
    return torch.stack([g.reshape(-1) for g in grids], 1)
