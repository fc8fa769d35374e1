"""Each row of docs/conventions.md's table "Derivatives where thunderx differs from torch.func",
as an assertion of the thunderx behaviour it states (torch.func still differing):
`BEHAVIOUR` maps a row id to its check (run by tests/test_conventions_table.py)."""

import math
from fractions import Fraction

import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

from .conventions_rows_base import F64, S, T, _close
from .conventions_rows_forward import (
    forward_mode_kinks,
    forward_mode_unselected_tangent,
    huber_second_derivative_at_the_bound,
)
from .conventions_rows_numeric import (
    batched_norm_per_example,
    batched_recurrent_rounding,
    batched_reduction_layout,
    batched_tie_by_rounding,
    bce_second_derivative_at_the_clamp,
    bce_with_logits_at_minus_infinity,
    bessel_ratio_near_zero,
    bilinear_at_infinity,
    cosine_similarity_rounding,
    cumprod_at_infinity,
    logcumsumexp_rounded_output,
    logcumsumexp_second_derivative_at_zero,
    normalized_rounding_noise,
    product_derivative_at_subnormals,
)


def extremum_of_nan():
    nan, one = S(math.nan), S(1.0)
    assert tx.jvp(torch.maximum, (nan, one), (S(1.0), S(3.0)))[1] == 2.0  # split: (1 + 3) / 2
    assert tf.jvp(torch.maximum, (nan, one), (S(1.0), S(3.0)))[1] == 3.0
    _close(torch.stack(tx.grad(torch.maximum, argnums=(0, 1))(nan, one)), T(0.5, 0.5))
    _close(torch.stack(tf.grad(torch.maximum, argnums=(0, 1))(nan, one)), T(1.0, 1.0))
    _close(torch.stack(tx.grad(torch.minimum, argnums=(0, 1))(one, nan)), T(0.5, 0.5))
    _close(torch.stack(tf.grad(torch.minimum, argnums=(0, 1))(one, nan)), T(1.0, 1.0))
    # max() over a tensor with a nan: nan everywhere (torch.func: the cotangent to the nan)
    x = T(1.0, math.nan, 3.0)
    for f in (torch.max, torch.amax):
        assert torch.isnan(tx.grad(f)(x)).all() and torch.isnan(tx.jvp(f, (x,), (x,))[1])
    _close(tf.grad(torch.amax)(x), tx.grad(torch.amax)(x))
    _close(tf.grad(torch.max)(x), T(0.0, 1.0, 0.0))


def nan_derivative_by_kernel_path():
    _elu_at_nan()
    for fn in (F.relu6, F.hardtanh):
        for n in (3, 16):
            x = torch.full((n,), math.nan, dtype=F64)
            f = lambda x, fn=fn: fn(x).sum()  # noqa: E731
            assert torch.equal(tx.grad(f)(x), torch.ones(n, dtype=F64))
            two = torch.full((n,), 2.0, dtype=F64)
            assert torch.equal(tx.jvp(fn, (x,), (two,))[1], two)
            # torch: its scalar loop passes the derivative, its vectorized kernel gives 0
            assert (tf.grad(f)(x) == (1.0 if n == 3 else 0.0)).all()
    for n in (3, 16):
        x = torch.full((n,), math.nan, dtype=F64)
        f = lambda x: F.hardswish(x).sum()  # noqa: E731
        assert torch.isnan(tx.grad(f)(x)).all()
        assert torch.isnan(tx.jvp(F.hardswish, (x,), (torch.ones(n, dtype=F64),))[1]).all()
        theirs = tf.grad(f)(x)
        assert (theirs == 1).all() if n == 3 else torch.isnan(theirs).all()


def _elu_at_nan():
    # torch's vectorized elu backward gives nan at a nan input, its scalar loop 1; thunderx 1
    f = lambda x: F.elu(x).sum()  # noqa: E731
    long = torch.full((64,), math.nan, dtype=F64)
    assert torch.equal(tx.grad(f)(long), torch.ones(64, dtype=F64))
    assert torch.isnan(tf.grad(f)(long)).all() and torch.equal(tf.grad(f)(long[:3]), T(1, 1, 1))


def nan_cotangent_dropped():
    x, ct = T(-0.38, 0.5, 0.1), T(1.0, math.nan, 2.0)
    f = lambda v: torch.logcumsumexp(v, 0)  # noqa: E731
    ours = tx.vjp(f, x)[1](ct)[0]
    # y_1 depends on x_0 and x_1 only: x_2's derivative stays finite
    assert torch.isnan(ours[:2]).all() and torch.isfinite(ours[2])
    assert torch.isfinite(tf.vjp(f, x)[1](ct)[0]).all()
    # cumprod past a zero, nan cotangents: torch.func agrees with thunderx, torch.autograd drops
    # the nan at the last entry (its product 0 * 0 meets the nan)
    c = lambda v: (torch.cumprod(v, 0) * T(math.inf, math.nan, math.nan)).sum()  # noqa: E731
    v = T(1.6e-4, 0.0, 0.0)
    assert torch.isnan(tx.grad(c)(v)).all() and torch.isnan(tf.grad(c)(v)).all()
    leaf = v.clone().requires_grad_()
    (by_autograd,) = torch.autograd.grad(c(leaf), leaf)
    assert by_autograd[2] == 0
    # prod with two zeros: every partial derivative is 0, torch.autograd returns that without
    # reading the nan cotangent; torch.func and thunderx multiply it in
    p = lambda v: torch.prod(v) * math.nan  # noqa: E731
    v2 = T(0.0, 0.5, 0.0)
    assert torch.isnan(tx.grad(p)(v2)).all() and torch.isnan(tf.grad(p)(v2)).all()
    leaf = v2.clone().requires_grad_()
    assert torch.equal(torch.autograd.grad(p(leaf), leaf)[0], torch.zeros(3, dtype=F64))
    # three zeros (hardsigmoid's flat piece) and the nan of a std over one element
    q = lambda v: torch.std(torch.prod(F.hardsigmoid(v)).reshape(1, 1), 0)  # noqa: E731
    v3 = T(-30.0, -30.0, 0.5, -30.0)
    assert torch.isnan(tx.grad(lambda v: q(v).sum())(v3)[2])
    assert torch.isnan(tf.grad(lambda v: q(v).sum())(v3)[2])
    leaf = v3.clone().requires_grad_()
    assert torch.equal(torch.autograd.grad(q(leaf).sum(), leaf)[0], torch.zeros(4, dtype=F64))


def pow_at_exponent_zero():
    x, y = T(0.75)[0], T(0.0)[0]
    ours = tx.hessian(torch.pow, argnums=(0, 1))(x, y)
    assert ours[0][1] == ours[1][0] and torch.isclose(ours[0][1], 1 / x)
    theirs = tf.hessian(torch.pow, argnums=(0, 1))(x, y)
    assert theirs[0][1] == 0 and torch.isclose(theirs[1][0], 1 / x)
    # a nan (or infinite) cotangent at y == 0 and a finite nonzero x: the product's nan; at
    # x == 0 or a nan x, torch's 0
    xs, ys = T(0.75, -2.0, 0.0, math.nan), T(0.0, 0.0, 0.0, 0.0)
    for ct in (math.nan, math.inf):
        ours = tx.vjp(torch.pow, xs, ys)[1](torch.full((4,), ct, dtype=F64))[0]
        theirs = tf.vjp(torch.pow, xs, ys)[1](torch.full((4,), ct, dtype=F64))[0]
        assert torch.isnan(ours[:2]).all() and torch.equal(ours[2:], theirs[2:])
        assert torch.equal(theirs, torch.zeros(4, dtype=F64))
        t = torch.full((4,), ct, dtype=F64)
        ours = tx.jvp(lambda x: torch.pow(x, ys), (xs,), (t,))[1]
        theirs = tf.jvp(lambda x: torch.pow(x, ys), (xs,), (t,))[1]
        assert torch.isnan(ours[:2]).all() and torch.equal(ours[2:], theirs[2:])
        assert torch.equal(theirs, torch.zeros(4, dtype=F64))


def logcumsumexp_forward_range():
    x, t = T(0.5, 800.0, 1.0), T(1.0, 1.0, 1.0)
    f = lambda v: torch.logcumsumexp(v, 0)  # noqa: E731
    assert torch.equal(tx.jvp(f, (x,), (t,))[1], t)
    _close(tf.jvp(f, (x,), (t,))[1], T(0.0, 1.0, 1.0))
    _, vjp = tf.vjp(f, x)
    _close(vjp(T(1.0, 0.0, 0.0))[0], T(1.0, 0.0, 0.0))  # its reverse mode is exact
    # a 0-d nan: logcumsumexp of a 0-d value is the value, so its tangent is the incoming one
    nan, t1 = S(math.nan), S(0.7)
    assert torch.equal(tx.jvp(f, (nan,), (t1,))[1], t1)
    assert torch.isnan(tf.jvp(f, (nan,), (t1,))[1]).all()


def batched_rule_at_nan():
    x, t = T(math.nan), T(-0.99)
    ours = tx.jacrev(F.smooth_l1_loss, argnums=(0, 1))(x, t)
    _close(ours, tx.grad(F.smooth_l1_loss, argnums=(0, 1))(x, t))
    assert all(torch.isnan(g) for g in ours)
    assert all(torch.isnan(g) for g in tf.grad(F.smooth_l1_loss, argnums=(0, 1))(x, t))
    assert all(g == 0 for g in tf.jacrev(F.smooth_l1_loss, argnums=(0, 1))(x, t))
    f = lambda v: torch.log_softmax(v, 0)  # noqa: E731
    x0 = T(math.nan)[0]
    assert torch.isnan(tx.jacrev(f)(x0)) and torch.isnan(tx.grad(f)(x0))
    assert tf.jacrev(f)(x0) == 0 and torch.isnan(tf.grad(f)(x0))
    assert torch.isnan(tx.hessian(f)(x0)) and tf.hessian(f)(x0) == 0
    f = lambda v: torch.softmax(v, 0)  # noqa: E731
    assert torch.isnan(tx.hessian(f)(x0)) and torch.isnan(tx.grad(f)(x0))
    assert tf.hessian(f)(x0) == 0 and torch.isnan(tf.grad(f)(x0))

    # 0-d, with hypot's nan cotangent at 0 after it
    def g(v, b):
        return torch.hypot(torch.log_softmax(v.sum(), 0), b)

    v, b = T(1.25, 1.64), T(0.0)[0]
    ours, theirs = tx.jacrev(g, (0, 1))(v, b), tf.jacrev(g, (0, 1))(v, b)
    _close(ours, tx.grad(g, (0, 1))(v, b))
    assert torch.isnan(ours[0]).all() and torch.isnan(tf.grad(g, (0, 1))(v, b)[0]).all()
    assert (theirs[0] == 0).all()

    # exp overflowing to inf before linear: the weight/input block of the Hessian
    def h(x, w):
        return F.linear(torch.exp(x * 30.0), w).sum()

    x, w = T(0.1, 30.0), T(1.5, -2.0, 3.0, 0.5).reshape(2, 2)
    ours = tx.hessian(h, argnums=(0, 1))(x, w)[1][0]  # d/dx_k of d/dw_ij: exp'(x_j) at j == k
    assert torch.isinf(ours[:, 1, 1]).all() and (ours[:, 1, 1] > 0).all()
    rev_rev = tf.jacrev(tf.jacrev(h, argnums=1), argnums=0)(x, w)
    assert torch.equal(ours[:, 1, 1], rev_rev[:, 1, 1])
    assert torch.isnan(tf.hessian(h, argnums=(0, 1))(x, w)[1][0][:, 1, 1]).all()


def variance_without_degrees_of_freedom():
    x = T(0.7)[0]
    assert torch.isnan(tx.hessian(torch.var)(x))
    assert tf.hessian(torch.var)(x) == 0
    assert torch.isnan(tf.grad(torch.var)(x))
    assert torch.isnan(tf.hessian(lambda v: torch.var(v.reshape(1, 1), 1).sum())(x))
    f = lambda v: torch.abs(torch.var(torch.softmax(v, -1) ** 3))  # noqa: E731
    assert torch.isnan(tx.jacrev(f)(x)) and torch.isnan(tx.grad(f)(x))
    assert tf.jacrev(f)(x) == 0 and torch.isnan(tf.grad(f)(x))

    # std's 0 / 0 discarded by a where: finite differences give 0 (and torch's batched rule for
    # the 0-d softmax), torch's grad nan as ours
    def g(v, y):
        s = torch.std(torch.softmax(v, -1), 0)
        return torch.where(s > 0, s, y)

    y = T(0.35)[0]
    assert torch.isnan(tx.jacrev(g)(x, y)) and torch.isnan(
        tx.jit(tx.vmap(tx.grad(g)))(x[None], y[None])
    )
    assert tf.jacrev(g)(x, y) == 0 and torch.isnan(tf.grad(g)(x, y))


def variance_of_a_constant_row():
    x = T(0.9457804375746737, 0.9457804375746737, 0.9457804375746737)
    for f in (torch.std, torch.var):
        assert tx.jit(f)(x) == 0 and f(x) > 0  # torch: rounding noise
    assert tx.jit(torch.std_mean)(x)[0] == 0
    assert torch.equal(tx.grad(torch.std)(x), torch.zeros(3, dtype=F64))
    assert torch.equal(tx.jacfwd(torch.std)(x), torch.zeros(3, dtype=F64))
    assert tf.grad(torch.std)(x).abs().min() > 0.01
    # where torch's kernel gives exactly 0 (the last dim of a 3-D tensor), both agree
    z = x.expand(3, 3, 3)
    assert torch.equal(torch.std(z, -1), tx.jit(lambda v: torch.std(v, -1))(z))
    s = lambda v: torch.std(v, -1).sum()  # noqa: E731
    _close(tx.grad(s)(z.contiguous()), tf.grad(s)(z.contiguous()))
    # entries an ulp apart: the exact std and derivative (rational arithmetic), torch's differ
    a, b = -0.27649471450546520, -0.27649471450546514
    v = [Fraction(u) for u in (a, a, b)]
    mean = sum(v) / 3
    std = math.sqrt(sum((u - mean) ** 2 for u in v) / 2)
    exact = T(*[float((u - mean) / 2) / std for u in v])
    assert math.isclose(tx.jit(torch.std)(T(a, a, b)).item(), std, rel_tol=1e-14)
    _close(tx.grad(torch.std)(T(a, a, b)), exact)
    _close(tx.vmap(tx.grad(torch.std))(torch.stack([T(a, a, b), x])), torch.stack([exact, 0 * x]))
    assert (tf.grad(torch.std)(T(a, a, b)) - exact).abs().max() > 0.1


def _grow(v, last):
    """v with one more entry (a third channel)."""
    return torch.cat([v, T(last)])


def layer_norm_constant_row():
    x = T(-30.0, 30.0, 30.0, 30.0, 30.0, 0.46).reshape(3, 2)
    w, b, wt = T(-30.0, 0.023), T(0.73, -30.0), T(1.3, -0.4, 0.2, 0.9, -1.1, 0.5).reshape(3, 2)
    # layer_norm normalizes each row (row 1 is constant), batch_norm each column of x.T
    # (column 1 of x.T constant) with a weight and bias per channel, of which it has one more
    norms = {
        "layer_norm": (x, wt, -1, lambda w, b: (w, b), lambda x, w, b: F.layer_norm(x, (2,), w, b)),
        "batch_norm": (
            x.T.contiguous(),
            wt.T,
            0,
            lambda w, b: (_grow(w, 1.0), _grow(b, 0.5)),
            lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        ),
    }
    for name, (xs, wts, dim, affine, norm) in norms.items():

        def s(x, w, b, norm=norm, affine=affine, wts=wts):
            return (norm(x, *affine(w, b)) * wts).sum()

        def composed(x, w, b, dim=dim, affine=affine, wts=wts):
            m = x.mean(dim, keepdim=True)
            xc = x - m
            v = (xc * xc).mean(dim, keepdim=True)
            ws, bs = affine(w, b)
            return ((xc * torch.rsqrt(v + 1e-5) * ws + bs) * wts).sum()

        def flat(h, xs=xs):
            return torch.cat(
                [
                    torch.cat([h[i][j].reshape(a.numel(), -1) for j in range(3)], 1)
                    for i, a in enumerate((xs, w, b))
                ]
            )

        ours = flat(tx.hessian(s, argnums=(0, 1, 2))(xs, w, b))
        _close(ours, flat(tf.hessian(composed, argnums=(0, 1, 2))(xs, w, b)))
        _close(ours, ours.T)
        theirs = flat(tf.hessian(s, argnums=(0, 1, 2))(xs, w, b))
        assert not torch.allclose(theirs, theirs.T), name


def symbolic_zero_derivative():
    # x / y * c at y = 0, Hessian in (x, y, c): the (y, y) entry is 2xc / y^3, the formula's
    # +inf, as both give without c; torch's batched tangent carries c's 0 into -x / y^2 = -inf
    x, y, c = T(0.7, 0.5), T(0.0, 2.0), S(1.0)
    q = lambda x, y, c: (x / y * c).sum()  # noqa: E731
    yy = lambda hess, *an: hess(q, argnums=an)(x, y, c)  # noqa: E731
    assert yy(tx.hessian, 0, 1, 2)[1][1][0, 0] == math.inf
    assert torch.isnan(yy(tf.hessian, 0, 1, 2)[1][1][0, 0])
    assert yy(tx.hessian, 1)[0][0][0, 0] == yy(tf.hessian, 1)[0][0][0, 0] == math.inf
    _close(yy(tx.hessian, 0, 1, 2)[1][1][1, 1], 2 * x[1] * c / y[1] ** 3)
    f = lambda x: torch.ceil(torch.sqrt(x)).sum()  # noqa: E731 - sqrt's tangent at 0 is inf
    x = T(0.0, 4.0)
    _close(tx.grad(f)(x), T(0.0, 0.0))
    _close(tf.grad(f)(x), T(math.nan, 0.0))
    h = lambda x: torch.sign(torch.sqrt(x)).sum()  # noqa: E731
    _close(tx.grad(h)(x), T(0.0, 0.0))
    _close(tf.grad(h)(x), T(math.nan, 0.0))
    # x * 2 under vmap(jvp) at a nan x: torch's batched forward AD multiplies the constant's
    # zero tangent by the nan
    xb, tb = T(math.nan, 0.5), T(-0.25, 0.3)
    jv = lambda jvp: lambda x, t: jvp(lambda v: v * 2, (x,), (t,))[1]  # noqa: E731
    _close(tx.vmap(jv(tx.jvp))(xb, tb), tb * 2)
    assert torch.isnan(tf.vmap(jv(tf.jvp))(xb, tb)[0])
    # amax's unselected entries under a nan cotangent
    am = lambda x: torch.amax(x, -1) / 0.0  # noqa: E731 - 0 / 0 at the selected 0
    xa = T(-0.75, -0.75, 0.0)
    assert torch.equal(tx.grad(am)(xa)[:2], T(0.0, 0.0))
    assert torch.isnan(tf.grad(am)(xa)[:2]).all()
    # an infinite cotangent of an index_reduce amax: 0 at the source entry it does not select
    idx = torch.tensor([0, 0])
    r = lambda x, s: (x.index_reduce(0, idx, s, "amax") * math.inf).sum()  # noqa: E731
    x1, src = T(0.75), T(0.75, 0.0)
    assert tx.grad(r, argnums=1)(x1, src)[1] == 0
    assert torch.isnan(tf.grad(r, argnums=1)(x1, src)[1])
    # |x|_1 / y at y = 0: d/dy of the x-gradient sign(x) / y is -sign(x) / y^2 (the
    # numerator's tangent in y is a symbolic zero, not 0 / 0)
    q = lambda x, y: torch.linalg.vector_norm(x, 1) / y  # noqa: E731
    xq, yq = T(0.3, -0.2), S(0.0)
    assert torch.equal(tx.hessian(q, argnums=(0, 1))(xq, yq)[0][1], T(-math.inf, math.inf))
    assert torch.isnan(tf.hessian(q, argnums=(0, 1))(xq, yq)[0][1]).all()
    # the (y, y) entry of xlogy(a / y, z) at y = 0, z also differentiated: xlogy is linear in
    # a (its zero second derivative meets (a')^2 = inf); the other chain-rule term,
    # log(z) * 2a / y^3, is -inf (torch gives -inf too when z is not differentiated)
    xl = lambda a, y, z: torch.xlogy(a / y, z)  # noqa: E731
    at = (S(0.5), S(0.0), S(0.75))
    assert tx.hessian(xl, argnums=(1, 2))(*at)[0][0] == -math.inf
    assert torch.isnan(tf.hessian(xl, argnums=(1, 2))(*at)[0][0])
    g = lambda x: torch.var(torch.max(x))  # noqa: E731 - var of one value: a nan cotangent
    y = T(1.0, 3.0, 2.0)
    _close(tx.grad(g)(y), T(0.0, math.nan, 0.0))
    assert torch.isnan(tf.grad(g)(y)).all()
    # the 2-norm at the zero vector under a nan cotangent: torch's backward multiplies its 0 by
    # it; its jvp (and std's backward at a constant row) give 0, as thunderx does in both modes
    n = lambda x: torch.linalg.vector_norm(x, 2, -1) / 0.0  # noqa: E731 - 0 / 0
    z = T(0.0, 0.0)
    assert torch.equal(tx.grad(n)(z), T(0.0, 0.0))
    assert torch.isnan(tf.grad(n)(z)).all()
    m, nan_t = (lambda x: torch.linalg.vector_norm(x, 2, -1)), T(math.nan, math.nan)  # noqa: E731
    assert tx.jvp(m, (z,), (nan_t,))[1] == 0 and tf.jvp(m, (z,), (nan_t,))[1] == 0
    # in a Hessian, relu's (and |x|'s) zero second derivative meeting exp's overflow, and
    # huber's linear piece meeting 1 / 0: the entry is the chain rule's other term, -inf, where
    # torch's double backward multiplies its explicit 0 by the infinity
    wr, zr = T(-0.7, 0.3), T(2000.0, 1.0)
    for act in (torch.relu, lambda v: F.l1_loss(v, torch.zeros_like(v), reduction="none")):
        r = lambda z, act=act: (wr * act(torch.exp(z))).sum()  # noqa: E731
        assert tx.hessian(r)(zr)[0, 0] == -math.inf
        assert torch.isnan(tf.hessian(r)(zr)[0, 0])
    hb = lambda y: (wr * F.huber_loss(1 / y, torch.zeros_like(y), reduction="none")).sum()  # noqa: E731
    yb = T(1.0, 0.0)
    assert tx.hessian(hb)(yb)[1, 1] == math.inf and torch.isnan(tf.hessian(hb)(yb)[1, 1])


def reduction_over_no_elements():
    x = torch.zeros(2, 0, dtype=F64)
    f = lambda x: torch.logsumexp(x, 1)  # noqa: E731
    _close(tx.jvp(f, (x,), (x,))[1], T(0.0, 0.0))
    assert torch.isnan(tf.jvp(f, (x,), (x,))[1]).all()
    v = lambda x: torch.var(x, 1)  # noqa: E731
    _close(tx.jvp(v, (x,), (x,))[1], tf.jvp(v, (x,), (x,))[1])  # both 0
    # std = sqrt(var) and acos(var): the tangent has no entries, so it is the symbolic zero
    # and the root's (acos's) nan derivative at the nan value never multiplies it; torch's
    # chain rule gives nan * 0 = nan (under vmap too, but for some batched rules: relu6's
    # gives 0 after acos(var(x)), where its unbatched jvp gives nan)
    for g in (lambda x: torch.std(x, 1), lambda x: torch.acos(torch.var(x, 1))):
        _close(tx.jvp(g, (x,), (x,))[1], T(0.0, 0.0))
        assert torch.isnan(tf.jvp(g, (x,), (x,))[1]).all()
        xb = torch.zeros(3, 2, 0, dtype=F64)
        _close(tx.vmap(lambda b: tx.jvp(g, (b,), (x,))[1])(xb), torch.zeros(3, 2, dtype=F64))
    # cross_entropy over no examples gathered from x: a constant (nan) function of x
    idx, t = torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    ce = lambda x: F.cross_entropy(torch.take_along_dim(x, idx, 0), t)  # noqa: E731
    y, dy = T(0.5, -1.0, 2.0, 0.0).reshape(2, 2), T(1.0, 2.0, 3.0, 4.0).reshape(2, 2)
    assert tx.jvp(ce, (y,), (dy,))[1] == 0
    assert torch.isnan(tf.jvp(ce, (y,), (dy,))[1])
    # the mean of an empty index_select: 0 in both modes (torch: jacrev 0, jacfwd nan)
    sel = lambda x: torch.special.i0(x.index_select(0, idx[:, 0])).mean()  # noqa: E731
    for jac in (tx.jacfwd, tx.jacrev, tf.jacrev):
        assert torch.equal(jac(sel)(y), torch.zeros(2, 2, dtype=F64))
    assert torch.isnan(tf.jacfwd(sel)(y)).all()
    # a scalar broadcast into no elements: the mean of nothing does not depend on it
    e = torch.zeros(0, dtype=F64)
    mse = lambda s: F.mse_loss(e - s, e)  # noqa: E731
    assert tx.jacfwd(mse)(S(0.5)) == 0 and tx.jacrev(mse)(S(0.5)) == 0
    assert torch.isnan(tf.jacfwd(mse)(S(0.5)))


def second_derivative_at_the_zero_vector():
    x, d = T(0.0, 0.0), T(0.3, -1.2)
    for f in (torch.linalg.vector_norm, lambda v: F.normalize(v, dim=0).sum()):
        _close(tx.grad(f)(x), tf.grad(f)(x))

        def rev_rev(grad):
            return grad(lambda v: (grad(f)(v) * d).sum())(x)

        assert torch.equal(rev_rev(tx.grad), torch.zeros(2, dtype=F64))
        assert torch.equal(tx.hessian(f)(x), torch.zeros(2, 2, dtype=F64))
        assert torch.isnan(rev_rev(tf.grad)).all()
    # softmax after normalize at a zero pair: normalize is x / eps there, softmax's second
    # derivative at two equal values is 0, so the Hessian is 0 * eps^-2 = 0; torch's rounding
    # scaled by eps^-2 = 1e24 gives 6.1e7 in one row and 0 in its transpose
    w = T(-1.2338090194182634, -2.424216230456128).reshape(1, 2)
    s = lambda v: (torch.softmax(F.normalize(v, dim=-1), -1) * w).sum()  # noqa: E731
    z = torch.zeros(1, 2, dtype=F64)
    assert torch.equal(tx.hessian(s)(z), torch.zeros(1, 2, 1, 2, dtype=F64))
    theirs = tf.hessian(s)(z).reshape(2, 2)
    assert theirs[0, 1].abs() > 1e7 and theirs[1, 0] == 0


def sinc_second_derivative_at_zero():
    for v in (0.0, -0.0):
        x = S(v)
        for ours in (
            tx.grad(tx.grad(torch.sinc)),
            tx.jacrev(tx.jacrev(torch.sinc)),
            tx.hessian(torch.sinc),
            tx.jacfwd(tx.jacfwd(torch.sinc)),
        ):
            assert ours(x).item() == 0
        assert tf.hessian(torch.sinc)(x).item() == 0
        assert torch.isnan(tf.grad(tf.grad(torch.sinc))(x))
    # next to 0 the series' -pi^2 / 3 (torch's quotient rule cancels to 0 at 1e-17, nan at
    # 1e-300)
    for v in (1e-17, -1e-300):
        torch.testing.assert_close(tx.hessian(torch.sinc)(S(v)), S(-(math.pi**2) / 3))


def batch_norm_hessian_weight_block():
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*sh, dtype=F64, generator=g) for sh in ((2, 3, 4), (3,), (3,)))
    wt = torch.linspace(-1, 1, 24, dtype=F64).reshape(2, 3, 4)

    def s(x, w):
        return (F.batch_norm(x, None, None, w, b, training=True) * wt).sum()

    (_, xw), (wx, _) = tx.hessian(s, argnums=(0, 1))(x, w)
    _close(wx, xw.movedim(-1, 0))  # symmetric
    h = 1e-6
    gx = lambda w: tf.grad(s)(x, w)  # noqa: E731
    fd = torch.stack([(gx(w + h * e) - gx(w - h * e)) / (2 * h) for e in torch.eye(3, dtype=F64)])
    torch.testing.assert_close(wx, fd, rtol=1e-6, atol=1e-8)
    (_, txw), (twx, _) = tf.hessian(s, argnums=(0, 1))(x, w)
    torch.testing.assert_close(txw.movedim(-1, 0), fd, rtol=1e-6, atol=1e-8)
    assert (twx - fd).abs().max() > 0.1


BEHAVIOUR = {
    f.__name__.replace("_", "-"): f
    for f in (
        forward_mode_kinks,
        forward_mode_unselected_tangent,
        extremum_of_nan,
        nan_derivative_by_kernel_path,
        nan_cotangent_dropped,
        pow_at_exponent_zero,
        logcumsumexp_forward_range,
        batched_rule_at_nan,
        variance_without_degrees_of_freedom,
        variance_of_a_constant_row,
        layer_norm_constant_row,
        symbolic_zero_derivative,
        reduction_over_no_elements,
        second_derivative_at_the_zero_vector,
        sinc_second_derivative_at_zero,
        bilinear_at_infinity,
        cumprod_at_infinity,
        logcumsumexp_rounded_output,
        batch_norm_hessian_weight_block,
        batched_recurrent_rounding,
        cosine_similarity_rounding,
        bessel_ratio_near_zero,
        bce_with_logits_at_minus_infinity,
        bce_second_derivative_at_the_clamp,
        product_derivative_at_subnormals,
        normalized_rounding_noise,
        batched_norm_per_example,
        batched_tie_by_rounding,
        batched_reduction_layout,
        huber_second_derivative_at_the_bound,
        logcumsumexp_second_derivative_at_zero,
    )
}
