"""torch.compile around thunderx's transforms: each transform and the functions it returns is a
black box to TorchDynamo (transforms/opaque.py), so the compiled call gives thunderx's eager
values. Traced by TorchDynamo, thunderx's own machinery gave wrong values (jacrev, hessian, jvp,
vmap of grad). Oracle: torch.func on the same function."""

import pytest
import torch
import torch.func as tf

import thunderx as tx
import thunderx.func as txf

F64 = torch.float64
X = torch.linspace(-1.5, 2.0, 5, dtype=F64)
XB = torch.stack([X, X + 0.5, X - 1.0])


def f(x):
    return (x.sin() * x).sum()


CASES = {
    "grad": (lambda: tx.grad(f), lambda: tf.grad(f), X),
    "vmap(grad)": (lambda: tx.vmap(tx.grad(f)), lambda: tf.vmap(tf.grad(f)), XB),
    "jacrev": (lambda: tx.jacrev(torch.sin), lambda: tf.jacrev(torch.sin), X),
    "hessian": (lambda: tx.hessian(f), lambda: tf.hessian(f), X),
    "jvp": (
        lambda: lambda x: tx.jvp(f, (x,), (torch.ones_like(x),))[1],
        lambda: lambda x: tf.jvp(f, (x,), (torch.ones_like(x),))[1],
        X,
    ),
    "vjp pullback": (
        lambda: tx.vjp(torch.sin, X)[1],
        lambda: tf.vjp(torch.sin, X)[1],
        torch.ones(5, dtype=F64),
    ),
    "thunderx.func.hessian": (lambda: txf.hessian(f), lambda: tf.hessian(f), X),
    "jit(grad)": (lambda: tx.jit(tx.grad(f)), lambda: tf.grad(f), X),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_compile_of_a_transform_gives_its_values(name):
    ours, theirs, x = CASES[name]
    torch._dynamo.reset()
    got = torch.compile(ours())(x)
    torch.testing.assert_close(got, theirs()(x))


def test_a_transform_called_inside_a_compiled_function():
    torch._dynamo.reset()

    def step(x):
        return tx.hessian(f)(x).sum() + x.cos().sum()

    torch.testing.assert_close(torch.compile(step)(X), tf.hessian(f)(X).sum() + X.cos().sum())
