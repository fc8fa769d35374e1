"""Each mapped torch function, traced: eval_jaxpr, jit, vjp and vmap agree with torch."""

import pytest
import torch

import thunderx as tx

from .lang_cases import CASES as _CASES
from .lang_cases_named import NAMED

CASES = _CASES + NAMED

IDS = [c[0] for c in CASES]


def _float_out(out):
    return all(torch.as_tensor(o).dtype.is_floating_point for o in tx.tree.leaves(out))


def _close(got, want, tol=1e-6):
    got_l, want_l = tx.tree.leaves(got), tx.tree.leaves(want)
    assert len(got_l) == len(want_l)
    for g, w in zip(got_l, want_l):
        w = torch.as_tensor(w)
        assert tuple(g.shape) == tuple(w.shape), f"shape {tuple(g.shape)} vs {tuple(w.shape)}"
        assert g.dtype == w.dtype, f"dtype {g.dtype} vs {w.dtype}"
        torch.testing.assert_close(g, w, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("name,fn,args", CASES, ids=IDS)
def test_traced_matches_eager(name, fn, args):
    closed = tx.make_jaxpr(fn)(*args)
    out = tx.eval_jaxpr(closed.jaxpr, closed.consts, *tx.tree.leaves(args))
    want = fn(*args)
    _close(tx.tree.unflatten(tx.tree.structure(want), out), want)


@pytest.mark.parametrize("name,fn,args", CASES, ids=IDS)
def test_jit_matches_eager(name, fn, args):
    _close(tx.jit(fn)(*args), fn(*args))


@pytest.mark.parametrize("name,fn,args", CASES, ids=IDS)
def test_float32_matches_eager(name, fn, args):
    args32 = [a.float() if a.dtype == torch.float64 else a for a in args]
    _close(tx.jit(fn)(*args32), fn(*args32), tol=1e-4)


# cases with something to differentiate: floating inputs and floating outputs
VJP_CASES = [
    c for c in CASES if any(a.dtype.is_floating_point for a in c[2]) and _float_out(c[1](*c[2]))
]


@pytest.mark.parametrize("name,fn,args", VJP_CASES, ids=[c[0] for c in VJP_CASES])
def test_vjp_matches_autograd(name, fn, args):
    diff = [i for i, a in enumerate(args) if a.dtype.is_floating_point]

    def f(*xs):
        full = list(args)
        for i, x in zip(diff, xs):
            full[i] = x
        return fn(*full)

    primals = [args[i] for i in diff]
    out, f_vjp = tx.vjp(f, *primals)
    ct = tx.tree.map(lambda o: torch.randn_like(o), out)
    got = f_vjp(ct)
    leaves = [p.clone().requires_grad_() for p in primals]
    ref_out = [o for o in tx.tree.leaves(f(*leaves))]
    cts = [c for o, c in zip(ref_out, tx.tree.leaves(ct)) if o.requires_grad]
    ref_out = [o for o in ref_out if o.requires_grad]
    want_g = (
        torch.autograd.grad(ref_out, leaves, cts, allow_unused=True)
        if ref_out
        else [None] * len(leaves)
    )
    want_g = [torch.zeros_like(p) if g is None else g for g, p in zip(want_g, primals)]
    _close(list(got), want_g)


@pytest.mark.parametrize("name,fn,args", CASES, ids=IDS)
def test_vmap_matches_loop(name, fn, args):
    b = 3
    batched = [
        torch.stack([a * (1 + 0.05 * k) if a.dtype.is_floating_point else a for k in range(b)])
        for a in args
    ]
    got = tx.vmap(fn)(*batched)
    rows = [fn(*[x[k] for x in batched]) for k in range(b)]
    want = tx.tree.map(lambda *xs: torch.stack([torch.as_tensor(x) for x in xs]), *rows)
    _close(got, want)


def test_vander_of_a_0d_tensor_is_one_row_as_in_torch():
    x = torch.tensor(1.5, dtype=torch.float64)
    f = lambda x: torch.linalg.vander(x, N=4)  # noqa: E731
    torch.testing.assert_close(tx.jit(f)(x), f(x))
    torch.testing.assert_close(
        tx.grad(lambda x: f(x).sum())(x), torch.func.grad(lambda x: f(x).sum())(x)
    )
    with pytest.raises(RuntimeError, match="N must be greater than 1"):
        tx.jit(torch.linalg.vander)(x)


@pytest.mark.skipif(
    not hasattr(torch.nn.functional, "linear_cross_entropy"),
    reason=f"torch {torch.__version__} has no F.linear_cross_entropy",
)
def test_linear_cross_entropy_matches_torch():
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    x, w = (
        torch.randn(6, 3, dtype=torch.float64, generator=g),
        torch.randn(4, 3, dtype=torch.float64),
    )
    t = torch.randint(0, 4, (6,), generator=g)

    def f(x, w):
        return F.linear_cross_entropy(x, w, t, label_smoothing=0.1)

    torch.testing.assert_close(tx.jit(f)(x, w), f(x, w))
    torch.testing.assert_close(tx.grad(f, (0, 1))(x, w), torch.func.grad(f, (0, 1))(x, w))


def test_aten_helpers_match_torch():
    z = torch.randn(2, 3, 4, dtype=torch.float64)
    z[1, :, 1] = float("-inf")  # a dead row: 0, not nan, in value and gradient
    sm = torch.ops.aten._safe_softmax.default
    torch.testing.assert_close(tx.jit(lambda z: sm(z, 1))(z), sm(z, 1))
    zr = z.clone().requires_grad_()
    want = torch.autograd.grad((sm(zr, 1) * 2).sum(), zr)[0]
    torch.testing.assert_close(tx.grad(lambda z: (sm(z, 1) * 2).sum())(z), want)
