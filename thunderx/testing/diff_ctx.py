"""A differential case prepared for the checks (thunderx/testing/diff_checks.py): the function
with and without its integer arguments, a weighting for scalar reductions, tangents, a batch and
its axes, and the tolerance its scale allows."""

from __future__ import annotations

import copy
import random

import torch

from thunderx.testing.diff_ops import Case, fill
from thunderx.testing.diff_verdict import F64, RTOL


class Ctx:
    """A case prepared for the checks: the function with and without its integer args, a
    weighting for scalar reductions, tangents, cotangents and a batch."""

    def __init__(self, case: Case, seed: int):
        self.case = case
        self.xs = case.args[: case.ndiff]
        self.ks = case.args[case.ndiff :]
        self.n = case.ndiff
        self.f = lambda *xs: case.fn(*xs, *self.ks)
        self.out = self.f(*self.xs)
        g = torch.Generator().manual_seed(seed)
        self.float_out = isinstance(self.out, torch.Tensor) and self.out.is_floating_point()
        if self.float_out:
            self.w = torch.randn(self.out.shape, dtype=F64, generator=g)
        self.ts = [torch.randn(x.shape, dtype=F64, generator=g) for x in self.xs]
        rng = random.Random(seed)
        self.batch = [torch.stack([x, fill(x.shape, case.edge, g)]) for x in self.xs]
        self.axes = [
            rng.choice([0, -1, None]) if x.ndim else rng.choice([0, None]) for x in self.xs
        ]
        if self.axes and all(a is None for a in self.axes):
            self.axes[0] = 0
        self.argnums = tuple(range(self.n))
        scale = max([case.scale] + [max_finite(t) for t in case.args[: case.ndiff]])
        if self.float_out:
            scale = max(scale, max_finite(self.out))
        self.rtol = max(RTOL, 1e-13 * scale)

    def s(self, *xs):
        return (self.f(*xs) * self.w).sum()

    def scaled(self, factor: float) -> "Ctx":
        """The same case with its differentiable inputs (and batches) times `factor`."""
        other = copy.copy(self)
        other.xs = [x * factor for x in self.xs]
        other.batch = [b * factor for b in self.batch]
        return other

    def s_all(self, *args):
        return (self.case.fn(*args) * self.w).sum()


def max_finite(t: torch.Tensor) -> float:
    finite = t[torch.isfinite(t)] if t.is_floating_point() else t
    return float(finite.abs().max()) if finite.numel() else 0.0
