"""Recurrent layers (torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu over a whole
sequence) as one composite: executed by torch's own sequence kernel, which runs the recurrence
in C++ (per step, a Python-level program pays a dozen torch calls), and differentiated and
batched through its decomposition (the cells unrolled over time, in thunderx.lang.rnn).

Only dropout-free layers are composites: dropout between layers draws random numbers, which the
language layer expresses as random draws in the unrolled program."""

from __future__ import annotations

import torch

from thunderx.avals import ShapedArray
from thunderx.primitives.composite import declare_composite

_KERNELS = {
    "lstm": lambda: torch.lstm,
    "gru": lambda: torch.gru,
    "rnn_tanh": lambda: torch.rnn_tanh,
    "rnn_relu": lambda: torch.rnn_relu,
}


def _split(args, mode):
    n = 2 if mode == "lstm" else 1
    return args[0], list(args[1 : 1 + n]), list(args[1 + n :])


def _impl(*args, mode, has_biases, num_layers, bidirectional, batch_first):
    x, states, weights = _split(args, mode)
    hx = tuple(states) if mode == "lstm" else states[0]
    out = _KERNELS[mode]()(
        x, hx, weights, has_biases, num_layers, 0.0, False, bidirectional, batch_first
    )
    return list(out)


def _abstract_eval(*avals, mode, has_biases, num_layers, bidirectional, batch_first):
    x, states, _ = _split(avals, mode)
    hidden = states[0].shape[-1] * (2 if bidirectional else 1)
    out = ShapedArray(tuple(x.shape[:-1]) + (hidden,), x.dtype, x.device)
    return [out] + [ShapedArray(s.shape, s.dtype, s.device) for s in states]


# The cells over time, written with the language layer's linear, chunk and stack (which
# thunderx.lang.rnn installs here: this layer does not import the one above it).
UNROLLED: list = [None]


def _decomposition(*args, mode, has_biases, num_layers, bidirectional, batch_first):
    x, states, weights = _split(args, mode)
    return UNROLLED[0](mode, x, states, weights, has_biases, num_layers, bidirectional, batch_first)


rnn_p = declare_composite(
    "rnn",
    decomposition=_decomposition,
    impl=_impl,
    abstract_eval=_abstract_eval,
    multiple_results=True,
)


def rnn(mode, x, states, weights, has_biases, num_layers, bidirectional, batch_first):
    """(output, final h) or, for an LSTM, (output, final h, final c)."""
    return rnn_p.bind(
        x,
        *states,
        *weights,
        mode=mode,
        has_biases=bool(has_biases),
        num_layers=int(num_layers),
        bidirectional=bool(bidirectional),
        batch_first=bool(batch_first),
    )
