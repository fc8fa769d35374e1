"""torch.special functions without a decomposition (Bessel, Airy, orthogonal polynomials, zeta,
incomplete gamma) under vmap, nested vmap and jit(vmap) against a loop of eager calls. The
Bessel functions' derivatives (torch has none: torch.func returns a gradient of 0) against
float64 finite differences; the others are refused by name under differentiation."""

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx.lang.special_kernels import BINARY, DERIVATIVES, UNARY


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


@pytest.mark.parametrize("fn", [torch.special.airy_ai, torch.special.zeta], ids=str)
def test_differentiating_a_kernel_without_a_known_derivative_is_refused_by_name(fn):
    x = _x(4)

    def f(v):
        return (fn(v) if fn is torch.special.airy_ai else fn(v + 1, 2.0)).sum()

    name = fn.__name__.removeprefix("special_")
    with pytest.raises(tx.errors.UnsupportedOperationError, match=f"torch.special.{name}"):
        tx.grad(f)(x)


_SINGULAR_AT_ZERO = {"bessel_y0", "bessel_y1", "modified_bessel_k0", "modified_bessel_k1"}


@pytest.mark.parametrize("fn", sorted(DERIVATIVES, key=str), ids=lambda f: f.__name__)
def test_bessel_derivatives_match_finite_differences(fn):
    # torch has no derivative for these (torch.func's gradient is 0); thunderx's rules are the
    # Bessel identities, checked in float64 to first and second order, at 0 where defined
    name = fn.__name__.removeprefix("special_")
    x = torch.tensor([0.0, 0.004, 0.3, 1.7, 4.2], dtype=torch.float64)
    if name.removeprefix("scaled_") in _SINGULAR_AT_ZERO:
        x = x[2:]  # finite differences are too coarse next to their pole at 0

    def f(v):
        return fn(v).sum()

    eps = 1e-6
    first = (fn(x + eps) - fn(x - eps)) / (2 * eps)
    h = 1e-4
    second = (fn(x + h) - 2 * fn(x) + fn(x - h)) / h**2
    g = tx.grad(f)(x)
    torch.testing.assert_close(g, first, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(tx.jit(tx.grad(f))(x), g)
    torch.testing.assert_close(tx.vmap(tx.grad(f))(x[:, None])[:, 0], g)
    torch.testing.assert_close(tx.hessian(f)(x).diagonal(), second, rtol=1e-4, atol=1e-4)
    assert torch.count_nonzero(tf.grad(f)(x)) == 0  # torch.func's answer
