"""The control-flow differential test (thunderx.testing.diff_control): random programs of
thunderx.lax loops and branches through every transform against the same programs run as Python
under torch autograd; and the bugs it found, each against its oracle. The long run is
`python -m thunderx.testing.diff_control --minutes 10`."""

from __future__ import annotations

import os

import torch

import thunderx as tx
from thunderx import lax
from thunderx.core import transpose_rules
from thunderx.primitives.scan import scan_p
from thunderx.testing import diff_control as DC

F64 = torch.float64
# CI: 60 programs (about 15 s on 2 cores); a local run draws more
PROGRAMS = 60 if os.environ.get("CI") else 150


def test_random_control_flow_programs_agree_with_torch_autograd_on_python_control_flow():
    report = DC.run(programs=PROGRAMS, seed=0)
    assert report.programs >= PROGRAMS * 0.9, report.summary()
    # every check ran on every program (a refusal would be a missing feature, and is counted)
    assert report.checks == report.programs * 17, report.summary()
    assert not report.refused, report.summary()
    assert report.findings == [], report.summary()


def test_the_programs_cover_every_construct_and_nesting():
    kinds, nested = set(), 0
    for seed in range(PROGRAMS):
        prog = DC.make_program(seed)
        for node in prog.nodes:
            kinds.add(node.kind)
            nested += any(isinstance(x, DC.Node) for x in node.inner)
    assert kinds == set(DC._APPLY), kinds
    assert nested >= 5


def test_a_planted_bug_is_found(monkeypatch):
    """The harness can fail: scan's transpose running the loop the wrong way round."""
    orig = transpose_rules[scan_p]

    def wrong(cts, *args, **params):
        return orig(cts, *args, **dict(params, reverse=not params["reverse"]))

    monkeypatch.setitem(transpose_rules, scan_p, wrong)
    report = DC.run(programs=30, seed=0)
    checks = {f.check for f in report.findings}
    assert {"grad", "vjp", "jacrev"} <= checks, report.summary()
    assert "jvp" not in checks and "jit" not in checks  # forward mode and values are right


def test_a_decision_near_its_threshold_draws_new_inputs(monkeypatch):
    """Inputs where a branch's predicate or a loop's condition is within MARGIN of flipping are
    redrawn, so that no reference straddles a branch; a program that never draws far enough
    from its decisions is left out."""
    margins = DC.Margins()
    margins.note(torch.tensor(1e-5, dtype=F64))
    margins.note(torch.tensor(-2.0, requires_grad=True))
    assert margins.values == [1e-5, 2.0]
    seed = next(
        s
        for s in range(100)
        if any(n.kind == "cond" and n.params["on"] == "value" for n in DC.make_program(s).nodes)
    )
    monkeypatch.setattr(DC, "MARGIN", 1e9)
    report = DC.Report()
    DC.run_program(seed, report)
    assert (report.programs, report.checks, report.skipped_near_decisions) == (0, 0, 20)


# ----------------------------------------------------------------- the bugs the fuzzer found


def test_switch_with_one_branch_compiles_and_runs_it():
    """Found by the fuzzer: the generated code for a one-branch switch was `else:` alone."""
    h, k = torch.randn(3, dtype=F64), torch.tensor(2)

    def f(h, k):
        return lax.switch(k, [lambda a: a.sin() * 2], h)

    assert torch.equal(tx.jit(f)(h, k), h.sin() * 2)
    g = tx.jit(tx.grad(lambda h, k: f(h, k).sum()))(h, k)
    torch.testing.assert_close(g, 2 * h.cos())
    ks = torch.tensor([0, 5, -1])
    hs = torch.randn(3, 3, dtype=F64)
    assert torch.equal(tx.jit(tx.vmap(f))(hs, ks), hs.sin() * 2)


def test_hessian_through_a_branch_whose_while_loop_ignores_an_operand():
    """Found by the fuzzer: partial evaluation of a checkpoint (the remat around a while loop
    inside a branch) whose outputs ignore an unknown operand kept that operand as an input of
    the known equation (a variable used before it is defined)."""
    w = torch.randn(4, dtype=F64)

    def f(h):
        def body(c):
            k, a = c
            return k + 1.0, (a - a.mean()) * 0.9 + a.sin()

        def loop(a):
            start = (torch.zeros((), dtype=F64), a)
            return lax.while_loop(lambda c: (c[0] < 2) & (c[1].square().sum() < 50), body, start)[1]

        return (lax.switch(torch.tensor(1), [torch.sigmoid, loop], h * w) * w).sum()

    h = torch.randn(4, dtype=F64) * 0.5
    want = torch.autograd.functional.hessian(f, h)
    torch.testing.assert_close(tx.hessian(f)(h), want)
    torch.testing.assert_close(tx.jit(tx.hessian(f))(h), want)


def _scan_eqn_with_an_ignored_const():
    from thunderx.core import get_aval
    from thunderx.ir import Eqn, Jaxpr, Var
    from thunderx.primitives import unary as U
    from thunderx.tracing import trace_flat

    c, ignored = torch.randn(3, dtype=F64), torch.randn(3, dtype=F64)
    closed, _ = trace_flat(lambda ign, c: ([U.sin(c)], None), [get_aval(ignored), get_aval(c)])
    body = closed.jaxpr
    ins = [Var(get_aval(ignored)), Var(get_aval(c))]
    out = Var(get_aval(c))
    params = {"jaxpr": body, "num_consts": 1, "num_carry": 1, "length": 2, "reverse": False}
    return Eqn(scan_p, ins, [out], params), Jaxpr, (ignored, c)


def test_scan_partial_eval_drops_an_unknown_operand_no_output_reads():
    """The same defect in scan's rule: the known loop must not take the unknown constant."""
    from thunderx.core import partial_eval_rules
    from thunderx.ir import eval_jaxpr

    eqn, Jaxpr, (ignored, c) = _scan_eqn_with_an_ignored_const()
    known, unknown, out_unk, _ = partial_eval_rules[scan_p](eqn, [True, False])
    assert unknown is None and out_unk == [False]
    assert [id(x) for x in known.inputs] == [id(eqn.inputs[1])]
    j = Jaxpr([], [eqn.inputs[1]], [known], known.outputs)
    (got,) = eval_jaxpr(j, [], c)
    assert torch.equal(got, c.sin().sin())


def test_map_with_batch_size_over_no_slices():
    """Found by the fuzzer: `lax.map(f, xs, batch_size=...)` with a leading axis of 0 failed;
    as JAX, the result is f's output stacked 0 times."""
    xs = torch.ones(0, 2, 3)

    def f(x):
        return x.sum(-1)

    want = torch.zeros(0, 2)
    assert torch.equal(lax.map(f, xs, batch_size=2), want)
    assert torch.equal(tx.jit(lambda xs: lax.map(f, xs, batch_size=2))(xs), want)
    got = tx.vmap(lambda xs: lax.map(f, xs, batch_size=2))(torch.ones(3, 0, 2, 3))
    assert got.shape == (3, 0, 2)


def test_detach_under_eager_vmap_cuts_torch_autograd():
    """Found by the fuzzer (its oracle runs `lax.map(batch_size=...)`, an eager vmap, under
    torch autograd): stop_gradient's kernel was the identity, so torch autograd differentiated
    through a `.detach()` inside an eager vmap (twice the gradient of `x.detach() * x`)."""
    import torch.func as tf

    xs = torch.randn(4, 3, dtype=F64, requires_grad=True)
    for vmap in (tx.vmap, tf.vmap):
        out = vmap(lambda x: x.detach() * x + x.sin().detach())(xs)
        (g,) = torch.autograd.grad(out.sum(), xs)
        torch.testing.assert_close(g, xs.detach())

    def no_grad_block(x):
        with torch.no_grad():
            y = x * 2
        return y * x

    (g,) = torch.autograd.grad(tx.vmap(no_grad_block)(xs).sum(), xs)
    torch.testing.assert_close(g, 2 * xs.detach())


def test_a_layout_op_read_by_a_kept_equation_stays_in_its_fusion_region():
    """Found by the fuzzer: refining the fusion partition peeled a broadcast out of its region
    when one of its two readers in the region was peeled, although the other stayed; the region
    then both fed and read the peeled op (a cycle the nvFuser and inductor executors refused)."""
    from thunderx.executors import regions as R
    from thunderx.passes import optimize

    X = torch.randn(3, 4, dtype=F64)

    def f(h, w):
        ys = lax.map(lambda x: ((x + h) ** 3) * 0.125, X, batch_size=2)
        return ((h + ys.sum(0) * 0.3) * w).sum()

    hs, ws = torch.randn(3, 4, dtype=F64), torch.randn(3, 4, dtype=F64)
    g = tx.jit(tx.vmap(tx.grad(f, argnums=(0, 1))), executor="nvfuser")
    got = g(hs, ws)
    for i in range(3):
        h, w = hs[i].clone().requires_grad_(), ws[i].clone().requires_grad_()
        want = torch.autograd.grad(f(h, w), (h, w))
        torch.testing.assert_close(got[0][i], want[0])
        torch.testing.assert_close(got[1][i], want[1])
    entry, _ = g.jit_function._lookup((hs, ws), {})
    jaxpr = optimize(entry.jaxpr)
    regions = R.refine(jaxpr, R.partition(jaxpr))
    R.schedule(jaxpr, regions)  # raises on a cycle
    assert any(r is not None for r in regions)
