"""pure_callback: a Python function of run-time values inside traced code (behind
`thunderx.pure_callback`, JAX's `jax.pure_callback`).

The function is pure: it has no side effects the program depends on, so passes may drop an
unused call or merge two identical ones, and its results are what `out_avals` declare (checked on
every call). It is opaque to differentiation: under `jvp`/`grad` with a nonzero tangent it raises
(wrap it in `custom_jvp`/`custom_vjp` to give it a derivative); with only zero tangents (integer
or stopped inputs) it runs as it is. Under `vmap` the call's `vmap_method` says how:
"sequential" calls it once per batch element, "expand_dims" calls it once with unbatched operands
given a leading dim of size 1, "broadcast_all" once with every operand broadcast to the batch.
"""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero
from thunderx.core import ALL_OPERANDS, declare, get_aval
from thunderx.errors import user_frame

VMAP_METHODS = ("sequential", "expand_dims", "broadcast_all")


def _impl(*args, callback, out_avals, vmap_method):
    outs = callback(*args)
    if len(outs) != len(out_avals):
        raise TypeError(
            f"pure_callback: {getattr(callback, '__name__', 'the callback')} returned "
            f"{len(outs)} values where result_shape_dtypes declares {len(out_avals)}"
        )
    results = []
    for i, (o, a) in enumerate(zip(outs, out_avals)):
        t = torch.as_tensor(o, device=a.device)
        if tuple(t.shape) != tuple(a.shape) or t.dtype != a.dtype:
            raise TypeError(
                f"pure_callback: result {i} is {t.dtype}{list(t.shape)} where "
                f"result_shape_dtypes declares {a.str_short()}"
            )
        results.append(t)
    return results


def _abstract_eval(*avals, callback, out_avals, vmap_method):
    return list(out_avals)


def _jvp(primals, tangents, **params):
    if any(type(t) is not Zero for t in tangents):
        raise TypeError(
            "pure_callback is not differentiable: its callback runs outside the trace. Give it a "
            f"derivative with thunderx.custom_jvp or custom_vjp (as with jax.pure_callback) (at "
            f"{user_frame()})"
        )
    outs = pure_callback_p.bind(*primals, **params)
    return outs, [Zero(get_aval(o).strip_weak()) for o in outs]


def _batch(args, dims, *, callback, out_avals, vmap_method):
    from thunderx.primitives import shape as S
    from thunderx.primitives.custom import _batch_size
    from thunderx.primitives.slicing import batch_element, concatenate

    size = _batch_size(args, dims)
    batched_avals = tuple(a.update(shape=(size,) + tuple(a.shape)) for a in out_avals)
    if vmap_method == "sequential":
        rows = []
        for i in range(size):
            rows.append(
                pure_callback_p.bind(
                    *batch_element(args, dims, i),
                    callback=callback,
                    out_avals=out_avals,
                    vmap_method=vmap_method,
                )
            )
        outs = [
            concatenate([S.expand_dims(r[k], (0,)) for r in rows], 0) for k in range(len(out_avals))
        ]
        return outs, [0] * len(outs)
    if vmap_method == "expand_dims":
        moved = [
            S.expand_dims(a, (0,)) if d is None else S.moveaxis(a, d, 0) for a, d in zip(args, dims)
        ]
    elif vmap_method == "broadcast_all":
        moved = [
            S.broadcast_batch(a, size, 0) if d is None else S.moveaxis(a, d, 0)
            for a, d in zip(args, dims)
        ]
    else:
        raise NotImplementedError(
            "pure_callback under vmap needs vmap_method: 'sequential' (one call per element), "
            "'expand_dims' (one call, unbatched operands with a leading dim of 1) or "
            f"'broadcast_all' (one call, every operand batched); got {vmap_method!r} (at "
            f"{user_frame()})"
        )
    outs = pure_callback_p.bind(
        *moved, callback=callback, out_avals=batched_avals, vmap_method=vmap_method
    )
    return outs, [0] * len(outs)


# No torch codegen rule: the generated code calls `_impl` with the callback as a constant.
pure_callback_p = declare(
    "pure_callback",
    multiple_results=True,
    impl=_impl,
    abstract_eval=_abstract_eval,
    jvp=_jvp,
    batch=_batch,
    aliases=ALL_OPERANDS,  # the callback may return an operand itself
)
