"""Random torch ops under transforms. Under vmap they follow `randomness`: 'error' (default),
'different' (independent draws per batch element) or 'same' (one draw shared by the batch).
While staging (jit, make_jaxpr) they become random primitives, so each call draws anew."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from thunderx.core import current_trace, get_aval, set_trace
from thunderx.errors import user_frame
from thunderx.primitives import creation as C

_DEFAULT_DEVICE = torch.device("cpu")


def _size(args, kwargs):
    size = kwargs.pop("size", None)
    if size is None:
        size = (
            args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
        )
    return tuple(int(s) for s in size)


def _batch_traces():
    """The vmap traces enclosing the current context, innermost first."""
    from thunderx.transforms.vmap import BatchTrace

    t = current_trace()
    while t is not None:
        if isinstance(t, BatchTrace) and t.alive:
            yield t
        t = t.parent


def draw(kind: str, shape, dtype, device, name: str):
    """A random draw of `shape` per batch element, honouring every enclosing vmap."""
    from thunderx.transforms.vmap import BatchTracer

    prim = C.random_uniform if kind == "uniform" else C.random_normal
    batches = list(_batch_traces())
    different = []
    for bt in batches:
        if bt.randomness == "error":
            raise ValueError(
                f"vmap: {name} called under vmap at {user_frame()}; random ops need "
                "vmap(..., randomness='different') or randomness='same'"
            )
        if bt.randomness == "different":
            different.append(bt)
    if not different:
        return prim(shape, dtype, device)
    # Draw a block with one axis per 'different' vmap (outermost first), then wrap it.
    outer_first = list(reversed(different))
    with set_trace(outer_first[0].parent):
        val = prim(tuple(bt.axis_size for bt in outer_first) + tuple(shape), dtype, device)
    # Peel the axes one trace at a time: each vmap level sees its own leading axis.
    for bt in outer_first:
        val = BatchTracer(bt, val, 0)
    return val


def _rand(kind, name):
    def impl(
        *args,
        dtype=None,
        device=None,
        layout=None,
        requires_grad=False,
        generator=None,
        pin_memory=False,
        out=None,
        **kwargs,
    ):
        shape = _size(args, kwargs)
        return draw(
            kind, shape, dtype or torch.get_default_dtype(), torch.device(device or "cpu"), name
        )

    return impl


def _rand_like(kind, name):
    def impl(x, *, dtype=None, device=None, layout=None, requires_grad=False, memory_format=None):
        a = get_aval(x)
        return draw(kind, a.shape, dtype or a.dtype, a.device, name)

    return impl


def _dropout(x, p=0.5, training=True, inplace=False):
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    a = get_aval(x)
    keep = draw("uniform", a.shape, a.dtype, a.device, "dropout") >= p
    return torch.where(keep, x / (1.0 - p), 0.0)


def _bernoulli(p, generator=None, *, out=None):
    a = get_aval(p)
    return (draw("uniform", a.shape, a.dtype, a.device, "bernoulli") < p).to(a.dtype)


RANDOM_FUNCTIONS = {
    torch.rand: _rand("uniform", "torch.rand"),
    torch.randn: _rand("normal", "torch.randn"),
    torch.rand_like: _rand_like("uniform", "torch.rand_like"),
    torch.randn_like: _rand_like("normal", "torch.randn_like"),
    F.dropout: _dropout,
    torch.dropout: lambda x, p, train: _dropout(x, p, train),
    torch.bernoulli: _bernoulli,
}


class RandomnessMode(TorchFunctionMode):
    """Routes torch's random functions to `draw` while a transform is tracing."""

    def __init__(self, trace):
        super().__init__()
        self.trace = trace

    def __torch_function__(self, func, types, args=(), kwargs=None):
        handler = RANDOM_FUNCTIONS.get(func)
        if handler is not None:
            return handler(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))
