"""Classes registered with torch's own pytrees (`torch.utils._pytree`, what torch.func and
torch.compile users register: dataclasses, containers, transformers' ModelOutput) are pytrees
under thunderx too, as arguments and as results, against torch.func. thunderx refused them."""

import dataclasses

import torch
import torch.func as tf
import torch.utils._pytree as tp

import thunderx as tx


@dataclasses.dataclass
class Params:
    w: torch.Tensor
    b: torch.Tensor


tp.register_dataclass(Params)


class Pair:
    def __init__(self, first, second):
        self.first, self.second = first, second


tp.register_pytree_node(
    Pair, lambda p: ([p.first, p.second], None), lambda values, _: Pair(*values)
)


def _loss(p, x):
    return torch.tanh(x @ p.w + p.b).pow(2).sum()


def _params():
    g = torch.Generator().manual_seed(0)
    return Params(
        torch.randn(3, 2, generator=g, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    )


def test_a_torch_registered_dataclass_through_grad_jit_and_vmap():
    p, x = _params(), torch.randn(4, 3, dtype=torch.float64)
    want = tf.grad(_loss)(p, x)
    for got in (tx.grad(_loss)(p, x), tx.jit(tx.grad(_loss))(p, x), tx.func.grad(_loss)(p, x)):
        assert isinstance(got, Params)
        torch.testing.assert_close(got.w, want.w)
        torch.testing.assert_close(got.b, want.b)
    per_example = tx.vmap(tx.grad(_loss), in_axes=(None, 0))(p, x[:, None])
    loop = [tf.grad(_loss)(p, r[None]) for r in x]
    torch.testing.assert_close(per_example.w, torch.stack([g.w for g in loop]))
    jac = tx.jacrev(lambda q: torch.tanh(x @ q.w + q.b))(p)
    torch.testing.assert_close(jac.w, tf.jacrev(lambda q: torch.tanh(x @ q.w + q.b))(p).w)


def test_a_class_registered_after_thunderx_was_used_is_a_node_in_results_and_arguments():
    class Late:
        def __init__(self, value):
            self.value = value

    tx.grad(lambda v: v.sum())(torch.ones(2))  # thunderx's trees are in use before
    tp.register_pytree_node(Late, lambda o: ([o.value], None), lambda vs, _: Late(vs[0]))
    out = tx.jit(lambda t: Late(t * 2))(torch.ones(3))
    assert isinstance(out, Late)
    torch.testing.assert_close(out.value, torch.full((3,), 2.0))
    pair = tx.vmap(lambda t: Pair(t.sin(), Late(t.cos())))(torch.ones(2, 3))
    assert isinstance(pair, Pair) and isinstance(pair.second, Late)
    torch.testing.assert_close(pair.second.value, torch.ones(2, 3).cos())
    g = tx.grad(lambda q: (q.first * q.second.value).sum())(
        Pair(torch.ones(2), Late(torch.arange(2.0)))
    )
    torch.testing.assert_close(g.first, torch.arange(2.0))
    torch.testing.assert_close(g.second.value, torch.ones(2))
