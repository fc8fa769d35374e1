"""torch's fused derivative kernels (tanh_backward, sigmoid_backward, threshold_backward) in the
generated code: the same kernels as torch.autograd, so the same bits; higher derivatives and
batching still right (torch.func and a loop are the oracles)."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

FNS = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": F.relu,
    "mlp": lambda x: torch.sigmoid(F.relu(x @ x.T) - 1.0).tanh(),
}
KERNELS = {"tanh": "tanh_backward", "sigmoid": "sigmoid_backward", "relu": "threshold_backward"}


def _x(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 6, generator=g, dtype=dtype) * 4  # saturating tanh/sigmoid entries
    x[0, :3] = torch.tensor([0.0, 20.0, -20.0], dtype=dtype)  # relu's kink, saturation
    return x


def _autograd(f, x, ct):
    x = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(f(x), x, ct)
    return g


@pytest.mark.parametrize("name", sorted(FNS))
def test_gradients_are_bitwise_torch_autograd(name):
    f, x = FNS[name], _x()
    ct = torch.randn(f(x).shape, generator=torch.Generator().manual_seed(1))
    want = _autograd(f, x, ct)
    _, vjp_fn = tx.vjp(f, x)
    assert torch.equal(vjp_fn(ct)[0], want)
    jitted = tx.jit(lambda x, ct: tx.vjp(f, x)[1](ct)[0])
    assert torch.equal(jitted(x, ct), want)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_generated_code_calls_the_fused_kernel(name):
    f = tx.jit(tx.grad(lambda x: FNS[name](x).sum()))
    code = f.lower(_x()).as_text()
    # the kernel itself, or its out= overload writing over a dead operand
    kernel = f"torch.ops.aten.{KERNELS[name]}"
    assert f"{kernel}(" in code or f"{kernel}.grad_input(" in code, code


@pytest.mark.parametrize("name", sorted(FNS))
def test_higher_derivatives_match_torch_func(name):
    f, x = FNS[name], _x(torch.float64)[:3, :3]
    s = lambda x: f(x).sum()  # noqa: E731
    torch.testing.assert_close(tx.hessian(s)(x), tf.hessian(s)(x))
    torch.testing.assert_close(tx.jacfwd(tx.grad(s))(x), tf.jacfwd(tf.grad(s))(x))
    if name in KERNELS:  # elementwise: also at a scalar, twice reverse
        x0 = x[0, 1]
        torch.testing.assert_close(tx.grad(tx.grad(f))(x0), tf.grad(tf.grad(f))(x0))


@pytest.mark.parametrize("name", sorted(FNS))
def test_per_example_gradients_match_a_loop(name):
    f = FNS[name]
    xs = _x(torch.float64).reshape(4, 3, 3)
    g = tx.grad(lambda x: f(x).sum())
    want = torch.stack([tf.grad(lambda x: f(x).sum())(x) for x in xs])
    torch.testing.assert_close(tx.vmap(g)(xs), want)
    torch.testing.assert_close(tx.jit(tx.vmap(g))(xs), want)
    # batched cotangent against an unbatched saved output (elementwise batching of the kernel)
    x = xs[0]
    cts = torch.randn(5, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    _, vjp_fn = tx.vjp(f, x)
    got = tx.vmap(vjp_fn)(cts)[0]
    torch.testing.assert_close(got, torch.stack([_autograd(f, x, c) for c in cts]))


def test_relu_conventions_at_zero_and_nan_match_torch():
    x = torch.tensor([0.0, -0.0, float("nan"), 1.0, -1.0], dtype=torch.float64)
    torch.testing.assert_close(
        tx.grad(lambda x: F.relu(x).sum())(x), tf.grad(lambda x: F.relu(x).sum())(x), equal_nan=True
    )
    torch.testing.assert_close(tx.jit(F.relu)(x), F.relu(x), equal_nan=True)
    i = torch.tensor([-2, 0, 3])
    assert torch.equal(tx.jit(F.relu)(i), F.relu(i))
    with pytest.raises(TypeError, match="bool"):
        tx.jit(F.relu)(torch.tensor([True, False]))
