"""Sorting and order statistics under jit, grad and vmap against torch eager and torch.func
(float64): values, indices (torch's tie conventions), and gradients through the permutation."""

import math

import pytest
import torch

import thunderx as tx

F64 = torch.float64
GEN = torch.Generator().manual_seed(1)


def rand(*shape):
    return torch.randn(*shape, dtype=F64, generator=GEN)


TIES = torch.tensor([[3.0, 1.0, 3.0, 2.0, 1.0, 3.0], [0.0, 0.0, 5.0, -1.0, 5.0, 0.0]], dtype=F64)
WITH_NAN = torch.tensor([[1.0, float("nan"), 3.0, 2.0], [4.0, 2.0, 2.0, 1.0]], dtype=F64)
ALL_NAN = torch.tensor([[float("nan"), 1.0], [float("nan"), 2.0], [float("nan"), 0.5]], dtype=F64)
Q = torch.tensor([0.0, 0.3, 0.5, 0.9, 1.0], dtype=F64)

CASES = [
    ("sort", lambda x: torch.sort(x), rand(3, 5)),
    ("sort_dim0_descending", lambda x: torch.sort(x, 0, descending=True), rand(4, 3)),
    ("sort_stable_ties", lambda x: torch.sort(x, stable=True), TIES),
    ("sort_stable_descending_ties", lambda x: torch.sort(x, descending=True, stable=True), TIES),
    ("sort_nan", lambda x: torch.sort(x, stable=True), WITH_NAN),
    ("argsort", lambda x: torch.argsort(x, dim=1), rand(3, 5)),
    ("argsort_stable_ties", lambda x: torch.argsort(x, stable=True), TIES),
    ("msort", lambda x: torch.msort(x), rand(4, 3)),
    ("sort_method", lambda x: x.sort(dim=-1).values, rand(2, 3)),
    ("topk", lambda x: torch.topk(x, 2), rand(3, 5)),
    ("topk_smallest_dim0", lambda x: torch.topk(x, 3, dim=0, largest=False), rand(4, 3)),
    ("kthvalue", lambda x: torch.kthvalue(x, 2), rand(3, 5)),
    ("kthvalue_keepdim_dim0", lambda x: torch.kthvalue(x, 3, 0, keepdim=True), rand(4, 3)),
    ("median_all", lambda x: torch.median(x), rand(3, 4)),
    ("median_dim", lambda x: torch.median(x, 1), rand(3, 4)),
    ("median_ties", lambda x: torch.median(x, 1), TIES),
    ("median_nan", lambda x: torch.median(x, 1), WITH_NAN),
    ("nanmedian_nan", lambda x: torch.nanmedian(x, 1), WITH_NAN),
    ("nanmedian_all", lambda x: torch.nanmedian(x), WITH_NAN),
    ("quantile_linear", lambda x: torch.quantile(x, Q, dim=1), rand(3, 6)),
    ("quantile_scalar_all", lambda x: torch.quantile(x, 0.37), rand(3, 6)),
    ("quantile_keepdim", lambda x: torch.quantile(x, Q, dim=0, keepdim=True), rand(5, 2)),
    ("quantile_lower", lambda x: torch.quantile(x, Q, 1, interpolation="lower"), rand(3, 6)),
    ("quantile_higher", lambda x: torch.quantile(x, Q, 1, interpolation="higher"), rand(3, 6)),
    ("quantile_midpoint", lambda x: torch.quantile(x, Q, 1, interpolation="midpoint"), rand(3, 6)),
    ("quantile_nearest", lambda x: torch.quantile(x, Q, 1, interpolation="nearest"), rand(3, 5)),
    ("quantile_nan", lambda x: torch.quantile(x, 0.5, dim=1), WITH_NAN),
    ("nanquantile", lambda x: torch.nanquantile(x, Q, dim=1), WITH_NAN),
    ("nanquantile_all_nan_row", lambda x: torch.nanquantile(x, 0.4, dim=0), ALL_NAN),
    ("nanquantile_all", lambda x: torch.nanquantile(x, Q, interpolation="midpoint"), WITH_NAN),
    ("cummax", lambda x: torch.cummax(x, 1), rand(3, 5)),
    ("cummin_ties", lambda x: torch.cummin(x, 1), TIES),
    ("cummax_ties", lambda x: torch.cummax(x, 1), TIES),
    ("logcumsumexp", lambda x: torch.logcumsumexp(x, 1), rand(3, 5)),
    ("logcumsumexp_wide_range", lambda x: torch.logcumsumexp(x * 300.0, 0), rand(6, 2)),
    (
        "searchsorted",
        lambda x: torch.searchsorted(torch.arange(-2.0, 2.0, 0.5, dtype=F64), x),
        rand(3, 4),
    ),  # fmt: skip
    (
        "searchsorted_right_rows",
        lambda x: torch.searchsorted(torch.sort(x, 1).values, x[:, :2], right=True),
        TIES,
    ),  # fmt: skip
    (
        "searchsorted_side_int32",
        lambda x: torch.searchsorted(torch.sort(x, 1).values, x, side="right", out_int32=True),
        rand(2, 5),
    ),  # fmt: skip
    (
        "bucketize",
        lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 1.0], dtype=F64)),
        rand(3, 4),
    ),  # fmt: skip
]
IDS = [c[0] for c in CASES]


def _close(got, want, tol=1e-7):
    gl, wl = tx.tree.leaves(got), tx.tree.leaves(want)
    assert len(gl) == len(wl), f"{len(gl)} outputs, expected {len(wl)}"
    for g, w in zip(gl, wl):
        g = torch.as_tensor(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (
            f"{g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        )
        torch.testing.assert_close(g, w, rtol=tol, atol=tol, equal_nan=True)


def _float_outputs(out):
    return [o for o in tx.tree.leaves(out) if o.dtype.is_floating_point]


def _loss(fn):
    def f(x):
        outs = _float_outputs(fn(x))
        weights = [torch.arange(o.numel(), dtype=F64).reshape(o.shape) + 1 for o in outs]
        return sum(torch.nansum(o * w) for o, w in zip(outs, weights))

    return f


@pytest.mark.parametrize("name,fn,x", CASES, ids=IDS)
def test_jit_matches_torch(name, fn, x):
    _close(tx.jit(fn)(x), fn(x))


# integer-valued functions (argsort, searchsorted, bucketize) are covered by
# test_integer_ops_have_zero_grad
DIFFERENTIABLE = [c for c in CASES if _float_outputs(c[1](c[2]))]


@pytest.mark.parametrize("name,fn,x", DIFFERENTIABLE, ids=[c[0] for c in DIFFERENTIABLE])
def test_grad_matches_torch_func(name, fn, x):
    _close(tx.grad(_loss(fn))(x), torch.func.grad(_loss(fn))(x), 1e-6)


@pytest.mark.parametrize("name,fn,x", CASES, ids=IDS)
def test_vmap_matches_loop(name, fn, x):
    batched = torch.stack([x, x.flip(-1), x * 2.0])
    want = tx.tree.map(lambda *xs: torch.stack(xs), *[fn(b) for b in batched])
    _close(tx.vmap(fn)(batched), want)


def test_integer_ops_have_zero_grad():
    x = rand(3, 4)
    seq = torch.sort(rand(5)).values

    def f(x):
        idx = torch.searchsorted(seq, x) + torch.argsort(x, dim=1)
        return (x * idx.to(F64)).sum()

    _close(tx.grad(f)(x), torch.func.grad(f)(x))


def test_sort_primitive_orders_by_several_keys():
    from thunderx.primitives import sort as SO

    k1 = torch.tensor([1, 0, 1, 0, 1])
    k2 = torch.tensor([2, 3, 0, 3, 1])
    v = torch.arange(5.0, dtype=F64)
    got = SO.sort([k1, k2, v], 0, num_keys=2)
    order = sorted(range(5), key=lambda i: (int(k1[i]), int(k2[i])))  # Python's sort is stable
    assert got[2].tolist() == [float(i) for i in order]
    jitted = tx.jit(lambda a, b, c: SO.sort([a, b, c], 0, num_keys=2))(k1, k2, v)
    assert jitted[2].tolist() == got[2].tolist()


def test_hessian_of_a_sorted_weighted_sum_matches_torch_func():
    x = rand(5)

    def f(v):
        s = torch.sort(v).values
        return (torch.arange(5, dtype=F64) * s**3).sum() + torch.logcumsumexp(v, 0).sum()

    _close(tx.hessian(f)(x), torch.func.hessian(f)(x), 1e-6)


@pytest.mark.parametrize("bad", [math.nan, math.inf, None])
@pytest.mark.parametrize("at", [0, 2, 4])
@pytest.mark.parametrize("big", [None, 800.0])
def test_logcumsumexp_derivative_reaches_only_the_entries_it_depends_on(bad, at, big):
    # y_k = log sum_{i <= k} exp(x_i): a nan/inf cotangent of y_k reaches x_0..x_k only, a
    # nan/inf tangent of x_i reaches y_i..y_n only; with an entry of 800 the weights exp(x_i - y_k)
    # of the terms i > k (absent from the sums) overflow. Oracle: the sums written term by term.
    x = torch.tensor([-0.38, 0.5, 0.1, 1.2, -2.0], dtype=F64)
    if big is not None:
        x[at] = big
    y = torch.logcumsumexp(x, 0)
    v = torch.tensor([1.0, -2.0, 0.5, 3.0, 0.25], dtype=F64)
    if bad is not None:
        v[at] = bad
    f = lambda t: torch.logcumsumexp(t, 0)  # noqa: E731
    n = len(x)
    want_vjp = torch.stack(
        [sum(v[k] * torch.exp(x[i] - y[k]) for k in range(i, n)) for i in range(n)]
    )
    want_jvp = torch.stack(
        [sum(v[i] * torch.exp(x[i] - y[k]) for i in range(k + 1)) for k in range(n)]
    )
    for mode in (lambda g: g, tx.jit):
        got_vjp = mode(lambda x, v: tx.vjp(f, x)[1](v)[0])(x, v)
        got_jvp = mode(lambda x, v: tx.jvp(f, (x,), (v,))[1])(x, v)
        torch.testing.assert_close(got_vjp, want_vjp, equal_nan=True)
        torch.testing.assert_close(got_jvp, want_jvp, equal_nan=True)


@pytest.mark.parametrize("at", [0, 2, 4])
def test_logcumsumexp_second_derivatives_with_overflowing_weights(at):
    # an entry of 800 after smaller ones: the weights exp(x_i - y_k) of the terms i > k overflow,
    # and reverse over reverse met them with a zero cotangent (0 * inf = nan) until the exponent
    # was selected too. Oracle: torch.func's reverse over reverse (its forward mode scales by
    # the largest entry and loses digits here: docs/conventions.md, logcumsumexp-forward-range)
    x = torch.tensor([-0.38, 0.5, 0.1, 1.2, -2.0], dtype=F64)
    x[at] = 800.0
    w = torch.tensor([1.0, -2.0, 0.5, 3.0, 0.25], dtype=F64)
    f = lambda t: (torch.logcumsumexp(t, 0) * w).sum()  # noqa: E731
    want = torch.func.jacrev(torch.func.jacrev(f))(x)
    for got in (tx.jacrev(tx.jacrev(f))(x), tx.hessian(f)(x), tx.jit(tx.hessian(f))(x)):
        assert not torch.isnan(got).any()
        _close(got, want, 1e-9)


@pytest.mark.parametrize("scale", [1.0, 1e20, 4e88])
def test_logcumsumexp_reverse_mode_where_the_outputs_round_to_the_entries(scale):
    # at 1e20 and beyond y_k = log sum exp(x_i) rounds to the largest entry, so the weights
    # exp(x_i - y_k) lose log(k + 1) (equal entries got weight 1 each). Oracle: each prefix's
    # softmax of the entries' exact differences (docs/conventions.md, logcumsumexp-rounded-output)
    offsets = torch.tensor([0.0, 0.0, -1.0, 0.0, 2.0], dtype=F64)
    x = scale + offsets * (scale * 2**-50 if scale > 1 else 1.0)
    ct = torch.tensor([0.3, -0.7, 1.1, 0.5, -0.2], dtype=F64)
    d = x - x.max()  # exact: the entries are close multiples of one ulp
    want = torch.zeros(5, dtype=F64)
    for k in range(5):
        w = torch.softmax(d[: k + 1], 0)
        want[: k + 1] += ct[k] * w
    f = lambda v: torch.logcumsumexp(v, 0)  # noqa: E731
    for got in (tx.vjp(f, x)[1](ct)[0], tx.jit(lambda v, c: tx.vjp(f, v)[1](c)[0])(x, ct)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_bad_arguments_name_the_problem():
    x = rand(3, 4)
    with pytest.raises(IndexError, match="kthvalue"):
        tx.jit(lambda v: torch.kthvalue(v, 9))(x)
    with pytest.raises(ValueError, match="interpolation"):
        tx.jit(lambda v: torch.quantile(v, 0.5, interpolation="cubic"))(x)
    with pytest.raises(RuntimeError, match="topk"):
        tx.jit(lambda v: torch.topk(v, 7))(x)


def test_logcumsumexp_reverse_mode_with_an_infinite_entry_is_logsumexps():
    # a prefix holding +inf: the derivative exp(x_i - y_k) is 0 at its finite entries and nan at
    # the infinite ones, as torch's (and logsumexp's); the prefix softmax's nan sum reached all
    inf = float("inf")
    w = torch.tensor([0.3, -0.5, 1.0], dtype=torch.float64)
    for x in ([inf, 1.0, 2.15], [inf, inf, 2.15], [1.0, inf, 2.15], [-inf, 1.0, 2.0]):
        x = torch.tensor(x, dtype=torch.float64)

        def f(x):
            return (torch.logcumsumexp(x, 0) * w).sum()

        want = torch.func.grad(f)(x)
        torch.testing.assert_close(tx.grad(f)(x), want, equal_nan=True)
        torch.testing.assert_close(tx.jit(tx.grad(f))(x), want, equal_nan=True)
