"""Channel normalizations: batch_norm, instance_norm, group_norm and their aten spellings
(native_batch_norm, _native_batch_norm_legit, _batch_norm_with_update, native_group_norm).

Normalizing with batch statistics runs as torch's kernels with their fused backward kernels as
derivatives: with a weight (and bias) of x's dtype the affine is inside the kernel, as torch
computes it (composite_channel_affine.py), else the plain kernels (composite_channel_norm.py)
followed by elementwise primitives; normalizing with given running statistics is elementwise.

Running statistics in training mode are torch's in-place update of the caller's buffers:
`running = momentum * batch_stat + (1 - momentum) * running` (the variance unbiased). Where the
transform knows the batch statistics' values (eager grad, vjp, jvp) the buffers are updated then,
as torch.func does; under jit the update is written back into the buffers after each call
(lang/captured.py); batched statistics under vmap have nowhere to go and are an error."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.core import Tracer, current_trace
from thunderx.lang._base import (
    add,
    aval,
    convert,
    div,
    dtype,
    is_tensor,
    mul,
    ndim,
    register,
    shape,
    sub,
)
from thunderx.lang.captured import write_captured
from thunderx.lang.inplace import mutate
from thunderx.lang.nn import _kernel_affine, layer_norm
from thunderx.primitives import binary as B
from thunderx.primitives import composite_channel_norm as KC
from thunderx.primitives import creation as C
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives.composite_batch_norm_eval import batch_norm_eval
from thunderx.primitives.composite_channel_affine import channel_norm_affine
from thunderx.primitives.higher_order import stop_gradient
from thunderx.tracing import written_value


def _update_running(buf, stat, momentum, what):
    """buf <- momentum * stat + (1 - momentum) * buf (torch's kernel's order), in place, with
    no derivative: now where values are known, written back after each call under jit."""
    if buf is None:
        return
    if isinstance(momentum, CumulativeFactor):
        # 1 / count, read here: after torch's forward added 1 to it (its traced value under jit)
        count = written_value(current_trace(), momentum.count)
        count = momentum.count if count is None else count
        factor = div(1.0, convert(count, torch.float64))
        new = convert(add(mul(stat, factor), mul(buf, sub(1.0, factor))), dtype(buf))
    else:
        new = B.add(B.mul(convert(stat, dtype(buf)), momentum), B.mul(buf, 1.0 - momentum))
    if isinstance(buf, Tracer):  # an argument of jit, or a value of the traced function
        with torch.no_grad():
            mutate(buf, new, what)
    else:
        write_captured(buf, new, what, grad_enabled=False)


def _per_channel(v, x):
    """A (C,) vector broadcast along dim 1 of x."""
    return S.broadcast_in_dim(convert(v, dtype(x)), shape(x), (1,))


def _affine(out, weight, bias):
    if weight is not None:
        out = B.mul(out, _per_channel(weight, out))
    if bias is not None:
        out = B.add(out, _per_channel(bias, out))
    return out


def _empty(x):
    # nothing to normalize: torch returns an empty tensor of the input's shape
    return B.mul(x, 1.0)


def _check_channels(name, x, *vectors):
    if ndim(x) < 2:
        raise ValueError(f"{name}: expected an (N, C, ...) input, got shape {shape(x)}")
    for what, v in vectors:
        if v is not None and shape(v) != (shape(x)[1],):
            raise ValueError(
                f"{name}: {what} of shape {shape(v)} does not match {shape(x)[1]} channels"
            )


def _moments(x, dims, keepdims=False, correction=0):
    """Mean and variance over dims (the variance divided by n - correction, at least 1)."""
    n = float(math.prod(shape(x)[d] for d in dims))
    mean = B.div(R.reduce_sum(x, dims, keepdims=True), n)
    xc = B.sub(x, S.broadcast_to(mean, shape(x)))
    var = B.div(R.reduce_sum(B.mul(xc, xc), dims, keepdims=keepdims), max(n - correction, 1.0))
    return (mean if keepdims else S.reshape(mean, shape(var))), var


def _channel_dims(x):
    return tuple(d for d in range(ndim(x)) if d != 1)


def _batch_stats(x, eps):
    """The per-channel mean and 1/sqrt(var + eps) that torch saves (not differentiated)."""
    mean, var = _moments(x, _channel_dims(x))
    return stop_gradient(mean), stop_gradient(U.rsqrt(B.add(var, eps)))


def _eval_norm(name, x, running_mean, running_var, eps):
    if running_mean is None or running_var is None:
        raise ValueError(f"{name}: normalizing without batch statistics needs running_mean/var")
    xc = B.sub(x, _per_channel(running_mean, x))
    return B.mul(xc, U.rsqrt(B.add(_per_channel(running_var, x), eps)))


def _evaluation(name, x, running_mean, running_var, weight, bias, eps):
    """x normalized with the running statistics, times the weight plus the bias: torch's
    kernel (composite_batch_norm_eval.py) where it takes the vectors as they are."""
    vectors = (running_mean, running_var, weight, bias)
    if (
        0 not in shape(x)
        and all(
            v is None or (is_tensor(v) and shape(v) == (shape(x)[1],) and dtype(v) == dtype(x))
            for v in vectors
        )
        and is_tensor(running_mean)
        and is_tensor(running_var)
    ):
        return batch_norm_eval(x, *vectors, eps)
    return _affine(_eval_norm(name, x, running_mean, running_var, eps), weight, bias)


def _unit_weight(x, weight, bias):
    """A bias alone goes into torch's kernel with a weight of ones: for batch and group norm the
    kernel's value and input cotangent are then its bits without a weight (x * 1 is exact), so
    eager code and `jit` both give `F.batch_norm(x, ..., None, b)`'s numbers, and an affine the
    user writes out after a norm stays the user's product and sum."""
    if weight is None and bias is not None and _kernel_affine(x, bias, None, (1,)):
        return C.full((shape(x)[1],), 1.0, dtype(x), aval(x).device)
    return weight


def _training_norm(name, x, eps, weight=None, bias=None):
    """x normalized with its batch statistics per channel, times the weight plus the bias."""
    if 0 in shape(x):
        return _affine(_empty(x), weight, bias)
    if math.prod(shape(x)) // shape(x)[1] < 2:
        raise ValueError(
            f"{name}: expected more than 1 value per channel when training, got input of "
            f"shape {shape(x)}"
        )
    weight = _unit_weight(x, weight, bias)
    if _kernel_affine(x, weight, bias, (1,)):
        # the affine inside torch's kernel, its backward as the transpose
        # (composite_channel_affine.py)
        return channel_norm_affine(x, weight, bias, 0, eps)
    return _affine(KC.batch_norm(x, eps), weight, bias)


@register(F.batch_norm)
def batch_norm(
    x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5
):
    if ndim(x) < 2 and 0 in shape(x):
        return _empty(x)
    _check_channels(
        "batch_norm", x, ("weight", weight), ("bias", bias), ("running_mean", running_mean)
    )
    if training or running_mean is None:
        out = _training_norm("batch_norm", x, eps, weight, bias)
        if training and 0 not in shape(x):
            _running_update("batch_norm", x, running_mean, running_var, momentum)
        return out
    return _evaluation("batch_norm", x, running_mean, running_var, weight, bias, eps)


def _native_batch_norm(
    name, x, weight, bias, running_mean, running_var, training, eps, momentum=0.1
):
    _check_channels(name, x, ("weight", weight), ("bias", bias), ("running_mean", running_mean))
    if training:
        out = _training_norm(name, x, eps, weight, bias)
        _running_update(name, x, running_mean, running_var, momentum)
        mean, invstd = _batch_stats(x, eps)
        return out, mean, invstd
    out = _evaluation(name, x, running_mean, running_var, weight, bias, eps)
    # torch saves no statistics in evaluation mode
    nothing = C.full((0,), 0.0, dtype(x), aval(x).device)
    return out, nothing, nothing


@register(torch.native_batch_norm, torch.ops.aten.native_batch_norm)
def native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return _native_batch_norm(
        "native_batch_norm", x, weight, bias, running_mean, running_var, training, eps, momentum
    )


@register(torch._native_batch_norm_legit, torch.ops.aten._native_batch_norm_legit)
def native_batch_norm_legit(x, weight, bias, *args):
    # (running_mean, running_var, training, momentum, eps) or, without running statistics,
    # (training, momentum, eps)
    if len(args) == 5:
        running_mean, running_var, training, momentum, eps = args
    elif len(args) == 3:
        running_mean = running_var = None
        training, momentum, eps = args
    else:
        raise TypeError(f"_native_batch_norm_legit: unexpected arguments {args!r}")
    return _native_batch_norm(
        "_native_batch_norm_legit",
        x,
        weight,
        bias,
        running_mean,
        running_var,
        training,
        eps,
        momentum,
    )


@register(torch.ops.aten._batch_norm_with_update, torch.ops.aten._batch_norm_with_update.default)
def batch_norm_with_update(x, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, invstd = _native_batch_norm(
        "_batch_norm_with_update", x, weight, bias, running_mean, running_var, True, eps, momentum
    )
    # the reserve buffer (cuDNN's workspace) is empty on CPU
    return out, mean, invstd, C.full((0,), 0, torch.uint8, aval(x).device)


@register(F.instance_norm)
def instance_norm(
    x,
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats=True,
    momentum=0.1,
    eps=1e-5,
):
    _check_channels("instance_norm", x, ("weight", weight), ("bias", bias))
    if not use_input_stats:
        return _affine(_eval_norm("instance_norm", x, running_mean, running_var, eps), weight, bias)
    if 0 in shape(x):
        return _affine(_empty(x), weight, bias)
    # torch's instance_norm: batch_norm of the input seen as one sample of N * C channels,
    # the weight and bias repeated N times
    shp = shape(x)
    merged = S.reshape(x, (1, shp[0] * shp[1]) + shp[2:])
    if running_mean is not None or running_var is not None:
        _instance_running_update(merged, shp, running_mean, running_var, momentum)
    weight = _unit_weight(x, weight, bias)
    if _kernel_affine(x, weight, bias, (1,)):
        w, b = (None if v is None else _repeated(v, shp[0]) for v in (weight, bias))
        return S.reshape(_training_norm("instance_norm", merged, eps, w, b), shp)
    return _affine(S.reshape(_training_norm("instance_norm", merged, eps), shp), weight, bias)


def _repeated(v, n):
    """torch's v.repeat(n) of a (C,) vector."""
    return S.reshape(S.broadcast_in_dim(v, (n, shape(v)[0]), (1,)), (n * shape(v)[0],))


def _group_stats(x, groups, eps):
    """The (N, groups) mean and rstd of native_group_norm, differentiable as torch's are."""
    g = S.reshape(x, (shape(x)[0], groups, math.prod(shape(x)[1:]) // groups))
    mean, var = _moments(g, (2,))
    return mean, U.rsqrt(B.add(var, eps))


def _group_norm(name, x, groups, weight, bias, eps):
    _check_channels(name, x, ("weight", weight), ("bias", bias))
    if groups < 1 or shape(x)[1] % groups:
        raise ValueError(f"{name}: {shape(x)[1]} channels are not divisible into {groups} groups")
    if 0 in shape(x):
        return _affine(_empty(x), weight, bias)
    weight = _unit_weight(x, weight, bias)
    if _kernel_affine(x, weight, bias, (1,)):
        # the affine inside torch's kernel (composite_channel_affine.py)
        return channel_norm_affine(x, weight, bias, groups, eps)
    return _affine(KC.group_norm(x, groups, eps), weight, bias)


@register(F.group_norm)
def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    return _group_norm("group_norm", x, int(num_groups), weight, bias, eps)


@register(torch.native_group_norm, torch.ops.aten.native_group_norm)
def native_group_norm(x, weight, bias, n, c, hxw, group, eps):
    shp = shape(x)
    if (shp[0], shp[1], math.prod(shp[2:])) != (n, c, hxw):
        raise ValueError(f"native_group_norm: N={n}, C={c}, HxW={hxw} do not match {shp}")
    out = _group_norm("native_group_norm", x, int(group), weight, bias, eps)
    if 0 in shp:
        nothing = C.full((n, group), 0.0, dtype(x), aval(x).device)
        return out, nothing, nothing
    mean, rstd = _group_stats(x, int(group), eps)
    return out, mean, rstd


def _running_update(name, x, running_mean, running_var, momentum):
    """The batch statistics written into the running buffers (training mode)."""
    if running_mean is None and running_var is None:
        return
    mean, var = KC.batch_norm_stats(stop_gradient(x))
    _update_running(running_mean, mean, momentum, name)
    _update_running(running_var, var, momentum, name)


@register(torch.native_layer_norm)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    k = len(tuple(normalized_shape))
    mean, var = _moments(x, tuple(range(ndim(x) - k, ndim(x))), keepdims=True)
    return layer_norm(x, normalized_shape, weight, bias, eps), mean, U.rsqrt(B.add(var, eps))


def _instance_running_update(merged, shp, running_mean, running_var, momentum):
    """torch updates instance_norm's running statistics with the per-instance statistics
    averaged over the batch."""
    mean, var = KC.batch_norm_stats(stop_gradient(merged))
    m = B.div(R.reduce_sum(S.reshape(mean, shp[:2]), (0,)), float(shp[0]))
    v = B.div(R.reduce_sum(S.reshape(var, shp[:2]), (0,)), float(shp[0]))
    _update_running(running_mean, m, momentum, "instance_norm")
    _update_running(running_var, v, momentum, "instance_norm")


class CumulativeFactor(float):
    """BatchNorm's momentum=None: the cumulative average's factor `1 / num_batches_tracked`,
    which torch computes with `float()` of the count, a value a trace does not know (jit writes
    the count back on every call). This float (NaN: never a number used as such) carries the
    count tensor, and `_update_running` reads the count where the update happens."""

    count: torch.Tensor


def cumulative_batch_norm(forward):
    """`_BatchNorm.forward` under transforms: with momentum=None and a traced input, the module's
    momentum is a CumulativeFactor for the call (torch's forward adds 1 to the count first)."""

    def wrapped(self, input):  # noqa: A002 - torch's argument name
        count = getattr(self, "num_batches_tracked", None)
        cumulative = self.momentum is None and self.training and self.track_running_stats
        if not cumulative or count is None or not isinstance(input, Tracer):
            return forward(self, input)
        factor = CumulativeFactor(math.nan)
        factor.count = count
        self.momentum = factor
        try:
            return forward(self, input)
        finally:
            self.momentum = None

    return wrapped
