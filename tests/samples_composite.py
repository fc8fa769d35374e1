"""Samples of the composite operations of primitives/composite.py (registered into SAMPLES)."""

from __future__ import annotations

from .samples import F64, Sample, sample


@sample("relu")
def _(d):
    return Sample([d.tensor(d.shape(), F64, "nonzero")], {})


@sample("threshold")
def _(d):
    return Sample([d.tensor(d.shape())], {"threshold": d.choice([0.0, 0.5, -1.0]), "value": 2.0})


@sample("gelu")
def _(d):
    return Sample([d.tensor(d.shape())], {"approximate": d.choice(["none", "tanh"])})


@sample("tanh_backward", "sigmoid_backward")
def _(d):
    shape = d.shape()
    return Sample([d.tensor(shape), d.tensor(shape)], {})


@sample("threshold_backward")
def _(d):
    shape = d.shape()
    # x away from the threshold, where the mask is constant around it
    return Sample([d.tensor(shape), d.tensor(shape, F64, "nonzero")], {"threshold": 0.0})


@sample("gelu_backward")
def _(d):
    shape = d.shape()
    return Sample([d.tensor(shape), d.tensor(shape)], {"approximate": d.choice(["none", "tanh"])})


def _dim_sample(d, n_ops):
    shape = d.shape(min_rank=1)
    ops = [d.tensor(shape) for _ in range(n_ops)]
    return Sample(ops, {"dim": d.int(0, len(shape) - 1)})


@sample("softmax", "log_softmax")
def _(d):
    return _dim_sample(d, 1)


@sample("softmax_backward", "log_softmax_backward", "log_softmax_jvp")
def _(d):
    return _dim_sample(d, 2)


def _nll_sample(d, backward):
    lead = d.shape(max_rank=1, max_side=4)
    c = d.int(2, 4)
    target = d.index(lead, c)
    ignore = d.choice([-100, 0])
    reduction = d.choice(["none", "mean", "sum"])
    if ignore == 0 and reduction == "mean":
        target.view(-1)[:1] = c - 1  # keep one counted target, so the mean is finite
    params = {"reduction": reduction, "ignore_index": ignore}
    if backward:
        g = d.tensor(lead if reduction == "none" else ())
        return Sample([g, target], dict(params, shape=lead + (c,)))
    return Sample([d.tensor(lead + (c,)), target], params)


@sample("nll_loss")
def _(d):
    return _nll_sample(d, False)


@sample("nll_loss_backward")
def _(d):
    return _nll_sample(d, True)


@sample("layer_norm")
def _(d):
    shape = d.shape(min_rank=1, min_side=2)
    return Sample([d.tensor(shape)], {"normalized_ndim": d.int(1, len(shape)), "eps": 1e-5})


@sample("layer_norm_backward")
def _(d):
    shape = d.shape(min_rank=1, min_side=2)
    params = {"normalized_ndim": d.int(1, len(shape)), "eps": 1e-5}
    return Sample([d.tensor(shape), d.tensor(shape)], params)


def _channel_shape(d):
    # (N, C, ...) with more than one value per channel (torch's training-mode requirement)
    shape = d.shape(min_rank=2, min_side=2)
    return shape


@sample("batch_norm")
def _(d):
    return Sample([d.tensor(_channel_shape(d))], {"eps": 1e-5})


@sample("batch_norm_backward")
def _(d):
    shape = _channel_shape(d)
    return Sample([d.tensor(shape), d.tensor(shape)], {"eps": 1e-5})


def _groups(d, shape):
    return d.choice([g for g in range(1, shape[1] + 1) if shape[1] % g == 0])


@sample("group_norm")
def _(d):
    shape = _channel_shape(d)
    return Sample([d.tensor(shape)], {"groups": _groups(d, shape), "eps": 1e-5})


@sample("group_norm_backward")
def _(d):
    shape = _channel_shape(d)
    params = {"groups": _groups(d, shape), "eps": 1e-5}
    return Sample([d.tensor(shape), d.tensor(shape)], params)
