"""Writes that torch's autograd does not see: an in-place update in a `torch.no_grad()` block
changes the values while the tensor keeps its derivative (reverse mode; torch's forward AD does
see it), and F.embedding(max_norm=...) renormalizes the weight's looked-up rows in place through
`weight.detach()`. Checked against torch.func and eager torch.autograd, weights included."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx
from thunderx.lang.inplace import MutationError

F64 = torch.float64


def close(a, b, tol=1e-10):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def straight_through_clamp(x):
    # the clamp's values, the identity's gradient (a straight-through estimator)
    y = x * 2
    with torch.no_grad():
        y.clamp_(-0.5, 0.5)
    return (y * y.sin()).sum()


def no_grad_row_scale(x):
    y = torch.cos(x).reshape(2, 3)
    with torch.no_grad():
        y[1].mul_(3.0)
    return (y**3).sum()


def no_grad_then_grad_op(x):
    y = x.sin()
    with torch.no_grad():
        y.add_(1.0)
    y = y * x  # seen by autograd
    return y.sum()


def no_grad_setitem(x):
    # the written entry keeps x's derivative (a constant written: 0 before)
    y = x * 1.5
    with torch.no_grad():
        y[0] = 5.0
    return (y * y).sum()


CASES = {
    "setitem": no_grad_setitem,
    "clamp": straight_through_clamp,
    "row": no_grad_row_scale,
    "mixed": no_grad_then_grad_op,
}
X = torch.linspace(-0.7, 0.9, 6, dtype=F64)
T = torch.linspace(0.3, 1.1, 6, dtype=F64)


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_grad_write_keeps_the_derivative_in_reverse_mode(name):
    fn = CASES[name]
    close(tx.grad(fn)(X), tf.grad(fn)(X))
    close(tx.jit(tx.grad(fn))(X), tf.grad(fn)(X))
    close(tx.grad(tx.jit(fn))(X), tf.grad(fn)(X))
    xs = torch.stack([X, 2 * X])
    close(tx.vmap(tx.grad(fn))(xs), tf.vmap(tf.grad(fn))(xs))
    close(tx.jacrev(tx.grad(fn))(X), tf.jacrev(tf.grad(fn))(X))
    close(tx.hessian(fn)(X), tf.hessian(fn)(X))  # forward over reverse


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_grad_write_is_seen_by_forward_mode(name):
    # torch's forward AD differentiates the write (no_grad blocks do not stop it)
    fn = CASES[name]
    close(tx.jvp(fn, (X,), (T,))[1], tf.jvp(fn, (X,), (T,))[1])
    close(tx.jacfwd(fn)(X), tf.jacfwd(fn)(X))


@pytest.mark.parametrize("name", sorted(CASES))
def test_jit_under_torch_autograd_keeps_the_derivative(name):
    # the program torch autograd runs through (not thunderx's AD) keeps the derivative too
    fn = CASES[name]
    a = X.clone().requires_grad_()
    fn(a).backward()
    b = X.clone().requires_grad_()
    out = tx.jit(fn)(b)
    out.backward()
    close(out, fn(X))
    close(b.grad, a.grad)


def test_detach_in_place_cuts_later_uses():
    def fn(x):
        y = x * 3
        z = y * 2  # a use before: keeps its derivative
        y.detach_()
        return (y * x + z).sum()

    close(tx.grad(fn)(X), tf.grad(fn)(X))
    close(tx.jit(tx.grad(fn))(X), tf.grad(fn)(X))
    with pytest.raises(RuntimeError, match="Can't detach views in-place"):
        tx.grad(lambda x: (x * 1)[1:].detach_().sum())(X)


def test_detach_write_under_jit_and_torch_autograd():
    # a write through .detach() inside jit kept no derivative under torch autograd (zero grad)
    def fn(x):
        y = x * 3
        y.detach().mul_(2)
        return (y * y.tanh()).sum()

    a = X.clone().requires_grad_()
    fn(a).backward()
    b = X.clone().requires_grad_()
    tx.jit(fn)(b).backward()
    close(b.grad, a.grad)


def optimizer_style_step(w):
    loss = (w.sin() * 3).sum()
    with torch.no_grad():
        w.mul_(0.5)  # an update of the input, which autograd does not see
    return loss + (w * w).sum()


def test_no_grad_write_into_grad_input_reaches_the_caller():
    wt, wx = X.clone(), X.clone()
    gt = tf.grad(lambda w: _halve(w) + (w * w).sum())(wt)
    gx = tx.grad(lambda w: _halve(w) + (w * w).sum())(wx)
    close(gx, gt)
    close(wx, wt)  # both halved the caller's tensor
    # under jit the argument is written back after each call, as torch.compile does
    wj = X.clone()
    gj = tx.jit(tx.grad(lambda w: _halve(w) + (w * w).sum()))(wj)
    wr = X.clone()
    close(gj, tf.grad(lambda w: _halve(w) + (w * w).sum())(wr))
    close(wj, wr)


def no_grad_view_write(w):
    v = w[1:4]
    with torch.no_grad():
        v.mul_(0.5)
    return (v**2).sum() + (w * w.sin()).sum()


def detach_view_write(w):
    w.detach()[2:].mul_(2)
    return (w * w.sin()).sum()


@pytest.mark.parametrize("fn", [no_grad_view_write, detach_view_write])
def test_unseen_write_through_a_view_of_grad_input_reaches_the_caller(fn):
    wt, wx, wj = X.clone(), X.clone(), X.clone()
    gt = tf.grad(fn)(wt)
    close(tx.grad(fn)(wx), gt)
    close(tx.jit(tx.grad(fn))(wj), gt)
    assert not torch.equal(wt, X)
    close(wx, wt)
    close(wj, wt)


def _halve(w):
    with torch.no_grad():
        w.mul_(0.5)
    return w.sum() * 0


def test_no_grad_write_into_a_saved_input_is_refused_or_reads_the_old_value():
    # torch refuses (sin saved w); thunderx's derivative reads the value sin used (the
    # computation as written), and the write keeps w's derivative: 3 cos(w) + 2 (w / 2)
    w = X.clone()
    g = tx.grad(optimizer_style_step)(w)
    close(g, 3 * X.cos() + X)
    close(w, X * 0.5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        tf.grad(optimizer_style_step)(X.clone())


# ---------------------------------------------------------------------------- F.embedding


IDX = torch.tensor([1, 3, 3, 5, 0])


def weight(seed=0, batch=()):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*batch, 7, 4, generator=g, dtype=F64) * 1.5


def emb_loss(w, idx, norm_type=2.0):
    out = F.embedding(idx, w, max_norm=1.1, norm_type=norm_type)
    return (out**2 * torch.arange(4, dtype=out.dtype)).sum()


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0])
def test_embedding_max_norm_grad_renormalizes_the_callers_weight(norm_type):
    wt, wx = weight(), weight()
    gt = tf.grad(emb_loss)(wt, IDX, norm_type)
    gx = tx.grad(emb_loss)(wx, IDX, norm_type)
    assert not torch.equal(wt, weight())  # torch.func renormalized rows in place
    close(wx, wt, tol=1e-15)  # the row norms: torch's kernel per row, thunderx's per matrix
    close(gx, gt)


def test_embedding_max_norm_forward_mode_and_vmap_over_weights():
    wt, wx = weight(), weight()
    t = weight(1)
    yt = tf.jvp(lambda w: emb_loss(w, IDX), (wt,), (t,))
    yx = tx.jvp(lambda w: emb_loss(w, IDX), (wx,), (t,))
    close(yx, yt)
    close(wx, wt, tol=1e-15)
    bt, bx = weight(2, (3,)), weight(2, (3,))
    close(
        tx.vmap(emb_loss, in_axes=(0, None))(bx, IDX), tf.vmap(emb_loss, in_dims=(0, None))(bt, IDX)
    )
    close(bx, bt, tol=1e-15)


def test_embedding_max_norm_of_a_slice_of_grad_input():
    def f(w):
        out = F.embedding(IDX, w[1:8], max_norm=1.1)
        return (out**2).sum() + (w[0] * w[8]).sum()

    big = lambda: torch.cat([weight(3)[:2], weight(), weight(4)[:2]])  # noqa: E731
    wt, wx = big(), big()
    close(tx.grad(f)(wx), tf.grad(f)(wt))
    close(wx, wt, tol=1e-15)
    wt, wx, t = big(), big(), big() * 0.5
    close(tx.jvp(f, (wx,), (t.clone(),)), tf.jvp(f, (wt,), (t.clone(),)))


def test_embedding_max_norm_batched_indices_into_one_weight_is_refused():
    # each example would renormalize the same rows differently; torch.func refuses it too
    idx = torch.tensor([[1, 2], [3, 4]])
    with pytest.raises(RuntimeError):
        tf.vmap(emb_loss, in_dims=(None, 0))(weight(), idx)
    w = weight()
    with pytest.raises(MutationError, match="max_norm"):
        tx.vmap(emb_loss, in_axes=(None, 0))(w, idx)


@pytest.mark.parametrize("executor", ["torch", "inductor"])
def test_embedding_module_trained_under_jit_matches_eager(executor):
    torch.manual_seed(0)
    ours = torch.nn.Sequential(torch.nn.Embedding(12, 5, max_norm=1.0), torch.nn.Linear(5, 3))
    ref = torch.nn.Sequential(torch.nn.Embedding(12, 5, max_norm=1.0), torch.nn.Linear(5, 3))
    ref.load_state_dict(ours.state_dict())
    opt, opt_ref = (torch.optim.Adam(m.parameters(), lr=0.1) for m in (ours, ref))
    step = tx.jit(lambda i: ours(i).tanh().sum(), executor=executor)
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        i = torch.randint(0, 12, (9,), generator=gen)
        for o, f in ((opt, step), (opt_ref, lambda i: ref(i).tanh().sum())):
            o.zero_grad()
            f(i).backward()
            o.step()
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_embedding_max_norm_jit_argument_is_written_back():
    w, ref = weight(), weight()
    out = tx.jit(emb_loss)(w, IDX)
    close(out, emb_loss(ref, IDX))
    assert not torch.equal(ref, weight())
    close(w, ref, tol=1e-15)


def test_embedding_bag_max_norm_renormalizes():
    w, ref = weight().float(), weight().float()
    offsets = torch.tensor([0, 2])

    def bag(w):
        return F.embedding_bag(IDX, w, offsets, max_norm=1.0, mode="sum").square().sum()

    close(tx.grad(bag)(w), tf.grad(bag)(ref), tol=1e-6)
    assert not torch.equal(ref, weight().float())
    close(w, ref, tol=1e-6)
