"""Seeded complex test inputs shared by the complex-number tests."""

import torch


def complex_randn(*shape, seed=0, dtype=torch.float64):
    """Real and imaginary parts standard normal, from a generator seeded with `seed`."""
    g = torch.Generator().manual_seed(seed)
    return torch.complex(
        torch.randn(*shape, generator=g, dtype=dtype), torch.randn(*shape, generator=g, dtype=dtype)
    )
