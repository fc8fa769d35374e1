"""The rows of docs/conventions.md's table about forward mode through kinks and selections
(`forward-mode-kinks`, `forward-mode-unselected-tangent`) and a kink where torch's own modes
differ (`huber-second-derivative-at-the-bound`), as assertions of the thunderx
behaviour they state; tests/conventions_rows.py maps them to their row ids."""

import math

import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

from .conventions_rows_base import F64, S, T, _close


def forward_mode_kinks():
    zero, one = S(0.0), S(1.0)
    # atan2 at the origin: 0 in both modes (torch: forward nan, reverse 0)
    assert tx.jvp(torch.atan2, (zero, zero), (one, one))[1] == 0
    assert torch.isnan(tf.jvp(torch.atan2, (zero, zero), (one, one))[1])
    _close(
        tx.grad(torch.atan2, argnums=(0, 1))(zero, zero), tf.grad(torch.atan2, (0, 1))(zero, zero)
    )
    # fmax tie: all to the first operand in both modes (torch forward: to the second)
    ta, tb = S(2.0), S(3.0)
    assert tx.jvp(torch.fmax, (one, one), (ta, tb))[1] == 2.0
    assert tf.jvp(torch.fmax, (one, one), (ta, tb))[1] == 3.0
    _close(tx.grad(torch.fmax, argnums=(0, 1))(one, one), tf.grad(torch.fmax, (0, 1))(one, one))
    # clamp(x, min=t) with x == t: all to x (torch forward: to the bound)
    clamp = lambda x, t: torch.clamp(x, min=t)  # noqa: E731
    assert tx.jvp(clamp, (one, one), (ta, tb))[1] == 2.0
    assert tf.jvp(clamp, (one, one), (ta, tb))[1] == 3.0
    _close(tx.grad(clamp, argnums=(0, 1))(one, one), tf.grad(clamp, (0, 1))(one, one))
    # clamp(x, lo, hi) with tensor bounds at x nan: 0 (torch forward: x's tangent; reverse: 0)
    clamp2 = lambda x, lo, hi: torch.clamp(x, lo, hi)  # noqa: E731
    nan, lo, hi = S(math.nan), S(-1.0), S(2.0)
    assert tx.jvp(clamp2, (nan, lo, hi), (ta, zero, zero))[1] == 0
    assert tf.jvp(clamp2, (nan, lo, hi), (ta, zero, zero))[1] == 2.0
    _close(tx.grad(clamp2, (0, 1, 2))(nan, lo, hi), tf.grad(clamp2, (0, 1, 2))(nan, lo, hi))
    # cosine_similarity with a vector of norm 2e-10 < eps: forward mode follows reverse mode
    # (torch.autograd's: the unclamped norm's derivative), torch.func's forward mode does not
    cs = lambda a, b: F.cosine_similarity(a, b, dim=0)  # noqa: E731
    a, b, ta_, tb_ = T(9.17e-11, 1.834e-10), T(-0.1146, -0.2948), T(0.4, -1.3), T(0.2, 0.5)
    ag, bg = a.clone().requires_grad_(), b.clone().requires_grad_()
    ga, gb = torch.autograd.grad(cs(ag, bg), (ag, bg))
    ours = tx.jvp(cs, (a, b), (ta_, tb_))[1]
    _close(ours, ga @ ta_ + gb @ tb_)
    assert abs(tf.jvp(cs, (a, b), (ta_, tb_))[1] / ours - 1) > 1e-3


def forward_mode_unselected_tangent():
    three, one = S(3.0), S(1.0)
    for fn in (torch.fmin, torch.minimum, torch.fmax, torch.maximum):
        if fn in (torch.fmin, torch.minimum):  # x = 3 is not selected
            tangents, picked = (S(math.nan), S(2.0)), 2.0
        else:  # y = 1 is not selected
            tangents, picked = (S(5.0), S(math.nan)), 5.0
        assert tx.jvp(fn, (three, one), tangents)[1] == picked
        assert torch.isnan(tf.jvp(fn, (three, one), tangents)[1])
        _close(tx.grad(fn, argnums=(0, 1))(three, one), tf.grad(fn, (0, 1))(three, one))

    # a Hessian (forward over reverse) through minimum where x / 0 is not selected: the b block
    # is the selected branch's i0e'' (the unselected branch's infinite derivative ignored)
    def h(x, b):
        return (torch.special.i0e(torch.minimum(x / 0.0, b)) * T(-2.0, -0.25)).sum()

    x, b = T(0.75, -0.75), S(0.75)
    i0e_d2 = tf.grad(tf.grad(torch.special.i0e))(b)
    _close(tx.hessian(h, argnums=(0, 1))(x, b)[1][1], -2.0 * i0e_d2)
    assert torch.isnan(tf.hessian(h, argnums=(0, 1))(x, b)[1][1])


def huber_second_derivative_at_the_bound():
    # |input - target| == delta: thunderx takes the quadratic piece's second derivative in every
    # mode (torch.func.hessian's), torch's reverse over reverse the linear piece's 0
    x, t = T(1.0, -2.0), T(0.0, -1.0)
    f = lambda x, t: F.huber_loss(x, t)  # noqa: E731 - mean over two elements
    h = tx.hessian(f, argnums=(0, 1))(x, t)
    diag = torch.full((2,), 0.5, dtype=F64)
    _close(torch.diagonal(h[0][0]), diag)
    _close(torch.diagonal(h[0][1]), -diag)
    _close(tf.hessian(f)(x, t), h[0][0])
    leaves = [x.clone().requires_grad_(), t.clone().requires_grad_()]
    gx = tx.grad(f, argnums=(0, 1))(*leaves)[0].sum()
    _close(torch.autograd.grad(gx, leaves)[0], diag)  # torch autograd over thunderx's gradient
    theirs = tf.grad(lambda x: tf.grad(f)(x, t).sum())(x)
    assert torch.equal(theirs, torch.zeros(2, dtype=F64))
    # a nan difference: the gradient is nan on both sides; thunderx's second derivative is again
    # the quadratic piece's (torch.func.hessian's), torch's reverse over reverse the linear 0
    xn = T(float("nan"), 0.3)
    _close(tx.hessian(f)(xn, t), tf.hessian(f)(xn, t))
    _close(torch.diagonal(tx.hessian(f)(xn, t)), T(0.5, 0.0))
    leaf = xn.clone().requires_grad_()
    _close(torch.autograd.grad(tx.grad(f)(leaf, t).sum(), leaf)[0], T(0.5, 0.0))
    theirs = tf.grad(lambda x: tf.grad(f)(x, t).sum())(xn)
    assert torch.equal(theirs, torch.zeros(2, dtype=F64))
