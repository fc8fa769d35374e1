"""nvFuser lowering: every primitive's rule, run by the reference interpreter on CPU, equals its
impl; random programs partition without cycles; CUDA tests run the real nvFuser when present."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import thunderx as tx
from thunderx import core
from thunderx.executors.nvfuser_exec import (
    NvFuserProgram,
    nvfuser_available,
    nvfuser_import_error,
    partition,
    schedule,
)
from thunderx.passes import closure_convert

from .samples import EXCLUDED, SAMPLES, Draw

WITH_RULES = sorted(
    n for n, p in core.primitives.items() if p in core.nvfuser_rules and n not in EXCLUDED
)


def _single_eqn_program(name, sample):
    prim = core.primitives[name]
    pos = [i for i, a in enumerate(sample.args) if isinstance(a, torch.Tensor)]

    def f(*xs):
        args = list(sample.args)
        for p, x in zip(pos, xs):
            args[p] = x
        return prim.bind(*args, **sample.params)

    tensors = [sample.args[p] for p in pos]
    closed = tx.make_jaxpr(f)(*tensors)
    return closed, tensors, f


@pytest.mark.parametrize("name", WITH_RULES)
@given(data=st.data())
def test_reference_interpreter_matches_impl(name, data):
    sample = SAMPLES[name](Draw(data))
    closed, tensors, f = _single_eqn_program(name, sample)
    jaxpr = closure_convert(closed.jaxpr)
    prog = NvFuserProgram(jaxpr)
    fusible = [e for e in jaxpr.eqns if e.prim.name == name]
    if fusible and core.nvfuser_checks.get(core.primitives[name], lambda e: True)(fusible[0]):
        assert prog.regions, f"{name} was not placed in a fusion region"
    got = prog(*closed.consts, *tensors)
    want = f(*tensors)
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and tuple(g.shape) == tuple(w.shape)
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6, equal_nan=True)


FUSIBLE_UNARY = [
    torch.sin,
    torch.exp,
    torch.tanh,
    lambda x: x * 2.0,
    lambda x: x.sum(-1, keepdim=True).expand_as(x),
]
OPAQUE = [
    lambda x: x @ x.T[:, : x.shape[1]] if x.shape[0] >= x.shape[1] else x.T @ x[:, : x.shape[0]].T,
    lambda x: torch.cumsum(x, 0),
    lambda x: x[torch.tensor([1, 0, 2])[: x.shape[0]] % x.shape[0]],
]


@st.composite
def programs(draw):
    """A random program over a few values mixing fusible and torch-only ops."""
    n_ops = draw(st.integers(2, 12))
    steps = []
    for _ in range(n_ops):
        kind = draw(st.sampled_from(["unary", "binary", "opaque"]))
        a = draw(st.integers(0, 10))
        b = draw(st.integers(0, 10))
        k = draw(st.integers(0, 10))
        steps.append((kind, a, b, k))
    return steps


def _run(steps, x):
    vals = [x, x * 0.5 + 1]
    for kind, a, b, k in steps:
        u, v = vals[a % len(vals)], vals[b % len(vals)]
        if kind == "unary":
            vals.append(FUSIBLE_UNARY[k % len(FUSIBLE_UNARY)](u))
        elif kind == "binary":
            vals.append(torch.tanh(u) + v * 0.25)
        else:
            vals.append(OPAQUE[k % len(OPAQUE)](u))
    return vals[-1] + vals[len(vals) // 2]


@given(programs())
def test_random_programs_partition_without_cycles(steps):
    x = torch.randn(3, 3, dtype=torch.float64)
    closed = tx.make_jaxpr(lambda v: _run(steps, v))(x)
    jaxpr = closure_convert(closed.jaxpr)
    regions = partition(jaxpr)
    units = schedule(jaxpr, regions)
    # every unit's inputs are produced by an earlier unit (or are program inputs)
    available = {id(v) for v in jaxpr.invars}
    for u in units:
        for v in u.inputs:
            assert id(v) in available, "a region runs before one of its inputs exists (cycle)"
        available.update(id(v) for e in u.eqns for v in e.outputs)
    got = NvFuserProgram(jaxpr)(*closed.consts, x)
    torch.testing.assert_close(got[0], _run(steps, x))


def test_regions_are_maximal_for_an_elementwise_chain():
    f = lambda x: torch.exp(torch.sin(x) * 2 + 1).sum(0)  # noqa: E731
    closed = tx.make_jaxpr(f)(torch.ones(3, 3))
    prog = NvFuserProgram(closure_convert(closed.jaxpr))
    assert len(prog.regions) == 1 and len(prog.units) == 1


needs_cuda = pytest.mark.skipif(
    not nvfuser_available(),
    reason=f"real nvFuser not usable here: {nvfuser_import_error()}",
)


@needs_cuda
@pytest.mark.parametrize("name", WITH_RULES)
@given(data=st.data())
def test_cuda_nvfuser_matches_impl(name, data):
    sample = SAMPLES[name](Draw(data))
    sample.args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in sample.args]
    closed, tensors, f = _single_eqn_program(name, sample)
    prog = NvFuserProgram(closure_convert(closed.jaxpr))
    got = prog(*closed.consts, *tensors)
    want = f(*tensors)
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)


@needs_cuda
def test_cuda_jit_uses_nvfuser_by_default():
    x = torch.randn(64, 128, device="cuda")
    f = lambda x: torch.nn.functional.gelu(x).sum(-1)  # noqa: E731
    j = tx.jit(f)
    torch.testing.assert_close(j(x), f(x), rtol=1e-5, atol=1e-5)
    assert j.lower(x).executor == "nvfuser"
