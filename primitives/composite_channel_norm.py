"""batch_norm and group_norm (training statistics, without the affine part) as composite
operations: torch's native_batch_norm / native_group_norm forward, and their backward kernels
(native_batch_norm_backward, native_group_norm_backward) as both the jvp and the transpose: a
normalization's Jacobian rstd * (I - 1 1^T / n - y y^T / n) is symmetric within each group.
The backward kernels' derivative in x comes from their decompositions, so hessians work.

batch_norm normalizes each channel (dim 1) over every other dim; group_norm normalizes each
(sample, group of channels) over the group's channels and the spatial dims. Under vmap the batch
dim joins the kernel's own: the channels for batch_norm, the samples for group_norm."""

from __future__ import annotations

import math

import torch

from thunderx.ad_util import is_undefined
from thunderx.avals import is_float
from thunderx.core import declare, get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives.composite import backward_kernel_jvp, declare_composite


def batch_norm(x, eps: float):
    """F.batch_norm(x, None, None, training=True, eps=eps): per-channel batch statistics."""
    return batch_norm_p.bind(x, eps=float(eps))


def batch_norm_backward(g, x, eps: float):
    """The cotangent (and tangent) of batch_norm at x, as torch's native_batch_norm_backward."""
    return batch_norm_backward_p.bind(g, x, eps=float(eps))


def group_norm(x, groups: int, eps: float):
    """F.group_norm(x, groups, eps=eps) without weight and bias."""
    return group_norm_p.bind(x, groups=int(groups), eps=float(eps))


def group_norm_backward(g, x, groups: int, eps: float):
    """The cotangent (and tangent) of group_norm at x, as torch's native_group_norm_backward."""
    return group_norm_backward_p.bind(g, x, groups=int(groups), eps=float(eps))


# ------------------------------------------------------------------------------ shape checks


def _check(name, x, groups=None):
    if not is_float(x.dtype):
        raise TypeError(f"{name} needs a floating operand, got {x.str_short()}")
    if x.ndim < 2 or 0 in x.shape:
        raise TypeError(f"{name} needs a non-empty (N, C, ...) operand, got {x.str_short()}")
    if groups is None:
        if math.prod(x.shape) // x.shape[1] < 2:
            raise ValueError(
                f"{name}: expected more than 1 value per channel when training, got {x.str_short()}"
            )
    elif groups < 1 or x.shape[1] % groups:
        raise TypeError(f"{name}: {x.shape[1]} channels are not divisible into {groups} groups")


def _checker(name, has_grad):
    def abstract_eval(*avals, eps, groups=None):
        x = avals[-1]
        _check(name, x, groups)
        if has_grad and (avals[0].shape != x.shape or avals[0].dtype != x.dtype):
            raise TypeError(f"{name}: gradient {avals[0].str_short()} vs input {x.str_short()}")
        return x.strip_weak()

    return abstract_eval


# ---------------------------------------------------------------- decompositions (primitives)


def _normalize(v, dims, eps):
    """(v - mean) * rstd and rstd over `dims` of v, both shaped like v, and the count."""
    shp = S._shape(v)
    n = float(math.prod(shp[d] for d in dims))
    mean = B.div(R.reduce_sum(v, dims, keepdims=True), n)
    xc = B.sub(v, S.broadcast_to(mean, shp))
    var = B.div(R.reduce_sum(B.mul(xc, xc), dims, keepdims=True), n)
    rstd = S.broadcast_to(U.rsqrt(B.add(var, eps)), shp)
    return B.mul(xc, rstd), rstd, n


def _norm_backward(g, v, dims, eps):
    y, rstd, n = _normalize(v, dims, eps)
    shp = S._shape(v)

    def mean(t):
        return S.broadcast_to(B.div(R.reduce_sum(t, dims, keepdims=True), n), shp)

    return B.mul(rstd, B.sub(B.sub(g, mean(g)), B.mul(y, mean(B.mul(g, y)))))


def _bn_dims(x):
    return tuple(d for d in range(len(S._shape(x))) if d != 1)


def _grouped(x, groups):
    shp = S._shape(x)
    return S.reshape(x, (shp[0], groups, math.prod(shp[1:]) // groups))


def _bn_decomposition(x, *, eps):
    return _normalize(x, _bn_dims(x), eps)[0]


def _bn_backward_decomposition(g, x, *, eps):
    return _norm_backward(g, x, _bn_dims(x), eps)


def _gn_decomposition(x, *, groups, eps):
    return S.reshape(_normalize(_grouped(x, groups), (2,), eps)[0], S._shape(x))


def _gn_backward_decomposition(g, x, *, groups, eps):
    out = _norm_backward(_grouped(g, groups), _grouped(x, groups), (2,), eps)
    return S.reshape(out, S._shape(x))


# ------------------------------------------------------------------------------ torch kernels


def _bn_impl(x, *, eps):
    return torch.native_batch_norm(x, None, None, None, None, True, 0.0, eps)[0]


def _bn_backward_impl(g, x, *, eps):
    # the statistics as torch's forward computes them (so the numbers are torch's)
    _, mean, invstd = torch.native_batch_norm(x, None, None, None, None, True, 0.0, eps)
    return torch.ops.aten.native_batch_norm_backward(
        g, x, None, None, None, mean, invstd, True, eps, [True, False, False]
    )[0]


def gn_sizes(shape, groups):
    n, c = shape[0], shape[1]
    return n, c, math.prod(shape[2:]), groups


# torch's group_norm kernels need contiguous operands (a vmapped one may not be)
def _gn_impl(x, *, groups, eps):
    x = x.contiguous()
    return torch.native_group_norm(x, None, None, *gn_sizes(x.shape, groups), eps)[0]


def _gn_backward_impl(g, x, *, groups, eps):
    g, x = g.contiguous(), x.contiguous()
    sizes = gn_sizes(x.shape, groups)
    _, mean, rstd = torch.native_group_norm(x, None, None, *sizes, eps)
    return torch.ops.aten.native_group_norm_backward(
        g, x, mean, rstd, None, *sizes, [True, False, False]
    )[0]


# generated names never start with an underscore: the statistics are named by an assignment
# expression so that they are computed once
def _bn_codegen(args, avals, *, eps):
    return forward_source(args[0], "None", "None", avals[0].shape, 0, eps) + "[0]"


def _backward_call(op: str, args: str, mask) -> str:
    """torch source of a norm's backward kernel: the input's cotangent alone, or with `mask` the
    kernel's (input, weight, bias) cotangents."""
    call = f"torch.ops.aten.{op}({args}, {mask or [True, False, False]})"
    return call if mask else f"{call}[0]"


def bn_backward_source(
    g: str, x: str, mean: str, invstd: str, eps: float, weight: str = "None", mask=None
) -> str:
    """Batch norm's backward from the saved `mean` and `invstd` (see `_backward_call`)."""
    args = f"{g}, {x}, {weight}, None, None, {mean}, {invstd}, True, {eps!r}"
    return _backward_call("native_batch_norm_backward", args, mask)


def gn_backward_source(
    g: str, x: str, mean: str, rstd: str, sizes: str, weight: str = "None", mask=None
) -> str:
    """Group norm's backward from the saved `mean` and `rstd` (see `_backward_call`); its
    operands made contiguous (torch's group norm kernels read them as if they were: a strided
    weight gave other values)."""
    g, x, weight = (contiguous_source(a) for a in (g, x, weight))
    args = f"{g}, {x}, {mean}, {rstd}, {weight}, {sizes}"
    return _backward_call("native_group_norm_backward", args, mask)


def contiguous_source(source: str) -> str:
    return source if source == "None" else f"{source}.contiguous()"


def forward_source(x: str, w: str, b: str, shape, groups: int, eps: float) -> str:
    """torch source of a channel norm's forward kernel with training statistics, its (out, mean,
    rstd): batch norm for `groups` 0, else group norm (its operands made contiguous)."""
    if groups:
        sizes = ", ".join(map(str, gn_sizes(shape, groups)))
        x, w, b = (contiguous_source(a) for a in (x, w, b))
        return f"torch.native_group_norm({x}, {w}, {b}, {sizes}, {eps!r})"
    return f"torch.native_batch_norm({x}, {w}, {b}, None, None, True, 0.0, {eps!r})"


def _bn_backward_codegen(args, avals, *, eps):
    g, x = args
    stats = f"(_bn_stats := {forward_source(x, 'None', 'None', avals[1].shape, 0, eps)})"
    return bn_backward_source(g, x, f"{stats}[1]", "_bn_stats[2]", eps)


def _gn_codegen(args, avals, *, groups, eps):
    return forward_source(args[0], "None", "None", avals[0].shape, groups, eps) + "[0]"


def _gn_backward_codegen(args, avals, *, groups, eps):
    g, x = args
    sizes = ", ".join(map(str, gn_sizes(avals[1].shape, groups)))
    stats = f"(_gn_stats := {forward_source(x, 'None', 'None', avals[1].shape, groups, eps)})"
    return gn_backward_source(g, x, f"{stats}[1]", "_gn_stats[2]", sizes)


# ------------------------------------------------------------------------ derivative rules


def _transpose(get_backward):
    def transpose(ct, g, x, **params):
        if is_undefined(x):
            raise TypeError(f"{get_backward().name} is linear in its gradient only")
        return [get_backward().bind(ct, x, **params), None]

    return transpose


class ChannelMerge:
    """A vmapped batch dim joined with a channel kernel's channels: each example's channel
    becomes one more channel of the kernel, with its own statistics, weight and bias. An
    x-shaped operand (N, B, C, ...) -> (N, B * C, ...), a per-channel vector (B, C) ->
    (B * C,) (an unbatched one repeated B times); `per_example` and `unmerge` undo it.
    Shared by batch_norm, its affine composites and evaluation-mode batch norm."""

    def __init__(self, args, dims):
        self.size = next(get_aval(a).shape[d] for a, d in zip(args, dims) if d is not None)
        self.shape = None

    def operand(self, a, d):
        a = S.broadcast_batch(a, self.size, 1) if d is None else S.moveaxis(a, d, 1)
        self.shape = S._shape(a)  # (N, B, C, ...)
        merged = (self.shape[0], self.shape[1] * self.shape[2]) + self.shape[3:]
        return S.reshape(a, merged)

    def vector(self, v, d):
        if d is None:
            c = S._shape(v)[0]
            return S.reshape(S.broadcast_in_dim(v, (self.size, c), (1,)), (self.size * c,))
        v = S.moveaxis(v, d, 0)
        return S.reshape(v, (self.size * S._shape(v)[1],))

    def per_example(self, v):
        """A merged per-channel result (B * C,) as (B, C), batched at 0."""
        return S.reshape(v, (self.size, S._shape(v)[0] // self.size)), 0

    def unmerge(self, out):
        return S.reshape(out, self.shape), 1


def _bn_batch(get_prim):
    # each vmapped example has its own statistics per channel: the batch dim joins the channels
    def batch(args, dims, **params):
        m = ChannelMerge(args, dims)
        return m.unmerge(get_prim().bind(*[m.operand(a, d) for a, d in zip(args, dims)], **params))

    return batch


def _gn_batch(get_prim):
    # each vmapped example is more samples: the batch dim joins the kernel's samples
    def batch(args, dims, **params):
        moved = S.batch_to_front(args, dims)
        shp = S._shape(moved[-1])  # (B, N, C, ...)
        merged = (shp[0] * shp[1],) + tuple(shp[2:])
        out = get_prim().bind(*[S.reshape(a, merged) for a in moved], **params)
        return S.reshape(out, shp), 0

    return batch


batch_norm_p = declare_composite(
    "batch_norm",
    decomposition=_bn_decomposition,
    impl=_bn_impl,
    abstract_eval=_checker("batch_norm", False),
    jvp=backward_kernel_jvp(lambda: batch_norm_p, lambda: batch_norm_backward_p),
    batch=_bn_batch(lambda: batch_norm_p),
    torch_codegen=_bn_codegen,
)
batch_norm_backward_p = declare_composite(
    "batch_norm_backward",
    decomposition=_bn_backward_decomposition,
    impl=_bn_backward_impl,
    abstract_eval=_checker("batch_norm_backward", True),
    linear=True,
    nonlinear=(1,),
    differentiate_decomposition=True,
    transpose=_transpose(lambda: batch_norm_backward_p),
    batch=_bn_batch(lambda: batch_norm_backward_p),
    torch_codegen=_bn_backward_codegen,
)
group_norm_p = declare_composite(
    "group_norm",
    decomposition=_gn_decomposition,
    impl=_gn_impl,
    abstract_eval=_checker("group_norm", False),
    jvp=backward_kernel_jvp(lambda: group_norm_p, lambda: group_norm_backward_p),
    batch=_gn_batch(lambda: group_norm_p),
    torch_codegen=_gn_codegen,
)
group_norm_backward_p = declare_composite(
    "group_norm_backward",
    decomposition=_gn_backward_decomposition,
    impl=_gn_backward_impl,
    abstract_eval=_checker("group_norm_backward", True),
    linear=True,
    nonlinear=(1,),
    differentiate_decomposition=True,
    transpose=_transpose(lambda: group_norm_backward_p),
    batch=_gn_batch(lambda: group_norm_backward_p),
    torch_codegen=_gn_backward_codegen,
    kernel_differentiable=False,  # native_group_norm_backward has no derivative in torch
)


# ------------------------------------------------- batch statistics for the running statistics


def batch_norm_stats(x):
    """[mean, unbiased variance] of x per channel (dim 1): what training-mode batch_norm
    writes into its running statistics, computed by torch's batch_norm kernel (several times
    faster on CPU than torch.var_mean over the non-channel dims)."""
    return batch_norm_stats_p.bind(x)


def _stats_abstract_eval(x):
    _check("batch_norm_stats", x)
    stat = x.strip_weak().update(shape=(x.shape[1],))
    return [stat, stat]


def _stats_impl(x):
    # momentum 1: the kernel's running-statistics update overwrites them with the batch's
    mean, var = x.new_zeros(x.shape[1]), x.new_ones(x.shape[1])
    torch.native_batch_norm(x, None, None, mean, var, True, 1.0, 0.0)
    return [mean, var]


def _stats_batch(args, dims):
    # each vmapped example has its own statistics per channel: the batch dim joins the channels
    (x,), (d,) = args, dims
    moved = S.moveaxis(x, d, 1)
    shp = S._shape(moved)  # (N, B, C, ...)
    merged = S.reshape(moved, (shp[0], shp[1] * shp[2]) + tuple(shp[3:]))
    mean, var = batch_norm_stats_p.bind(merged)
    return [S.reshape(mean, shp[1:3]), S.reshape(var, shp[1:3])], [0, 0]


batch_norm_stats_p = declare(
    "batch_norm_stats",
    impl=_stats_impl,
    abstract_eval=_stats_abstract_eval,
    batch=_stats_batch,
    multiple_results=True,
    not_differentiable="running statistics carry no derivative: torch's kernel writes them "
    "outside autograd (and thunderx/lang/norms.py stops gradients before it)",
)
