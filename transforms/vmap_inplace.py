"""In-place updates of vmap's inputs, written back to the caller's tensors (torch.func's semantics).

Under torch.func.vmap a batched input is the caller's memory seen one example at a time, so
`vmap(lambda t: t.clamp_min_(0))(x)` clamps `x` itself. thunderx's language layer turns the
in-place op into a new value of the input's tracer (thunderx/lang/inplace.py lets a vmap input be
mutated because `BatchTrace.writes_back_inputs`); when the vmap ends, each input whose tracer took
a new value is written back: into the caller's tensor with `copy_` (the batch dim moved back to
the input's `in_dims` position), or, when the caller's value is itself traced (nested vmap, or
vmap inside jit or grad), as the same in-place update one level up, which that transform accepts
(an enclosing vmap) or refuses with its own error (jit, grad: inputs are immutable there).

Refused rather than guessed: an input tensor passed twice (or overlapping another argument's
memory), where torch would see the aliasing inside the function and thunderx would not; and
`chunk_size`, whose per-chunk inputs are not the caller's memory.
"""

from __future__ import annotations

import torch

from thunderx.core import Tracer
from thunderx.errors import user_frame


def mutated_inputs(trace, ins: list, before: list) -> list:
    """(index, value, batch dim) of each input whose tracer took a new value, at the parent
    level (call inside the vmap's trace, before it ends)."""
    out = []
    for i, (t, b) in enumerate(zip(ins, before)):
        if b is None:
            continue
        if getattr(t, "_trace", None) is not trace:
            from thunderx.lang.inplace import MutationError

            raise MutationError(
                f"an input of vmap was updated in place by an inner transform's value at "
                f"{user_frame()}; the update cannot be written back to the caller: clone the "
                "input first (y = x.clone()) and mutate the copy"
            )
        val, bdim = trace.unpack(t)
        if val is not b[0] or bdim != b[1]:
            out.append((i, val, bdim))
    return out


def write_back(mutated: list, flat_args: list, norm_axes: list, size: int, chunked: bool) -> None:
    from thunderx.lang.inplace import MutationError, mutate
    from thunderx.primitives import shape as S

    if chunked:
        raise MutationError(
            f"vmap(chunk_size=...) of a function that updates an input in place (at "
            f"{user_frame()}): the chunks are copies, so the update cannot reach the caller's "
            "tensor; drop chunk_size, or clone the input first and return the copy"
        )
    for i, _, _ in mutated:  # all checks before the first write: a refusal changes nothing
        _check_unaliased(i, flat_args)
    for i, val, bdim in mutated:
        ax = norm_axes[i]
        new = S.broadcast_batch(val, size, ax) if bdim is None else S.moveaxis(val, bdim, ax)
        target = flat_args[i]
        if isinstance(target, Tracer) or isinstance(new, Tracer):
            mutate(target, new, "an in-place update of a vmap input (written back)")
        else:
            target.copy_(new)


def _check_unaliased(i: int, flat_args: list) -> None:
    from thunderx.lang.inplace import MutationError

    target = flat_args[i]
    for j, other in enumerate(flat_args):
        if j == i:
            continue
        same = other is target
        if not same and isinstance(target, torch.Tensor) and isinstance(other, torch.Tensor):
            same = _overlap(target, other)
        if same:
            raise MutationError(
                f"vmap: input {i} is updated in place and shares memory with input {j} (at "
                f"{user_frame()}); thunderx treats the inputs as separate values, so the update "
                "would not be seen through the other: pass a clone"
            )


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors share a storage (a conservative test: any common storage)."""
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and (
            a.untyped_storage().nbytes() > 0
        )
    except (RuntimeError, NotImplementedError):
        return False
