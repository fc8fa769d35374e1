"""`associative_scan`: JAX's parallel prefix scan of an associative binary operation.

All prefixes of `fn` over a sequence in O(log n) rounds of whole-array operations: adjacent pairs
are combined, the sequence of pairs is scanned recursively (giving the prefixes that end at odd
positions), and one more combination of those with the elements at even positions fills in the
rest. Every round is ordinary torch operations on strided slices, so the scan is traced, batched
and differentiated like any other code (grad, vmap, jit, jacfwd, hessian), and runs eagerly
outside a transform. `fn` must be associative and work on slices of any length along `axis` (it
is called on whole halves of the sequence); the result is JAX's up to floating-point
reassociation.

>>> associative_scan(torch.add, torch.arange(1.0, 6.0))
tensor([ 1.,  3.,  6., 10., 15.])
"""

from __future__ import annotations

from typing import Callable

import torch

from thunderx import tree
from thunderx.core import Tracer, get_aval
from thunderx.errors import user_frame

__all__ = ["associative_scan"]


def associative_scan(fn: Callable, elems, reverse: bool = False, axis: int = 0):
    """Every prefix `fn(... fn(fn(x[0], x[1]), x[2]) ..., x[i])` of the leaves of `elems` (a
    pytree of tensors of one length along `axis`), in parallel rounds; `fn(a, b)` takes and
    returns pytrees of `elems`' structure. With `reverse=True` the suffixes, each combined as
    JAX does: `fn(... fn(x[n-1], x[n-2]) ..., x[i])`.

    >>> associative_scan(torch.mul, torch.tensor([1.0, 2.0, 3.0]), reverse=True)
    tensor([6., 6., 3.])
    """
    where = user_frame()
    if not callable(fn):
        raise TypeError(f"associative_scan: fn must be callable, got {type(fn).__name__}")
    leaves, treedef = tree.flatten(elems)
    if not leaves:
        raise ValueError(f"associative_scan: elems has no tensors (at {where})")
    for x in leaves:
        if not isinstance(x, (Tracer, torch.Tensor)):
            raise TypeError(
                f"associative_scan: elems' leaves must be tensors, got {type(x).__name__} "
                f"(at {where})"
            )
    ndims = {len(get_aval(x).shape) for x in leaves}
    ndim = min(ndims)
    if ndim == 0:
        raise ValueError(f"associative_scan: elems' leaves need an axis to scan (at {where})")
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"associative_scan: axis {axis} is out of range for leaves of rank {ndim} (at {where})"
        )
    axes = [axis % len(get_aval(x).shape) for x in leaves]
    lengths = {int(get_aval(x).shape[a]) for x, a in zip(leaves, axes)}
    if len(lengths) != 1:
        raise ValueError(
            f"associative_scan: elems' leaves have different lengths along axis {axis}: "
            f"{sorted(lengths)} (at {where})"
        )
    scan = _Scan(fn, treedef, axes, where)
    if reverse:
        leaves = [torch.flip(x, (a,)) for x, a in zip(leaves, axes)]
    out = scan.run(leaves)
    if reverse:
        out = [torch.flip(x, (a,)) for x, a in zip(out, axes)]
    return tree.unflatten(treedef, out)


class _Scan:
    def __init__(self, fn, treedef, axes, where):
        self.fn, self.treedef, self.axes, self.where = fn, treedef, axes, where

    def part(self, xs, start, stop, step=1):
        """xs[start:stop:step] along each leaf's axis."""
        return [x[(slice(None),) * a + (slice(start, stop, step),)] for x, a in zip(xs, self.axes)]

    def combine(self, a, b):
        out = self.fn(tree.unflatten(self.treedef, a), tree.unflatten(self.treedef, b))
        leaves, out_tree = tree.flatten(out)
        if out_tree != self.treedef:
            raise TypeError(
                f"associative_scan: fn returned the structure {out_tree} for elems of structure "
                f"{self.treedef} (at {self.where})"
            )
        for got, want in zip(leaves, a):
            if not isinstance(got, (Tracer, torch.Tensor)) or tuple(got.shape) != tuple(want.shape):
                shape = tuple(got.shape) if isinstance(got, (Tracer, torch.Tensor)) else got
                raise TypeError(
                    f"associative_scan: fn returned {shape} for operands of shape "
                    f"{tuple(want.shape)}; it must combine them elementwise along the scanned "
                    f"axis (at {self.where})"
                )
        return leaves

    def run(self, xs):
        n = int(xs[0].shape[self.axes[0]])
        if n < 2:
            return xs
        pairs = n // 2
        # odd[k]: the prefix ending at 2k + 1, from the scan of adjacent pairs
        odd = self.run(self.combine(self.part(xs, 0, 2 * pairs, 2), self.part(xs, 1, 2 * pairs, 2)))
        # even[k]: the prefix ending at 2k, x[0] then odd[k - 1] combined with x[2k]
        evens = (n + 1) // 2
        rest = self.combine(self.part(odd, 0, evens - 1), self.part(xs, 2, n, 2))
        even = [torch.cat([f, r], a) for f, r, a in zip(self.part(xs, 0, 1), rest, self.axes)]
        return [_interleave(e, o, a) for e, o, a in zip(even, odd, self.axes)]


def _interleave(even, odd, axis):
    """[e0, o0, e1, o1, ...] along axis; `even` is as long as `odd` or one longer."""
    n_odd = odd.shape[axis]
    head = even.narrow(axis, 0, n_odd)
    both = torch.stack([head, odd], axis + 1).flatten(axis, axis + 1)
    if even.shape[axis] == n_odd:
        return both
    return torch.cat([both, even.narrow(axis, n_odd, 1)], axis)
