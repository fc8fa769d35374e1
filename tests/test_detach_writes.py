"""A write through `.detach()` or `.data` changes the values but not the derivative, as torch's
autograd (which does not see the write) and torch.func do; checked against torch.func."""

import pytest
import torch
import torch.func as tf

import thunderx as tx

F64 = torch.float64


def close(a, b, tol=1e-10):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def detach_add(x):
    y = x * 3
    y.detach().add_(1)
    return (y * x).sum()


def data_setitem(x):
    y = x * 3
    y.data[0] = 5.0
    return (y * y).sum()


def detach_view_row(x):
    y = torch.sin(x).reshape(2, 3) * 2
    y.detach()[1].mul_(4.0)
    return (y**2).sum()


CASES = {"detach_add": detach_add, "data_setitem": data_setitem, "detach_row": detach_view_row}


@pytest.mark.parametrize("name", sorted(CASES))
def test_write_through_detach_keeps_the_derivative(name):
    fn = CASES[name]
    x = torch.linspace(-0.7, 0.9, 6, dtype=F64)
    t = torch.linspace(0.3, 1.1, 6, dtype=F64)
    close(tx.grad(fn)(x), tf.grad(fn)(x))
    close(tx.jit(tx.grad(fn))(x), tf.grad(fn)(x))
    close(tx.jvp(fn, (x,), (t,))[1], tf.jvp(fn, (x,), (t,))[1])
    close(tx.jit(fn)(x), fn(x))
    xs = torch.stack([x, 2 * x])
    close(tx.vmap(tx.grad(fn))(xs), tf.vmap(tf.grad(fn))(xs))


def test_write_into_an_op_that_saved_its_output_uses_the_computation_as_written():
    # torch's exp backward multiplies by its saved output, which the `.data` write changed (so
    # torch.func gives e^x + 1); thunderx differentiates the computation as written: e^x
    def fn(x):
        y = x.exp()
        y.data.add_(1)
        return y.sum()

    x = torch.linspace(-0.5, 0.5, 4, dtype=F64)
    close(tx.grad(fn)(x), x.exp())
    close(tf.grad(fn)(x), x.exp() + 1)  # what torch does, for the record
    close(tx.jvp(fn, (x,), (torch.ones_like(x),))[1], tf.jvp(fn, (x,), (torch.ones_like(x),))[1])
