"""torch.special functions (primitives/special.py: i0, i0e, i1, i1e, erfcx, ndtri; lang/special.py:
ndtr, log_ndtr, entr, xlog1py, mvlgamma) against torch (float64): values under jit, first and
second derivatives against torch.autograd, vmap against a Python loop, and thunderx.testing's
rule checks (jvp vs finite differences, vjp vs jvp, vmap vs loop)."""

import pytest
import torch

import thunderx as tx
from thunderx.testing import check_grads, check_jit, check_vmap

F64 = torch.float64
GEN = torch.Generator().manual_seed(0)


def reals(*shape, scale=3.0):
    return torch.randn(*shape, dtype=F64, generator=GEN) * scale


def probs(*shape):
    return torch.rand(*shape, dtype=F64, generator=GEN) * 0.98 + 0.01


Y = probs(7)
XS = reals(7)

# name -> (function of one tensor, input maker); inputs avoid the points where the functions are
# not differentiable (entr at 0), with both signs where the function takes them
UNARY = {
    "i0": (torch.special.i0, lambda: reals(7)),
    "i0e": (torch.special.i0e, lambda: reals(7)),
    "i1": (torch.special.i1, lambda: reals(7)),
    "i1e": (torch.special.i1e, lambda: reals(7)),
    "erfcx": (torch.special.erfcx, lambda: reals(7, scale=2.0)),
    "ndtri": (torch.special.ndtri, lambda: probs(7)),
    "ndtr": (torch.special.ndtr, lambda: reals(7)),
    "log_ndtr": (torch.special.log_ndtr, lambda: reals(7)),
    "entr": (torch.special.entr, lambda: probs(7) * 3),
    "xlog1py_x": (lambda x: torch.special.xlog1py(x, Y), lambda: reals(7)),
    "xlog1py_y": (lambda y: torch.special.xlog1py(XS, y), lambda: probs(7) * 2),
    "mvlgamma_p3": (lambda x: torch.mvlgamma(x, 3), lambda: probs(7) * 4 + 1.1),
    "multigammaln_p1": (lambda x: torch.special.multigammaln(x, 1), lambda: probs(7) * 4 + 0.1),
}


def close(a, b, tol=1e-9):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol, equal_nan=True)


def _torch_grads(f, x):
    """First and second derivatives of sum(f(x)) by torch.autograd."""
    x = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    if not g.requires_grad:  # f is linear in x (xlog1py in x): its second derivative is 0
        return g.detach(), torch.zeros_like(g)
    (gg,) = torch.autograd.grad(g.sum(), x)
    return g.detach(), gg


@pytest.mark.parametrize("name", sorted(UNARY))
def test_values_under_jit_match_torch(name):
    f, make = UNARY[name]
    torch.manual_seed(0)
    x = make()
    close(tx.jit(f)(x), f(x))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_first_and_second_derivatives_match_torch_autograd(name):
    f, make = UNARY[name]
    x = make()
    g, gg = _torch_grads(f, x)
    got_g = tx.grad(lambda t: f(t).sum())(x)
    got_gg = tx.grad(lambda t: tx.grad(lambda u: f(u).sum())(t).sum())(x)
    close(got_g, g, 1e-8)
    close(got_gg, gg, 1e-7)
    # and through jit, as one staged program
    close(tx.jit(tx.grad(lambda t: f(t).sum()))(x), g, 1e-8)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_vmap_matches_loop(name):
    f, make = UNARY[name]
    xs = torch.stack([make() for _ in range(3)])
    close(tx.vmap(f)(xs), torch.stack([f(x) for x in xs]))
    per_row = tx.vmap(tx.grad(lambda t: f(t).sum()))(xs)
    close(per_row, torch.stack([_torch_grads(f, x)[0] for x in xs]), 1e-8)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_rule_checks(name):
    f, make = UNARY[name]
    x = make()
    check_grads(f, (x,), order=2, rtol=1e-4, atol=1e-5)
    check_vmap(f, (torch.stack([x, make()]),))
    check_jit(f, (x,))


def test_special_points_match_torch():
    # the derivative's special cases: i1/i1e at 0 (1/2), ndtri near the ends, log_ndtr far left
    x = torch.tensor([0.0, -0.0, 1e-300, -40.0, -5.0, 30.0], dtype=F64)
    for f in (torch.special.i1, torch.special.i1e, torch.special.log_ndtr, torch.special.erfcx):
        close(tx.jit(f)(x), f(x))
        g, _ = _torch_grads(f, x)
        close(tx.grad(lambda t: f(t).sum())(x), g, 1e-8)
    p = torch.tensor([1e-12, 0.5, 1 - 1e-12], dtype=F64)
    close(tx.jit(torch.special.ndtri)(p), torch.special.ndtri(p))
    g, _ = _torch_grads(torch.special.ndtri, p)
    close(tx.grad(lambda t: torch.special.ndtri(t).sum())(p), g, 1e-6)


def test_xlog1py_at_zero_x_and_entr_edges_match_torch():
    x = torch.tensor([0.0, 0.0, 0.0, 2.0], dtype=F64)
    y = torch.tensor([-1.0, float("nan"), 3.0, -1.0], dtype=F64)
    close(tx.jit(torch.special.xlog1py)(x, y), torch.special.xlog1py(x, y))
    e = torch.tensor([-1.0, 0.0, float("nan"), 2.0], dtype=F64)
    close(tx.jit(torch.special.entr)(e), torch.special.entr(e))


def test_mvlgamma_rejects_bad_p():
    with pytest.raises(ValueError, match="p must be"):
        tx.jit(lambda x: torch.mvlgamma(x, 0))(probs(3) + 2)


def test_exp2_is_exact_at_integers_and_has_torch_derivative():
    k = torch.arange(-1074, 1024, dtype=F64)
    assert torch.equal(tx.jit(torch.exp2)(k), torch.exp2(k))
    x = reals(9)
    close(tx.jit(torch.special.exp2)(x), torch.exp2(x), 1e-15)
    g, gg = _torch_grads(torch.exp2, x)
    close(tx.grad(lambda t: torch.exp2(t).sum())(x), g, 1e-12)
    close(tx.vmap(torch.exp2)(torch.stack([x, -x])), torch.exp2(torch.stack([x, -x])), 1e-15)
