"""Bitwise operations on integer tensors under the transforms, against torch eager (and a loop
for vmap). `&`, `|`, `^` and `~` on integers ran as the logical ops (a bool result: 3 & 5 gave
True), `<<` / `>>` and the bitwise functions were refused."""

import pytest
import torch
import torch.func as tf

import thunderx as tx

INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)

BINARY = {
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "bitwise_and": torch.bitwise_and,
    "bitwise_or_method": lambda a, b: a.bitwise_or(b),
    "bitwise_xor": torch.bitwise_xor,
    "left_shift": lambda a, b: a << (b & 7),
    "right_shift": lambda a, b: a >> (b & 7),
    "bitwise_left_shift": lambda a, b: torch.bitwise_left_shift(a, b & 3),
    "bitwise_right_shift": lambda a, b: torch.bitwise_right_shift(a, b & 3),
    "not": lambda a, b: ~a,
    "bitwise_not": lambda a, b: torch.bitwise_not(b),
    "scalar_right": lambda a, b: (a & 6) | 9,
    "scalar_left": lambda a, b: (6 & a) ^ (1 << (b & 3)),
    "mixed_widths": lambda a, b: a.to(torch.int16) & b.to(torch.int64),
    "with_bool": lambda a, b: a & (b > 0),
    "bools": lambda a, b: ((a > 0) & (b < 3)) ^ ~(a == b),
}


def _ints(dtype, seed, shape=(5, 4)):
    g = torch.Generator().manual_seed(seed)
    lo = 0 if dtype is torch.uint8 else -50
    return torch.randint(lo, 100, shape, generator=g, dtype=torch.int64).to(dtype)


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_bitwise_ops_match_torch(name, dtype):
    f, a, b = BINARY[name], _ints(dtype, 0), _ints(dtype, 1)
    want = f(a, b)
    for got in (tx.jit(f)(a, b), tx.vmap(f)(a, b)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(
        tx.vmap(f, in_axes=(0, None))(a, b[0]), torch.stack([f(r, b[0]) for r in a])
    )


IN_PLACE = ("__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "bitwise_and_")


@pytest.mark.parametrize("method", IN_PLACE)
def test_in_place_bitwise_ops_write_through_views_under_jit(method):
    def f(a, b):
        c = a.clone()
        getattr(c[:2], method)(b[:2] & 3)
        return c

    a, b = _ints(torch.int64, 2), _ints(torch.int64, 3)
    torch.testing.assert_close(tx.jit(f)(a, b), f(a, b), rtol=0, atol=0)


def test_bit_masks_inside_differentiated_functions():
    def f(x, flags):
        keep = (flags & 1).bool() | ((flags >> 2) & 1).bool()
        return torch.where(keep, x.sin(), x * x).sum()

    x, flags = torch.randn(5, 4, dtype=torch.float64), _ints(torch.int64, 4)
    want = tf.grad(f)(x, flags)
    torch.testing.assert_close(tx.grad(f)(x, flags), want)
    torch.testing.assert_close(tx.jit(tx.grad(f))(x, flags), want)
    torch.testing.assert_close(tx.vmap(tx.grad(f))(x[None], flags[None])[0], want)


@pytest.mark.parametrize("f", [lambda a: a & a, lambda a: ~a, lambda a: a << 1, torch.bitwise_xor])
def test_bitwise_ops_on_floats_are_refused_as_torch_refuses_them(f):
    x = torch.randn(3)
    g = (lambda a: f(a, a)) if f is torch.bitwise_xor else f
    with pytest.raises((RuntimeError, TypeError)):
        g(x)
    with pytest.raises((RuntimeError, TypeError)):
        tx.jit(g)(x)
