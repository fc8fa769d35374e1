"""Recurrent cells: torch.rnn_tanh_cell, rnn_relu_cell, gru_cell and lstm_cell (what nn.RNNCell,
nn.GRUCell and nn.LSTMCell call), as linear layers and gates."""

from __future__ import annotations

import torch

from thunderx.lang._base import register
from thunderx.lang.linalg import linear
from thunderx.lang.shape_ops import _chunk
from thunderx.primitives import binary as B
from thunderx.primitives import composite_rnn
from thunderx.primitives import unary as U

# Each cell is a step given its input projection `gi` (x @ w_ih.T + b_ih): the sequence ops
# project every time step's input with one GEMM before the time loop, as torch's kernels do.


def _rnn_tanh_step(gi, h, w_hh, b_hh):
    return U.tanh(B.add(gi, linear(h, w_hh, b_hh)))


def _rnn_relu_step(gi, h, w_hh, b_hh):
    from thunderx.lang.nn import relu

    return relu(B.add(gi, linear(h, w_hh, b_hh)))


def _gru_step(gi, h, w_hh, b_hh):
    gh = linear(h, w_hh, b_hh)
    i_r, i_z, i_n = _chunk(gi, 3, -1)
    h_r, h_z, h_n = _chunk(gh, 3, -1)
    r = U.logistic(B.add(i_r, h_r))
    z = U.logistic(B.add(i_z, h_z))
    n = U.tanh(B.add(i_n, B.mul(r, h_n)))
    return B.add(n, B.mul(z, B.sub(h, n)))  # (1 - z) * n + z * h


def _lstm_step(gi, hx, w_hh, b_hh):
    h, c = hx
    i, f, g, o = _chunk(B.add(gi, linear(h, w_hh, b_hh)), 4, -1)
    c_new = B.add(B.mul(U.logistic(f), c), B.mul(U.logistic(i), U.tanh(g)))
    return B.mul(U.logistic(o), U.tanh(c_new)), c_new


def _cell(step):
    """torch's single-step cell (torch.lstm_cell, ...) from the step."""

    def cell(x, h, w_ih, w_hh, b_ih=None, b_hh=None):
        return step(linear(x, w_ih, b_ih), h, w_hh, b_hh)

    return cell


_STEPS = {
    "lstm": _lstm_step,
    "gru": _gru_step,
    "rnn_tanh": _rnn_tanh_step,
    "rnn_relu": _rnn_relu_step,
}


# --------------------------------------------------------------------------- multi-head attention


def _additive(mask, dtype):
    """torch's convention: a bool mask is True where attention is not allowed."""
    from thunderx.lang._base import aval
    from thunderx.lang._base import dtype as dtype_of
    from thunderx.primitives import creation as C

    if dtype_of(mask) is torch.bool:
        a = aval(mask)
        return U.select(mask, float("-inf"), C.full(a.shape, 0.0, dtype, a.device))
    return mask if dtype_of(mask) == dtype else U.convert(mask, dtype)


@register(torch.nn.functional.multi_head_attention_forward)
def _multi_head_attention_forward(
    query,
    key,
    value,
    embed_dim_to_check,
    num_heads,
    in_proj_weight,
    in_proj_bias,
    bias_k,
    bias_v,
    add_zero_attn,
    dropout_p,
    out_proj_weight,
    out_proj_bias,
    training=True,
    key_padding_mask=None,
    need_weights=True,
    attn_mask=None,
    use_separate_proj_weight=False,
    q_proj_weight=None,
    k_proj_weight=None,
    v_proj_weight=None,
    static_k=None,
    static_v=None,
    average_attn_weights=True,
    is_causal=False,
):
    """The math of nn.MultiheadAttention ((L, N, E) or unbatched (L, E) inputs)."""
    import math

    import torch.nn.functional as F

    from thunderx.errors import unsupported
    from thunderx.lang._base import aval, dtype, ndim, shape
    from thunderx.lang.linalg import matmul
    from thunderx.lang.nn import softmax
    from thunderx.lang.shape_ops import _cat
    from thunderx.primitives import creation as C
    from thunderx.primitives import reductions as R
    from thunderx.primitives import shape as S

    if (bias_k is None) != (bias_v is None) or (static_k is None) != (static_v is None):
        raise unsupported(
            "multi_head_attention_forward with only one of bias_k/bias_v or "
            "static_k/static_v (torch requires both or neither)"
        )
    if bias_k is not None and (static_k is not None or static_v is not None):
        raise unsupported("multi_head_attention_forward: bias_k/bias_v with static keys")
    unbatched = ndim(query) == 2
    if unbatched:
        query, key, value = (S.expand_dims(t, (1,)) for t in (query, key, value))
        if key_padding_mask is not None:
            key_padding_mask = S.expand_dims(key_padding_mask, (0,))
    tgt_len, bsz, embed_dim = shape(query)
    src_len = shape(key)[0]
    hd = embed_dim // num_heads
    # torch's fused path (one scaled_dot_product_attention, no weights returned) runs batch-major:
    # the projections take (N, n, E) rows and the heads are (N, n, H, hd) views, the layout the
    # attention kernels return their output in, so merging the heads back is a view, not a copy.
    # nn.MultiheadAttention(batch_first=True) transposes its (N, L, E) input to (L, N, E) and its
    # output back: those transposes and the ones here compose to nothing.
    batch_major = not need_weights and bias_k is None and static_k is None and not add_zero_attn
    self_attention = key is query and value is query
    if batch_major:
        query, key, value = (S.transpose(t, (1, 0, 2)) for t in (query, key, value))
    if not use_separate_proj_weight and self_attention:
        # self-attention: one projection by the packed weight, as torch's _in_projection_packed
        q, k, v = _chunk(linear(query, in_proj_weight, in_proj_bias), 3, -1)
    else:
        if use_separate_proj_weight:
            w_q, w_k, w_v = q_proj_weight, k_proj_weight, v_proj_weight
        else:
            w_q, w_k, w_v = _chunk(in_proj_weight, 3, 0)
        b_q = b_k = b_v = None
        if in_proj_bias is not None:
            b_q, b_k, b_v = _chunk(in_proj_bias, 3, 0)
        q, k, v = linear(query, w_q, b_q), linear(key, w_k, b_k), linear(value, w_v, b_v)

    def heads(t, n):  # (n, N, E) -> (N * H, n, hd)
        return S.transpose(S.reshape(t, (n, bsz * num_heads, hd)), (1, 0, 2))

    def split(t, n):  # (n, N, E) or batch-major (N, n, E) -> (N, H, n, hd), views in torch
        if batch_major:
            return S.transpose(S.reshape(t, (bsz, n, num_heads, hd)), (0, 2, 1, 3))
        return S.transpose(S.reshape(t, (n, bsz, num_heads, hd)), (1, 2, 0, 3))

    def zeros(shp):
        return C.full(shp, 0.0, dtype(q), aval(q).device)

    appended = 0  # key positions appended to every sequence: bias_k, then a zero key
    if bias_k is not None:
        k = _cat([k, S.broadcast_to(bias_k, (1, bsz, embed_dim))], 0)
        v = _cat([v, S.broadcast_to(bias_v, (1, bsz, embed_dim))], 0)
        appended, src_len = 1, src_len + 1
    q4, k4, v4 = split(q, tgt_len), split(k, src_len), split(v, src_len)
    if not batch_major:
        q = heads(q, tgt_len)
        if static_k is not None:
            k, v = static_k, static_v  # (N * H, S, hd)
            src_len = shape(k)[1]
        else:
            k, v = heads(k, src_len), heads(v, src_len)
    if add_zero_attn:
        k, v = (_cat([t, zeros((bsz * num_heads, 1, hd))], 1) for t in (k, v))
        appended, src_len = appended + 1, src_len + 1
    if static_k is not None or add_zero_attn:
        k4, v4 = (S.reshape(t, (bsz, num_heads, src_len, hd)) for t in (k, v))

    def pad_keys(m):  # the appended key positions are never masked
        return _cat([m, zeros(shape(m)[:-1] + (appended,))], -1) if appended else m

    mask = None
    if attn_mask is not None:
        mask = pad_keys(_additive(attn_mask, dtype(q)))
        if ndim(mask) == 2:
            mask = S.expand_dims(mask, (0,))
    elif is_causal:
        r = C.iota(torch.int64, (tgt_len, src_len), 0)
        c = C.iota(torch.int64, (tgt_len, src_len), 1)
        mask = S.expand_dims(_additive(B.gt(c, r), dtype(q)), (0,))
    if key_padding_mask is not None:
        kpm = pad_keys(_additive(key_padding_mask, dtype(q)))  # (N, S)
        kpm = S.reshape(
            S.broadcast_in_dim(kpm, (bsz, num_heads, 1, src_len), (0, 3)),
            (bsz * num_heads, 1, src_len),
        )
        mask = (
            kpm
            if mask is None
            else B.add(
                S.broadcast_to(mask, (bsz * num_heads, tgt_len, src_len)),
                S.broadcast_to(kpm, (bsz * num_heads, tgt_len, src_len)),
            )
        )
    if not need_weights:
        # torch's own path: one scaled_dot_product_attention over (N, H, L, hd)
        from thunderx.lang.attention import scaled_dot_product_attention

        causal = is_causal and key_padding_mask is None
        if mask is not None and not causal:
            m = S.broadcast_to(mask, (shape(mask)[0], tgt_len, src_len))
            lead = (1, 1) if shape(m)[0] == 1 else (bsz, num_heads)
            mask = S.reshape(m, lead + (tgt_len, src_len))
        out = scaled_dot_product_attention(
            q4,
            k4,
            v4,
            None if causal else mask,
            dropout_p if training else 0.0,
            is_causal=causal,
        )
        out = S.reshape(S.transpose(out, (0, 2, 1, 3)), (bsz * tgt_len, embed_dim))
        out = S.reshape(linear(out, out_proj_weight, out_proj_bias), (bsz, tgt_len, embed_dim))
        out = S.transpose(out, (1, 0, 2))
        return (S.squeeze(out, (1,)) if unbatched else out), None
    scores = matmul(B.mul(q, 1.0 / math.sqrt(hd)), S.transpose(k, (0, 2, 1)))
    if mask is not None:
        scores = B.add(scores, S.broadcast_to(mask, shape(scores)))
    weights = softmax(scores, -1)
    if dropout_p > 0.0 and training:
        weights = F.dropout(weights, p=dropout_p)
    out = matmul(weights, v)  # (N * H, L, hd)
    out = S.reshape(S.transpose(out, (1, 0, 2)), (tgt_len * bsz, embed_dim))
    out = S.reshape(linear(out, out_proj_weight, out_proj_bias), (tgt_len, bsz, embed_dim))
    if unbatched:
        out = S.squeeze(out, (1,))
    if not need_weights:
        return out, None
    w = S.reshape(weights, (bsz, num_heads, tgt_len, src_len))
    if average_attn_weights:
        w = B.div(R.reduce_sum(w, (1,)), float(num_heads))
    if unbatched:
        w = S.squeeze(w, (0,))
    return out, w


# ----------------------------------------------------------------- full-sequence RNN/GRU/LSTM ops


def _run_layers(
    step, x, states, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
):
    """Unroll `step` over time for every layer and direction (what torch.lstm/gru/rnn_* do);
    `states` holds one initial state per layer and direction. Returns (output, final states)."""
    import torch.nn.functional as F

    from thunderx.lang.shape_ops import _cat, _stack, _unbind

    per = 4 if has_biases else 2
    dirs = 2 if bidirectional else 1
    if len(params) != per * num_layers * dirs:
        from thunderx.errors import unsupported

        raise unsupported("recurrent layers with projections (proj_size)")
    t_axis = 1 if batch_first else 0
    seq, finals = x, []
    for layer in range(num_layers):
        outs_dir = []
        for d in range(dirs):
            k = (layer * dirs + d) * per
            w_ih, w_hh, *biases = params[k : k + per]
            b_ih, b_hh = biases if has_biases else (None, None)
            state = states[layer * dirs + d]
            # every time step's input projection in one GEMM, then the recurrence
            projected = _unbind(linear(seq, w_ih, b_ih), t_axis)
            outs = []
            for gi in projected if d == 0 else projected[::-1]:
                state = step(gi, state, w_hh, b_hh)
                outs.append(state[0] if isinstance(state, tuple) else state)
            outs_dir.append(outs if d == 0 else outs[::-1])
            finals.append(state)
        steps = outs_dir[0] if dirs == 1 else [_cat([f, r], -1) for f, r in zip(*outs_dir)]
        if dropout and train and layer < num_layers - 1:
            steps = [F.dropout(s, dropout) for s in steps]
        seq = _stack(steps, t_axis)
    return seq, finals


def unrolled(
    mode,
    x,
    states,
    weights,
    has_biases,
    num_layers,
    bidirectional,
    batch_first,
    dropout=0.0,
    train=False,
):
    """The sequence op as cells over time (the rnn composite's decomposition, and the op itself
    with dropout between layers): [output, final h over layers and directions(, final c)]."""
    from thunderx.lang.shape_ops import _stack, _unbind

    h0 = _unbind(states[0], 0)
    init = list(zip(h0, _unbind(states[1], 0))) if mode == "lstm" else list(h0)
    flags = (has_biases, num_layers, dropout, train, bidirectional, batch_first)
    out, finals = _run_layers(_STEPS[mode], x, init, list(weights), *flags)
    if mode == "lstm":
        return [out, _stack([h for h, _ in finals], 0), _stack([c for _, c in finals], 0)]
    return [out, _stack(finals, 0)]


def _sequence_op(mode):
    """torch.<mode>(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
    batch_first): the rnn composite (torch's kernel when executed), or, with dropout between
    layers in training, the cells unrolled with their random draws."""

    def op(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):  # noqa: A002
        from thunderx.lang._base import ndim

        states, params = (list(hx) if mode == "lstm" else [hx]), list(params)
        flags = (has_biases, num_layers, bidirectional, batch_first)
        per_layer = (4 if has_biases else 2) * (2 if bidirectional else 1)
        composite = ndim(input) == 3 and len(params) == per_layer * num_layers
        if composite and not (dropout and train and num_layers > 1):
            return tuple(composite_rnn.rnn(mode, input, states, params, *flags))
        return tuple(unrolled(mode, input, states, params, *flags, dropout, train))

    op.__name__ = mode
    return op


for _mode, _step in _STEPS.items():
    register(getattr(torch, f"{_mode}_cell"))(_cell(_step))
    register(getattr(torch, _mode))(_sequence_op(_mode))
composite_rnn.UNROLLED[0] = unrolled
