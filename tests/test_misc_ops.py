"""op_db functions written on the language layer (thunderx/lang/misc_ops.py, lang/extras.py):
index_put with None and boolean indices, repeat_interleave with tensor repeats, mode, frexp,
nextafter, torch.gradient, as_strided / as_strided_copy / as_strided_scatter. Each under jit (vs
torch eager), grad (vs torch.autograd or float64 finite differences) and vmap (vs a Python loop
or torch.func.vmap)."""

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx.errors import ConcretizationError, UnsupportedOperationError

F64 = torch.float64
GEN = torch.Generator().manual_seed(0)


def rand(*shape):
    return torch.randn(*shape, dtype=F64, generator=GEN)


def close(a, b, tol=1e-9):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol, equal_nan=True)


def autograd_grad(f, *xs, ct=None):
    """torch.autograd's vjp of f at xs with cotangent ct (ones by default)."""
    xs = [x.clone(memory_format=torch.contiguous_format).requires_grad_() for x in xs]
    out = f(*xs)
    ct = torch.ones_like(out) if ct is None else ct
    return torch.autograd.grad(out, xs, ct, allow_unused=True, materialize_grads=True)


def finite_difference_vjp(f, x, ct, eps=1e-6):
    flat = torch.zeros(x.numel(), dtype=F64)
    for i in range(x.numel()):
        d = torch.zeros(x.numel(), dtype=F64)
        d[i] = eps
        d = d.reshape(x.shape)
        flat[i] = ((f(x + d) - f(x - d)) * ct).sum() / (2 * eps)
    return flat.reshape(x.shape)


def check_all(f, *xs, tol=1e-9):
    """f under jit vs eager, grad (all float args) vs torch.autograd, vmap vs a loop."""
    want = f(*xs)
    close(tx.jit(f)(*xs), want, tol)
    ct = rand(*want.shape)
    argnums = tuple(range(len(xs)))
    got = tx.grad(lambda *a: (f(*a) * ct).sum(), argnums=argnums)(*xs)
    for g, w in zip(got, autograd_grad(f, *xs, ct=ct)):
        close(g, w, tol)
    batch = [torch.stack([x, 0.5 * x + 0.25]) for x in xs]
    loop = torch.stack([f(*[b[k].clone() for b in batch]) for k in range(2)])  # own storage
    close(tx.vmap(f)(*batch), loop, tol)


# ------------------------------------------------------------------------------------ index_put


def test_index_put_with_concrete_bool_indices():
    x, v = rand(5, 4), rand(4)
    mask = torch.tensor([True, False, True, True, False])
    idx = torch.tensor([2, 0])
    for accumulate in (False, True):
        check_all(lambda x, v: torch.index_put(x, (mask,), v, accumulate), x, v)
        check_all(lambda x, v: x.index_put((mask, idx[:1]), v[:1], accumulate), x, v)


def test_index_put_refuses_none_as_torch_does():
    x = rand(5, 4)
    with pytest.raises(TypeError):
        torch.index_put(x, (None, torch.tensor([1])), rand(5, 1))
    with pytest.raises(TypeError, match="None"):
        tx.jit(lambda x: torch.index_put(x, (None, torch.tensor([1])), x[:, :1]))(x)


def test_index_put_with_traced_mask_and_row_values():
    x, v, m = rand(5, 4), rand(4), rand(5)
    for accumulate in (False, True):

        def f(x, v, m):
            return torch.index_put(x, (m > 0,), v, accumulate)

        close(tx.jit(f)(x, v, m), f(x, v, m))
        ms = torch.stack([m, -m])
        close(tx.vmap(f, in_axes=(None, None, 0))(x, v, ms), torch.stack([f(x, v, r) for r in ms]))
    with pytest.raises(ConcretizationError):  # one value per selected row: a data-dependent count
        tx.jit(lambda x, m: torch.index_put(x, (m > 0,), x[:2]))(x, m)


# ----------------------------------------------------------------------------- repeat_interleave


def test_repeat_interleave_with_tensor_repeats():
    x = rand(3, 4)
    reps = torch.tensor([0, 2, 1])
    check_all(lambda x: torch.repeat_interleave(x, reps, dim=0), x)
    check_all(lambda x: x.repeat_interleave(torch.tensor(2), dim=1), x)
    check_all(lambda x: torch.repeat_interleave(x, torch.arange(12) % 3), x)
    # traced repeats with output_size: the length is known, the source rows are computed
    f = lambda x, r: torch.repeat_interleave(x, r, dim=0, output_size=3)  # noqa: E731
    close(tx.jit(f)(x, reps), f(x, reps))
    rs = torch.stack([reps, torch.tensor([1, 1, 1])])
    close(tx.vmap(f, in_axes=(None, 0))(x, rs), torch.stack([f(x, r) for r in rs]))
    with pytest.raises(UnsupportedOperationError, match="output_size"):
        tx.jit(lambda x, r: torch.repeat_interleave(x, r, dim=0))(x, reps)


# ----------------------------------------------------------------------------- mode, frexp, next


def test_mode_values_indices_and_gradient():
    x = torch.round(rand(4, 9) * 1.5)
    for dim, keepdim in ((1, False), (0, True), (-1, True)):
        f = lambda x: torch.mode(x, dim, keepdim)  # noqa: E731
        got, want = tx.jit(f)(x), f(x)
        close(got[0], want[0])
        assert torch.equal(got[1], want[1])
        check_all(lambda x: torch.mode(x, dim, keepdim).values, x)
    big = torch.round(rand(3000) * 2)  # many ties: torch's kernel picks the index
    assert torch.equal(tx.jit(lambda x: x.mode().indices)(big), big.mode().indices)


def test_frexp_is_exact_and_has_torch_derivative():
    specials = [0.0, -0.0, 1.0, -0.75, 0.5, 2.0**-1022, 5e-324, 1e-310, -5e300, 1 - 1e-16]
    x = torch.tensor(specials + [float("inf"), float("-inf"), float("nan")], dtype=F64)
    wide = rand(2000) * torch.pow(2.0, torch.randint(-1070, 1020, (2000,), generator=GEN).double())
    for v in (x, wide, wide.float()):
        got, want = tx.jit(torch.frexp)(v), torch.frexp(v)
        assert torch.equal(got.exponent, want.exponent)
        assert torch.equal(got.mantissa.nan_to_num(), want.mantissa.nan_to_num())
    y = rand(6) * 100
    check_all(lambda y: torch.frexp(y).mantissa, y)
    close(
        tx.vmap(lambda y: torch.frexp(y)[1])(torch.stack([y, 3 * y])),
        torch.frexp(torch.stack([y, 3 * y]))[1],
    )


def test_nextafter_values_and_derivative():
    x, y = rand(4, 5), rand(5)
    assert torch.equal(tx.jit(torch.nextafter)(x, y), torch.nextafter(x, y))
    assert torch.equal(tx.vmap(torch.nextafter, in_axes=(0, None))(x, y), torch.nextafter(x, y))
    check_all(lambda x, y: torch.nextafter(x, y), x, y.expand(4, 5).clone())


# ------------------------------------------------------------------------------------- gradient


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"spacing": 2.0},
        {"spacing": [2.0, 0.5], "edge_order": 2},
        {"dim": 1, "edge_order": 2},
        {
            "dim": (0, -1),
            "spacing": [torch.tensor([0.0, 1.1, 3.0, 3.5, 6.0]), torch.arange(6.0) ** 1.5],
        },
        {
            "dim": (0, 1),
            "edge_order": 2,
            "spacing": [torch.tensor([0.0, 1.1, 3.0, 3.5, 6.0]), torch.arange(6.0) ** 1.5],
        },
    ],
)
def test_gradient_matches_torch(kwargs):
    kwargs = {
        k: [s.to(F64) if isinstance(s, torch.Tensor) else s for s in v]
        if isinstance(v, list)
        else v
        for k, v in kwargs.items()
    }
    x = rand(5, 6)
    n = len(torch.gradient(x, **kwargs))
    for k in range(n):
        check_all(lambda x: torch.gradient(x, **kwargs)[k], x)


def test_gradient_rejects_short_dims():
    with pytest.raises(RuntimeError, match="edge_order"):
        tx.jit(lambda x: torch.gradient(x, edge_order=2))(rand(2))


# ----------------------------------------------------------------------------------- as_strided


def test_as_strided_and_copy_match_torch_and_torch_func():
    x = rand(3, 4)
    for size, stride, offset in (((2, 2), (1, 2), 0), ((3, 3), (1, 1), 2), ((2, 3), (4, 1), 1)):
        for fn in (torch.as_strided, torch.as_strided_copy):
            f = lambda x: fn(x, size, stride, offset)  # noqa: E731
            check_all(f, x)  # overlapping windows too: the gradient sums over the reads
            xs = torch.stack([x, 2 * x])
            close(tx.vmap(f)(xs), tf.vmap(f)(xs))  # per-example storage, as torch.func


def test_as_strided_scatter_values_and_true_derivative():
    x, src = rand(3, 3), rand(2, 2)

    def f(x, src):
        return torch.as_strided_scatter(x, src, (2, 2), (1, 3), 1)

    close(tx.jit(f)(x, src), f(x, src))
    xs = torch.stack([x, x + 1])
    close(tx.vmap(f, in_axes=(0, None))(xs, src), torch.stack([f(r.clone(), src) for r in xs]))
    ct = rand(3, 3)
    gx, gsrc = tx.grad(lambda a, b: (f(a, b) * ct).sum(), argnums=(0, 1))(x, src)
    # torch.autograd gets src's derivative right; x's (torch 2.13 gives the complement of the
    # positions, nonzero where x is overwritten) is checked against finite differences
    close(gsrc, autograd_grad(f, x, src, ct=ct)[1])
    close(gx, finite_difference_vjp(lambda a: f(a, src), x, ct), 1e-7)
    with pytest.raises(RuntimeError, match="overlaps"):
        tx.jit(lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (1, 1)))(x, src)


def test_writes_through_as_strided_reach_the_base():
    def f(x):
        y = x * 1
        v = y.as_strided((2, 2), (1, 3), 1)
        v.mul_(10)
        return y, v

    x = rand(3, 3)
    for got, want in zip(tx.jit(f)(x), f(x)):
        close(got, want)
    check_all(lambda x: f(x)[0], x)


# ------------------------------------------------------------------------------- segment_reduce


@pytest.mark.parametrize("reduce", ["sum", "mean", "prod", "max", "min"])
@pytest.mark.parametrize("initial", [None, 0.5])
def test_segment_reduce_matches_torch(reduce, initial):
    kw = {} if initial is None else {"initial": initial}
    lengths = torch.tensor([2, 0, 3, 1])
    offsets = torch.tensor([0, 2, 2, 5, 6])
    for bounds in ({"lengths": lengths}, {"offsets": offsets}):
        check_all(lambda d: torch.segment_reduce(d, reduce, **bounds, **kw), rand(6, 3))
    # batched lengths: the segmented axis is lengths' last dim
    lens = torch.tensor([[2, 0, 3], [1, 1, 3]])
    batched = lambda d: torch.segment_reduce(d, reduce, lengths=lens, axis=1, **kw)  # noqa: E731
    check_all(batched, rand(2, 5, 3))
    # traced lengths (their values unknown while tracing)
    g = lambda d, n: torch.segment_reduce(d, reduce, lengths=n, **kw)  # noqa: E731
    x = rand(6, 3)
    close(tx.jit(g)(x, lengths), g(x, lengths))


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("initial", [None, 0.0])
def test_segment_reduce_ties_share_the_derivative_evenly(reduce, initial):
    # torch 2.13's backward splits a tie evenly only where the cotangent is positive (a negative
    # one reaches every tied element whole: not a linear map), so torch is the oracle for
    # positive cotangents, and linearity covers the rest.
    kw = {} if initial is None else {"initial": initial}
    lens = torch.tensor([[2, 0, 3], [1, 1, 3]])
    data, ct = torch.round(rand(2, 5, 3) * 2) / 2, rand(2, 3, 3).abs() + 0.1
    f = lambda d: torch.segment_reduce(d, reduce, lengths=lens, axis=1, **kw)  # noqa: E731
    close(tx.jit(f)(data), f(data))
    got = tx.grad(lambda d: (f(d) * ct).sum())(data)
    for r in range(2):
        for c in range(3):
            col = lambda d: torch.segment_reduce(d, reduce, lengths=lens[r], **kw)  # noqa: E731
            close(got[r, :, c], autograd_grad(col, data[r, :, c], ct=ct[r, :, c])[0])
    close(tx.grad(lambda d: (f(d) * -ct).sum())(data), -got)


# ------------------------------------------------------------------- householder_product, ormqr


def test_householder_product_and_ormqr_match_torch():
    a, c = rand(2, 6, 4), rand(2, 6, 3)
    reflectors, tau = torch.geqrf(a)
    for k in (4, 2):
        check_all(lambda r, t: torch.linalg.householder_product(r, t[..., :k]), reflectors, tau)
    for transpose in (False, True):
        check_all(lambda r, t, c: torch.ormqr(r, t, c, True, transpose), reflectors, tau, c)
        cr = rand(2, 3, 6)
        check_all(lambda r, t, c: torch.ormqr(r, t, c, False, transpose), reflectors, tau, cr)
    # Q from geqrf's reflectors is the Q of the QR decomposition
    q = tx.jit(torch.linalg.householder_product)(reflectors, tau)
    close(q.abs(), torch.linalg.qr(a).Q.abs(), 1e-8)


# ------------------------------------------------------------------------------- linalg.eig


def _general(batch=()):
    """Non-symmetric matrices with distinct (complex-pair) eigenvalues."""
    return rand(*batch, 4, 4) + torch.diag(torch.arange(4, dtype=F64))


def _eig_losses():
    weights = torch.arange(4, dtype=F64)
    return {
        # real functions of the complex eigenvalues and of gauge-invariant |V|^2
        "eigvals": lambda a: (
            torch.linalg.eigvals(a).real ** 2 + 3 * torch.linalg.eigvals(a).imag ** 2
        ).sum(),
        "eig": lambda a: (
            (torch.linalg.eig(a).eigenvectors.abs() ** 2 * weights).sum()
            + torch.linalg.eig(a).eigenvalues.abs().sum()
        ),
    }


@pytest.mark.parametrize("name", ["eig", "eigvals"])
def test_eig_values_vmap_and_gradient_match_torch(name):
    a = _general()
    fn = getattr(torch.linalg, name)
    got, want = tx.jit(fn)(a), fn(a)
    for g, w in zip(tx.tree.leaves(got), tx.tree.leaves(want)):
        close(g, w)
    b = _general((3,))
    for g, w in zip(tx.tree.leaves(tx.vmap(fn)(b)), tx.tree.leaves(fn(b))):
        close(g, w)
    loss = _eig_losses()[name]
    want_g = autograd_grad(loss, a)[0]
    close(tx.grad(loss)(a), want_g, 1e-8)
    close(tx.jit(tx.grad(loss))(a), want_g, 1e-8)
    close(tx.vmap(tx.grad(loss))(b), torch.stack([autograd_grad(loss, m)[0] for m in b]), 1e-8)


def test_conjugate_transposes_of_complex_tensors():
    v = torch.randn(3, 4, 4, dtype=torch.complex128, generator=GEN)
    for fn in (lambda m: m.mH, torch.adjoint, lambda m: m.adjoint(), lambda m: m.H):
        close(tx.jit(fn)(v[0]), fn(v[0]))
        close(tx.vmap(fn)(v), torch.stack([fn(m) for m in v]))

    def write(x):
        y = x * 1
        y.mH.mul_(2)
        return y

    with pytest.raises(Exception, match="conjugated view"):
        tx.jit(write)(v)


# ------------------------------------------------------------------- svd_lowrank, pca_lowrank


@pytest.mark.parametrize("name", ["svd_lowrank", "pca_lowrank"])
@pytest.mark.parametrize("rows, cols", [(7, 4), (4, 6)])
def test_lowrank_matches_torch_with_the_same_draw(name, rows, cols):
    fn = getattr(torch, name)
    a = rand(rows, cols)

    def seeded(f, *args):
        torch.manual_seed(11)
        return f(*args)

    f = lambda a: fn(a, q=3, niter=1)  # noqa: E731
    for got, want in zip(seeded(tx.jit(f), a), seeded(f, a)):
        close(got, want, 1e-8)
    loss = lambda a: f(a)[1].sum() + (f(a)[0] @ f(a)[2].mT).pow(2).sum()  # noqa: E731
    close(seeded(tx.grad(loss), a), seeded(lambda x: autograd_grad(loss, x)[0], a), 1e-7)
    b = torch.stack([a, 2 * a + 1])
    got = seeded(tx.vmap(lambda m: f(m)[1], randomness="same"), b)
    close(got, torch.stack([seeded(lambda m: f(m)[1], m) for m in b]), 1e-8)
    with pytest.raises(Exception, match="random"):
        tx.vmap(lambda m: f(m)[1])(b)
    # under jit the test matrix is drawn by each call, not baked in while tracing
    assert "random_normal" in str(tx.make_jaxpr(f)(a))
