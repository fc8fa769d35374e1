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


@sample("silu", "mish", "hardswish", "log_sigmoid", "sinc")
def _(d):
    return Sample([d.tensor(d.shape())], {})


@sample("lerp")
def _(d):
    shape = d.shape()
    # weights on both sides of 0.5, where torch's kernel switches formula
    return Sample([d.tensor(shape), d.tensor(shape), d.tensor(shape)], {})


@sample("addcmul", "addcdiv")
def _(d):
    shape = d.shape()
    # a divisor away from 0, where addcdiv's quotient and its derivatives blow up
    value = d.choice([1.0, 0.3, -2.0])
    return Sample(
        [d.tensor(shape), d.tensor(shape), d.tensor(shape, F64, "nonzero")], {"value": value}
    )


@sample("copy")
def _(d):
    return Sample([d.tensor(d.shape())], {})


@sample("add_scaled")
def _(d):
    shape = d.shape()
    return Sample([d.tensor(shape), d.tensor(shape)], {"alpha": d.choice([0.1, -2.0, 3.0])})


@sample("norm2")
def _(d):
    shape = d.shape(min_rank=1)
    # nonzero entries: away from the zero vector, where the norm is not differentiable
    return Sample([d.tensor(shape, F64, "nonzero")], {"axes": d.subset(len(shape))})


def _elu_params(d):
    return d.choice(
        [
            {"alpha": 1.0, "scale": 1.0, "input_scale": 1.0},
            {"alpha": 1.6732632423543772, "scale": 1.0507009873554805, "input_scale": 1.0},
            {"alpha": 0.7, "scale": 1.0, "input_scale": 1 / 0.7},
        ]
    )


@sample("elu")
def _(d):
    return Sample([d.tensor(d.shape(), F64, "nonzero")], _elu_params(d))


@sample("elu_backward")
def _(d):
    shape = d.shape()
    return Sample([d.tensor(shape), d.tensor(shape, F64, "nonzero")], _elu_params(d))


@sample("softplus")
def _(d):
    params = {"beta": d.choice([1.0, 2.0, 0.5]), "threshold": d.choice([20.0, 1.0])}
    return Sample([d.tensor(d.shape())], params)


@sample("softplus_backward")
def _(d):
    shape = d.shape()
    params = {"beta": d.choice([1.0, 2.0, 0.5]), "threshold": d.choice([20.0, 1.0])}
    return Sample([d.tensor(shape), d.tensor(shape)], params)


def _probabilities(d, shape):
    # below 0.7: the vmap checks scale batch copies by up to 1.2 (the kernel refuses values
    # outside [0, 1])
    return [d.tensor(shape, F64, "probability") * 0.8 for _ in range(2)]


@sample("binary_cross_entropy")
def _(d):
    return Sample(_probabilities(d, d.shape()), {})


@sample("binary_cross_entropy_backward")
def _(d):
    shape = d.shape()
    return Sample([d.tensor(shape), *_probabilities(d, shape)], {})


@sample("silu_backward", "mish_backward", "log_sigmoid_backward")
def _(d):
    shape = d.shape()
    return Sample([d.tensor(shape), d.tensor(shape)], {})


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


def _ln_affine_operands(d):
    shape = d.shape(min_rank=1, min_side=2)
    nd = d.int(1, len(shape))
    params = {"normalized_ndim": nd, "eps": 1e-5}
    return shape, d.tensor(shape), d.tensor(shape[len(shape) - nd :]), params


@sample("layer_norm_affine")
def _(d):
    shape, x, w, params = _ln_affine_operands(d)
    bias = [d.tensor(tuple(w.shape))] if d.bool() else []
    return Sample([x, w, *bias], {**params, "has_bias": bool(bias)})


@sample("layer_norm_affine_tangent")
def _(d):
    shape, x, w, params = _ln_affine_operands(d)
    chosen = d.subset(3)
    present = tuple(k in chosen for k in range(3))
    sizes = (shape, tuple(w.shape), tuple(w.shape))
    ts = [d.tensor(s) for s, p in zip(sizes, present) if p]
    return Sample([x, w, *ts], {**params, "present": present})


@sample("layer_norm_affine_cotangent")
def _(d):
    shape, x, w, params = _ln_affine_operands(d)
    chosen = d.subset(3)
    mask = tuple(k in chosen for k in range(3))
    return Sample([x, w, d.tensor(shape)], {**params, "mask": mask})


def _cn_affine_operands(d):
    groups = d.choice([0, 1, 2])  # 0: batch norm
    n = d.int(1, 3) if groups else d.int(2, 3)  # batch norm: more than one value per channel
    shape = (n, 2 * d.int(1, 2)) + d.shape(min_rank=1, max_rank=2, min_side=2)
    params = {"groups": groups, "eps": 1e-5}
    return shape, d.tensor(shape), d.tensor(shape[1:2]), params


@sample("channel_norm_affine")
def _(d):
    shape, x, w, params = _cn_affine_operands(d)
    bias = [d.tensor(tuple(w.shape))] if d.bool() else []
    return Sample([x, w, *bias], {**params, "has_bias": bool(bias)})


@sample("channel_norm_affine_tangent")
def _(d):
    shape, x, w, params = _cn_affine_operands(d)
    chosen = d.subset(3)
    present = tuple(k in chosen for k in range(3))
    sizes = (shape, tuple(w.shape), tuple(w.shape))
    ts = [d.tensor(s) for s, p in zip(sizes, present) if p]
    return Sample([x, w, *ts], {**params, "present": present})


@sample("channel_norm_affine_cotangent")
def _(d):
    shape, x, w, params = _cn_affine_operands(d)
    chosen = d.subset(3)
    mask = tuple(k in chosen for k in range(3))
    return Sample([x, w, d.tensor(shape)], {**params, "mask": mask})


@sample("batch_norm_eval")
def _(d):
    shape = (d.int(1, 3), d.int(1, 3)) + d.shape(max_rank=2)
    c = shape[1:2]
    mean, var = d.tensor(c), d.tensor(c).abs() + 0.5
    present = [d.bool(), d.bool()]
    vecs = [d.tensor(c) for p in present if p]
    params = {"eps": 1e-5, "has_weight": present[0], "has_bias": present[1]}
    return Sample([d.tensor(shape), mean, var, *vecs], params)


def _upsample_sample(d, backward):
    from thunderx.primitives.composite_vision import KERNELS

    kind, nd = d.choice(sorted(KERNELS))
    # sides >= 2: torch's CPU antialias kernel repeats its first row when a pass runs on a
    # width-1 tensor (a kernel bug, not a formula)
    spatial = tuple(d.int(2, 5) for _ in range(nd))
    scales = None
    # explicit scales come with the output size F.interpolate derives from them; not for
    # nearest, whose CPU backward kernels index differently from the forward one when scales are
    # given (nearest_idx's `out == 2 * in` shortcut), so they are not its transpose there
    if d.bool() and not kind.startswith("nearest"):
        scales = tuple(d.choice([1.5, 2.25, 2.5]) for _ in range(nd))
        out = tuple(int(s * f) for s, f in zip(spatial, scales))
    else:
        out = tuple(d.int(2, 6) for _ in range(nd))
    params = {"kind": kind, "output_size": out, "scales": scales, "align_corners": d.bool()}
    lead = (d.int(1, 2), d.int(1, 2))
    if backward:
        params["input_size"] = lead + spatial
        return Sample([d.tensor(lead + out)], params)
    return Sample([d.tensor(lead + spatial)], params)


@sample("upsample")
def _(d):
    return _upsample_sample(d, False)


@sample("upsample_backward")
def _(d):
    return _upsample_sample(d, True)


def _window_sample(d, fold):
    kernel = (d.int(1, 2), d.int(1, 3))
    dilation, padding, stride = (d.int(1, 2), 1), (d.int(0, 1), d.int(0, 2)), (1, d.int(1, 2))
    hw = (d.int(3, 5), d.int(3, 5))
    params = {"kernel": kernel, "dilation": dilation, "padding": padding, "stride": stride}
    n, c = d.int(1, 2), d.int(1, 2)
    if fold:
        from thunderx.primitives.composite_vision import sliding_blocks

        bh, bw = sliding_blocks(hw, kernel, dilation, padding, stride)
        cols = d.tensor((n, c * kernel[0] * kernel[1], bh * bw))
        return Sample([cols], dict(params, output_size=hw))
    return Sample([d.tensor((n, c) + hw)], params)


@sample("im2col")
def _(d):
    return _window_sample(d, False)


@sample("col2im")
def _(d):
    return _window_sample(d, True)


def _attention_operands(d):
    """q, k, v (B, H, L, E) / (B, H, S, E), an optional additive mask broadcastable to the
    scores, and the params of the sdpa primitives."""
    b, h, lq, lk, e = d.int(1, 2), d.int(1, 2), d.int(1, 4), d.int(1, 4), d.int(1, 3)
    q, k, v = d.tensor((b, h, lq, e)), d.tensor((b, h, lk, e)), d.tensor((b, h, lk, e))
    mask = []
    if d.bool():
        mshape = tuple(d.choice([1, n]) for n in (b, h, lq, lk))
        mask = [d.tensor(mshape)]
    return [q, k, v], mask, {"is_causal": d.bool(), "scale": d.choice([0.5, 1.0 / e**0.5])}


@sample("sdpa")
def _(d):
    ops, mask, params = _attention_operands(d)
    return Sample(ops + mask, params)


def _saved(ops, mask, params):
    import torch

    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    out, lse = flash(
        *ops, 0.0, params["is_causal"], attn_mask=(mask or [None])[0], scale=params["scale"]
    )
    return [out, lse]


@sample("sdpa_jvp")
def _(d):
    ops, mask, params = _attention_operands(d)
    tangents = [d.tensor(tuple(t.shape)) for t in ops]
    return Sample(tangents + ops + _saved(ops, mask, params) + mask, params)


@sample("sdpa_backward")
def _(d):
    ops, mask, params = _attention_operands(d)
    saved = _saved(ops, mask, params)
    return Sample([d.tensor(tuple(saved[0].shape))] + ops + saved + mask, params)


def _channel_shape(d):
    # (N, C, ...) with more than one value per channel (torch's training-mode requirement)
    shape = d.shape(min_rank=2, min_side=2)
    return shape


@sample("batch_norm")
def _(d):
    return Sample([d.tensor(_channel_shape(d))], {"eps": 1e-5})


@sample("batch_norm_stats")
def _(d):
    return Sample([d.tensor(_channel_shape(d))], {})


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


@sample("rnn")
def _rnn_sample(d):
    # a sequence (T, B, In) or (B, T, In), layers of hidden size H, one or two directions
    mode = d.choice(["lstm", "gru", "rnn_tanh", "rnn_relu"])
    gates = {"lstm": 4, "gru": 3}.get(mode, 1)
    t, b, n_in, h = d.int(1, 3), d.int(1, 2), d.int(1, 3), d.int(1, 3)
    layers, dirs, batch_first = d.int(1, 2), d.choice([1, 2]), d.bool()
    has_biases = d.bool()
    x = d.tensor((b, t, n_in) if batch_first else (t, b, n_in))
    states = [d.tensor((layers * dirs, b, h)) for _ in range(2 if mode == "lstm" else 1)]
    weights = []
    for layer in range(layers):
        fan_in = n_in if layer == 0 else h * dirs
        for _ in range(dirs):
            weights += [d.tensor((gates * h, fan_in)), d.tensor((gates * h, h))]
            weights += [d.tensor((gates * h,)), d.tensor((gates * h,))] if has_biases else []
    params = {
        "mode": mode,
        "has_biases": has_biases,
        "num_layers": layers,
        "bidirectional": dirs == 2,
        "batch_first": batch_first,
    }
    return Sample([x, *states, *weights], params)


@sample("rnn_jvp")
def _(d):
    # tangents shaped as the layer's operands, then the operands
    primal = _rnn_sample(d)
    tangents = [d.tensor(tuple(a.shape)) for a in primal.args]
    return Sample(tangents + list(primal.args), primal.params)


@sample("rnn_backward")
def _(d):
    # cotangents of (output, final h[, final c]), then the layer's operands
    primal = _rnn_sample(d)
    p = primal.params
    x, n_states = primal.args[0], 2 if p["mode"] == "lstm" else 1
    dirs = 2 if p["bidirectional"] else 1
    hidden = primal.args[1].shape[-1]
    out_shape = tuple(x.shape[:-1]) + (hidden * dirs,)
    cts = [d.tensor(out_shape)] + [d.tensor(tuple(s.shape)) for s in primal.args[1 : 1 + n_states]]
    return Sample(cts + list(primal.args), primal.params)
