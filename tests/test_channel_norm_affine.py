"""batch_norm, instance_norm and group_norm with their weight and bias inside torch's kernels
without jit (primitives/composite_channel_affine.py): the value and the reverse-mode
derivatives are torch.autograd's bits, also where a channel is constant (the normalized value
is rounding noise there, and a product-then-sum affine rounded differently); the batched and
forward-mode rules agree with torch.func, and hessians with finite differences in float64
(torch.func's own hessian of batch norm's weight block is wrong: docs/conventions.md,
batch-norm-hessian-weight-block)."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

NORMS = {
    "batch_norm": lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
    "instance_norm": lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
    "group_norm": lambda x, w, b: F.group_norm(x, 2, w, b),
}


def _inputs(dtype, constant_channel=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, 5, generator=g, dtype=dtype) * 3
    w, b = (torch.randn(4, generator=g, dtype=dtype) for _ in range(2))
    if constant_channel:
        x[:, 0], w[0], b[0] = 30.0, 30.0, -30.0
    return x, w, b


def _with(norm, bias):
    """The norm as a function of (x, w[, b])."""
    return (lambda x, w, b: norm(x, w, b)) if bias else (lambda x, w: norm(x, w, None))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(NORMS))
def test_value_grad_and_vjp_are_torch_autograds_bits(name, dtype, bias):
    x, w, b = _inputs(dtype)
    f = _with(NORMS[name], bias)
    args = (x, w, b) if bias else (x, w)
    ct = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    assert torch.equal(
        tx.vmap(f, in_axes=(0,) + (None,) * (len(args) - 1))(x[None], *args[1:])[0], f(*args)
    )
    xs = [a.clone().requires_grad_() for a in args]
    want = torch.autograd.grad(f(*xs), xs, ct)
    value, vjp_fn = tx.vjp(f, *args)
    assert torch.equal(value, f(*args))
    for got, ref in zip(vjp_fn(ct), want):
        assert torch.equal(got, ref), (got - ref).abs().max()

    def loss(*a):
        return (torch.sin(f(*a)) * ct).sum()

    nums = tuple(range(len(args)))
    want = torch.autograd.grad(loss(*xs), xs)
    for grad in (tx.grad(loss, argnums=nums), tx.jit(tx.grad(loss, argnums=nums))):
        for got, ref in zip(grad(*args), want):
            assert torch.equal(got, ref), (got - ref).abs().max()


def _close(got, want, tol=1e-10):
    got, want = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    assert len(got) == len(want)
    for a, r in zip(got, want):
        torch.testing.assert_close(a, r, rtol=tol, atol=tol)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", sorted(NORMS))
def test_batched_and_forward_rules_agree_with_torch_func(name, bias):
    dt = torch.float64
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 3, 4, 2, generator=g, dtype=dt)
    ws = torch.randn(5, 4, generator=g, dtype=dt)
    bs = torch.randn(5, 4, generator=g, dtype=dt)
    wt = torch.randn(3, 4, 2, generator=g, dtype=dt)
    f = _with(NORMS[name], bias)
    one = (x[0], ws[0], bs[0]) if bias else (x[0], ws[0])
    batched = (x, ws, bs) if bias else (x, ws)
    nums = tuple(range(len(one)))

    def loss(*a):
        return (torch.tanh(f(*a)) * wt).sum()

    shared = (0,) + (None,) * (len(one) - 1)  # per-example gradients, shared parameters
    per_example = (
        tx.vmap(tx.grad(loss, argnums=nums), in_axes=shared),
        tf.vmap(tf.grad(loss, argnums=nums), in_dims=shared),
    )
    _close(per_example[0](x, *one[1:]), per_example[1](x, *one[1:]))
    _close(tx.jit(per_example[0])(x, *one[1:]), per_example[1](x, *one[1:]))
    # an ensemble: a weight and bias per example
    _close(
        tx.vmap(tx.grad(loss, argnums=nums))(*batched),
        tf.vmap(tf.grad(loss, argnums=nums))(*batched),
    )
    _close(tx.vmap(f)(*batched), tf.vmap(f)(*batched))
    for ours, theirs in ((tx.jacfwd, tf.jacfwd), (tx.jacrev, tf.jacrev)):
        _close(ours(f, argnums=nums)(*one), theirs(f, argnums=nums)(*one))
    ts = tuple(torch.randn(a.shape, generator=g, dtype=dt) for a in one)
    _close(tx.jvp(loss, one, ts), tf.jvp(loss, one, ts))
    _close(
        tx.vmap(lambda *a: tx.jvp(loss, a, ts))(*batched),
        tf.vmap(lambda *a: tf.jvp(loss, a, ts))(*batched),
    )


@pytest.mark.parametrize("name", sorted(NORMS))
def test_hessians_agree_with_finite_differences(name):
    dt = torch.float64
    x, w, b = _inputs(dt, constant_channel=False, seed=3)
    x = x[:, :, :2]
    wt = torch.randn(x.shape, generator=torch.Generator().manual_seed(4), dtype=dt)
    norm = NORMS[name]

    def loss(x, w, b):
        return (torch.tanh(norm(x, w, b)) * wt).sum()

    sizes = [x.numel(), 4, 4]

    def grad_flat(v):
        parts = [p.clone().requires_grad_() for p in torch.split(v, sizes)]
        parts[0] = parts[0].reshape(x.shape)
        return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss(*parts), parts)])

    v0, eps = torch.cat([x.reshape(-1), w, b]), 1e-6
    basis = torch.eye(v0.numel(), dtype=dt)
    fd = torch.stack(
        [(grad_flat(v0 + eps * e) - grad_flat(v0 - eps * e)) / (2 * eps) for e in basis], 1
    )
    for hessian in (
        tx.hessian(loss, argnums=(0, 1, 2)),
        tx.jit(tx.hessian(loss, argnums=(0, 1, 2))),
    ):
        h = hessian(x, w, b)
        rows = [
            torch.cat([h[i][j].reshape(sizes[i], sizes[j]) for j in range(3)], 1) for i in range(3)
        ]
        torch.testing.assert_close(torch.cat(rows, 0), fd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("affine", ["w and b", "b only"])
def test_group_norm_reads_a_strided_weight_and_bias(affine):
    # torch's group norm kernels read the weight and bias as if contiguous: a column of a
    # matrix (or a vmapped slice) gave another answer (3.7 off) until they are made contiguous
    g = torch.Generator().manual_seed(5)
    x, wb = torch.randn(2, 2, 2, generator=g), torch.randn(2, 3, generator=g)
    use_w = affine == "w and b"

    def f(x, wb):
        return F.group_norm(x, 1, wb[:, 0] if use_w else None, wb[:, 1])

    def reference(x, wb):  # torch's backward fails without a weight: the same function
        return f(x, wb) if use_w else F.group_norm(x, 1) + wb[:, 1, None]

    want = f(x, wb)
    for ours in (f, tx.jit(f)):
        torch.testing.assert_close(ours(x, wb), want)
    xs, wbs = x.clone().requires_grad_(), wb.clone().requires_grad_()
    ct = torch.randn(x.shape, generator=g)
    want = torch.autograd.grad((reference(xs, wbs).sin() * ct).sum(), [xs, wbs])
    grad = tx.grad(lambda x, wb: (f(x, wb).sin() * ct).sum(), argnums=(0, 1))
    for got in (grad(x, wb), tx.jit(grad)(x, wb)):
        for a, r in zip(got, want):
            torch.testing.assert_close(a, r)
    many = torch.randn(2, 3, 4, generator=g)  # four weights and biases, batched on the last dim
    batched = tx.vmap(f, in_axes=(None, 2))(x, many)
    torch.testing.assert_close(batched, torch.stack([f(x, many[..., i]) for i in range(4)]))


def test_second_derivatives_beside_an_infinite_channel_are_finite_differences():
    # batch norm's channels are independent: an infinity in channel 0 says nothing about
    # channel 1, where the derivative of the backward kernel is checked against float64
    # finite differences of torch's own first derivative (torch's double backward there is
    # wrong: tests/test_special_points.py)
    inf = float("inf")
    x = torch.tensor([[[inf, -0.0], [1.0, -1.0]], [[0.5, -0.5], [3.0, -3.0]]], dtype=torch.float64)
    w = torch.tensor([-inf, 0.5], dtype=torch.float64)
    ct = torch.tensor(
        [[[inf, -3.0], [6.0, 30.0]], [[-30.0, 0.0], [-0.0, 1.0]]], dtype=torch.float64
    )
    u = torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def s(x):  # <u, the input's cotangent of batch norm with weight w at cotangent ct>
        return (
            tx.vjp(lambda x: F.batch_norm(x, None, None, w, training=True), x)[1](ct)[0] * u
        ).sum()

    def torch_grad(x):
        xs = x.clone().requires_grad_()
        y = F.batch_norm(xs, None, None, w, training=True)
        (gx,) = torch.autograd.grad(y, xs, ct, create_graph=True)
        return torch.autograd.grad((gx * u).sum(), xs)[0]

    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    v[:, 0] = 0.0  # a direction within the finite channel
    got = tx.jvp(tx.grad(s), (x,), (v,))[1]
    h = 1e-6
    fd = (torch_grad(x + h * v) - torch_grad(x - h * v)) / (2 * h)
    torch.testing.assert_close(got[:, 1], fd[:, 1], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(tx.grad(s)(x)[:, 1], torch_grad(x)[:, 1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(NORMS))
def test_a_bias_alone_is_torchs_bits_without_jit(name, dtype):
    # a bias alone goes into the kernel with a weight of ones (lang/norms.py _unit_weight),
    # which for these kernels is their value without a weight, bit for bit
    x, _, b = _inputs(dtype)
    f = lambda x, b: NORMS[name](x, None, b)  # noqa: E731
    assert torch.equal(tx.vjp(f, x, b)[0], f(x, b))
    assert torch.equal(tx.jit(f)(x, b), f(x, b))
    assert torch.equal(torch.trunc(tx.vmap(f)(x[None], b[None])[0]), torch.trunc(f(x, b)))
    ct = torch.randn(x.shape, generator=torch.Generator().manual_seed(2), dtype=dtype)
    got = tx.vjp(f, x, b)[1](ct)
    if name == "group_norm":  # torch's group norm backward fails without a weight
        want = tf.vjp(lambda x, b: F.group_norm(x, 2) + b[:, None], x, b)[1](ct)
        for g, r in zip(got, want):
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
        return
    xs = [a.clone().requires_grad_() for a in (x, b)]
    for g, r in zip(got, torch.autograd.grad(f(*xs), xs, ct)):
        assert torch.equal(g, r), (g - r).abs().max()
