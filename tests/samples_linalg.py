"""Samples of the linear algebra and order-statistics primitives (registered into SAMPLES)."""

from __future__ import annotations

import torch

from .samples import F64, Sample, sample

# ------------------------------------------------------------------ linear algebra and sorting


def _sym(a):
    return (a + a.mT) / 2


def _batch(d):
    return d.shape(max_rank=1, max_side=2)


def _orthogonal(d, batch, n):
    return torch.linalg.qr(d.tensor(batch + (n, n)))[0]


def _spaced(d, batch, n, lo=0.5):
    """n distinct values per batch row, at least 0.5 apart, shuffled."""
    gaps = 0.5 + d.tensor(batch + (n,), F64, "positive")
    return (lo + torch.cumsum(gaps, -1)).flip(-1)


@sample("triangular_solve")
def _(d):
    batch, n, k = _batch(d), d.int(1, 4), d.int(1, 3)
    left = d.bool()
    a = d.tensor(batch + (n, n)) + 3.0 * torch.eye(n, dtype=F64)
    b = d.tensor(batch + ((n, k) if left else (k, n)))
    params = {
        "left_side": left,
        "lower": d.bool(),
        "transpose_a": d.bool(),
        "unit_diagonal": d.bool(),
    }
    return Sample([a, b], params)


@sample("cholesky")
def _(d):
    batch, n = _batch(d), d.int(1, 4)
    x = d.tensor(batch + (n, n))
    return Sample([x @ x.mT + n * torch.eye(n, dtype=F64)], {}, prepare={0: _sym})


@sample("eigh")
def _(d):
    batch, n = _batch(d), d.int(1, 4)
    q = _orthogonal(d, batch, n)
    a = q @ torch.diag_embed(_spaced(d, batch, n, lo=-2.0)) @ q.mT
    return Sample([a], {"compute_v": d.bool(), "lower": d.bool()}, prepare={0: _sym})


@sample("eig")
def _(d):
    # distinct eigenvalues and well-conditioned eigenvectors (a general, non-symmetric matrix)
    batch, n = _batch(d), d.int(1, 4)
    p = torch.eye(n, dtype=F64) + 0.3 * d.tensor(batch + (n, n))
    a = p @ torch.diag_embed(_spaced(d, batch, n, lo=-2.0)) @ torch.linalg.inv(p)
    return Sample([a], {"compute_v": d.bool()})


@sample("svd")
def _(d):
    batch, m, n = _batch(d), d.int(1, 4), d.int(1, 4)
    k = min(m, n)
    u = _orthogonal(d, batch, m)[..., :k]
    v = _orthogonal(d, batch, n)[..., :k]
    a = u @ torch.diag_embed(_spaced(d, batch, k)) @ v.mT
    full = m == n and d.bool()  # extra columns of a full U or V are not determined by A
    return Sample([a], {"full_matrices": full, "compute_uv": d.bool()})


@sample("qr")
def _(d):
    batch, m, n = _batch(d), d.int(1, 4), d.int(1, 4)
    a = d.tensor(batch + (m, n))
    a[..., : min(m, n), : min(m, n)] += 3.0 * torch.eye(min(m, n), dtype=F64)
    mode = "complete" if m <= n and d.bool() else "reduced"
    return Sample([a], {"mode": mode})


@sample("lu")
def _(d):
    batch, m, n = _batch(d), d.int(1, 4), d.int(1, 4)
    return Sample([d.tensor(batch + (m, n))], {"check": ""})


@sample("expm")
def _(d):
    n = d.int(1, 4)
    return Sample([0.5 * d.tensor(_batch(d) + (n, n))], {})


@sample("expm_frechet")
def _(d):
    shape = _batch(d) + (d.int(1, 3),) * 2
    return Sample([0.5 * d.tensor(shape), d.tensor(shape)], {})


@sample("sort")
def _(d):
    shape = d.shape(min_rank=1)
    num_keys = d.int(1, 2)
    # several keys: integer keys with ties, so the later keys decide; one key: floats, no ties
    keys = [d.index(shape, 3) for _ in range(num_keys)] if num_keys > 1 else [d.tensor(shape)]
    rest = [d.tensor(shape) for _ in range(d.int(1 if num_keys > 1 else 0, 2))]
    params = {
        "dimension": d.int(0, len(shape) - 1),
        "is_stable": num_keys > 1 or d.bool(),
        "num_keys": num_keys,
        "descending": d.bool(),
    }
    return Sample(keys + rest, params)


@sample("top_k")
def _(d):
    shape = d.shape(min_rank=1)
    axis = d.int(0, len(shape) - 1)
    params = {"k": d.int(0, shape[axis]), "axis": axis, "largest": d.bool(), "sorted": True}
    return Sample([d.tensor(shape)], params)


@sample("cummax", "cummin", "logcumsumexp")
def _(d):
    shape = d.shape(min_rank=1)
    return Sample([d.tensor(shape)], {"axis": d.int(0, len(shape) - 1)})


@sample("searchsorted")
def _(d):
    shape = d.shape(min_rank=1)
    seq = torch.sort(d.tensor(shape), -1).values
    values = d.tensor(shape[:-1] + (d.int(1, 4),))
    if d.bool():
        seq = seq.reshape(-1)[: shape[-1]].sort().values
    return Sample([seq, values], {"right": d.bool(), "index_dtype": torch.int64})


@sample("lu_pivots_to_permutation")
def _(d):
    batch, m, n = _batch(d), d.int(1, 4), d.int(1, 4)
    pivots = torch.linalg.lu_factor_ex(d.tensor(batch + (m, n)))[1]
    return Sample([pivots], {"permutation_size": m})
