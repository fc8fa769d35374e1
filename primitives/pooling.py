"""Max pooling as torch's pooling kernels: values, and the flat index of each window's maximum
(the first on ties, as torch), with derivatives that gather at that index."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.avals import ShapedArray
from thunderx.core import declare
from thunderx.primitives import shape as S

# --------------------------------------------------------------------------- max pooling

# Max pooling over the trailing `len(kernel)` dims runs as torch's pooling kernel: `max_pool`
# gives the values, `max_pool_argmax` the flat spatial index of each window's maximum (the first
# on ties, as torch). Derivatives gather the tangent at that index, so they follow torch's
# convention and their transpose is one scatter-add (torch's max_pool backward does the same).
_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def pool_out_size(n, k, s, p, d, ceil_mode) -> int:
    """torch's output length of one pooled dim."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _pool_abstract_eval(x, *, kernel, stride, padding, dilation, ceil_mode, dtype=None):
    nsp = len(kernel)
    if x.ndim < nsp + 1 or nsp not in _POOL:
        raise TypeError(f"max_pool: {nsp}-d pooling needs a leading dim, got {x.str_short()}")
    sp = tuple(
        pool_out_size(n, k, s, p, d, ceil_mode)
        for n, k, s, p, d in zip(x.shape[-nsp:], kernel, stride, padding, dilation)
    )
    return ShapedArray(x.shape[:-nsp] + sp, dtype or x.dtype, x.device)


def _pool_impl(x, *, kernel, stride, padding, dilation, ceil_mode, indices: bool):
    nsp = len(kernel)
    lead = x.shape[:-nsp]
    # torch's kernels take (C, *spatial): all leading dims become the channels
    flat = x.reshape((math.prod(lead),) + tuple(x.shape[-nsp:]))
    out = _POOL[nsp](flat, kernel, stride, padding, dilation, ceil_mode, return_indices=indices)
    out = out[1] if indices else out
    return out.reshape(lead + tuple(out.shape[1:]))


def _max_pool_jvp(primals, tangents, **params):
    (x,), (t,) = primals, tangents
    from thunderx.primitives.composite_pool import max_pool_gather

    idx = max_pool_argmax_p.bind(x, **params)
    # its transpose is torch's max_pool backward kernel (composite_pool.py)
    return gather_window(x, idx, len(params["kernel"])), max_pool_gather(t, x, idx, **params)


def gather_window(x, idx, nsp):
    """x's values at flat spatial indices `idx` (shaped like the pooled output)."""
    from thunderx.primitives import indexing as I

    xs, ids = S._shape(x), S._shape(idx)
    lead = xs[:-nsp]
    flat_x = S.reshape(x, lead + (math.prod(xs[-nsp:]),))
    flat_i = S.reshape(idx, lead + (math.prod(ids[-nsp:]),))
    return S.reshape(I.gather(flat_x, flat_i, len(lead)), ids)


def _pool_batch(prim, args, dims, params):
    return prim.bind(S.moveaxis(args[0], dims[0], 0), **params), 0


max_pool_p = declare(
    "max_pool",
    impl=lambda x, **kw: _pool_impl(x, **kw, indices=False),
    abstract_eval=_pool_abstract_eval,
    jvp=_max_pool_jvp,
    batch=lambda args, dims, **params: _pool_batch(max_pool_p, args, dims, params),
)
max_pool_argmax_p = declare(
    "max_pool_argmax",
    impl=lambda x, **kw: _pool_impl(x, **kw, indices=True),
    abstract_eval=lambda x, **kw: _pool_abstract_eval(x, **kw, dtype=torch.int64),
    batch=lambda args, dims, **params: _pool_batch(max_pool_argmax_p, args, dims, params),
)


def max_pool(x, kernel, stride, padding, dilation, ceil_mode, return_indices=False):
    params = dict(
        kernel=tuple(kernel),
        stride=tuple(stride),
        padding=tuple(padding),
        dilation=tuple(dilation),
        ceil_mode=bool(ceil_mode),
    )
    if not return_indices:
        return max_pool_p.bind(x, **params)
    idx = max_pool_argmax_p.bind(x, **params)
    return gather_window(x, idx, len(kernel)), idx
