"""torch.scatter_reduce / index_reduce under jit, grad and vmap: values against torch eager,
gradients against torch.autograd (ties split, zeros in products), vmap against a loop."""

import pytest
import torch
import torch.func as tf

import thunderx as tx

F64 = torch.float64


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 5, dtype=F64, generator=g)
    src = torch.randn(6, 5, dtype=F64, generator=g)
    idx = torch.randint(0, 4, (6, 5), generator=g)
    # zeros (one and two in a product group) and ties with x and among sources
    x[1, 3], src[3, 3], src[2, 1] = 0.0, 0.0, 0.0
    src[0, 0], src[1, 0], idx[0, 0], idx[1, 0] = 2.5, 2.5, 2, 2
    src[4, 2], idx[4, 2] = x[0, 2] + 10.0, 0
    src[5, 2], idx[5, 2] = x[0, 2] + 10.0, 0
    return x, src, idx


def _weights(y):
    return torch.arange(y.numel(), dtype=F64).reshape(y.shape).cos()


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    x, src, idx = _data()

    def f(x, s):
        return torch.scatter_reduce(x, 0, idx, s, reduce, include_self=include_self)

    torch.testing.assert_close(tx.jit(f)(x, src), f(x, src))

    def loss(x, s):
        return (f(x, s) * _weights(x)).sum()

    xr, sr = x.clone().requires_grad_(), src.clone().requires_grad_()
    want = torch.autograd.grad(loss(xr, sr), (xr, sr))
    torch.testing.assert_close(tx.grad(loss, (0, 1))(x, src), want)
    torch.testing.assert_close(tx.jit(tx.grad(loss, (0, 1)))(x, src), want)
    xs, ss = torch.stack([x, 2 * x, x - 1]), torch.stack([src, src + 1, 3 * src])
    torch.testing.assert_close(tx.vmap(f)(xs, ss), torch.stack([f(a, b) for a, b in zip(xs, ss)]))
    if reduce in ("sum", "mean", "amax", "amin"):  # torch.func's batching rules cover these
        torch.testing.assert_close(
            tx.vmap(tx.grad(loss, (0, 1)))(xs, ss), tf.vmap(tf.grad(loss, (0, 1)))(xs, ss)
        )


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce(reduce):
    x, src, _ = _data(1)
    index = torch.tensor([0, 2, 2, 1, 0, 3])

    def f(x, s):
        return x.index_reduce(0, index, s, reduce, include_self=False)

    torch.testing.assert_close(tx.jit(f)(x, src), f(x, src))
    xr, sr = x.clone().requires_grad_(), src.clone().requires_grad_()
    want = torch.autograd.grad((f(xr, sr) ** 2).sum(), (xr, sr))
    torch.testing.assert_close(tx.grad(lambda x, s: (f(x, s) ** 2).sum(), (0, 1))(x, src), want)


@pytest.mark.parametrize("src_zero", [False, True])
def test_prod_gradient_where_a_left_out_self_is_zero(src_zero):
    # include_self=False: x[p] = 0 takes no part where sources land, and its share y / x[p]
    # (inf or 0 / 0) must not reach the gradient: torch's is 0 there, not NaN
    x = torch.tensor([[-1.75, 0.0, 2.0], [0.0, 3.0, -0.5]], dtype=F64)
    src = torch.tensor([[0.5, -0.0 if src_zero else -0.25, 1.5]], dtype=F64).expand(3, 3) * 2
    idx = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 1]])

    def loss(x, s):
        return (torch.scatter_reduce(x, 0, idx, s, "prod", include_self=False) * 1.5).sum()

    def loss_index(x, s):
        return x.index_reduce(0, torch.tensor([1, 0, 1]), s, "prod", include_self=False).sum()

    for f in (loss, loss_index):
        xr, sr = x.clone().requires_grad_(), src.clone().requires_grad_()
        want = torch.autograd.grad(f(xr, sr), (xr, sr))
        for got in (tx.grad(f, (0, 1))(x, src), tx.jit(tx.grad(f, (0, 1)))(x, src)):
            for g, w in zip(got, want):
                assert torch.isfinite(g).all()
                torch.testing.assert_close(g, w)
        xs, ss = torch.stack([x, 2 * x]), torch.stack([src, src - 1])
        batched = tx.vmap(tx.grad(f, (0, 1)))(xs, ss)
        for i in range(2):
            for g, w in zip(batched, tx.grad(f, (0, 1))(xs[i], ss[i])):
                torch.testing.assert_close(g[i], w)


def test_generated_code_calls_torch_scatter_reduce():
    x, src, idx = _data()
    text = tx.jit(lambda x, s: torch.scatter_reduce(x, 0, idx, s, "amax")).lower(x, src).as_text()
    assert "torch.scatter_reduce" in text


def test_scatter_with_repeated_indices_keeps_the_last_write_as_torch():
    # summing the repeated writes was a silent wrong answer
    x = torch.zeros(4, 5, dtype=F64)
    idx = torch.tensor([[0, 1, 2, 0, 1], [0, 1, 3, 3, 1]])
    src = torch.randn(2, 5, dtype=F64)

    def f(x, s):
        return x.scatter(0, idx, s)

    torch.testing.assert_close(tx.jit(f)(x, src), f(x, src), rtol=0, atol=0)
    xs, ss = torch.stack([x, x + 1]), torch.stack([src, 2 * src])
    torch.testing.assert_close(tx.vmap(f)(xs, ss), torch.stack([f(a, b) for a, b in zip(xs, ss)]))
    unique = torch.tensor([[0, 1, 2, 3, 1], [3, 2, 1, 0, 0]])

    def loss(x, s):
        return (x.scatter(0, unique, s) ** 2).sum()

    torch.testing.assert_close(tx.grad(loss, (0, 1))(x, src), tf.grad(loss, (0, 1))(x, src))


@pytest.mark.parametrize("reduce", ["prod", "amax", "amin"])
def test_an_excluded_self_gets_zero_derivative_even_from_an_infinite_cotangent(reduce):
    # include_self=False: x at the scattered rows takes no part, its derivative is a structural
    # 0 in both modes (torch.autograd gives 0); the rule used to multiply 0 by the cotangent
    inf = float("inf")
    x = torch.tensor([[-0.75, 0.0], [0.0, 2.0], [1.5, -1.0]], dtype=torch.float64)
    src = torch.tensor([[0.0, 1.0], [0.75, 3.0], [0.75, -2.0]], dtype=torch.float64)
    idx = torch.tensor([0, 1, 0])

    def f(x, s):
        return x.index_reduce(0, idx, s, reduce, include_self=False)

    ct = torch.tensor([[inf, -inf], [inf, 1.0], [inf, -inf]], dtype=torch.float64)
    got = tx.vjp(f, x, src)[1](ct)[0]
    want = tf.vjp(f, x, src)[1](ct)[0]
    assert torch.equal(got[:2], torch.zeros(2, 2, dtype=torch.float64))
    torch.testing.assert_close(got, want)
    t = torch.full_like(x, inf)
    tangent = tx.jvp(lambda x: f(x, src), (x,), (t,))[1]
    assert torch.equal(tangent[:2], torch.zeros(2, 2, dtype=torch.float64))
    assert torch.equal(tangent[2], t[2])  # row 2: nothing scattered, x passes through


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_extremum_gradient_where_the_result_is_nan(reduce, include_self):
    # a nan result is attained nowhere (nan != nan): its derivative was 0 in reverse mode (the
    # cotangent selected away) and nan forward; torch gives nan at every element taking part
    nan = float("nan")
    x = torch.tensor([[1.0, 2.0], [3.0, nan], [0.5, 0.5]], dtype=torch.float64)
    src = torch.tensor([[nan, 1.0], [5.0, 0.2], [4.0, 9.0], [0.5, 0.1]], dtype=torch.float64)
    idx = torch.tensor([0, 0, 1, 2])
    w = torch.arange(6.0, dtype=torch.float64).reshape(3, 2)

    def index(x, s):
        return (x.index_reduce(0, idx, s, reduce, include_self=include_self) * w).sum()

    def scatter(x, s):
        i = idx[:, None].expand(4, 2)
        return (x.scatter_reduce(0, i, s, reduce, include_self=include_self) * w).sum()

    for f in (index, scatter):
        want = tf.grad(f, (0, 1))(x, src)
        assert want[1][:2, 0].isnan().all()  # the nan result's elements
        for got, exp in zip(tx.grad(f, (0, 1))(x, src), want):
            torch.testing.assert_close(got, exp, equal_nan=True, rtol=0, atol=0)
        t = tx.jvp(f, (x, src), (torch.ones_like(x), torch.ones_like(src)))[1]
        assert t.isnan()
