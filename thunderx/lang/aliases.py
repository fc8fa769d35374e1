"""Other spellings of functions the language layer already has: torch.special's aliases of torch
functions, torch.nn.functional's in-place variants (`F.relu_`, `F.elu_`, ...) and the power-average
pools (`F.lp_pool1d/2d/3d`, written with avg/max pooling as torch writes them)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.lang._base import optional, promote, register
from thunderx.primitives import composite_activation as KA

_SPECIAL = {
    "digamma": torch.digamma,
    "psi": torch.digamma,
    "erf": torch.erf,
    "erfc": torch.erfc,
    "erfinv": torch.erfinv,
    "expm1": torch.expm1,
    "log1p": torch.log1p,
    "gammaln": torch.lgamma,
    "logsumexp": torch.logsumexp,
    "round": torch.round,
}


def _alias(target):
    def impl(*args, **kwargs):
        return target(*args, **kwargs)

    impl.__name__ = getattr(target, "__name__", "alias")
    return impl


for _name, _target in _SPECIAL.items():
    register(getattr(torch.special, _name))(_alias(_target))


_INPLACE = {
    "relu_": F.relu,
    "elu_": F.elu,
    "celu_": F.celu,
    "selu_": F.selu,
    "leaky_relu_": F.leaky_relu,
    "hardtanh_": F.hardtanh,
    "threshold_": F.threshold,
    "rrelu_": F.rrelu,
}


def _in_place(out_of_place):
    """`F.op_(x, ...)`: x holds op(x, ...) afterwards and is returned (an in-place write of a
    traced value, recorded as the language layer records `x.copy_`)."""

    def impl(x, *args, **kwargs):
        kwargs.pop("inplace", None)
        return x.copy_(out_of_place(x, *args, **kwargs))

    impl.__name__ = out_of_place.__name__ + "_"
    return impl


for _name, _target in _INPLACE.items():
    register(getattr(F, _name))(_in_place(_target))


def _lp_pool(avg_pool, max_pool, n: int):
    def impl(x, norm_type, kernel_size, stride=None, ceil_mode=False):
        ks = (kernel_size,) * n if isinstance(kernel_size, int) else tuple(kernel_size)
        if norm_type == math.inf:
            return max_pool(x.abs(), ks, stride, 0, 1, ceil_mode)
        if norm_type == -math.inf:
            return -max_pool(-x.abs(), ks, stride, 0, 1, ceil_mode)
        out = avg_pool(x.pow(norm_type), ks, stride if stride is not None else ks, 0, ceil_mode)
        return (torch.sign(out) * F.relu(torch.abs(out))).mul(math.prod(ks)).pow(1.0 / norm_type)

    impl.__name__ = f"lp_pool{n}d"
    return impl


register(F.lp_pool1d)(_lp_pool(F.avg_pool1d, F.max_pool1d, 1))
register(F.lp_pool2d)(_lp_pool(F.avg_pool2d, F.max_pool2d, 2))
register(F.lp_pool3d)(_lp_pool(F.avg_pool3d, F.max_pool3d, 3))


@register(optional(F, "linear_cross_entropy"))
def _linear_cross_entropy(
    input,  # noqa: A002 - torch's argument names
    linear_weight,
    target,
    *,
    linear_bias=None,
    weight=None,
    reduction="mean",
    ignore_index=None,
    label_smoothing=0.0,
    options=None,
):
    """torch's reference implementation: cross_entropy(linear(input)); `options` (chunking) only
    changes how torch schedules the same sums."""
    if input.ndim < 1 or input.ndim > 2:
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {input.ndim}")
    if linear_weight.ndim < 2 or linear_weight.shape[-1] != input.shape[-1]:
        raise RuntimeError(
            "expected equal input and linear_weight last dimensions (in_features), got "
            f"{tuple(input.shape)} and {tuple(linear_weight.shape)}"
        )
    logits = torch.tensordot(input, linear_weight, dims=([-1], [-1]))
    if linear_bias is not None:
        logits = logits + linear_bias
    probabilities = tuple(target.shape) == tuple(logits.shape)
    if probabilities and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains probabilities")
    return F.cross_entropy(
        logits,
        target,
        weight=weight,
        ignore_index=-100 if ignore_index is None else ignore_index,
        reduction=reduction,
        label_smoothing=label_smoothing,
    )


@register(torch.ops.aten._safe_softmax.default, torch.ops.aten._safe_softmax)
def _safe_softmax(x, dim, dtype=None):
    """softmax with rows that are all -inf giving 0 instead of nan (torch's SDPA helper)."""
    dead = (x == float("-inf")).all(dim, keepdim=True)
    # a dead row is softmaxed as zeros (no nan on the way, in value or gradient), then zeroed
    out = torch.softmax(torch.where(dead, torch.zeros_like(x), x), dim, dtype=dtype)
    return torch.where(dead, torch.zeros_like(out), out)


@register(torch.ops.aten._softmax_backward_data.default, torch.ops.aten._softmax_backward_data)
def _softmax_backward_data(grad_output, output, dim, input_dtype):
    g = grad_output * output
    return (g - output * g.sum(dim, keepdim=True)).to(input_dtype)


@register(torch.ops.aten.native_dropout_backward.default, torch.ops.aten.native_dropout_backward)
def _native_dropout_backward(grad_output, mask, scale):
    return grad_output * mask.to(grad_output.dtype) * scale


@register(torch.ops.aten.silu_backward.default, torch.ops.aten.silu_backward)
def _silu_backward(grad_output, x):
    (g, v), _ = promote(grad_output, x, to_float=True)
    return KA.silu_backward_p.bind(g, v)


@register(torch.ops.aten.mish_backward.default, torch.ops.aten.mish_backward)
def _mish_backward(grad_output, x):
    (g, v), _ = promote(grad_output, x, to_float=True)
    return KA.mish_backward_p.bind(g, v)


@register(torch.result_type)
def _result_type(tensor, other):
    """torch's promotion answer from stand-ins of the same dtype and rank on the meta device (a
    0-d tensor promotes with less priority than a dimensioned one, so the rank matters)."""

    def meta(v):
        if isinstance(v, (bool, int, float, complex)):
            return v
        return torch.empty((0,) * len(v.shape), dtype=v.dtype, device="meta")

    return torch.result_type(meta(tensor), meta(other))
