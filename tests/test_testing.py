"""thunderx.testing catches wrong derivative rules and passes correct ones."""

import pytest
import torch
from hypothesis import given

import thunderx as tx
from thunderx import core
from thunderx.ad_util import instantiate
from thunderx.primitives import binary as B
from thunderx.primitives import unary as U
from thunderx.testing import check_grads, check_jit, check_transpose, check_vmap
from thunderx.testing import strategies as tst

F64 = torch.float64


def _custom_sin(correct: bool):
    @tx.custom_jvp
    def f(x):
        return torch.sin(x)

    @f.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        d = torch.cos(x) if correct else torch.cos(x) * 1.01
        return torch.sin(x), d * t

    return f


def test_check_grads_passes_a_correct_custom_jvp():
    check_grads(_custom_sin(True), (torch.randn(5, dtype=F64),), order=2)


def test_check_grads_catches_a_wrong_custom_jvp():
    with pytest.raises(AssertionError, match=r"forward mode.*differs at index.*got.*expected"):
        check_grads(_custom_sin(False), (torch.randn(5, dtype=F64),), modes=("fwd",))
    with pytest.raises(AssertionError, match="reverse mode"):
        check_grads(_custom_sin(False), (torch.randn(5, dtype=F64),), modes=("rev",))


def test_check_grads_catches_a_perturbed_primitive_rule(monkeypatch):
    x = (torch.randn(4, dtype=F64),)
    check_grads(torch.tanh, x)

    def wrong_tanh_jvp(primals, tangents):
        (a,), (t,) = primals, tangents
        y = U.tanh(a)
        return y, B.mul(t, B.sub(1.0, y))  # should be 1 - y**2

    # a test-local change of the registry: monkeypatch restores the rule afterwards
    monkeypatch.setitem(core.jvp_rules, U.tanh_p, wrong_tanh_jvp)
    with pytest.raises(AssertionError):
        check_grads(torch.tanh, x)


def test_check_grads_catches_a_wrong_second_derivative(monkeypatch):
    x = (torch.rand(4, dtype=F64) + 0.5,)
    check_grads(torch.log, x, order=2)

    def wrong_div_jvp(primals, tangents):
        # the divisor's tangent dropped: log's derivative is t / x, so only its second
        # derivatives see this
        (a, b), (ta, _) = primals, tangents
        return B.div_p.bind(a, b), B.div(instantiate(ta), b)

    monkeypatch.setitem(core.jvp_rules, B.div_p, wrong_div_jvp)
    check_grads(torch.log, x, order=1)
    with pytest.raises(AssertionError, match="derivative of order 2"):
        check_grads(torch.log, x, order=2)


def test_custom_vjp_checked_in_reverse_mode():
    @tx.custom_vjp
    def square(x):
        return x * x

    square.defvjp(lambda x: (x * x, x), lambda x, ct: (2 * x * ct,))
    check_grads(square, (torch.randn(3, dtype=F64),), modes=("rev",))
    bad = tx.custom_vjp(lambda x: x * x)
    bad.defvjp(lambda x: (x * x, x), lambda x, ct: (3 * x * ct,))
    with pytest.raises(AssertionError):
        check_grads(bad, (torch.randn(3, dtype=F64),), modes=("rev",))


def test_check_vmap_jit_transpose_catch_wrong_functions():
    x = torch.randn(3, 4, dtype=F64)
    check_vmap(lambda v: v.sum(0), (x,))
    check_jit(lambda v: torch.sin(v) * 2, (x,))
    check_transpose(lambda v: v.T * 3.0, (x,))
    with pytest.raises(AssertionError):
        check_transpose(lambda v: v * v, (x,))  # not linear


@given(tst.tensors(shape=tst.shapes(1, 3, 1, 4), domain="positive"))
def test_strategies_drive_checks(x):
    check_grads(lambda v: torch.log(v) * torch.sqrt(v), (x,), order=2)


@given(tst.broadcastable_shapes(n=2))
def test_broadcastable_shapes_broadcast(shapes):
    torch.broadcast_shapes(*shapes)


@given(tst.pytrees())
def test_pytrees_flatten_round_trip(t):
    leaves, treedef = tx.tree.flatten(t)
    assert all(isinstance(v, torch.Tensor) for v in leaves)
    back = tx.tree.unflatten(treedef, leaves)
    assert tx.tree.structure(back) == treedef
