"""Max pooling's derivatives as torch's kernels: the tangent of max_pool gathers the input's
tangent at each window's maximum (`max_pool_gather`), and its transpose, the cotangent of
max_pool, is torch's max_pool2d/3d_with_indices_backward (`max_pool_scatter`): both linear in
their first operand and each other's transpose. The pooled input `x` is an operand only for its
shape (torch's backward kernel reads it); `idx` is max_pool_argmax's flat spatial index."""

from __future__ import annotations

import math

import torch

from thunderx.ad_util import is_undefined
from thunderx.core import get_aval
from thunderx.primitives import creation as C
from thunderx.primitives import indexing as I
from thunderx.primitives import shape as S
from thunderx.primitives.composite import declare_composite


def max_pool_gather(t, x, idx, **params):
    """t's values at the windows' maxima (shaped like the pooled output)."""
    return max_pool_gather_p.bind(t, x, idx, **params)


def max_pool_scatter(g, x, idx, **params):
    """The pooled output's cotangent `g` added into x's shape at the windows' maxima."""
    return max_pool_scatter_p.bind(g, x, idx, **params)


def _flat(v, nsp):
    shp = S._shape(v)
    return S.reshape(v, shp[:-nsp] + (math.prod(shp[-nsp:]),))


def _gather_decomposition(t, x, idx, **params):
    nsp = len(params["kernel"])
    flat = I.gather(_flat(t, nsp), _flat(idx, nsp), len(S._shape(t)) - nsp)
    return S.reshape(flat, S._shape(idx))


def _scatter_decomposition(g, x, idx, **params):
    nsp = len(params["kernel"])
    xs = S._shape(x)
    lead = xs[:-nsp]
    zeros = C.full(lead + (math.prod(xs[-nsp:]),), 0.0, get_aval(g).dtype, get_aval(g).device)
    return S.reshape(I.scatter_add(zeros, _flat(idx, nsp), _flat(g, nsp), len(lead)), xs)


def _gather_impl(t, x, idx, **params):
    nsp = len(params["kernel"])
    flat = torch.gather(t.flatten(-nsp), -1, idx.flatten(-nsp))
    return flat.reshape(idx.shape)


def _kernel_args(nsp, kernel, stride, padding, dilation):
    if nsp == 1:  # torch pools 1-d as 2-d with a unit dim
        return [1, *kernel], [1, *stride], [0, *padding], [1, *dilation]
    return list(kernel), list(stride), list(padding), list(dilation)


def _scatter_impl(g, x, idx, *, kernel, stride, padding, dilation, ceil_mode):
    nsp = len(kernel)
    lead = x.shape[:-nsp]
    c = math.prod(lead)
    unit = (1,) if nsp == 1 else ()
    # torch's kernels take (C, *spatial): all leading dims become the channels
    gx, xx, ix = (v.reshape((c,) + unit + tuple(v.shape[-nsp:])) for v in (g, x, idx))
    op = getattr(torch.ops.aten, f"max_pool{3 if nsp == 3 else 2}d_with_indices_backward")
    k, s, p, d = _kernel_args(nsp, kernel, stride, padding, dilation)
    return op(gx, xx, k, s, p, d, ceil_mode, ix).reshape(x.shape)


def _scatter_codegen(args, avals, *, kernel, stride, padding, dilation, ceil_mode):
    g, x, idx = args
    nsp = len(kernel)
    xs = tuple(avals[1].shape)
    c = math.prod(xs[:-nsp])
    unit = (1,) if nsp == 1 else ()
    ins, outs = (c,) + unit + xs[-nsp:], (c,) + unit + tuple(avals[0].shape[-nsp:])
    op = f"torch.ops.aten.max_pool{3 if nsp == 3 else 2}d_with_indices_backward"
    k, s, p, d = _kernel_args(nsp, kernel, stride, padding, dilation)
    return (
        f"{op}({g}.reshape({outs}), {x}.reshape({ins}), {k}, {s}, {p}, {d}, {ceil_mode}, "
        f"{idx}.reshape({outs})).reshape({xs})"
    )


def _abstract_eval(name, scatter):
    def abstract_eval(t, x, idx, **params):
        nsp = len(params["kernel"])
        pooled = t if scatter else idx
        ok = (
            x.ndim == t.ndim == idx.ndim > nsp
            and idx.dtype == torch.int64
            and pooled.shape == idx.shape
            and (scatter or t.shape == x.shape)
            and t.shape[:-nsp] == x.shape[:-nsp]
        )
        if not ok:
            raise TypeError(
                f"{name}: operands {t.str_short()}, {x.str_short()}, {idx.str_short()} do not agree"
            )
        return (x if scatter else idx).update(dtype=t.dtype).strip_weak()

    return abstract_eval


def _transpose(get_partner):
    def transpose(ct, t, x, idx, **params):
        if is_undefined(x) or is_undefined(idx):
            raise TypeError(f"{get_partner().name}'s partner is linear in its first operand only")
        return [get_partner().bind(ct, x, idx, **params), None, None]

    return transpose


def _batch(get_prim):
    # leading dims are the kernel's channels: the batch dim goes first
    def batch(args, dims, **params):
        return get_prim().bind(*S.batch_to_front(args, dims), **params), 0

    return batch


max_pool_gather_p = declare_composite(
    "max_pool_gather",
    decomposition=_gather_decomposition,
    impl=_gather_impl,
    abstract_eval=_abstract_eval("max_pool_gather", False),
    linear=True,
    nonlinear=(1, 2),
    differentiate_decomposition=True,
    transpose=_transpose(lambda: max_pool_scatter_p),
    batch=_batch(lambda: max_pool_gather_p),
)
max_pool_scatter_p = declare_composite(
    "max_pool_scatter",
    decomposition=_scatter_decomposition,
    impl=_scatter_impl,
    abstract_eval=_abstract_eval("max_pool_scatter", True),
    linear=True,
    nonlinear=(1, 2),
    differentiate_decomposition=True,
    transpose=_transpose(lambda: max_pool_gather_p),
    batch=_batch(lambda: max_pool_scatter_p),
    torch_codegen=_scatter_codegen,
)
