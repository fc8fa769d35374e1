"""Integer, bool and half-precision tensors through jit and vmap: every op's result dtype and
value against torch eager, over nine dtypes (thunderx had nansum of integers in float32, any /
all of uint8 as bool, the square of a bool as bool and uint8 // -7 wrong)."""

import pytest
import torch

import thunderx as tx

DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
)


def _values(dt, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dt is torch.bool:
        return torch.randint(0, 2, (4, 3), generator=g).bool()
    if dt.is_floating_point:
        return (torch.randn(4, 3, generator=g) * 50).to(dt)
    lo, hi = (0, 255) if dt is torch.uint8 else (-120, 120)
    return torch.randint(lo, hi, (4, 3), generator=g).to(dt)


OPS = {
    "neg": lambda a: -a,
    "abs": torch.abs,
    "sign": torch.sign,
    "square": torch.square,
    "sum": lambda a: a.sum(0),
    "sum_all": lambda a: a.sum(),
    "nansum": lambda a: a.nansum(0),
    "prod": lambda a: a.prod(1),
    "cumsum": lambda a: a.cumsum(0),
    "cumprod": lambda a: a.cumprod(1),
    "amax": lambda a: a.amax(0),
    "argmax": lambda a: a.argmax(1),
    "argmin": lambda a: a.argmin(0),
    "max_dim": lambda a: a.max(0),
    "sort": lambda a: a.sort(dim=1, stable=True),
    "topk": lambda a: a.topk(2, 1).values,
    "floordiv": lambda a: a // 7,
    "floordiv_negative": lambda a: a // -7,
    "div_floor": lambda a: torch.div(a, 7, rounding_mode="floor"),
    "div_trunc": lambda a: torch.div(a, -7, rounding_mode="trunc"),
    "true_div": lambda a: a / 7,
    "remainder": lambda a: a % 7,
    "remainder_negative": lambda a: a % -7,
    "fmod": lambda a: torch.fmod(a, -7),
    "pow": lambda a: a**2,
    "mul_overflow": lambda a: a * a * a,
    "add_scalar": lambda a: a + 300,
    "compare_negative": lambda a: a > -1,
    "clamp": lambda a: a.clamp(-5, 5),
    "clamp_float": lambda a: a.clamp(-5.5, 5.5),
    "where": lambda a: torch.where(a > 0, a, 0),
    "count_nonzero": lambda a: torch.count_nonzero(a, 0),
    "any": lambda a: a.any(0),
    "all": lambda a: a.all(1),
    "minimum": lambda a: torch.minimum(a, a.flip(0)),
    "cummax": lambda a: a.cummax(0),
    "logical_not": torch.logical_not,
    "to_int8": lambda a: a.to(torch.int8),
    "median": lambda a: a.median(0),
    "kthvalue": lambda a: a.kthvalue(2, 0).values,
    "mode": lambda a: a.mode(0).values,
    "index_add": lambda a: a.index_add(0, torch.tensor([0, 0, 1, 3]), a),
    "diff": lambda a: torch.diff(a, dim=0),
    "trace": lambda a: a[:3].trace(),
    "matmul": lambda a: a @ a.T,
    "round": torch.round,
    "floor": torch.floor,
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_result_dtype_and_value_match_torch_for_every_dtype(name):
    f = OPS[name]
    for dt in DTYPES:
        a = _values(dt)
        try:
            want = f(a)
        except (RuntimeError, TypeError, NotImplementedError):
            continue  # torch has no kernel for this dtype (thunderx may be more permissive)
        per_example = tx.tree.map(lambda v: v[0], tx.vmap(f)(a[None]))
        for got in (tx.jit(f)(a), per_example):
            for g, w in zip(tx.tree.flatten(got)[0], tx.tree.flatten(want)[0], strict=True):
                assert g.dtype == w.dtype, (dt, g.dtype, w.dtype)
                if w.dtype.is_floating_point:
                    torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-2, equal_nan=True)
                else:
                    assert torch.equal(g, w), (dt, g, w)
