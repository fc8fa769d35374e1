"""Misuse of a transform's arguments raises an error that is also the exception class torch.func
raises for the same misuse (RuntimeError), so code written against torch.func keeps catching it.
Each case is checked against torch.func itself: both must refuse it with a RuntimeError."""

from __future__ import annotations

import pytest
import torch
import torch.func

import thunderx as tx
from thunderx.errors import ArgumentTypeError, ArgumentValueError

X = torch.randn(3, dtype=torch.float64)


def _sum_sin(x, *rest):
    return x.sin().sum()


ARGNUM_CASES = [(), 2, -2, (0, 0), 0.0, (0, 0.0)]


@pytest.mark.parametrize("argnums", ARGNUM_CASES, ids=repr)
@pytest.mark.parametrize("api", ["grad", "jacrev", "jacfwd"])
def test_bad_argnums_raise_runtime_error_like_torch_func(api, argnums):
    fun = _sum_sin if api == "grad" else torch.sin
    with pytest.raises(RuntimeError):
        getattr(torch.func, api)(fun, argnums=argnums)(X)
    with pytest.raises(RuntimeError) as info:
        getattr(tx, api)(fun, argnums=argnums)(X)
    # still thunderx's own argument errors, naming the API and the argument
    assert isinstance(info.value, (ArgumentTypeError, ArgumentValueError))
    assert f"{api}: argnums" in str(info.value)


def test_negative_and_tuple_argnums_still_work():
    y = torch.randn(3, dtype=torch.float64)
    f = lambda a, b: (a * b.exp()).sum()  # noqa: E731
    for argnums in (-1, -2, (0, -1)):
        got = tx.grad(f, argnums=argnums)(X, y)
        want = torch.func.grad(f, argnums=argnums)(X, y)
        torch.testing.assert_close(got, want)


JVP_CASES = [
    ((X,), X),  # tangents not a tuple
    ((X,), (X, X)),  # length mismatch
    (((X, X), X), (X, X)),  # nested structure mismatch
    (X, (X,)),  # primals not a tuple
]


@pytest.mark.parametrize("primals,tangents", JVP_CASES)
def test_jvp_structure_errors_raise_runtime_error_like_torch_func(primals, tangents):
    f = lambda *a: a[0]  # noqa: E731
    with pytest.raises(RuntimeError):
        torch.func.jvp(f, primals, tangents)
    with pytest.raises(RuntimeError, match="jvp: Expected"):
        tx.jvp(f, primals, tangents)


def test_inplace_write_into_captured_tensor_is_refused_like_torch_func():
    x = torch.tensor([1.0, 2.0, 3.0])
    captured = torch.randn(3)

    def foo(x):
        captured.copy_(x)
        return (x * captured).sum()

    before = captured.clone()
    with pytest.raises(RuntimeError, match="mutate a captured Tensor"):
        torch.func.grad(foo)(x)
    captured.copy_(before)
    with pytest.raises(RuntimeError, match="mutate a captured Tensor"):
        tx.grad(foo)(x)
    torch.testing.assert_close(captured, before)  # the refused write left it unchanged


@pytest.mark.parametrize("make", ["new_zeros", "new_empty", "new_ones"])
def test_tensor_created_from_batched_value_takes_inplace_writes(make):
    # vmap(grad(...)): `x` is batched but not differentiated; the new tensor lives at vmap's
    # level (one per example), so grad's traced `y` can be copied into it, as in torch.func
    def foo(y, x):
        result = getattr(x, make)((5,))
        result.copy_(y)
        return (result**2 * x.exp()).sum()

    x = torch.randn(3, dtype=torch.float64)
    y = torch.randn(3, 5, dtype=torch.float64)
    got = tx.vmap(tx.grad(foo))(y, x)
    want = torch.func.vmap(torch.func.grad(foo))(y, x)
    torch.testing.assert_close(got, want)


def test_zeros_like_of_batched_value_with_indexed_write_matches_torch_func():
    def bar(x):
        r = torch.zeros_like(x)
        r[0] = x[1] * 3
        return r

    x = torch.randn(4, 3, dtype=torch.float64)
    torch.testing.assert_close(tx.vmap(bar)(x), torch.func.vmap(bar)(x))


def _functional_calls():
    fa = torch.autograd.functional
    s = lambda x: x.sin().sum()  # noqa: E731
    return {
        "jacobian": lambda x: fa.jacobian(s, x),
        "jacobian_fwd": lambda x: fa.jacobian(s, x, strategy="forward-mode", vectorize=True),
        "vjp": lambda x: fa.vjp(s, x),
        "jvp": lambda x: fa.jvp(s, (x,), (torch.ones_like(x),)),
        "hessian": lambda x: fa.hessian(s, x),
    }


@pytest.mark.parametrize("name", list(_functional_calls()))
@pytest.mark.parametrize("transform", ["vmap", "grad"])
def test_autograd_functional_on_traced_values_is_refused_like_torch_func(name, transform):
    f = _functional_calls()[name]
    g = (lambda x: f(x)[0].sum()) if name in ("vjp", "jvp") else (lambda x: f(x).sum())
    x = torch.randn(5, 3) if transform == "vmap" else torch.randn([])
    if not (transform == "grad" and name == "jacobian_fwd"):  # this torch.func lets it run
        with pytest.raises(RuntimeError):
            getattr(torch.func, transform)(g)(x)
    with pytest.raises(RuntimeError, match="torch.autograd.functional"):
        getattr(tx, transform)(g)(x)
    # torch's own function is back in place after the transform, and still works
    want = torch.diag(torch.ones(3).cos())
    torch.testing.assert_close(torch.autograd.functional.jacobian(torch.sin, torch.ones(3)), want)


def test_autograd_functional_on_concrete_values_inside_a_transform_is_torch_own():
    # a closed-over concrete tensor carries no tracer: torch's function runs on it unchanged
    # (torch.func refuses any torch.autograd.functional call inside; the oracle is a loop)
    w = torch.randn(3, dtype=torch.float64)

    def f(x):
        jw = torch.autograd.functional.jacobian(torch.sin, w)
        return (jw @ x).sum()

    x = torch.randn(4, 3, dtype=torch.float64)
    torch.testing.assert_close(tx.vmap(f)(x), torch.stack([f(xi) for xi in x]))


def test_vjp_cotangent_structure_mismatch_raises_runtime_error_like_torch_func():
    def f(x):
        return x, (x, x)

    x, v1, v2, v3 = (torch.randn([], dtype=torch.float64) for _ in range(4))
    bad = ((v1, (v2, v3)),)
    with pytest.raises(RuntimeError):
        torch.func.vjp(f, x)[1](bad)
    with pytest.raises(RuntimeError, match="Expected pytree structure"):
        tx.vjp(f, x)[1](bad)
    (got,) = tx.vjp(f, x)[1]((v1, (v2, v3)))
    torch.testing.assert_close(got, v1 + v2 + v3)
