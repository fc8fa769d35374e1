"""torch's semantics under every transform: each case is checked against torch eager or
torch.func (the oracle a torch user compares against), float64 finite differences deciding
derivatives at differentiable points."""

import math

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx
from thunderx.lang.inplace import MutationError

F64 = torch.float64


def close(a, b, tol=1e-6):
    for x, y in zip(tx.tree.leaves(a), tx.tree.leaves(b), strict=True):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol, equal_nan=True)


# ------------------------------------------------------------------- mutation through views


def _write_row(x):
    y = x * 1
    y[0].add_(100)
    return y


def _sin_row(x):
    y = x.clone()
    y[0].sin_()
    return y.sum()


X23 = torch.arange(6.0, dtype=F64).reshape(2, 3) / 7


def test_write_through_view_reaches_base_under_jit_and_vmap():
    close(tx.jit(_write_row)(X23), _write_row(X23))
    close(tx.vmap(_write_row)(X23), tf.vmap(_write_row)(X23))
    close(tx.jit(tx.vmap(_write_row))(X23), tf.vmap(_write_row)(X23))


def test_write_through_view_gradient_matches_torch_func():
    f = lambda x: (_write_row(x) ** 2).sum()  # noqa: E731
    close(tx.grad(f)(X23), tf.grad(f)(X23))
    close(tx.jit(tx.grad(f))(X23), tf.grad(f)(X23))


def test_inplace_sin_of_a_row_value_and_grad():
    x = torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    v, g = tx.value_and_grad(_sin_row)(x)
    tv, tg = tf.grad_and_value(_sin_row)(x)[::-1]
    close((v, g), (tv, tg))
    close(tx.jit(_sin_row)(x), _sin_row(x))
    x1 = torch.ones(3, dtype=F64)
    close(tx.value_and_grad(_sin_row)(x1)[1], torch.tensor([math.cos(1), 1, 1], dtype=F64))


def test_copy_into_view_of_a_clone_under_jvp():
    def f(x, y):
        c = x.clone()
        v = c[0]
        v.copy_(y)
        return c, v

    p = (torch.ones(3, 2, dtype=F64), torch.zeros(2, dtype=F64))
    t = (torch.full((3, 2), 2.0, dtype=F64), torch.full((2,), 5.0, dtype=F64))
    close(tx.jvp(f, p, t), tf.jvp(f, p, t))


def test_write_through_view_of_an_input_is_refused():
    def f(x, y):
        x[0].copy_(y)
        return x

    p = (torch.ones(3, 2), torch.zeros(2))
    with pytest.raises(MutationError, match="view of an input"):
        tx.jvp(f, p, p)
    with pytest.raises(MutationError):
        tx.grad(lambda x: f(x, torch.zeros(2)).sum())(p[0])


def test_views_of_views_and_sibling_views_are_refreshed():
    def f(x):
        y = x * 1
        col = y[:, 1]
        diag = y.diagonal()
        t = y.t()
        row = y.select(0, 1)
        t[2].mul_(-1)  # writes y[:, 2]
        row[0] = 7.0  # writes y[1, 0]
        diag.add_(10)
        flat = y.view(-1)
        flat[-1] = flat[0]
        return y, col, diag, t, row, flat

    x = torch.arange(9.0, dtype=F64).reshape(3, 3)
    close(tx.jit(f)(x), f(x.clone()))
    close(tx.vmap(f)(torch.stack([x, -x])), tf.vmap(f)(torch.stack([x, -x])))
    g = lambda x: sum((o**2).sum() for o in f(x))  # noqa: E731
    close(tx.grad(g)(x), tf.grad(g)(x))


def test_outputs_of_split_and_unbind_are_views():
    def f(x):
        y = x * 1
        a, b = y.split(2, dim=1)
        rows = y.unbind(0)
        b.mul_(3)
        rows[0].sub_(1)
        return y, a, rows[1]

    x = torch.arange(8.0).reshape(2, 4)
    close(tx.jit(f)(x), f(x))


def test_reshape_of_a_non_contiguous_view_is_a_copy():
    def f(x):
        y = x * 1
        r = y.t().reshape(-1)  # torch copies here: writes to r do not reach y
        r.add_(1)
        v = y[0].reshape(-1)  # a view: writes reach y
        v.add_(100)
        return y, r

    x = torch.arange(6.0).reshape(2, 3)
    close(tx.jit(f)(x), f(x))


def test_write_into_expanded_view_is_refused_like_torch():
    def f(x, whole):
        y = x * 1
        e = y.expand(3, 2)
        (e if whole else e[1]).add_(1)  # one row of the expansion does not overlap itself
        return y

    x = torch.ones(2)
    close(tx.jit(f, static_argnums=1)(x, False), f(x, False))
    with pytest.raises(RuntimeError):
        f(x, True)
    with pytest.raises(MutationError, match="single memory location"):
        tx.jit(f, static_argnums=1)(x, True)


def test_inplace_on_a_local_copy_under_grad():
    def f(a):
        y = a.clone()
        y.mul_(2)
        return (y * a).sum()

    a = torch.tensor([1.0, -2.0, 3.0])
    close(tx.grad(f)(a), tf.grad(f)(a))
    close(f(a.clone()), tx.jit(f)(a))


@pytest.mark.parametrize(
    "op, args",
    [
        ("t_", ()),
        ("transpose_", (0, 1)),
        ("swapaxes_", (1, 0)),
        ("unsqueeze_", (1,)),
        ("squeeze_", ()),
    ],
)
def test_inplace_layout_ops(op, args):
    def f(x):
        y = x.clone() * 1
        getattr(y, op)(*args)
        y.mul_(torch.arange(1.0, 1 + y.numel()).reshape(y.shape))  # the new layout is used
        return y

    x = torch.arange(6.0).reshape(2, 3)
    if op == "squeeze_":
        x = x.reshape(1, 2, 3)
    close(tx.jit(f)(x), f(x))
    g = lambda x: (f(x) ** 2).sum()  # noqa: E731
    close(tx.grad(g)(x), tf.grad(g)(x))
    close(tx.vmap(f)(torch.stack([x, x + 1])), torch.stack([f(x), f(x + 1)]))


def test_inplace_layout_op_on_a_view_leaves_the_base_layout():
    def f(x):
        y = x * 1
        v = y[:, :2]
        v.t_()
        v[0].add_(10)  # column 0 of y
        return y, v

    x = torch.arange(6.0).reshape(2, 3)
    close(tx.jit(f)(x), f(x))


def test_resize_as_keeps_the_elements():
    def f(a, b):
        y = a * 1
        y.resize_as_(b)
        return y + b

    a, b = torch.arange(6.0), torch.ones(2, 3)
    close(tx.jit(f)(a, b), f(a, b))
    with pytest.raises(MutationError, match="number of elements"):
        tx.jit(f)(torch.arange(5.0), b)


# ------------------------------------------------------------------- no_grad, .data, detach


def _no_grad_block(ctx):
    def f(x):
        with ctx():
            c = x * 2
        return (c * x).sum()

    return f


NO_GRAD_BLOCKS = {
    "no_grad": torch.no_grad,
    "set_grad_enabled": lambda: torch.set_grad_enabled(False),
    "inference_mode": torch.inference_mode,
}


@pytest.mark.parametrize("name", sorted(NO_GRAD_BLOCKS))
def test_no_grad_block_stops_gradients(name):
    f = _no_grad_block(NO_GRAD_BLOCKS[name])
    want = tf.grad(_no_grad_block(torch.no_grad))  # torch.func refuses inference tensors
    x = torch.tensor([1.0, -2.0, 0.5])
    close(tx.grad(f)(x), want(x))
    close(tx.grad(tx.jit(f))(x), want(x))
    close(tx.jacrev(f)(x), tf.jacrev(_no_grad_block(torch.no_grad))(x))
    close(tx.vjp(f, x)[1](torch.tensor(1.0))[0], want(x))
    close(tx.vmap(tx.grad(f))(torch.stack([x, -x])), tf.vmap(want)(torch.stack([x, -x])))


def test_no_grad_around_the_transform_is_ignored_like_torch_func():
    f = _no_grad_block(torch.no_grad)
    g = lambda x: (x * x).sum()  # noqa: E731
    x = torch.tensor([1.0, 3.0])
    with torch.no_grad():
        close(tx.grad(f)(x), tf.grad(f)(x))
        close(tx.grad(g)(x), 2 * x)
        jg = tx.jit(g)
        jg(x)  # traced inside no_grad: the cached trace must still differentiate
    close(tx.grad(jg)(x), 2 * x)


def test_writes_to_a_view_inside_no_grad_reach_the_base():
    def f(x):
        y = x * 1
        with torch.no_grad():
            y[0].fill_(5.0)
            d = y.detach()
        d[1].zero_()  # a detached tensor shares memory with its base, as in torch
        return y

    x = torch.arange(6.0).reshape(3, 2)
    close(tx.jit(f)(x), f(x))


def test_data_and_detach_are_constants_under_every_transform():
    for read in (lambda x: x.data, lambda x: x.detach()):
        f = lambda x: (read(x) * x).sum()  # noqa: E731
        x = torch.full((3,), 3.0)
        close(tx.grad(f)(x), tf.grad(f)(x))
        close(tx.jvp(f, (x,), (torch.ones(3),)), tf.jvp(f, (x,), (torch.ones(3),)))
        # stop_gradient holds at every level (JAX's rule; torch.func detaches only the innermost
        # level and gives the identity here: docs/conventions.md)
        close(tx.hessian(f)(x), torch.zeros(3, 3))


# --------------------------------------------------------------------------------- vmap axes


def test_vmap_none_argument_does_not_shift_in_axes():
    def f(w, b, y):
        assert b is None
        return w * y

    w, y = torch.randn(3), torch.randn(4, 3)
    out = tx.vmap(f, in_axes=(None, None, 0))(w, None, y)
    close(out, tf.vmap(f, in_dims=(None, None, 0))(w, None, y))
    close(tx.vmap(f, in_axes=(0, None, 0))(y, None, y), y * y)


def test_vmap_keeps_torch_rank_checks():
    with pytest.raises(RuntimeError):
        tf.vmap(torch.mv)(torch.ones(4, 2, 3, 3), torch.ones(4, 3))
    with pytest.raises(ValueError, match="mv: expected a 2-D matrix"):
        tx.vmap(torch.mv)(torch.ones(4, 2, 3, 3), torch.ones(4, 3))
    close(tx.vmap(torch.mv)(torch.ones(4, 3, 3), torch.ones(4, 3)), torch.full((4, 3), 3.0))


def test_vmap_out_axes_moves_the_batch_axis():
    x = torch.randn(2, 3, 4, 5)
    close(tx.vmap(lambda v: v, out_axes=3)(x), tf.vmap(lambda v: v, out_dims=3)(x))
    close(tx.vmap(lambda v: v * 2, out_axes=-1)(x), tf.vmap(lambda v: v * 2, out_dims=-1)(x))
    with pytest.raises(ValueError, match="out_axes=3 is out of range"):
        tx.vmap(lambda v: v, out_axes=3)(torch.ones(2, 3, 4)[:, :, 0])


# ---------------------------------------------------------------------- traced integer index


def test_indexing_with_a_traced_0d_integer_tensor():
    def f(h, i):
        y = h * 1
        y[i].mul_(10)  # a 0-d integer tensor index is a view in torch: the write reaches y
        return h[i] * h[1:][i - 1] + h[..., i].sum(), y

    h = torch.arange(12.0).reshape(3, 4)
    for i in (torch.tensor(2), torch.tensor(-1), torch.tensor(0, dtype=torch.int32)):
        close(tx.jit(f)(h, i), f(h, i))
    g = lambda h, i: (f(h, i)[1] ** 2).sum()  # noqa: E731
    close(tx.grad(g)(h, torch.tensor(1)), tf.grad(g)(h, torch.tensor(1)))


# ------------------------------------------------- derivatives at differentiable points


def _fd_diag(g, x, eps=1e-6):
    """d g_i / d x_i by central finite differences in float64 (the independent oracle)."""
    out = torch.zeros_like(x)
    for i in range(x.numel()):
        e = torch.zeros_like(x)
        e[i] = eps
        out[i] = ((g(x + e) - g(x - e)) / (2 * eps))[i]
    return out


def test_xlogy_derivative_in_x_at_zero_is_log_y():
    y = torch.tensor([0.5, 2.0, 2.0], dtype=F64)
    f = lambda x: torch.xlogy(x, y).sum()  # noqa: E731
    x = torch.tensor([0.0, 0.0, 1.0], dtype=F64)
    want = torch.log(y)
    close(tx.grad(f)(x), want)
    close(tf.grad(f)(x), want)
    close(tx.jvp(lambda x: torch.xlogy(x, y), (x,), (torch.ones(3, dtype=F64),))[1], want)
    # values where x == 0 stay 0 for y == 0 and y == inf, nan for y == nan
    ys = torch.tensor([0.0, math.inf, math.nan, 3.0], dtype=F64)
    xs = torch.tensor([0.0, 0.0, 0.0, 2.0], dtype=F64)
    close(tx.jit(torch.xlogy)(xs, ys), torch.xlogy(xs, ys))
    g = tx.grad(lambda y: torch.xlogy(xs[[0, 3]], y).sum())(ys[[0, 3]] + 1)
    close(g, T(0, 2 / 4))


@pytest.mark.parametrize("fn", [F.softplus, F.logsigmoid, F.mish])
def test_second_derivatives_of_softplus_family_at_zero(fn):
    x = torch.tensor([0.0, 1.0, -2.0, 30.0], dtype=F64)
    f = lambda x: fn(x).sum()  # noqa: E731
    want = torch.diagonal(tf.hessian(f)(x))
    close(torch.diagonal(tx.hessian(f)(x)), want)
    fd = _fd_diag(tf.grad(f), x[:3])
    close(want[:3], fd, tol=1e-5)  # torch agrees with finite differences
    close(tx.jit(fn)(x), fn(x))
    big = torch.tensor([-100.0, -30.0, 25.0, 100.0])
    close(tx.jit(fn)(big), fn(big))
    close(tx.grad(lambda v: fn(v).sum())(big), tf.grad(lambda v: fn(v).sum())(big))


def test_log_softmax_with_an_infinite_entry_is_nan_like_torch():
    x = torch.tensor([[1.0, math.inf, 0.5], [1.0, 2.0, 3.0], [-math.inf] * 3])
    want = F.log_softmax(x, -1)
    close(tx.jit(lambda x: F.log_softmax(x, -1))(x), want)
    close(tx.vmap(lambda r: F.log_softmax(r, 0))(x), want)
    close(tx.jit(torch.logsumexp, static_argnums=1)(x, 1), torch.logsumexp(x, 1))


def test_logsumexp_over_an_empty_dimension():
    x = torch.zeros(2, 0)
    want = torch.logsumexp(x, 1)
    f = lambda x: torch.logsumexp(x, 1)  # noqa: E731
    close(tx.jit(f)(x), want)
    close(tx.vmap(f)(torch.zeros(3, 2, 0)), torch.full((3, 2), -math.inf))
    close(tx.jvp(f, (x,), (x,)), (want, torch.zeros(2)))
    close(tx.grad(lambda x: f(x).exp().sum())(x), torch.zeros(2, 0))


# ------------------------------------------ gradients at kinks and ties: torch's conventions

T = lambda *v: torch.tensor(v, dtype=F64)  # noqa: E731

KINKS = {
    "vector_norm at 0": (lambda x: torch.linalg.vector_norm(x), T(0, 0, 0)),
    "vector_norm ord 3 at 0": (lambda x: torch.linalg.vector_norm(x, 3), T(0, 0, 0)),
    "norm at 0": (lambda x: torch.norm(x), T(0, 0)),
    "std of a constant": (lambda x: torch.std(x), T(2, 2, 2)),
    "std_mean of a constant": (lambda x: torch.std_mean(x)[0], T(2, 2, 2)),
    "atan2(0, 0)": (lambda x: torch.atan2(x, x * 0).sum() + torch.atan2(x * 0, x).sum(), T(0, 1)),
    "relu6 at 0 and 6": (lambda x: F.relu6(x).sum(), T(0, 6, 3, -1, 7)),
    "hardtanh at +-1": (lambda x: F.hardtanh(x).sum(), T(-1, 1, 0, 2)),
    "clamp at its bounds": (lambda x: torch.clamp(x, -1, 1).sum(), T(-1, 1, 0, 2)),
    "hardsigmoid at +-3": (lambda x: F.hardsigmoid(x).sum(), T(-3, 3, 0, 4)),
    "hardswish at +-3": (lambda x: F.hardswish(x).sum(), T(-3, 3, 0, 4)),
    "max(dim) with ties": (lambda x: torch.max(x, 0).values.sum(), T(1, 3, 3)),
    "min(dim) with ties": (lambda x: torch.min(x.reshape(2, 2), 1).values.sum(), T(1, 1, 3, 0)),
    "max() with ties (split)": (lambda x: torch.max(x), T(1, 3, 3)),
    "amax with ties (split)": (lambda x: torch.amax(x.reshape(2, 2), 1).sum(), T(1, 1, 3, 0)),
    "prod(1/x) at [0, 2]": (lambda x: torch.prod(1 / x), T(0, 2)),
    "prod with zeros": (lambda x: torch.prod(x), T(0, 2, 3)),
    "normalize of 0": (lambda x: F.normalize(x, dim=0).sum(), T(0, 0, 0)),
    "elu at 0": (lambda x: F.elu(x, alpha=2.0).sum(), T(0, -0.5, 1)),
    "cosine_similarity of 0": (lambda x: F.cosine_similarity(x, x * 0 + 1, dim=0), T(0, 0)),
}


@pytest.mark.parametrize("name", sorted(KINKS))
def test_gradient_at_kinks_and_ties_follows_torch(name):
    f, x = KINKS[name]
    close(tx.grad(f)(x), tf.grad(f)(x))
    close(tx.jit(tx.grad(f))(x), tf.grad(f)(x))


def test_fmax_fmin_ties_send_the_derivative_to_the_first_argument():
    a = T(1, 2)
    for fn in (torch.fmax, torch.fmin, torch.maximum, torch.minimum):
        f = lambda a, b: fn(a, b).sum()  # noqa: E731
        close(tx.grad(f, argnums=(0, 1))(a, a.clone()), tf.grad(f, argnums=(0, 1))(a, a.clone()))
    b = T(math.nan, 1)
    close(tx.jit(torch.fmax)(a, b), torch.fmax(a, b))
    close(tx.jit(torch.fmin)(b, a), torch.fmin(b, a))


@pytest.mark.parametrize("reduce", ["min", "amin", "max"])
def test_extremum_jvp_ignores_infinite_tangents_it_does_not_select(reduce):
    sign = -1 if reduce == "max" else 1
    if reduce == "amin":
        f = lambda x: torch.amin(1 / x, 0)  # noqa: E731
    else:
        f = lambda x: getattr(torch, reduce)(sign / x, 0).values  # noqa: E731
    x, t = T(1, 0), T(1, 1)
    close(tx.jvp(f, (x,), (t,)), tf.jvp(f, (x,), (t,)))


@pytest.mark.parametrize("fn", [F.elu, F.selu, F.celu])
def test_second_derivative_of_elu_family_at_zero(fn):
    x = T(0, 1, -1, -0.25)
    f = lambda x: fn(x).sum()  # noqa: E731
    close(torch.diagonal(tx.hessian(f)(x)), torch.diagonal(tf.hessian(f)(x)))
    close(tx.grad(f)(x), tf.grad(f)(x))


# ------------------------------------------------------------ Python scalars under jit


def test_jit_python_float_keeps_float64_precision():
    f = tx.jit(lambda x, s: x * s)
    x = torch.ones(3, dtype=F64)
    assert (f(x, 1 / 3) - 1 / 3).abs().max().item() <= 1e-16
    assert f(x, 0.1).eq(x * 0.1).all()
    # weak typing: the scalar takes the tensor's dtype, as a Python scalar does in torch
    for t, s in ((torch.ones(2), 1 / 3), (torch.ones(2, dtype=torch.int64), 0.5)):
        out, want = f(t, s), t * s
        assert out.dtype == want.dtype
        close(out, want)
    assert f(torch.ones(2, dtype=torch.float16), 1 / 3).dtype == torch.float16
    g = tx.jit(lambda s, t: s * t + s / t)
    assert abs(g(1 / 3, 3.0).item() - (1 / 3 * 3.0 + (1 / 3) / 3.0)) <= 1e-15
    close(g(7, 2), torch.tensor(7 * 2 + 7 / 2))


# -------------------------------------------------------------------------------- randomness

B = 2000  # rows per statistical check: bounds below are about 5 standard deviations wide

RANDOM_FNS = {
    "randperm": lambda x: torch.randperm(4),
    "randint": lambda x: torch.randint(0, 10, (8,)),
    "normal": lambda x: torch.normal(2.0, 3.0, (8,)),
    "multinomial": lambda x: torch.multinomial(torch.tensor([1.0, 2.0, 3.0, 4.0]), 2),
    "multinomial_replacement": lambda x: torch.multinomial(x, 4, replacement=True),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.5, True),
    "feature_alpha_dropout": lambda x: F.feature_alpha_dropout(x.reshape(2, 2, 2), 0.5, True),
    "dropout2d": lambda x: F.dropout2d(x.reshape(2, 2, 2, 1), 0.5, True),
}


@pytest.mark.parametrize("name", sorted(RANDOM_FNS))
def test_vmap_randomness_modes(name):
    fn = RANDOM_FNS[name]
    x = torch.ones(6, 8) if "multinomial" not in name else torch.ones(6, 4)
    for wrap in (lambda f: f, tx.jit):
        diff = wrap(tx.vmap(fn, randomness="different"))(x)
        assert any(not torch.equal(diff[0], diff[i]) for i in range(1, 6)), "rows should differ"
        same = wrap(tx.vmap(fn, randomness="same"))(x)
        assert all(torch.equal(same[0], same[i]) for i in range(1, 6)), "rows should be equal"
        with pytest.raises(ValueError, match="randomness"):
            wrap(tx.vmap(fn, randomness="error"))(x)


def _rows(fn, n_in=8):
    return tx.vmap(fn, randomness="different")(torch.ones(B, n_in))


def test_randperm_rows_are_uniform_permutations():
    out = _rows(RANDOM_FNS["randperm"])
    assert torch.equal(out.sort(-1).values, torch.arange(4).expand(B, 4))
    counts = torch.bincount(out[:, 0], minlength=4)
    assert ((counts - B / 4).abs() < 100).all(), counts
    one = tx.jit(lambda x: torch.randperm(6) + x)  # a draw per call, not a traced constant
    draws = {tuple(one(torch.zeros(6)).tolist()) for _ in range(8)}
    assert len(draws) > 1


def test_randint_and_normal_distributions():
    r = _rows(RANDOM_FNS["randint"])
    assert r.dtype == torch.int64 and r.min() >= 0 and r.max() <= 9
    assert torch.bincount(r.flatten(), minlength=10).min() > 0
    assert abs(r.double().mean().item() - 4.5) < 0.15
    z = _rows(RANDOM_FNS["normal"])
    assert abs(z.mean().item() - 2.0) < 0.15 and abs(z.std().item() - 3.0) < 0.15
    zt = tx.vmap(lambda m: torch.normal(m, 0.5), randomness="different")(torch.full((B, 8), -1.0))
    assert abs(zt.mean().item() + 1.0) < 0.03 and abs(zt.std().item() - 0.5) < 0.03


def test_multinomial_frequencies():
    w = torch.tensor([1.0, 2.0, 3.0, 4.0])
    out = _rows(RANDOM_FNS["multinomial"], 4)
    assert (out[:, 0] != out[:, 1]).all(), "without replacement: distinct categories"
    first = torch.bincount(out[:, 0], minlength=4)
    assert ((first - B * w / w.sum()).abs() < 100).all(), first
    rep = tx.vmap(lambda p: torch.multinomial(p, 4, replacement=True), randomness="different")(
        w.expand(B, 4)
    )
    freq = torch.bincount(rep.flatten(), minlength=4)
    assert ((freq - 4 * B * w / w.sum()).abs() < 200).all(), freq


def test_alpha_dropout_keeps_mean_and_variance():
    torch.manual_seed(0)
    x = torch.randn(B, 8)
    out = tx.vmap(lambda r: F.alpha_dropout(r, 0.3, True), randomness="different")(x)
    assert abs(out.mean().item()) < 0.05 and abs(out.std().item() - 1.0) < 0.05
    dropped_value = out.flatten().mode().values
    assert abs((out == dropped_value).double().mean().item() - 0.3) < 0.02
    fa = tx.vmap(RANDOM_FNS["feature_alpha_dropout"], randomness="different")(torch.randn(B, 8))
    flat = fa.reshape(B, 2, 2, 2)
    # a dropped channel is constant; a kept one is an affine map of the input
    assert abs((flat[..., 0] == flat[..., 1]).double().mean().item() - 0.5) < 0.05


def test_dropout2d_drops_whole_channels():
    out = _rows(RANDOM_FNS["dropout2d"]).reshape(B, 2, 2, 2)
    zero = (out == 0).all(-1)
    kept = (out == 2.0).all(-1)
    assert (zero | kept).all()
    assert abs(zero.double().mean().item() - 0.5) < 0.05


def test_jit_draws_are_not_merged():
    f = tx.jit(lambda x: (torch.rand(3) + x, torch.rand(3) + x))
    a, b = f(torch.zeros(3))
    assert not torch.equal(a, b)


def test_explicit_generator_gives_eager_numbers():
    f = lambda: torch.randn(3, generator=torch.Generator().manual_seed(0))  # noqa: E731
    jf = tx.jit(f)
    for _ in range(3):
        close(jf(), f())
    # a generator from outside advances as in eager code, call after call
    g_eager, g_jit = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    h = lambda x, g: x + torch.rand(2, generator=g) + torch.randint(0, 9, (2,), generator=g)  # noqa: E731
    jh = tx.jit(lambda x: h(x, g_jit))
    for _ in range(3):
        close(jh(torch.zeros(2)), h(torch.zeros(2), g_eager))
    gg_eager, gg = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    k = lambda x, g: (x * torch.randn(2, generator=g)).sum()  # noqa: E731
    close(
        tx.grad(lambda x: k(x, gg))(torch.ones(2)), tf.grad(lambda x: k(x, gg_eager))(torch.ones(2))
    )
    close(
        tx.grad(lambda x: k(x, gg))(torch.ones(2)), tf.grad(lambda x: k(x, gg_eager))(torch.ones(2))
    )
