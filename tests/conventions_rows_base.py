"""Helpers shared by the conventions-table behaviour checks (tests/conventions_rows*.py)."""

import torch

F64 = torch.float64


def T(*v):
    return torch.tensor(v, dtype=F64)


def S(v):
    return torch.tensor(v, dtype=F64)


def _close(a, b):
    torch.testing.assert_close(a, b, equal_nan=True, rtol=1e-9, atol=1e-12)
