"""In-place updates of vmap's and jvp's inputs, written back to the caller's tensors (torch.func's
semantics).

Under torch.func.vmap a batched input is the caller's memory seen one example at a time, so
`vmap(lambda t: t.clamp_min_(0))(x)` clamps `x` itself; under torch.func.jvp an update of a
primal updates the caller's primal and its tangent. thunderx's language layer turns the in-place
op into a new value of the input's tracer (thunderx/lang/inplace.py lets such an input be mutated
when its trace `writes_back_inputs`); when the transform ends, each input whose tracer took a new
value is written back: into the caller's tensor with `copy_` (for vmap with the batch dim moved
back to the input's `in_dims` position), or, when the caller's value is itself traced (nested
transforms, or inside jit or grad), as the same in-place update one level up, which that
transform accepts (vmap, jvp) or refuses with its own error (jit, grad: inputs are immutable).

Refused rather than guessed: an input tensor passed twice (or overlapping another argument's
memory), where torch would see the aliasing inside the function and thunderx would not; and
vmap's `chunk_size`, whose per-chunk inputs are not the caller's memory.
"""

from __future__ import annotations

import torch

from thunderx.core import Tracer
from thunderx.errors import user_frame


def mutated_inputs(trace, ins: list, before: list, read) -> list:
    """(index, new value) of each input whose tracer took a new value; `read(tracer)` gives the
    value at the parent level (call inside the transform's trace, before it ends), compared
    entry by entry with `before[i]` (None: not an input of this trace)."""
    out = []
    for i, (t, b) in enumerate(zip(ins, before)):
        if b is None:
            continue
        if getattr(t, "_trace", None) is not trace:
            from thunderx.lang.inplace import MutationError

            raise MutationError(
                f"an input of a transform was updated in place by an inner transform's value at "
                f"{user_frame()}; the update cannot be written back to the caller: clone the "
                "input first (y = x.clone()) and mutate the copy"
            )
        now = read(t)
        if any(a is not b_ for a, b_ in zip(now, b)):
            out.append((i, now))
    return out


def write(target, new, what: str) -> None:
    """The caller's `target` takes the value `new` in place."""
    from thunderx.lang.inplace import MutationError, mutate

    if tuple(new.shape) != tuple(target.shape):
        raise MutationError(
            f"{what}: an in-place update changed the shape of an input from "
            f"{tuple(target.shape)} to {tuple(new.shape)} (at {user_frame()}); the caller's "
            "tensor cannot follow: use the out-of-place form (x.unsqueeze(0), not x.unsqueeze_(0))"
        )
    if isinstance(target, Tracer) or isinstance(new, Tracer):
        mutate(target, new, what)
    else:
        target.copy_(new)


def write_back(mutated: list, flat_args: list, norm_axes: list, size: int, chunked: bool) -> None:
    """vmap's: each updated input (value, batch dim) back into the caller's tensor."""
    from thunderx.lang.inplace import MutationError
    from thunderx.primitives import shape as S

    if chunked:
        raise MutationError(
            f"vmap(chunk_size=...) of a function that updates an input in place (at "
            f"{user_frame()}): the chunks are copies, so the update cannot reach the caller's "
            "tensor; drop chunk_size, or clone the input first and return the copy"
        )
    for i, _ in mutated:  # all checks before the first write: a refusal changes nothing
        check_unaliased(i, flat_args)
    for i, (val, bdim) in mutated:
        ax = norm_axes[i]
        new = S.broadcast_batch(val, size, ax) if bdim is None else S.moveaxis(val, bdim, ax)
        write(flat_args[i], new, "an in-place update of a vmap input (written back)")


def write_back_jvp(mutated: list, primals: list, tangents: list) -> None:
    """jvp's: each updated input's primal and tangent back into the caller's."""
    from thunderx.ad_util import instantiate

    flat = primals + tangents
    for i, _ in mutated:
        check_unaliased(i, flat)
        check_unaliased(len(primals) + i, flat)
    for i, (p, t) in mutated:
        write(primals[i], p, "an in-place update of a jvp primal (written back)")
        write(tangents[i], instantiate(t), "an in-place update of a jvp tangent (written back)")


def write_back_primals(mutated: list, primals: list) -> None:
    """jacfwd's: each updated input's primal back into the caller's (its tangents are the
    basis jacfwd made, whose update the linear map already carries)."""
    for i, _ in mutated:
        check_unaliased(i, primals)
    for i, (p, _) in mutated:
        write(primals[i], p, "an in-place update of a jacfwd input (written back)")


def check_unaliased(i: int, flat_args: list) -> None:
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
                f"input {i} of a transform is updated in place and shares memory with input {j} (at "
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
