"""Writes to captured tensors and arguments that a transform cannot make sound are clear errors
(MutationError, ConcretizationError), as torch.func refuses them, and leave the tensors as they
were; a write of no elements needs nothing and is accepted (oracle: torch.func)."""

import pytest
import torch
import torch.nn.functional as F

import thunderx as tx
from thunderx import lax
from thunderx.errors import ConcretizationError
from thunderx.lang.inplace import MutationError


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_write_of_a_batched_value_is_refused():
    buf = torch.zeros(3)
    with pytest.raises(MutationError, match="batched value"):
        tx.vmap(lambda x: buf.add_(x))(torch.ones(2, 3))
    with pytest.raises(MutationError, match="batched value"):
        tx.jit(tx.vmap(lambda x: buf.add_(x)))(torch.ones(2, 3))
    with pytest.raises(MutationError, match="batched value"):
        tx.vmap(tx.jit(lambda x: (buf.add_(x), x)[1]))(torch.ones(2, 3))
    model = torch.nn.BatchNorm1d(3).train()
    with pytest.raises(MutationError, match="batched value"):
        tx.vmap(model)(torch.randn(2, 4, 3))  # per-example statistics
    assert torch.equal(buf, torch.zeros(3))
    assert torch.equal(model.running_mean, torch.zeros(3))
    # an unbatched value is one write, as in torch.func
    tx.vmap(lambda x: (buf.add_(1.0), x * 2)[1])(torch.ones(2, 3))
    close(buf, torch.ones(3))


@pytest.mark.parametrize("wrap", ["vmap", "jit(vmap)", "vmap(jit)", "grad"])
def test_a_write_of_no_elements_needs_no_batch_dimension_or_derivative(wrap):
    # a gather with an empty index gives a zero-element tensor of constants (no batch dim, no
    # derivative); writing a batched or differentiated value into it changes nothing, and
    # torch.func accepts it: the differential run's take_along_dim > setitem program
    def f(x, v, w, i):
        y = torch.take_along_dim(x, torch.zeros(1, 0, dtype=torch.long), 0) * 1
        y[i] = v * 2
        return torch.cat([y.flatten(), w.sin() * 3])

    g = torch.Generator().manual_seed(0)
    x, v = torch.randn(2, 3, 0, dtype=torch.float64), torch.randn(2, 0, dtype=torch.float64)
    w, i = torch.randn(2, 4, dtype=torch.float64, generator=g), torch.tensor([0, 0])
    if wrap == "grad":
        s = lambda *a: f(*a).sum()  # noqa: E731
        got = tx.grad(s, argnums=(0, 1, 2))(x[0], v[0], w[0], i[0])
        want = torch.func.grad(s, argnums=(0, 1, 2))(x[0], v[0], w[0], i[0])
    else:
        step = {
            "vmap": tx.vmap(f),
            "jit(vmap)": tx.jit(tx.vmap(f)),
            "vmap(jit)": tx.vmap(tx.jit(f)),
        }
        got, want = [step[wrap](x, v, w, i)], [torch.func.vmap(f)(x, v, w, i)]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("wrap", ["grad", "jit(grad)", "grad(jit)"])
def test_write_that_needs_a_derivative_is_refused_like_torch_func(wrap):
    buf = torch.zeros(3)

    def f(x):
        buf.add_(x)  # the derivative of the buffer's new value would be needed
        return (x * buf).sum()

    step = {"grad": tx.grad(f), "jit(grad)": tx.jit(tx.grad(f)), "grad(jit)": tx.grad(tx.jit(f))}
    with pytest.raises(MutationError, match="mutate a captured Tensor"):
        step[wrap](torch.ones(3))
    assert torch.equal(buf, torch.zeros(3))

    def g(x):
        with torch.no_grad():
            buf.add_(x)
        return (x * buf).sum()

    step = {"grad": tx.grad(g), "jit(grad)": tx.jit(tx.grad(g)), "grad(jit)": tx.grad(tx.jit(g))}
    for k in (1, 2):
        close(step[wrap](torch.ones(3)), torch.full((3,), float(k)))  # d/dx x * buf = buf


def test_write_aliasing_an_argument_is_refused():
    buf = torch.zeros(4)
    step = tx.jit(lambda x: (buf.add_(1.0), x * 2)[1])
    with pytest.raises(MutationError, match="shares memory"):
        step(buf)
    with pytest.raises(MutationError, match="shares memory"):
        step(buf[:4].view(2, 2).view(4))
    x = torch.randn(4, 3, 5, dtype=torch.float64)
    rm = torch.zeros(3, dtype=x.dtype)
    with pytest.raises(MutationError, match="shares memory"):
        tx.jit(lambda x, a, b: F.batch_norm(x, a, b, training=True))(x, rm, rm)
    assert torch.equal(buf, torch.zeros(4)) and torch.equal(rm, torch.zeros(3, dtype=x.dtype))


def test_write_inside_a_staged_body_is_refused():
    buf = torch.zeros(3)

    def body(c, x):
        buf.add_(x)
        return c + x, x

    with pytest.raises(MutationError, match="staged body"):
        tx.jit(lambda xs: lax.scan(body, torch.zeros(3), xs))(torch.ones(2, 3))


def test_reading_a_written_buffer_as_a_python_number_is_refused():
    # float() of a buffer written earlier in the trace: a value jit does not know while tracing
    count = torch.zeros((), dtype=torch.int64)

    def f(x):
        count.add_(1)
        return x / float(count)

    with pytest.raises(ConcretizationError):
        tx.jit(f)(torch.randn(4, 3))
    assert count.item() == 0
