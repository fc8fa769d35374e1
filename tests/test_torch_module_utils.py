"""torch's module utilities holding thunderx's traced values: `make_functional` and
`NamedMemberAccessor` (what functorch's MAML, ensembling and functional_init examples call) swap
a model's weights with `set_tensor` / `swap_tensor`, which refuse anything but a torch.Tensor
outside thunderx's transforms; torch.func is the oracle."""

import pytest
import torch
import torch.func as tf
import torch.nn as nn
from torch._functorch.make_functional import make_functional, make_functional_with_buffers
from torch.nn.utils._named_member_accessor import NamedMemberAccessor

import thunderx as tx
from thunderx import core

D = torch.float64


def test_make_functional_holds_traced_values_as_torch_func_does():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).to(D)
    fn, params = make_functional(net)
    x = torch.randn(5, 3, dtype=D)

    def loss(p, x):
        return fn(p, x).square().sum()

    for a, b in zip(tx.grad(loss)(params, x), tf.grad(loss)(params, x)):
        torch.testing.assert_close(a, b)
    per_ex = tx.vmap(tx.grad(loss), (None, 0))(params, x)
    for a, b in zip(per_ex, tf.vmap(tf.grad(loss), (None, 0))(params, x)):
        torch.testing.assert_close(a, b)
    # torch autograd through the inner gradient (MAML's outer step)
    ours = torch.autograd.grad(sum(g.sum() for g in tx.grad(loss)(params, x)), params)
    theirs = torch.autograd.grad(sum(g.sum() for g in tf.grad(loss)(params, x)), params)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def test_make_functional_with_buffers_under_jit_and_vmap():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4, track_running_stats=False)).to(D)
    fn, params, buffers = make_functional_with_buffers(net)
    x = torch.randn(2, 5, 3, dtype=D)

    def f(p, b, x):
        return fn(p, b, x).sin().sum()

    want = tf.vmap(tf.grad(f), (None, None, 0))(params, buffers, x)
    got = tx.jit(tx.vmap(tx.grad(f), (None, None, 0)))(params, buffers, x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_named_member_accessor_swaps_traced_values_and_restores_the_module():
    lin = nn.Linear(3, 2).to(D)
    acc = NamedMemberAccessor(lin)
    weight = lin.weight
    x = torch.randn(4, 3, dtype=D)

    def f(w):
        old = acc.swap_tensor("weight", w)
        try:
            return lin(x).sum()
        finally:
            acc.swap_tensor("weight", old)

    torch.testing.assert_close(tx.grad(f)(weight.detach()), tf.grad(f)(weight.detach()))
    assert lin.weight is weight  # put back
    # a plain attribute (not a parameter or buffer) holding a traced value, and its removal
    mod = nn.Module()
    acc2 = NamedMemberAccessor(mod)

    def g(t):
        acc2.set_tensor("extra", t * 2)
        out = mod.extra.sum()
        old = acc2.swap_tensor("extra", torch.zeros(3, dtype=D))
        assert isinstance(old, core.Tracer)
        acc2.del_tensor("extra")
        return out

    torch.testing.assert_close(tx.grad(g)(torch.ones(3, dtype=D)), torch.full((3,), 2.0, dtype=D))
    assert not hasattr(mod, "extra")


def test_outside_transforms_torch_s_own_checks_still_refuse_non_tensors():
    acc = NamedMemberAccessor(nn.Linear(3, 2))
    with pytest.raises(TypeError, match="not an instance of torch.Tensor"):
        acc.swap_tensor("weight", "not a tensor")
