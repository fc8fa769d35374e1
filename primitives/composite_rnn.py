"""Recurrent layers (torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu over a whole
sequence) as one composite: executed by torch's own sequence kernel, which runs the recurrence
in C++ (per step, a Python-level program pays a dozen torch calls), and batched through its
decomposition (the cells unrolled over time, in thunderx.lang.rnn).

Derivatives, as for attention, through two more composites: `rnn_jvp` (the tangent map, linear
in the tangents) and `rnn_backward` (its transpose, linear in the output cotangents), each the
other's transpose. `rnn_backward` runs torch autograd over the sequence kernel (the forward
recomputed inside it): eager torch's own backward of the layer (cuDNN's fused one on CUDA, the
C++ recurrence on CPU), where the unrolled cells' transpose paid a dozen kernels per step.
Forward mode and every derivative beyond the first come from the decompositions.

Only dropout-free layers are composites: dropout between layers draws random numbers, which the
language layer expresses as random draws in the unrolled program."""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero, instantiate, is_undefined
from thunderx.avals import ShapedArray
from thunderx.core import get_aval
from thunderx.primitives import creation as C
from thunderx.primitives.composite import declare_composite, decomposition_jvp

_KERNELS = {
    "lstm": lambda: torch.lstm,
    "gru": lambda: torch.gru,
    "rnn_tanh": lambda: torch.rnn_tanh,
    "rnn_relu": lambda: torch.rnn_relu,
}


def _split(args, mode):
    n = 2 if mode == "lstm" else 1
    return args[0], list(args[1 : 1 + n]), list(args[1 + n :])


def _impl(*args, mode, has_biases, num_layers, bidirectional, batch_first, train=False):
    # `train`: cuDNN's backward needs the forward run in training mode (no dropout either way)
    x, states, weights = _split(args, mode)
    hx = tuple(states) if mode == "lstm" else states[0]
    out = _KERNELS[mode]()(
        x, hx, weights, has_biases, num_layers, 0.0, train, bidirectional, batch_first
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


def _n_out(mode) -> int:
    return 3 if mode == "lstm" else 2


# Which layers differentiate through torch's backward (rnn_backward) rather than through the
# unrolled cells' jvp and transpose, per (mode, device type); elsewhere torch's (on CUDA, cuDNN's
# fused backward). Torch's backward recomputes the forward inside it. Measured on CPU (2
# threads, A/B in one process, T=50, B=16, 64->128, against eager autograd): LSTM 1.18-1.20x
# against 2.7x unrolled; GRU 1.27x against 0.96-0.99x; RNN 1.28x against 0.98x.
BACKWARD_KERNEL = {
    ("lstm", "cpu"): True,
    ("gru", "cpu"): False,
    ("rnn_tanh", "cpu"): False,
    ("rnn_relu", "cpu"): False,
}


def _backward_kernel_wins(mode, device) -> bool:
    return BACKWARD_KERNEL.get((mode, device.type), device.type != "cpu")


def _jvp(primals, tangents, **params):
    if not _backward_kernel_wins(params["mode"], get_aval(primals[0]).device):
        return decomposition_jvp(_decomposition, primals, tangents, params)
    outs = rnn_p.bind(*primals, **params)
    if all(type(t) is Zero for t in tangents):
        return outs, [Zero(get_aval(o)) for o in outs]
    ts = [instantiate(t) for t in tangents]
    return outs, rnn_jvp_p.bind(*ts, *primals, **params)


def _jvp_decomposition(*args, **params):
    n = len(args) // 2
    outs, t_outs = decomposition_jvp(_decomposition, args[n:], args[:n], params)
    return [C.zeros_like(o) if t is None or type(t) is Zero else t for o, t in zip(outs, t_outs)]


def _jvp_abstract_eval(*avals, **params):
    return _abstract_eval(*avals[len(avals) // 2 :], **params)


def _jvp_transpose(cts, *args, **params):
    n = len(args) // 2
    primals = args[n:]
    if any(is_undefined(p) for p in primals):
        raise TypeError("rnn_jvp is linear in its tangent operands only")
    cts = [instantiate(c) for c in cts]
    return list(rnn_backward_p.bind(*cts, *primals, **params)) + [None] * n


def _backward_impl(*args, mode, **params):
    # torch autograd over the sequence kernel: the layer's backward as eager torch runs it.
    # Under an outer torch autograd (a jitted gradient differentiated again by torch), the
    # gradients stay in its graph; each operand position is its own node (`view_as`), so one
    # tensor passed twice gets each position's gradient, not their sum twice.
    k = _n_out(mode)
    cts, primals = args[:k], args[k:]
    outer = torch.is_grad_enabled() and any(a.requires_grad for a in args)
    with torch.enable_grad():
        leaves = [
            p.view_as(p) if outer and p.requires_grad else p.detach().requires_grad_()
            for p in primals
        ]
        outs = _impl(*leaves, mode=mode, train=True, **params)
        grads = torch.autograd.grad(outs, leaves, cts, allow_unused=True, create_graph=outer)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(primals, grads)]


def _backward_decomposition(*args, mode, **params):
    from thunderx.transforms.ad import vjp

    k = _n_out(mode)
    cts, primals = args[:k], args[k:]
    _, pull = vjp(lambda *p: _decomposition(*p, mode=mode, **params), *primals)
    return list(pull(list(cts)))


def _backward_abstract_eval(*avals, mode, **params):
    return [a.strip_weak() for a in avals[_n_out(mode) :]]


def _backward_transpose(cts, *args, mode, **params):
    k = _n_out(mode)
    primals = args[k:]
    if any(is_undefined(p) for p in primals):
        raise TypeError("rnn_backward is linear in its cotangent operands only")
    ct_outs = rnn_jvp_p.bind(*(instantiate(c) for c in cts), *primals, mode=mode, **params)
    return list(ct_outs) + [None] * len(primals)


rnn_p = declare_composite(
    "rnn",
    decomposition=_decomposition,
    impl=_impl,
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    multiple_results=True,
)


def _linear_map(name, decomposition, impl, abstract_eval, transpose, **declared):
    """A composite linear in its leading operands (the tangents, the cotangents), whose
    derivatives in the layer's operands come from its decomposition."""
    rules = dict(impl=impl, abstract_eval=abstract_eval, transpose=transpose)
    flags = dict(linear=True, differentiate_decomposition=True, multiple_results=True)
    return declare_composite(name, decomposition=decomposition, **rules, **flags, **declared)


# forward mode has no torch kernel: rnn_jvp's implementation is its decomposition, run eagerly
rnn_jvp_p = _linear_map(
    "rnn_jvp", _jvp_decomposition, _jvp_decomposition, _jvp_abstract_eval, _jvp_transpose
)
rnn_backward_p = _linear_map(
    "rnn_backward",
    _backward_decomposition,
    _backward_impl,
    _backward_abstract_eval,
    _backward_transpose,
    runs_autograd=True,
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
