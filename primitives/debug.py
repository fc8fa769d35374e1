"""debug_callback: call a Python function with run-time values (behind `thunderx.debug`).

It has no outputs and is effectful, so passes keep it and every run of a compiled program calls
it. Under jvp it sees the primal values only (tangents are not passed); under vmap it is called
once per batch element, in order, with that element's values (as `jax.debug.callback` does);
under grad it runs in the forward pass with the primal values.
"""

from __future__ import annotations

import torch

from thunderx.core import declare


def _snapshot(x):
    # The callback may keep what it receives; generated code may later reuse a dead buffer in
    # place, so it gets its own copy (as JAX hands callbacks fresh host arrays).
    return x.detach().clone() if isinstance(x, torch.Tensor) else x


def _impl(*args, callback):
    callback(*[_snapshot(a) for a in args])
    return []


def _abstract_eval(*avals, callback):
    return []


def _jvp(primals, tangents, *, callback):
    debug_callback_p.bind(*primals, callback=callback)
    return [], []


def _batch(args, dims, *, callback):
    from thunderx.primitives.custom import _batch_size
    from thunderx.primitives.slicing import batch_element

    size = _batch_size(args, dims)
    for i in range(size):
        debug_callback_p.bind(*batch_element(args, dims, i), callback=callback)
    return [], []


# No torch codegen rule: the generated code calls `_impl` with the callback as a constant.
# No nvFuser rule: it runs between fusion regions, through torch.
debug_callback_p = declare(
    "debug_callback",
    multiple_results=True,
    impl=_impl,
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    batch=_batch,
    effects=("callback",),  # runs user code: never removed, merged or run fewer times
)


def debug_callback(callback, *args) -> None:
    """Bind the primitive: `callback(*args)` runs wherever and whenever the program runs."""
    debug_callback_p.bind(*args, callback=callback)
