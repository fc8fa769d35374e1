"""torch.special functions without a decomposition (Bessel, Airy, orthogonal polynomials, zeta,
incomplete gamma) under vmap, nested vmap and jit(vmap) against a loop of eager calls; under
differentiation they are refused by name (torch has no derivative for them: torch.func returns a
gradient of 0)."""

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx.lang.special_kernels import BINARY, UNARY


def _x(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g, dtype=torch.float64) * 3 + 0.1


def _second(fn, x):
    # polynomials take a degree; zeta and the incomplete gammas a second real operand
    return torch.full_like(x, 3.0) if "polynomial" in fn.__name__ else x.flip(-1) + 1


@pytest.mark.parametrize("fn", UNARY, ids=lambda f: f.__name__)
def test_unary_special_functions_under_vmap_and_jit(fn):
    xs = _x(3, 4)
    want = torch.stack([fn(x) for x in xs])
    torch.testing.assert_close(tx.vmap(fn)(xs), want)
    torch.testing.assert_close(tx.jit(tx.vmap(fn))(xs), want)
    torch.testing.assert_close(tx.vmap(fn, in_axes=1, out_axes=1)(xs.T.contiguous().T), want)
    nested = tx.vmap(tx.vmap(fn))(xs.reshape(3, 2, 2))
    torch.testing.assert_close(nested, want.reshape(3, 2, 2))
    torch.testing.assert_close(tx.jit(fn)(xs), fn(xs))


@pytest.mark.parametrize("fn", BINARY, ids=lambda f: f.__name__)
def test_binary_special_functions_with_batched_and_shared_operands(fn):
    xs = _x(3, 4) + (1.0 if fn is torch.special.zeta else 0.0)  # zeta(x, q) needs x > 1
    ys = torch.stack([_second(fn, x) for x in xs])
    torch.testing.assert_close(tx.vmap(fn)(xs, ys), torch.stack([fn(x, y) for x, y in zip(xs, ys)]))
    y0 = ys[0]
    got = tx.vmap(fn, in_axes=(0, None))(xs, y0)
    torch.testing.assert_close(got, torch.stack([fn(x, y0) for x in xs]))
    # a shared operand of higher rank than the batched one's examples
    wide = torch.stack([y0, y0 * 0 + 2.0])
    got = tx.vmap(fn, in_axes=(0, None))(xs, wide)
    torch.testing.assert_close(got, torch.stack([fn(x, wide) for x in xs]))


@pytest.mark.parametrize("fn", [torch.special.bessel_j0, torch.special.zeta], ids=str)
def test_differentiating_a_special_kernel_is_refused_by_name(fn):
    x = _x(4)

    def f(v):
        return (fn(v) if fn is torch.special.bessel_j0 else fn(v + 1, 2.0)).sum()

    name = fn.__name__.removeprefix("special_")
    with pytest.raises(tx.errors.UnsupportedOperationError, match=f"torch.special.{name}"):
        tx.grad(f)(x)
    if fn is torch.special.bessel_j0:
        # torch.func answers 0, which finite differences contradict
        assert torch.count_nonzero(tf.grad(f)(x)) == 0
