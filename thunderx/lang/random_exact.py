"""Random ops under eager vmap, run with torch's own kernels as torch.func runs them.

When every trace between the call and the top level is a vmap (nothing staged or differentiated
in between), a random op is one torch call per `randomness='different'` level with the batch
moved to the front, or one unbatched call for a 'same' level, so with the same seed (or the same
`generator` state) the numbers are eager torch's: `vmap(torch.rand)` over 4 draws
`torch.rand(4, ...)`, and an in-place draw writes into the caller's tensor as torch.func's does.
Misuse raises torch.func's messages (RandomnessError is also a RuntimeError)."""

from __future__ import annotations

import math

import torch

from thunderx.core import EvalTrace, Tracer, current_trace, set_trace
from thunderx.errors import RandomnessError, user_frame

NOT_EXACT = object()  # the call is not under eager vmaps only: the caller's general path runs

_SAME_BATCHED = (
    "Vmap does not currently support same randomness with a batched tensor input. Please file "
    "an issue with functorch"
)
_DIFFERENT_UNBATCHED = (
    "vmap: Cannot ask for different inplace randomness on an unbatched tensor. This will appear "
    "like same randomness. If this is necessary for your usage, please file an issue with "
    "functorch."
)
_EXTRA_ARGS = (
    "vmap: inplace {op}(self, *extra_args) is not possible because there exists a Tensor "
    "`other` in extra_args that has more elements than `self`. This happened due to `other` being "
    "vmapped over but `self` not being vmapped over in a vmap. Please try to use out-of-place "
    "operators instead of inplace arithmetic."
)


def _error(name: str, message: str) -> RandomnessError:
    return RandomnessError(f"{name} at {user_frame()}: {message}")


def eager_chain(through_derivatives: bool = False):
    """The vmap traces from the current one out to the top level, innermost first, when nothing
    else lies between (no jit, grad or jvp); otherwise None. Not empty.

    `through_derivatives`: eager grad, vjp and jvp levels may lie between too (a draw that
    reads no traced value, as a factory's, is made now at the top level: those levels take it
    as a constant), but nothing staged (jit, make_jaxpr)."""
    from thunderx.transforms.jvp import JVPTrace
    from thunderx.transforms.partial_eval import PartialEvalTrace
    from thunderx.transforms.vmap import BatchTrace

    t, chain = current_trace(), []
    while type(t) is not EvalTrace:
        if isinstance(t, BatchTrace) and t.alive:
            chain.append(t)
        elif not (through_derivatives and type(t) in (JVPTrace, PartialEvalTrace)):
            return None
        t = t.parent
    return chain or None


def _unpack(bt, x):
    if isinstance(x, Tracer):
        return bt.unpack(x)
    return x, None


def _front(v, d, n: int):
    """v with its batch axis d first (a view), or broadcast along a new first axis of size n."""
    if d is None:
        return v.unsqueeze(0).expand(n, *v.shape)
    return torch.movedim(v, d, 0)


def run(name: str, kernel, tensors, chain, like: bool = False, prefix: tuple = ()):
    """`kernel(prefix, *tensors)` with torch's kernels: each 'different' level moves its batch
    axis of every tensor to the front (broadcasting unbatched ones) and adds its size in front of
    `prefix` (the leading batch shape a factory draws); each 'same' level needs unbatched tensors
    (`like`: only their shape matters, so one example stands for the batch)."""
    from thunderx.transforms.vmap import BatchTracer

    if not chain:
        from thunderx.lang.random import check_forbidden

        check_forbidden()
        if any(isinstance(t, Tracer) for t in tensors):
            raise _error(name, "a traced value reached torch's random kernel")  # defensive
        with torch._C.DisableTorchFunction():
            return kernel(prefix, *tensors)
    bt, rest = chain[0], chain[1:]
    if bt.randomness == "error":
        raise _randomness_error(name)
    pairs = [_unpack(bt, x) for x in tensors]
    with set_trace(bt.parent):
        if bt.randomness == "different":
            vals = [_front(v, d, bt.axis_size) for v, d in pairs]
            out = run(name, kernel, vals, rest, like, (bt.axis_size,) + tuple(prefix))
            return BatchTracer(bt, out, 0)
        if any(d is not None for _, d in pairs):
            if not like:
                raise _error(name, _SAME_BATCHED)
            pairs = [(v if d is None else torch.select(v, d, 0), None) for v, d in pairs]
        return run(name, kernel, [v for v, _ in pairs], rest, like, prefix)


def _randomness_error(name: str) -> RandomnessError:
    from thunderx.lang.random import _randomness_error

    return _randomness_error(name)


def check_error_mode(chain, name: str) -> None:
    for bt in chain:
        if bt.randomness == "error":
            raise _randomness_error(name)


def call(name: str, fn, args: tuple, kwargs: dict, like: bool = False):
    """`fn(*args, **kwargs)` (a torch random function whose tensor arguments are the positional
    and keyword tensors) under eager vmaps, or NOT_EXACT elsewhere."""
    chain = eager_chain()
    if chain is None:
        return NOT_EXACT
    check_error_mode(chain, name)
    apos = [i for i, a in enumerate(args) if isinstance(a, (Tracer, torch.Tensor))]
    kpos = [k for k, v in kwargs.items() if isinstance(v, (Tracer, torch.Tensor))]

    def kernel(prefix, *ts):
        a, k = list(args), dict(kwargs)
        for i, t in zip(apos, ts[: len(apos)]):
            a[i] = t
        for key, t in zip(kpos, ts[len(apos) :]):
            k[key] = t
        return fn(*a, **k)

    tensors = [args[i] for i in apos] + [kwargs[k] for k in kpos]
    return run(name, kernel, tensors, chain, like)


def factory(name: str, draw_batched):
    """A draw without tensor arguments: `draw_batched(prefix)` draws prefix + its shape."""
    chain = eager_chain(through_derivatives=True)
    if chain is None:
        return NOT_EXACT
    check_error_mode(chain, name)
    return run(name, lambda prefix: draw_batched(tuple(prefix)), [], chain)


def normal(mean, std, size, tensors, generator, dtype, device):
    """torch.normal: of tensors, or of floats with a size."""
    if tensors:
        return call("torch.normal", torch.normal, (mean, std), {"generator": generator})
    if size is None:
        return NOT_EXACT
    dt, dev = dtype or torch.get_default_dtype(), torch.device(device or "cpu")
    return factory(
        "torch.normal",
        lambda prefix: torch.normal(
            float(mean), float(std), prefix + tuple(size), dtype=dt, device=dev, generator=generator
        ),
    )


def randperm_batched(n: int, prefix: tuple, **kwargs):
    """torch.func's randperm under 'different': one permutation after another."""
    count = math.prod(prefix)
    if not prefix:
        return torch.randperm(n, **kwargs)
    perms = [torch.randperm(n, **kwargs) for _ in range(count)]
    return torch.stack(perms).reshape(*prefix, n)


def multinomial_kernel(num_samples, replacement, generator):
    def kernel(prefix, probs):
        lead = probs.shape[:-1]
        flat = probs.reshape(-1, probs.shape[-1]) if probs.dim() > 2 else probs
        out = torch.multinomial(flat, num_samples, replacement, generator=generator)
        return out.reshape(*lead, num_samples)

    return kernel


def inplace(name: str, method: str, x, args: tuple, kwargs: dict):
    """`x.<method>(*args, **kwargs)` (an in-place random Tensor method) under one eager vmap:
    torch's kernel writes into the caller's tensor (as torch.func does), on the batch-first view
    for 'different', or on one contiguous example copied to the others for 'same'. NOT_EXACT elsewhere
    (nested vmaps, a target that is itself computed under a deeper trace)."""
    chain = eager_chain()
    if chain is None:
        return NOT_EXACT
    check_error_mode(chain, name)
    if len(chain) != 1:
        return NOT_EXACT
    bt = chain[0]
    tv, td = _unpack(bt, x)
    if isinstance(tv, Tracer):
        return NOT_EXACT
    apos = [i for i, a in enumerate(args) if isinstance(a, (Tracer, torch.Tensor))]
    others = [_unpack(bt, args[i]) for i in apos]
    if any(isinstance(v, Tracer) for v, _ in others):
        return NOT_EXACT
    other_batched = any(d is not None for _, d in others)
    if bt.randomness == "same" and other_batched:
        raise _error(name, _SAME_BATCHED)
    if bt.randomness == "different" and td is None:
        raise _error(
            name,
            _EXTRA_ARGS.format(op=method.rstrip("_")) if other_batched else _DIFFERENT_UNBATCHED,
        )
    from thunderx.lang.views import view_of

    # a member of a view family (thunderx models views as values): draw into a fresh tensor of
    # the same layout and write it through the view machinery, which refuses transform inputs
    tracked = isinstance(x, Tracer) and view_of(x) is not None
    a = list(args)
    if bt.randomness == "different":
        target = torch.movedim(tv, td, 0)
        rank = target.dim()
        for i, (v, d) in zip(apos, others):
            if d is not None:
                v = torch.movedim(v, d, 0)
                v = v.reshape(v.shape[:1] + (1,) * (rank - v.dim()) + v.shape[1:])
            a[i] = v
        with torch._C.DisableTorchFunction():
            dest = torch.empty_like(target) if tracked else target
            getattr(dest, method)(*a, **kwargs)
        return _written(bt, x, dest, name) if tracked else x
    for i, (v, _) in zip(apos, others):
        a[i] = v
    with torch._C.DisableTorchFunction():
        if td is None and not tracked:
            getattr(tv, method)(*a, **kwargs)
            return x
        # one contiguous example (torch's kernels draw differently into strided memory)
        example = (tv if td is None else torch.select(tv, td, 0)).contiguous()
        getattr(example, method)(*a, **kwargs)
        if tracked:
            return _written(None, x, example, name)
        torch.movedim(tv, td, 0).copy_(example.expand_as(torch.movedim(tv, td, 0)))
    return x


def _written(bt, x, values, name: str):
    """x after an in-place draw of `values` (batch-first under `bt`, or unbatched)."""
    from thunderx.lang.inplace import mutate
    from thunderx.transforms.vmap import BatchTracer

    new = values if bt is None else BatchTracer(bt, values, 0)
    return mutate(x, new, name)


def same_batched_check(name: str, tensors) -> None:
    """torch.func's refusal of a batched tensor argument under vmap(randomness='same'), for the
    general path (under jit or differentiation inside vmap)."""
    from thunderx.lang.random import _batch_traces

    for bt in _batch_traces():
        if bt.randomness != "same":
            continue
        for x in tensors:
            if isinstance(x, Tracer) and _unpack(bt, x)[1] is not None:
                raise _error(name, _SAME_BATCHED)


def unbatched_target_check(name: str, x) -> None:
    """torch.func's refusal of an in-place draw into a tensor no 'different' vmap batches (a
    concrete tensor), for the general path."""
    from thunderx.lang.random import _batch_traces

    if isinstance(x, Tracer):
        return
    if any(bt.randomness == "different" for bt in _batch_traces()):
        raise _error(name, _DIFFERENT_UNBATCHED)
