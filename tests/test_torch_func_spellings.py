"""torch.func's spellings and torch's calling conventions under thunderx's transforms, each
checked against torch.func or eager torch: unbound Tensor methods, torch.autograd.grad inside a
transform, jvp(strict=), out_dims for one output, and the exception classes torch.func raises."""

import pytest
import torch
import torch.func as tf

import thunderx as tx

F64 = torch.float64
T = torch.Tensor


def close(a, b, tol=1e-10):
    for x, y in zip(tx.tree.leaves(a), tx.tree.leaves(b), strict=True):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol)


def x34():
    return torch.linspace(-1.5, 2.0, 12, dtype=F64).reshape(3, 4)


# ---------------------------------------------------------------- unbound Tensor methods

UNBOUND = {
    "view_repeat": lambda x: T.view(T.repeat(x, 2, 1), -1),
    "add_": lambda x: T.add_(x * 1.0, T.sin(x)),
    "abs_": lambda x: T.abs_(x - 0.5) * x,
    "fill_": lambda x: T.fill_(x * 1.0, 2.0) * x,
    "new_zeros": lambda x: T.new_zeros(x, (2, 3)).sum() + x,
    "getitem": lambda x: T.__getitem__(x, (slice(None), 0)) * 2.0,
    "radd_rmul": lambda x: T.__rmul__(T.__radd__(x, 1.0), 3.0),
    "reshape_sum": lambda x: T.sum(T.reshape(x, (-1,)), 0),
}


@pytest.mark.parametrize("name", sorted(UNBOUND))
def test_unbound_tensor_methods_match_torch_func(name):
    fn = UNBOUND[name]
    x = x34()
    close(tx.jit(fn)(x), fn(x))
    close(tx.vmap(fn)(torch.stack([x, 2 * x])), tf.vmap(fn)(torch.stack([x, 2 * x])))
    scalar = lambda x: fn(x).sum()  # noqa: E731
    close(tx.grad(scalar)(x), tf.grad(scalar)(x))


def test_unbound_methods_are_torchs_own_outside_transforms():
    tx.vmap(UNBOUND["add_"])(torch.stack([x34(), x34()]))
    assert T.add_ is torch._C.TensorBase.add_ and T.view is torch._C.TensorBase.view
    with pytest.raises(TypeError, match="descriptor"):
        T.add_(object(), 1)  # torch's own check again, outside any transform


def test_unbound_methods_restored_after_an_exception():
    def bad(x):
        T.view(x, 5, 7)  # wrong size: torch-like error while tracing

    with pytest.raises(Exception):  # noqa: B017 - any error; what matters is the state after
        tx.vmap(bad)(torch.ones(2, 3, 4))
    assert T.view is torch._C.TensorBase.view


def test_eager_times_tracer_inside_a_transform():
    # torch's C operator looks up torch.Tensor.mul by name while the shadows are in place
    c = torch.arange(3.0, dtype=F64)
    fn = lambda x: (c * x).sum()  # noqa: E731
    close(tx.grad(fn)(torch.ones(3, dtype=F64)), c)


# ------------------------------------------------------------- values the op_db run found wrong


def test_logaddexp_of_equal_infinities_is_torchs():
    a = torch.tensor([-float("inf"), float("inf"), 1.0, -2.0], dtype=F64)
    b = torch.tensor([-float("inf"), float("inf"), 1.0, 3.0], dtype=F64, requires_grad=True)
    want = torch.logaddexp(a, b)
    close(tx.jit(torch.logaddexp)(a, b.detach()), want.detach())
    finite = b.detach()[2:].requires_grad_()
    (g,) = torch.autograd.grad(torch.logaddexp(a[2:], finite).sum(), finite)
    close(tx.grad(lambda b: torch.logaddexp(a[2:], b).sum())(finite.detach()), g)


def test_prelu_of_a_scalar_keeps_its_shape():
    x, w = torch.tensor(-2.0, dtype=F64), torch.tensor([0.25], dtype=F64)
    out = tx.jit(torch.nn.functional.prelu)(x, w)
    assert out.shape == () and out.item() == -0.5
    close(
        tx.grad(torch.nn.functional.prelu, argnums=1)(x, w),
        tf.grad(torch.nn.functional.prelu, argnums=1)(x, w),
    )
