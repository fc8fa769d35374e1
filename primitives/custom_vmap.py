"""custom_vmap_call: a function with a user-defined batching rule (behind
`thunderx.custom_vmap`, JAX's `jax.custom_batching.custom_vmap`).

Params: `call` (the flat function, before staging), `rule` (the flat batching rule), `jaxpr`
(the function, once staged into a jaxpr: jit, make_jaxpr) with `num_consts` hoisted operands, and
`name`. Under vmap the rule runs with the operands' batch dims moved to 0; outside vmap the
function runs (or its jaxpr); under jvp the function itself is differentiated (as JAX does), so
a vmap of the jvp batches the function's own operations.
"""

from __future__ import annotations

from thunderx.ad_util import Zero
from thunderx.core import ALL_OPERANDS, declare
from thunderx.errors import user_frame
from thunderx.primitives.custom import _batch_size, _call_abstract_eval, _call_impl, _stage


def _jvp(primals, tangents, *, call, rule, jaxpr, num_consts, name):
    from thunderx.ir import eval_jaxpr
    from thunderx.transforms.jvp import jvp_flat, jvp_reverse

    ts = [None if type(t) is Zero else t for t in tangents]
    if jaxpr is not None:
        fun = lambda *xs: eval_jaxpr(jaxpr, [], *xs)  # noqa: E731
    else:
        fun = lambda *xs: list(call(*xs))  # noqa: E731
    return jvp_flat(fun, list(primals), ts, jvp_reverse())


def _batch(args, dims, *, call, rule, jaxpr, num_consts, name):
    from thunderx.primitives import shape as S

    if any(d is not None for d in dims[:num_consts]):
        raise TypeError(
            f"custom_vmap {name}: the function closes over a batched value; pass it as an "
            f"argument so that its batching rule sees it (at {user_frame()})"
        )
    size = _batch_size(args, dims)
    moved = [a if d is None else S.moveaxis(a, d, 0) for a, d in zip(args, dims)]
    outs, out_batched = rule(size, [d is not None for d in dims[num_consts:]], moved[num_consts:])
    return outs, [0 if b else None for b in out_batched]


custom_vmap_call_p = declare(
    "custom_vmap_call",
    multiple_results=True,
    impl=_call_impl,
    abstract_eval=_call_abstract_eval,
    stage=_stage,
    jvp=_jvp,
    batch=_batch,
    aliases=ALL_OPERANDS,  # the user's function may return an operand itself
)
