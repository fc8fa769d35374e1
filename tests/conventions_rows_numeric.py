"""Rows of docs/conventions.md's derivative table about rounding (which side's floating-point
answer is closer, where neither can be exact) and limits at infinity, as assertions of the
thunderx behaviour each states; `tests/conventions_rows.py` collects them into BEHAVIOUR."""

import math

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

from .conventions_rows_base import F64, S, T, _close


def batched_recurrent_rounding():
    # at ordinary inputs the unrolled cells agree with the per-example sequence kernel to
    # rounding, and torch.func has no batching rule to compare with
    g = torch.Generator().manual_seed(1)
    x, h0 = torch.randn(2, 5, 3, 4, dtype=F64, generator=g), torch.randn(2, 1, 3, 6, dtype=F64)
    ws = [torch.randn(2, *sh, dtype=F64, generator=g) for sh in ((18, 4), (18, 6), (18,), (18,))]

    def gru(x, h, *w):
        return torch.gru(x, h, list(w), True, 1, 0.0, False, False, False)[0]

    loop = torch.stack([gru(x[i], h0[i], *[w[i] for w in ws]) for i in range(2)])
    torch.testing.assert_close(tx.vmap(gru)(x, h0, *ws), loop, rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="Batching rule not implemented"):
        tf.vmap(gru)(x, h0, *ws)


def cosine_similarity_rounding():
    a, b = (
        T(-0.4559921256, 0.7331139495).reshape(2, 1),
        T(1.1182751345e-04, 2.0996337854).reshape(2, 1),
    )
    wt = T(0.3, -0.8)

    def s(a, b):
        return (F.cosine_similarity(a, b) * wt).sum()

    ours, theirs = (
        torch.stack([h.reshape(-1) for row in hess(s, argnums=(0, 1))(a, b) for h in row])
        for hess in (tx.hessian, tf.hessian)
    )
    # exactly 0 in exact arithmetic: thunderx (with torch's norm kernel and its backward's
    # formula) gets 0 here, torch rounding noise over the squared norm
    assert ours.abs().max() < 1e-6 and theirs.abs().max() < 1e-6
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def bessel_ratio_near_zero():
    d2 = lambda grad, f=torch.special.i1e: grad(grad(f))  # noqa: E731
    for x, one_sided in ((-1.1437e-16, 1.0), (1.1437e-16, -1.0)):
        _close(d2(tx.grad)(S(x)), S(one_sided))
        assert d2(tf.grad)(S(x)) == 0
    # i1'' is 3x/8 + O(x^3) near 0; torch's derivative of `i0 - i1 / x` cancels to +-0.25
    for x in (-3e-16, 3e-16, 1e-12):
        _close(d2(tx.grad, torch.special.i1)(S(x)), S(3 * x / 8))
        assert abs(d2(tf.grad, torch.special.i1)(S(x)) - 3 * x / 8) > 1e-4


def bce_with_logits_at_minus_infinity():
    x, t = T(-math.inf, math.inf, 0.5), T(0.25, 0.25, 0.25)
    f = lambda v: F.binary_cross_entropy_with_logits(v, t)  # noqa: E731
    limit = (torch.sigmoid(x) - t) / 3  # -t / 3 at -inf, (1 - t) / 3 at +inf
    _close(tx.grad(f)(x), limit)
    _close(tx.jit(tx.grad(f))(x), limit)
    sig = torch.sigmoid(x)
    _close(tx.hessian(f)(x).diagonal(), sig * (1 - sig) / 3)
    xg = x.clone().requires_grad_()
    _close(torch.autograd.grad(f(xg), xg)[0], limit)  # torch's backward kernel agrees
    assert tf.grad(f)(x)[0].isnan() and tf.hessian(f)(x)[0, 0].isnan()


def bce_second_derivative_at_the_clamp():
    # a saturated sigmoid: 1 - x = 9.3e-14, so x (1 - x) is below the clamp 1e-12, where torch's
    # first derivative is g (x - t) / 1e-12: its derivative in x is 1e12
    x, t = torch.sigmoid(T(30.0)), T(0.5)
    f = lambda v: F.binary_cross_entropy(v, t, reduction="sum")  # noqa: E731
    _close(tx.hessian(f)(x), T(1e12).reshape(1, 1))
    assert tf.hessian(f)(x) > 1e23  # (x^2 - 2xt + t) / ((x + 1e-12)^2 (1 - x + 1e-12)^2)
    # finite differences of torch's own first derivative side with thunderx
    h = 2e-16
    fd = (tf.grad(f)(x + h) - tf.grad(f)(x - h)) / (2 * h)
    assert 0.5e12 < fd < 2e12
    # where the clamp is not reached both agree
    y = T(0.3)
    _close(tx.hessian(f)(y), tf.hessian(f)(y))


def product_derivative_at_subnormals():
    # selu after index_reduce('prod'), at a row the index leaves alone holding -4.9e-324: the
    # chain rule's exact value is selu's slope there, lambda * alpha
    v = T(0.33, 0.07, -5e-324).reshape(3, 1)
    src = T(1.1).reshape(1, 1)
    idx = torch.tensor([0])

    def f(v):
        return F.selu(v.index_reduce(0, idx, src, "prod"))[2, 0]

    slope = 1.0507009873554804934193349852946 * 1.6732632423543772848170429916717
    assert tx.grad(f)(v)[2, 0] == slope == tf.grad(F.selu)(torch.tensor(-5e-324, dtype=F64))
    # torch's backward, (grad * result) / self, rounds the subnormal product first
    assert tf.grad(f)(v)[2, 0] == 2.0


def normalized_rounding_noise():
    # rms_norm over one element (x / sqrt(x^2 + eps): a derivative of about eps) > sinc at
    # +-1 (3.9e-17, rounding) > normalize, which divides by that noise's norm
    x = T(-0.34988720911375065, -0.71726609712228162, -0.13898649748233868).reshape(3, 1)
    w = torch.linspace(-1, 1, 3, dtype=F64).reshape(3, 1)

    def s(x):
        y = torch.sinc(F.rms_norm(x, (1,)))
        return (F.normalize(y, dim=0) * w).sum()

    ours, theirs = tx.grad(s)(x), tf.grad(s)(x)
    assert torch.equal(tx.jit(s)(x), s(x))  # the same noise forward
    # gradients quantized by the rounding (multiples of 2^-14 here), equal to noise
    for g in (ours, theirs):
        assert torch.equal(g * 2**14, (g * 2**14).round())
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2**-8)
    # a second derivative through that rms_norm alone: noise of a few percent on each side,
    # where each side's two orders (jacfwd, jacrev) disagree as much as the two sides do
    z = T(-0.2134)

    def p(z):
        return torch.special.erfcx(F.rms_norm(z, (1,))).square().prod(0)

    h_ours, h_theirs = tx.hessian(p)(z), tf.hessian(p)(z)
    assert abs(h_ours.item()) < 1e-6 and abs(h_theirs.item()) < 1e-6
    assert not torch.equal(h_ours, h_theirs)
    for jf, jr in ((tx.jacfwd(p)(z), tx.jacrev(p)(z)), (tf.jacfwd(p)(z), tf.jacrev(p)(z))):
        assert abs((jf - jr).item()) > 1e-3 * abs(jr.item())


def batched_norm_per_example():
    # per-example gradients of batch norm's weight with equal cotangents of 7e16 on a channel:
    # the sum over the channel is cancellation (its exact value is 0 times 7e16)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 2, dtype=F64, generator=g) * 10 + 1000
    w, b = torch.randn(2, dtype=F64, generator=g), torch.randn(2, dtype=F64, generator=g)
    ct = torch.full((3, 2), 7e16, dtype=F64)

    def s(x, w):
        return (F.batch_norm(x, None, None, w, b, training=True) * ct).sum()

    loop = []
    for i in range(2):  # torch.autograd per example: torch's backward kernel
        wp = w.clone().requires_grad_()
        loop.append(torch.autograd.grad(s(x[i], wp), wp)[0])
    ours = tx.vmap(tx.grad(s, argnums=1), in_axes=(0, None))(x, w)
    assert torch.equal(ours, torch.stack(loop))
    theirs = tf.vmap(tf.grad(s, argnums=1), in_dims=(0, None))(x, w)
    assert (theirs - torch.stack(loop)).abs().max() > 1.0

    # batched tangents through a constant channel (log_softmax over two equal entries) whose
    # rounding noise rms_norm scales up: each example's tangent is the unbatched jvp's
    xs = T(-0.5173532643771082, 0.0, 0.0, 0.0, 1.4109023650617178, 2.0360639816179087)
    xs = torch.cat([xs, T(0.5707282969743367, -0.04942685962201295)]).reshape(2, 2, 2)
    ws = T(0.0, 0.45492245088244887, 0.7439185489206678, 0.0).reshape(2, 2)
    bs = T(0.0, 0.0, 0.0, 0.510179945026353).reshape(2, 2)
    tx_, tw, tb = (
        T(-0.74176, -1.82049, 0.66358, 2.23141).reshape(2, 2),
        T(0.645, 1.314),
        T(-0.759, 0.251),
    )

    def f(x, w, b):
        y = F.batch_norm(torch.log_softmax(x, -2), None, None, w, b, training=True)
        return torch.cos(F.rms_norm(y, (2,)))

    def ours(*a):
        return tx.jvp(f, a, (tx_, tw, tb))[1]

    def theirs(*a):
        return tf.jvp(f, a, (tx_, tw, tb))[1]

    loop = torch.stack([ours(xs[i], ws[i], bs[i]) for i in range(2)])
    torch.testing.assert_close(loop, torch.stack([theirs(xs[i], ws[i], bs[i]) for i in range(2)]))
    torch.testing.assert_close(tx.vmap(ours)(xs, ws, bs), loop, rtol=1e-12, atol=1e-12)
    assert (tf.vmap(theirs)(xs, ws, bs) - loop).abs().max() > 1.0

    # group norm: the differential run's lgamma > group_norm > abs at ties (a constant group)
    _per_example_against_torch_func(2011403, "tie", 3)
    # instance norm: relu6 > instance_norm > log > cummax, whose near ties (-0.4117 twice)
    # torch's batched instance norm rounds into another order than its per-example kernel
    _per_example_against_torch_func(4013344, "tie", 4)
    _per_example_tangents_against_torch_func(4013344, "tie", 4)


def _per_example_tangents_against_torch_func(seed, edge, length):
    """The differential run's program at (seed, edge) under vmap(jvp): thunderx's batched
    tangents are its per-example ones and torch.func's per-example ones; torch.func's batched
    tangents are not."""
    import random

    from thunderx.testing.diff_checks import Ctx
    from thunderx.testing.differential import make_program

    prog, _ = make_program(random.Random(seed), edge, length, None)
    c = Ctx(prog, seed)

    def ours(*xs):
        return tx.jvp(c.f, xs, tuple(c.ts))[1]

    def theirs(*xs):
        return tf.jvp(c.f, xs, tuple(c.ts))[1]

    rows = range(c.batch[0].shape[0])
    loop = torch.stack([theirs(*[b[i] for b in c.batch]) for i in rows])
    mine = torch.stack([ours(*[b[i] for b in c.batch]) for i in rows])
    torch.testing.assert_close(mine, loop, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(tx.vmap(ours)(*c.batch), loop, rtol=1e-12, atol=1e-12)
    assert (tf.vmap(theirs)(*c.batch) - loop).abs().max() > 1.0


def _per_example_against_torch_func(seed, edge, length):
    """The differential run's program at (seed, edge): thunderx's jit(vmap(grad)) equals its
    own per-example gradients, torch.func's vmap does not equal torch.func's loop. Where
    thunderx's per-example kernels round as torch's (the Intel machines the rows were found
    on), thunderx's batched gradients are torch's loop's too; on AMD EPYC the attention's
    rounding decides the per-example tie otherwise than torch's kernel (0.23 off, measured)."""
    import random

    from thunderx.testing.diff_checks import Ctx
    from thunderx.testing.differential import make_program

    prog, _ = make_program(random.Random(seed), edge, length, None)
    c = Ctx(prog, seed)
    n = c.batch[0].shape[0]

    def per_example(grad):
        outs = [grad(c.s, argnums=c.argnums)(*[b[i] for b in c.batch]) for i in range(n)]
        return [torch.stack([o[k] for o in outs]) for k in range(len(outs[0]))]

    loop = per_example(tf.grad)
    ours = tx.jit(tx.vmap(tx.grad(c.s, argnums=c.argnums)))(*c.batch)
    mine = per_example(tx.grad)
    for got, own in zip(ours, mine):
        torch.testing.assert_close(got, own, rtol=1e-12, atol=1e-12)
    if all(torch.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(mine, loop)):
        # the rows' case: thunderx's batched gradients are torch's loop's, torch.func's not
        for got, want in zip(ours, loop):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        theirs = tf.vmap(tf.grad(c.s, argnums=c.argnums))(*c.batch)
        assert max((a - b).abs().max() for a, b in zip(theirs, loop)) > 0.1


def batched_tie_by_rounding():
    # the differential run's program sdpa > maximum at +-30: under vmap each example's
    # attention output meets maximum's other operand exactly (a tie, the gradient split), as
    # in the per-example computation; torch.func's batched attention rounds otherwise
    _per_example_against_torch_func(1900972, "big", 2)


def batched_reduction_layout():
    # the differential run's program batch_norm > nansum > where (x > 0 ? x : -30) at +-30:
    # each example's normalized values sum to 0 by cancellation (terms of 60), and the batched
    # sum reads them where vmap laid them out (batch norm's examples merged into its channels,
    # so each example is strided), which rounds that sum another way than the per-example loop's
    import random

    from thunderx.testing.diff_checks import Ctx
    from thunderx.testing.differential import make_program

    prog, _ = make_program(random.Random(2216092), "big", 3, None)
    c = Ctx(prog, 2216092)
    x, w, b = c.batch[:3]

    def norm(x, w, b):
        return F.batch_norm(x, None, None, w, b, training=True)

    loop = torch.stack([norm(x[i], w[i], b[i]) for i in range(2)])
    batched = tx.vmap(norm)(x, w, b)
    assert torch.equal(batched, loop)  # the normalized values: torch's kernel per example
    # torch's own sum of those values depends on their layout: contiguous vs as vmap keeps them
    merged = batched.movedim(0, 1).contiguous().movedim(1, 0)  # examples strided, as batched
    contiguous = [loop[i].sum() for i in range(2)]
    strided = [merged[i].sum() for i in range(2)]
    assert contiguous[0] > 0 and strided[0] == 0  # 8.9e-16 against 0
    ours, theirs = tx.vmap(c.f)(*c.batch), tf.vmap(c.f)(*c.batch)
    loop = torch.stack([c.f(*[a[i] for a in c.batch]) for i in range(2)])
    assert ours[0] == -30.0 and loop[0] != -30.0  # the where flips on the noise's sign
    assert ours[1] == loop[1] and theirs[1] == -30.0 != loop[1]  # torch.func's in the other


def logcumsumexp_rounded_output():
    big = 4.2532690029e88
    x, ct = T(big, big, big), T(0.0, 0.0, 1.0)
    f = lambda v: torch.logcumsumexp(v, 0)  # noqa: E731
    assert f(x)[2] == big  # x_2 + log 3, rounded
    _close(tx.vjp(f, x)[1](ct)[0], T(1 / 3, 1 / 3, 1 / 3))
    assert torch.equal(tf.vjp(f, x)[1](ct)[0], T(1.0, 1.0, 1.0))  # its weights sum to 3
    # at an ordinary magnitude the two agree
    small = T(0.5, 0.5, 0.5)
    _close(tx.vjp(f, small)[1](ct)[0], tf.vjp(f, small)[1](ct)[0])


def logcumsumexp_second_derivative_at_zero():
    # torch's second derivatives of logcumsumexp are off where an input is exactly 0; thunderx
    # gives torch's own answer on the same function written log(cumsum(exp(x)))
    x, w, d = T(0.0, 0.37, 0.0), T(0.3, -1.2, 0.7), T(0.5, 1.0, 1.5)
    f = lambda x: (torch.logcumsumexp(x, 0) ** 2 * w).sum()  # noqa: E731
    same = lambda x: (torch.log(torch.cumsum(torch.exp(x), 0)) ** 2 * w).sum()  # noqa: E731
    exact = tf.jacrev(tf.grad(same))(x)
    _close(tx.hessian(f)(x), exact)
    leaf = x.clone().requires_grad_()
    outer = torch.autograd.grad((tx.grad(f)(leaf) * d).sum(), leaf)[0]
    _close(outer, exact @ d)  # torch autograd over thunderx's gradient
    assert (tf.jacrev(tf.grad(f))(x) - exact).abs().max() > 0.5
    assert (tf.hessian(f)(x) - exact).abs().max() > 0.5
    # away from 0 torch agrees
    y = T(0.1, 0.37, 0.2)
    _close(tf.jacrev(tf.grad(f))(y), tf.jacrev(tf.grad(same))(y))


def cumprod_at_infinity():
    x, t = T(math.inf, 2.0, 3.0), T(1.0, 0.0, 0.0)
    assert tx.jvp(lambda v: torch.cumprod(v, 0), (x,), (t,))[1][0] == 1.0
    assert torch.isnan(tf.jvp(lambda v: torch.cumprod(v, 0), (x,), (t,))[1][0])


def bilinear_at_infinity():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 4, dtype=F64, generator=g)
    x[0, 0, 1] = math.inf
    w, wt = (
        torch.randn(3, 2, 2, dtype=F64, generator=g),
        torch.randn(1, 3, 3, dtype=F64, generator=g),
    )
    dx, dw = (
        torch.randn(x.shape, dtype=F64, generator=g),
        torch.randn(w.shape, dtype=F64, generator=g),
    )

    def s(x, w):
        return (F.conv1d(x, w) * wt).sum()

    def second(jvp):
        return jvp(lambda x, w: jvp(s, (x, w), (dx, dw))[1], (x, w), (dx, dw))[1]

    _close(second(tx.jvp), 2 * (F.conv1d(dx, dw) * wt).sum())  # the closed form
    assert torch.isnan(second(tf.jvp))
    # matmul: the Hessian block of its right operand is 0, its mixed block the weights
    a = T(0.0, 1.0, 1.0, math.inf).reshape(2, 2)
    b, wm = T(-0.75, 0.75).reshape(2, 1), T(0.3, -0.5).reshape(2, 1)
    m = lambda a, b: (wm * (a @ b)).sum()  # noqa: E731
    (_, hab), (_, hbb) = tx.hessian(m, argnums=(0, 1))(a, b)
    assert torch.equal(hbb, torch.zeros(2, 1, 2, 1, dtype=F64))
    assert torch.equal(hab, torch.einsum("ik,jl->ijlk", wm, torch.eye(2, dtype=F64)))
    assert torch.isnan(tf.hessian(m, argnums=(0, 1))(a, b)[1][1]).any()
    # mv with a nan entry: the vector's Hessian block is 0, free of the matrix
    mv = lambda a, v: (torch.mv(a, v) * T(1.0, -2.0)).sum()  # noqa: E731
    an, vn = T(math.nan, 1.0, 0.5, 2.0).reshape(2, 2), T(0.3, -0.2)
    vv = lambda hess: hess(mv, argnums=(0, 1))(an, vn)[1][1]  # noqa: E731
    assert torch.equal(vv(tx.hessian), torch.zeros(2, 2, dtype=F64))
    assert torch.isnan(vv(tf.hessian)).any()
    # mm with a nan row: the right operand's Hessian block is 0
    mm = lambda a, v: (torch.mm(a, v) * T(1.0, -2.0).reshape(2, 1)).sum()  # noqa: E731
    vm = lambda hess: hess(mm, argnums=(0, 1))(an, vn.reshape(2, 1))[1][1]  # noqa: E731
    assert torch.equal(vm(tx.hessian), torch.zeros(2, 1, 2, 1, dtype=F64))
    assert torch.isnan(vm(tf.hessian)).any()
