"""thunderx's transforms as black boxes to torch.compile.

TorchDynamo traces Python bytecode; inside thunderx's transforms it would trace thunderx's own
machinery (tracers that are Python objects, trace stacks, interpreter loops), which it does not
model: `torch.compile(thunderx.jacrev(torch.sin))` gave wrong values (and
`torch.compile(thunderx.jvp(...))`, `hessian`, `vmap(grad)`). So each transform, and every
function one returns (`grad(f)`, `vjp`'s pullback, `linearize`'s jvp), is
`torch.compiler.disable`d: inside a compiled function the call is a graph break and runs as
thunderx runs it, on the values torch.compile hands it. `jit` is left traceable: its program is
plain torch code, which torch.compile captures correctly.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

_disable = getattr(getattr(torch, "compiler", None), "disable", None)
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: True)


def _opaque(fn):
    if not callable(fn) or isinstance(fn, torch.Tensor):
        return fn
    disabled: list = []  # made on the first call under torch.compile: torch._dynamo is imported
    # then, not when thunderx is (importing it takes a second)

    # a plain function, not the disabled one itself: torch.compile applied to a disabled
    # function unwraps it to the original and traces that. Outside torch.compile the call goes
    # straight to `fn`
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if _compiling():
            if not disabled:
                disabled.append(_disable(fn))
            return disabled[0](*args, **kwargs)
        return fn(*args, **kwargs)

    return call


def opaque_to_dynamo(transform: Callable) -> Callable:
    """`transform`, and the callables it returns (alone or in a tuple), opaque to TorchDynamo."""
    if _disable is None:  # a torch without torch.compiler
        return transform

    def wrapped(*args, **kwargs):
        out = transform(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(_opaque(o) for o in out)
        return _opaque(out)

    return _opaque(functools.wraps(transform)(wrapped))
