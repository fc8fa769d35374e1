"""debug_callback: call a Python function with run-time values (behind `thunderx.debug`).

It has no outputs and is effectful, so passes keep it and every run of a compiled program calls
it. Under jvp it sees the primal values only (tangents are not passed); under vmap it is called
once per batch element, in order, with that element's values (as `jax.debug.callback` does);
under grad it runs in the forward pass with the primal values.
"""

from __future__ import annotations

import torch

from thunderx.core import (
    abstract_eval_rules,
    batch_rules,
    effectful_primitives,
    get_aval,
    impl_rules,
    jvp_rules,
    new_primitive,
)

debug_callback_p = new_primitive("debug_callback", multiple_results=True)
effectful_primitives.add(debug_callback_p)


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
    from thunderx.primitives import shape as S
    from thunderx.primitives.slicing import slice_in_dim

    size = next(get_aval(a).shape[d] for a, d in zip(args, dims) if d is not None)
    for i in range(size):
        elems = [
            a if d is None else S.squeeze(slice_in_dim(a, i, i + 1, 1, d), (d,))
            for a, d in zip(args, dims)
        ]
        debug_callback_p.bind(*elems, callback=callback)
    return [], []


impl_rules[debug_callback_p] = _impl
abstract_eval_rules[debug_callback_p] = _abstract_eval
jvp_rules[debug_callback_p] = _jvp
batch_rules[debug_callback_p] = _batch
# No torch codegen rule: the generated code calls `_impl` with the callback as a constant.
# No nvFuser rule: it runs between fusion regions, through torch.


def debug_callback(callback, *args) -> None:
    """Bind the primitive: `callback(*args)` runs wherever and whenever the program runs."""
    debug_callback_p.bind(*args, callback=callback)
