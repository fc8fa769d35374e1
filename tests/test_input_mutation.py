"""In-place updates of a transform's inputs, checked against torch.func: under vmap and jvp the
caller's tensor is written (torch.func's wrappers share the caller's memory), under grad it is
refused as torch's autograd refuses it, and an update that cannot reach the caller is an error."""

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx.lang.inplace import MutationError

F64 = torch.float64


def close(a, b, tol=1e-10):
    for x, y in zip(tx.tree.leaves(a), tx.tree.leaves(b), strict=True):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol)


def data(*shape):
    g = torch.Generator().manual_seed(sum(shape))
    return torch.rand(*shape, generator=g, dtype=F64) * 0.8 + 0.1


def both(fn, *args, transform="vmap", **kw):
    """Run fn under thunderx's and torch.func's transform on separate copies of the args:
    (our out, their out, our args after, their args after)."""
    ours = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    theirs = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    out = getattr(tx, transform)(fn, **kw)(*ours)
    ref = getattr(tf, transform)(fn, **kw)(*theirs)
    return out, ref, ours, theirs


CASES = {
    "sin_": (lambda x: x.sin_(), {}),
    "unbound_acos_": (lambda x: torch.Tensor.acos_(x), {}),
    "mul_add_": (lambda x, y: x.mul_(y).add_(1.0), {}),
    "copy_": (lambda x, y: x.copy_(y), {}),
    "dim1": (lambda x, y: x.mul_(y), {"in_dims": (1, 0)}),
    "unbatched_other": (lambda x, y: x.sub_(y), {"in_dims": (0, None)}),
    "row_view": (lambda x: x[:, 0].mul_(3.0), {}),
    "fill_zero": (lambda x: x.fill_(2.0).zero_(), {}),
    "returns_other": (lambda x, y: (x.add_(y), y * 2), {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_vmap_writes_the_callers_tensor_like_torch_func(name):
    fn, kw = CASES[name]
    n = fn.__code__.co_argcount
    args = [data(4, 3, 2), data(4, 3, 2).flip(0)][:n]
    if kw.get("in_dims") == (1, 0):
        args = [data(3, 4, 2), data(4, 3, 2)]
    if kw.get("in_dims") == (0, None):
        args = [data(4, 3, 2), data(3, 2)]
    out, ref, ours, theirs = both(fn, *args, **kw)
    close(out, ref)
    close(ours, theirs)
    assert not torch.equal(ours[0], args[0])  # the update did reach the caller


def test_nested_vmap_writes_through_both_levels():
    fn = lambda x: tx.vmap(lambda r: r.mul_(2.0).add_(1.0))(x)  # noqa: E731
    ref_fn = lambda x: tf.vmap(lambda r: r.mul_(2.0).add_(1.0))(x)  # noqa: E731
    x, y = data(2, 3, 4), data(2, 3, 4)
    close(tx.vmap(fn, in_dims=1)(x), tf.vmap(ref_fn, in_dims=1)(y))
    close(x, y)


def test_jvp_inside_vmap_copy_into_an_input():
    # PyTorch's functorch test (TestVmapJvpInplaceView, case 1), with torch.func as the oracle
    def f(x, y):
        x.copy_(y)
        return x

    def push(jvp):
        return lambda x, xt, y, yt: jvp(f, (x, y), (xt, yt))

    args = [data(3, 2), data(3, 2) + 1, data(3, 2) + 2, data(3, 2) + 3]
    ours, theirs = [a.clone() for a in args], [a.clone() for a in args]
    close(tx.vmap(push(tx.jvp), in_dims=1)(*ours), tf.vmap(push(tf.jvp), in_dims=1)(*theirs))
    close(ours, theirs)


def test_update_of_an_unbatched_input_with_a_batched_value_is_refused():
    fn = lambda x, y: x.add_(y)  # noqa: E731
    with pytest.raises(RuntimeError):
        tf.vmap(fn, in_dims=(None, 0))(data(3), data(4, 3))
    with pytest.raises(RuntimeError, match="into a captured tensor.*inplace arithmetic"):
        tx.vmap(fn, in_dims=(None, 0))(data(3), data(4, 3))


def test_update_of_an_outer_input_from_an_inner_vmap_is_refused():
    def fn(x, ys):
        return tx.vmap(lambda y: x.add_(y))(ys)

    x = data(2, 3)
    before = x.clone()
    with pytest.raises(MutationError, match="nested inside"):
        tx.vmap(fn)(x, data(2, 4, 3))
    close(x, before)  # nothing was written


def test_grad_refuses_an_update_of_its_input_like_torch():
    fn = lambda x: x.sin_().sum()  # noqa: E731
    with pytest.raises(RuntimeError):
        tf.grad(fn)(data(3))
    x = data(3)
    before = x.clone()
    with pytest.raises(MutationError):
        tx.grad(fn)(x)
    close(x, before)


def test_a_shape_changing_update_of_an_input_is_an_error():
    with pytest.raises(MutationError, match="changed the shape"):
        tx.vmap(lambda x: x.unsqueeze_(0))(data(4, 3))


def test_jvp_writes_the_callers_primal_and_tangent_like_torch_func():
    fn = lambda a, b: a.mul_(b).sin_()  # noqa: E731
    args = [data(3, 2), data(3, 2).flip(0), torch.ones(3, 2, dtype=F64), data(3, 2)]
    ours, theirs = [a.clone() for a in args], [a.clone() for a in args]
    close(
        tx.jvp(fn, tuple(ours[:2]), tuple(ours[2:])),
        tf.jvp(fn, tuple(theirs[:2]), tuple(theirs[2:])),
    )
    close(ours, theirs)


def _no_grad_double(x):
    with torch.no_grad():
        x.mul_(2)
    return x.sin() * x


JACFWD_CASES = {
    # forward mode sees every update, inside no_grad too (torch's forward AD ignores it)
    "plain": (lambda L: L.jacfwd(lambda x: x.mul_(2).sin()), [data(3)]),
    "no_grad": (lambda L: L.jacfwd(_no_grad_double), [data(3)]),
    "hessian": (lambda L: L.hessian(lambda x: _no_grad_double(x).sum()), [data(3)]),
    "jacfwd_jacfwd": (lambda L: L.jacfwd(L.jacfwd(_no_grad_double)), [data(3)]),
    "vmap_jacfwd": (lambda L: L.vmap(L.jacfwd(_no_grad_double)), [data(4, 3)]),
    # the linear map reads x before its update (d(x*y)/dy = x): written back only after it ran
    "argnums_both": (
        lambda L: L.jacfwd(lambda x, y: y.add_(1) * x.mul_(y).exp(), argnums=(0, 1)),
        [data(3), data(3).flip(0)],
    ),
    # an argument outside argnums is a plain tensor there, updated as it is
    "other_arg": (lambda L: L.jacfwd(lambda x, y: x.mul_(y.add_(1)).exp()), [data(3), data(3)]),
}


@pytest.mark.parametrize("name", sorted(JACFWD_CASES))
def test_jacfwd_writes_the_callers_inputs_like_torch_func(name):
    make, args = JACFWD_CASES[name]
    ours, theirs = [a.clone() for a in args], [a.clone() for a in args]
    close(make(tx)(*ours), make(tf)(*theirs))
    close(ours, theirs)
    assert not all(torch.equal(a, b) for a, b in zip(ours, args))  # the update reached them
    jitted = [a.clone() for a in args]  # staged: the jit's arguments take the update
    close(tx.jit(make(tx))(*jitted), make(tf)(*[a.clone() for a in args]))
    close(jitted, theirs)


def test_jacfwd_update_of_aliased_inputs_is_refused():
    x = data(3)
    with pytest.raises(MutationError, match="shares memory"):
        tx.jacfwd(lambda a, b: a.mul_(2) + b, argnums=(0, 1))(x, x)


@pytest.mark.parametrize("out_dims", [0, 1])
def test_an_updated_input_returned_is_the_callers_tensor(out_dims):
    # torch.func returns (a view of) the caller's memory: a later write to it shows in both
    ours, theirs = data(4, 3), data(4, 3)
    out = tx.vmap(torch.Tensor.sin_, out_dims=out_dims)(ours)
    ref = tf.vmap(torch.Tensor.sin_, out_dims=out_dims)(theirs)
    close(out, ref)
    ours.mul_(2.0)
    theirs.mul_(2.0)
    close(out, ref)


VIEWS = {
    "diagonal": lambda x: torch.diagonal(x),
    "T": lambda x: x.T,
    "row": lambda x: x[0],
    "unfold": lambda x: x.unfold(1, 2, 1),
    "squeeze_view": lambda x: x.unsqueeze(0).squeeze(0),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_an_output_that_views_an_input_views_the_callers_tensor(name):
    # torch.func: `vmap(torch.diagonal)(x)._base is x`, so writes to x show in the output
    fn = VIEWS[name]
    x, y = data(3, 4, 4), data(3, 4, 4)
    out, ref = tx.vmap(fn, in_dims=1)(x), tf.vmap(fn, in_dims=1)(y)
    close(out, ref)
    assert out._base is x and ref._base is y
    x.add_(1.0)
    y.add_(1.0)
    close(out, ref)


def test_in_place_then_view_under_nested_vmap_views_the_callers_tensor():
    # PyTorch's functorch test_unary_pointwise: vmap(vmap(Tensor.sin_, in_dims=2), in_dims=2)
    op = lambda v: tx.vmap(torch.Tensor.sin_, in_dims=2)(v)  # noqa: E731
    ref_op = lambda v: tf.vmap(torch.Tensor.sin_, in_dims=2)(v)  # noqa: E731
    x = data(2, 5, 7, 11, 3)
    y = x.clone()
    out = tx.vmap(op, in_dims=2, out_dims=2)(x)
    ref = tf.vmap(ref_op, in_dims=2, out_dims=2)(y)
    close(out, ref)
    close(x, y)
    x.sin_()
    y.sin_()
    close(out, ref)


def test_view_outputs_do_not_depend_on_torch_func_vmap(monkeypatch):
    # code that swaps torch.func.vmap for thunderx's (as PyTorch's functorch tests are run)
    monkeypatch.setattr(torch.func, "vmap", tx.vmap)
    x = data(3, 4, 4)
    out = tx.vmap(torch.diagonal)(x)
    assert out._base is x
    close(out, torch.diagonal(x, dim1=1, dim2=2))


@pytest.mark.parametrize(
    "name,f",
    [
        ("clone", lambda x: x.clone()),
        ("times one", lambda x: x * 1),
        ("over one", lambda x: x / 1),
        ("double negation", lambda x: torch.neg(torch.neg(x))),
        ("two clones", lambda x: (x.clone(), x.clone())),
        ("clone beside the input", lambda x: (x, x.clone())),
    ],
)
def test_a_jit_output_torch_makes_fresh_is_not_the_callers_tensor(name, f):
    # the optimizer made these outputs the input itself (x * 1 -> x; clone was the input's own
    # value): mutating the result then changed the caller's tensor, where torch (and
    # torch.compile) return a new tensor
    x = torch.arange(6.0).reshape(2, 3)
    got = tx.jit(f)(x)
    want = f(x)
    outs = got if isinstance(got, tuple) else (got,)
    wants = want if isinstance(want, tuple) else (want,)
    for o, w in zip(outs, wants):
        assert torch.equal(o, w)
        assert (o.data_ptr() == x.data_ptr()) == (w.data_ptr() == x.data_ptr()), name
    ptrs = [o.data_ptr() for o in outs]
    assert len(set(ptrs)) == len({w.data_ptr() for w in wants})  # two clones, two tensors
    before = x.clone()
    for o, w in zip(outs, wants):
        if w.data_ptr() != x.data_ptr():
            o.add_(1.0)
    assert torch.equal(x, before)
