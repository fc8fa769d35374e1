"""Hypothesis strategies for tensors, shapes, dtypes and pytrees.

>>> from hypothesis import given
>>> from thunderx.testing import strategies as tst
>>> @given(tst.tensors(shape=tst.shapes(max_rank=2), domain="positive"))
... def test_log_grad(x): check_grads(torch.log, (x,))
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

FLOAT_DTYPES = (torch.float32, torch.float64)
DOMAINS = ("real", "positive", "unit", "gt1", "nonzero", "small", "probability")


def shapes(min_rank: int = 0, max_rank: int = 3, min_side: int = 1, max_side: int = 4):
    """Tensor shapes with rank and side-length bounds."""
    return st.lists(st.integers(min_side, max_side), min_size=min_rank, max_size=max_rank).map(
        tuple
    )


@st.composite
def broadcastable_shapes(draw, n: int = 2, max_rank: int = 3, max_side: int = 4):
    """`n` shapes that broadcast together (numpy rules): some dims dropped or set to 1."""
    base = draw(shapes(0, max_rank, 1, max_side))
    out = []
    for _ in range(n):
        k = draw(st.integers(0, len(base)))
        tail = list(base[len(base) - k :])
        for i in range(len(tail)):
            if draw(st.booleans()) and draw(st.booleans()):
                tail[i] = 1
        out.append(tuple(tail))
    return out


def dtypes(floating_only: bool = True):
    choices = list(FLOAT_DTYPES) + ([] if floating_only else [torch.int64, torch.bool])
    return st.sampled_from(choices)


def values(shape, dtype, domain: str, gen: torch.Generator) -> torch.Tensor:
    """Random values in a domain: real (normal), positive (0.1..2.1), unit (-0.9..0.9), gt1
    (1.1..3.1), nonzero (|x| in 0.5..1.5), small (-0.5..0.5), probability (0.05..0.85)."""
    if dtype is torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-5, 6, shape, generator=gen, dtype=dtype)
    u = torch.rand(shape, generator=gen, dtype=torch.float64)
    if domain == "real":
        v = torch.randn(shape, generator=gen, dtype=torch.float64)
    elif domain == "positive":
        v = 0.1 + 2.0 * u
    elif domain == "unit":
        v = 1.8 * u - 0.9
    elif domain == "gt1":
        v = 1.1 + 2.0 * u
    elif domain == "nonzero":
        sign = torch.where(torch.rand(shape, generator=gen) > 0.5, 1.0, -1.0).to(torch.float64)
        v = sign * (0.5 + u)
    elif domain == "small":
        v = u - 0.5
    elif domain == "probability":
        v = 0.05 + 0.8 * u  # below 0.85: a test may scale it by 1.1 and stay below 1
    else:
        raise ValueError(f"unknown domain {domain!r}; one of {DOMAINS}")
    return v.to(dtype)


@st.composite
def tensors(draw, shape=None, dtype=torch.float64, domain: str = "real"):
    """A tensor of `shape` (a tuple or a strategy) and `dtype` (or a strategy) in a domain."""
    if shape is None:
        shape = shapes()
    if not isinstance(shape, tuple):
        shape = draw(shape)
    if not isinstance(dtype, torch.dtype):
        dtype = draw(dtype)
    seed = draw(st.integers(0, 2**31 - 1))
    return values(shape, dtype, domain, torch.Generator().manual_seed(seed))


def pytrees(leaf=None, max_leaves: int = 4):
    """Nested dicts, tuples and lists of tensors."""
    leaf = leaf if leaf is not None else tensors(shapes(0, 2, 1, 3))
    return st.recursive(
        leaf,
        lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=3),
            st.tuples(children, children),
            st.dictionaries(st.sampled_from("abcd"), children, min_size=1, max_size=3),
        ),
        max_leaves=max_leaves,
    )
