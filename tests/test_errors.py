"""Every public error path: a clear message naming the problem and the user's line, and a clean
trace context afterwards (the next trace works)."""

import numpy as np
import pytest
import torch

import thunderx as tx
from thunderx.core import EvalTrace, current_trace
from thunderx.errors import ConcretizationError, UnexpectedTracerError, UnsupportedOperationError
from thunderx.lang.inplace import MutationError

X = torch.ones(3)
_leak = []


def _store(x):
    _leak.append(x)
    return x


def _use_leak(y):
    return y + _leak[0]


CASES = [
    (
        "unsupported torch function",
        lambda: tx.grad(lambda x: torch.special.airy_ai(x).sum())(X),
        UnsupportedOperationError,
        r"torch\.special\.airy_ai.*test_errors\.py:\d+",
    ),
    (
        "unsupported under vmap",
        lambda: tx.vmap(lambda x: torch.histc(x, bins=3))(X),
        UnsupportedOperationError,
        r"histc.*vmap",
    ),
    (
        "bool() of a tracer",
        lambda: tx.make_jaxpr(lambda x: x if x.sum() > 0 else -x)(X),
        ConcretizationError,
        r"bool\(\).*test_errors\.py:\d+.*torch\.where",
    ),
    (
        "item() of a tracer",
        lambda: tx.vmap(tx.grad(lambda x: x.sum() * x.sum().item()))(X[None]),
        ConcretizationError,
        r"\.item\(\)",
    ),
    (
        "int() of a tracer",
        lambda: tx.jit(lambda x: torch.ones(int(x[0])))(X),
        ConcretizationError,
        r"int\(\)",
    ),
    (
        "float() of a tracer",
        lambda: tx.vmap(lambda x: float(x))(X),
        ConcretizationError,
        r"float\(\)",
    ),
    (
        "numpy() of a tracer",
        lambda: tx.jit(lambda x: np.asarray(x.numpy()))(X),
        ConcretizationError,
        r"numpy",
    ),
    ("data-dependent shape", lambda: tx.jit(lambda x: x[x > 0])(X), ConcretizationError, r"mask"),
    (
        "nonzero",
        lambda: tx.jit(lambda x: torch.nonzero(x))(X),
        ConcretizationError,
        r"data-dependent",
    ),
    (
        "leaked tracer",
        lambda: (tx.jit(_store)(X), tx.jit(_use_leak)(X)),
        UnexpectedTracerError,
        r"test_errors\.py:\d+.*leaked",
    ),
    ("grad of non-scalar", lambda: tx.grad(torch.sin)(X), TypeError, r"scalar.*jacrev"),
    (
        "grad of integer input",
        lambda: tx.grad(lambda i: i.float().sum())(torch.arange(3)),
        TypeError,
        r"floating",
    ),
    ("bad argnums", lambda: tx.grad(lambda x: x.sum(), argnums=3)(X), ValueError, "out of range"),
    (
        "duplicate argnums",
        lambda: tx.grad(lambda x, y: x.sum(), argnums=(1, 1))(X, X),
        ValueError,
        "duplicates",
    ),
    ("has_aux not a pair", lambda: tx.grad(lambda x: x.sum(), has_aux=True)(X), TypeError, "pair"),
    (
        "vjp wrong cotangent",
        lambda: tx.vjp(torch.sin, X)[1](torch.ones(2)),
        ValueError,
        "cotangent",
    ),
    (
        "vmap size mismatch",
        lambda: tx.vmap(torch.add)(X, torch.ones(2)),
        ValueError,
        r"leaf 0: 3, leaf 1: 2",
    ),
    (
        "vmap axis out of range",
        lambda: tx.vmap(torch.sin, in_axes=1)(X),
        ValueError,
        "out of range",
    ),
    ("vmap tree mismatch", lambda: tx.vmap(torch.add, in_axes=(0,))(X, X), ValueError, "in_axes"),
    ("vmap no batched input", lambda: tx.vmap(torch.sin, in_axes=None)(X), ValueError, "axis_size"),
    (
        "vmap randomness",
        lambda: tx.vmap(lambda x: x + torch.randn(()))(X),
        ValueError,
        "randomness",
    ),
    ("mutating an input", lambda: tx.grad(lambda x: x.add_(1).sum())(X), MutationError, "input"),
    (
        "jit wrong argument type",
        lambda: tx.jit(lambda x: x)("text"),
        TypeError,
        r"jit.*str.*static",
    ),
    ("grad wrong argument type", lambda: tx.grad(lambda x: x)(object()), TypeError, "object"),
    ("make_jaxpr wrong type", lambda: tx.make_jaxpr(lambda x: x)([object()]), TypeError, "object"),
    (
        "unhashable static arg",
        lambda: tx.jit(lambda x, s: x, static_argnums=1)(X, [1]),
        TypeError,
        "hashable",
    ),
    (
        "custom_jvp without rule",
        lambda: tx.grad(tx.custom_jvp(lambda x: x.sum()))(X),
        AttributeError,
        "defjvp",
    ),
]


@pytest.mark.parametrize("name,fn,exc,pattern", CASES, ids=[c[0] for c in CASES])
def test_error_is_clear_and_context_is_clean(name, fn, exc, pattern):
    with pytest.raises(exc, match=pattern):
        fn()
    assert type(current_trace()) is EvalTrace
    assert current_trace().parent is None
    # the next trace works
    torch.testing.assert_close(tx.grad(lambda x: (x * x).sum())(X), 2 * X)
    assert "mul" in str(tx.make_jaxpr(lambda x: x * 2)(X))


def test_functionalized_inplace_matches_eager():
    def f(x):
        y = x * 1.0
        y.add_(1.0)
        y[0] = 5.0
        y[1:] *= 2
        out = torch.zeros_like(y)
        out += y
        return (out * x).sum()

    x = torch.randn(3, dtype=torch.float64)
    assert tx.jit(f)(x).item() == pytest.approx(f(x).item())
    xr = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(f(xr), xr)
    torch.testing.assert_close(tx.grad(f)(x), want)
    torch.testing.assert_close(tx.vmap(tx.grad(f))(x.expand(2, 3)), want.expand(2, 3))
