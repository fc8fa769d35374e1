"""Shape rules of the differential test's op table: `rule(rng, base) -> (float input shapes,
integer-args builder or None, params)`, or None where the op does not apply to the drawn base
shape."""

from __future__ import annotations

import math
import random  # noqa: F401  (rules take a random.Random)
from typing import Callable

import torch


def same(n):
    def rule(rng, base):
        return [base] * n, None, {}

    return rule


def bcast(rng, base):
    """y: a suffix of x's shape (broadcasts), sometimes 0-d, sometimes x's shape."""
    k = rng.randint(0, len(base))
    other = base[k:] if rng.random() < 0.7 else ()
    pair = [base, other] if rng.random() < 0.5 else [other, base]
    return pair, None, {}


def dim(rng, base, allow_none=False):
    if not base:
        return rng.choice([0, -1] + ([None] if allow_none else []))
    if allow_none and rng.random() < 0.2:
        return None
    return rng.randint(-len(base), len(base) - 1)


def reduce(keep=True, allow_none=True, nonempty=False):
    def rule(rng, base):
        d = dim(rng, base, allow_none)
        if nonempty and (0 in base if d is None else (base and base[d] == 0)):
            return None
        params = {"dim": d}
        if keep:
            params["keepdim"] = rng.random() < 0.5
        return [base], None, params

    return rule


def along_dim(nonempty=False, min_rank=0):
    def rule(rng, base):
        if len(base) < min_rank:
            return None
        d = dim(rng, base)
        if nonempty and base and base[d] == 0:
            return None
        return [base], None, {"dim": d}

    return rule


def matmul(rng, base):
    if not base:
        return None
    k = base[-1]
    m = rng.randint(1, 3)
    if len(base) == 1:
        other = (k,) if rng.random() < 0.5 else (k, m)
    else:
        other = (k, m) if rng.random() < 0.5 else base[:-2] + (k, m)
    return [base, other], None, {}


def mm(rng, base):
    if len(base) != 2:
        return None
    return [base, (base[1], rng.randint(1, 3))], None, {}


def bmm(rng, base):
    if len(base) != 3:
        return None
    return [base, (base[0], base[2], rng.randint(1, 3))], None, {}


def mv(rng, base):
    return ([base, base[1:]], None, {}) if len(base) == 2 else None


def vec(rng, base):
    return ([base, base], None, {}) if len(base) == 1 else None


def outer(rng, base):
    return ([base, (rng.randint(0, 3),)], None, {}) if len(base) == 1 else None


def linear(rng, base):
    if not base:
        return None
    return [base, (rng.randint(1, 3), base[-1]), (1,)], None, {}


def rank(n, extra: Callable | None = None):
    def rule(rng, base):
        if len(base) < n:
            return None
        return [base], None, extra(rng, base) if extra else {}

    return rule


def perm(rng, base):
    p = list(range(len(base)))
    rng.shuffle(p)
    return [base], None, {"perm": tuple(p)}


def narrow(rng, base):
    if not base:
        return None
    d = rng.randrange(len(base))
    if base[d] == 0:
        return [base], None, {"dim": d, "start": 0, "length": 0}
    start = rng.randrange(base[d])
    return [base], None, {"dim": d, "start": start, "length": rng.randint(0, base[d] - start)}


def dyn_narrow(rng, base):
    """narrow with a 0-d integer tensor start: a dynamic_slice under jit."""
    if not base or base[0] == 0:
        return None
    length = rng.randint(1, base[0])
    start = rng.randint(0, base[0] - length)
    return [base], lambda: [torch.tensor(start)], {"length": length}


def dyn_update(rng, base):
    """y = x.clone(); y[i] = v * 2 with a 0-d integer tensor i: a dynamic_update_slice."""
    if not base or base[0] == 0:
        return None
    i = rng.randrange(base[0])
    return [base, base[1:]], lambda: [torch.tensor(i)], {}


def index(kind):
    def rule(rng, base):
        if not base or base[0] == 0:
            return None
        n = rng.randint(0, 4)
        idx = [rng.randrange(base[0]) for _ in range(n)]
        if n >= 2 and rng.random() < 0.5:
            idx[1] = idx[0]  # repeated index: accumulation in the transpose
        t = torch.tensor(idx, dtype=torch.long)
        if kind == "take_along":
            shape = (n,) + tuple(base[1:])
            vals = [rng.randrange(base[0]) for _ in range(max(1, numel(shape)))]
            t = torch.tensor(vals[: numel(shape)], dtype=torch.long).reshape(shape)
            return [base], lambda: [t], {}
        if kind == "index_add":
            return [base, (n,) + base[1:]], lambda: [t], {}
        return [base], lambda: [t], {}

    return rule


def cat(rng, base):
    if not base:
        return None
    d = rng.randrange(len(base))
    other = list(base)
    other[d] = rng.randint(0, 2)
    return [base, tuple(other)], None, {"dim": d}


def pad(rng, base):
    if not base:
        return None
    return [base], None, {"pad": (rng.randint(0, 2), rng.randint(0, 1))}


def expand(rng, base):
    if len(base) > 2:
        return None
    return [base], None, {"shape": (rng.randint(0, 3),) + tuple(base)}


def reshape(rng, base):
    n = 1
    for s in base:
        n *= s
    return [base], None, {"shape": rng.choice([(n,), (-1, 1), tuple(reversed(base))])}


def conv1d(rng, base):
    if len(base) != 3 or base[2] < 2:
        return None
    c = base[1]
    return [base, (2, c, 2)], None, {}


def conv2d(rng, base):
    if len(base) != 3 or base[1] < 2 or base[2] < 2:
        return None
    return [(1,) + base, (2, base[0], 2, 2)], None, {}


def pool(rng, base):
    if len(base) != 3 or base[1] < 2 or base[2] < 2:
        return None
    return [base], None, {}


def lastdim(nonempty=True, min_rank=1):
    def rule(rng, base):
        if len(base) < min_rank or (nonempty and base and base[-1] == 0):
            return None
        return [base], None, {}

    return rule


def layer_norm(rng, base):
    if not base or base[-1] == 0:
        return None
    return [base, base[-1:], base[-1:]], None, {}


def channels(rng, base):
    """(N, C, ...) with more than one value per channel, and (C,) weight and bias."""
    if len(base) < 2 or 0 in base or math.prod(base) // base[1] < 2:
        return None
    return [base, base[1:2], base[1:2]], None, {}


def plain_channels(rng, base):
    """(N, C, ...) with more than one value per channel, without weight and bias."""
    found = channels(rng, base)
    return None if found is None else ([base], None, {})


def target(rng, base):
    return [base, base], None, {}


def cross_entropy(rng, base):
    if len(base) != 2 or base[1] == 0:
        return None
    t = torch.tensor([rng.randrange(base[1]) for _ in range(base[0])], dtype=torch.long)
    return [base], lambda: [t], {}


def sdpa(rng, base):
    if len(base) != 2 or base[0] == 0:
        return None
    return [base, base, base], None, {"heads": rng.random() < 0.5}


def clamp(rng, base):
    lo = rng.choice([-1.0, 0.0, 0.5])
    return [base], None, {"min": lo, "max": lo + rng.choice([0.0, 1.0, 2.0])}


def dyn_narrow_index(rng, base):
    if not base or base[0] == 0:
        return None
    return [base], lambda: [torch.tensor(rng.randrange(base[0]))], {}


def layer_target(rng, base):
    return ([base, base], None, {}) if len(base) == 2 and base[-1] else None


def numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def recurrent(gates: int, states: int):
    """A sequence (T, B, In) and one layer of hidden size 2: initial states (1, B, 2), input and
    hidden weights (gates * 2, In) and (gates * 2, 2), biases (gates * 2,)."""

    def shapes(rng, base):
        if len(base) != 3 or 0 in base:
            return None
        b, g = base[1], gates * 2
        return [base] + [(1, b, 2)] * states + [(g, base[2]), (g, 2), (g,), (g,)], None, {}

    return shapes
