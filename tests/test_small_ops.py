"""Small torch functions that were refused under vmap (or under jit: device strings in the
creation functions, `Tensor.char`, `torch.is_signed`): values against eager torch, per-example
results against a loop."""

import pytest
import torch

import thunderx as tx

_F = torch.tensor([[-1.5, -0.0, 0.0], [2.0, float("inf"), -float("inf")]])
_I = torch.tensor([[1, 5, 3], [7, 2, 9]])

CASES = {
    "signbit": (torch.signbit, _F),
    "signbit_int": (torch.signbit, _I - 4),
    "signbit_uint8": (torch.signbit, _I.to(torch.uint8)),
    "isreal": (torch.isreal, _F),
    "isreal_complex": (torch.isreal, torch.complex(_F, _F.flip(0) * (_F.flip(0) > 0))),
    "heaviside": (lambda x: torch.heaviside(x, torch.tensor(0.5)), _F),
    "heaviside_int": (lambda x: torch.heaviside(x - 3, x * 10), _I),
    "isin": (lambda x: torch.isin(x, torch.tensor([3, 7, 8])), _I),
    "isin_invert": (lambda x: torch.isin(x, torch.tensor([3, 7, 8]), invert=True), _I),
    "isin_scalar": (lambda x: torch.isin(x, 7), _I),
    "unravel_index": (lambda x: torch.stack(torch.unravel_index(x, (2, 2, 3))), _I),
    "gcd": (lambda x: torch.gcd(x, x.flip(-1) + 6), _I),
    "lcm": (lambda x: x.lcm(x.flip(-1) + 1), _I),
    "igamma": (lambda x: torch.igamma(x.abs() + 0.5, x.flip(-1).abs() + 1), _F.nan_to_num(3.0)),
    "igammac": (lambda x: (x.abs() + 0.5).igammac(x.flip(-1).abs() + 1), _F.nan_to_num(3.0)),
    "char": (lambda x: (x * 40).char(), _I),
    "is_signed": (lambda x: x * int(x.is_signed()) + int(torch.is_signed(x.byte())), _I),
    "zeros_like_device_string": (lambda x: torch.zeros_like(x, device="cpu") + x, _F),
    "new_full_device_string": (lambda x: x.new_full((2, 3), 2.0, device="cpu") * x, _F),
    "full_like_device_index": (lambda x: torch.full_like(x, 3, device=torch.device("cpu", 0)), _I),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_small_ops_match_torch_under_jit_and_vmap(name):
    f, x = CASES[name]
    want = f(x)
    got = tx.jit(f)(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True)
    xs = torch.stack([x, x.flip(0)])
    loop = torch.stack([f(v) for v in xs])
    torch.testing.assert_close(tx.vmap(f)(xs), loop, equal_nan=True)
