"""torch.autograd.grad called inside vmap, against torch.func running the same code (and
torch.autograd in a Python loop where torch.func refuses)."""

import pytest
import torch
import torch.func as tf

import thunderx as tx

F64 = torch.float64


def test_batched_cotangents_of_a_graph_built_outside():
    # vmap over the cotangent of a torch autograd graph: a Jacobian by rows
    x = torch.randn(4, dtype=F64, requires_grad=True)
    w = torch.randn(3, 4, dtype=F64)
    y = torch.tanh(w @ x)

    def vjp(v):
        return torch.autograd.grad(y, x, v, retain_graph=True)[0]

    eye = torch.eye(3, dtype=F64)
    torch.testing.assert_close(tx.vmap(vjp)(eye), tf.vmap(vjp)(eye))
    jac = torch.autograd.functional.jacobian(lambda x: torch.tanh(w @ x), x.detach())
    torch.testing.assert_close(tx.vmap(vjp)(eye), jac)


def test_grad_outputs_batched_along_another_dim_and_nested():
    x = torch.randn(3, 2, dtype=F64, requires_grad=True)
    y = x.exp()
    v = torch.randn(3, 5, 2, dtype=F64)

    def vjp(v):
        return torch.autograd.grad(y, x, v, retain_graph=True)[0]

    torch.testing.assert_close(tx.vmap(vjp, in_dims=1)(v), tf.vmap(vjp, in_dims=1)(v))
    vv = torch.randn(2, 4, 3, 2, dtype=F64)
    torch.testing.assert_close(tx.vmap(tx.vmap(vjp))(vv), tf.vmap(tf.vmap(vjp))(vv))


def test_second_order_with_create_graph():
    x = torch.randn(3, dtype=F64, requires_grad=True)
    (g,) = torch.autograd.grad((x**3).sum(), x, create_graph=True)

    def hvp(v):  # rows of the Hessian diag(6x)
        return torch.autograd.grad(g, x, v, retain_graph=True)[0]

    eye = torch.eye(3, dtype=F64)
    torch.testing.assert_close(tx.vmap(hvp)(eye), tf.vmap(hvp)(eye))


def test_per_example_grads_of_a_tensor_that_required_grad_before_vmap():
    xs = torch.randn(4, 3, dtype=F64, requires_grad=True)

    def f(x):
        return torch.autograd.grad((x.sin() * x).sum(), x)[0]

    want = torch.stack([torch.autograd.grad((r.sin() * r).sum(), r)[0] for r in xs])
    torch.testing.assert_close(tx.vmap(f)(xs), want)


def test_requires_grad_inside_a_transform_is_refused_as_torch_func_does():
    def f(x):
        x.requires_grad_()
        return x.sin().sum()

    x = torch.randn(3)
    for transform in (tx.vmap, tx.grad):
        with pytest.raises(RuntimeError, match=r"Tensor.requires_grad_\(\)"):
            transform(f)(x)
    # under jit it marks the traced value for torch.autograd.grad (tests/test_autograd_staged.py)
    torch.testing.assert_close(tx.jit(f)(x), x.sin().sum())
    with pytest.raises(RuntimeError, match=r"Tensor.requires_grad_\(\)"):
        tf.vmap(f)(x)


def test_where_thunderx_has_no_torch_graph_it_says_so():
    x = torch.randn(3, dtype=F64, requires_grad=True)
    y = x.exp()

    def vjp(v):
        return torch.autograd.grad(y, x, v, retain_graph=True)[0]

    with pytest.raises(NotImplementedError, match="jit"):
        tx.jit(vjp)(torch.ones(3, dtype=F64))
    assert torch.autograd.grad.__module__ == "torch.autograd"  # torch's own again
