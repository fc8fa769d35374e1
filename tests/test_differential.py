"""The differential test (thunderx.testing.differential): random cases of every differentiable
op and random programs through every transform against torch.func / torch.autograd (and JAX where
installed), finite differences deciding which side is wrong. The bounded profile runs here; the
long one is `python -m thunderx.testing.differential --minutes 10`."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import thunderx as tx
from thunderx.core import Tracer, jvp_rules
from thunderx.testing import diff_checks as dc
from thunderx.testing import differential as D
from thunderx.testing.diff_ops import EDGES, OPS, Case, Op, make_case
from thunderx.testing.diff_verdict import NOISE_SCALES

SEED = int(os.environ.get("THUNDERX_DIFF_SEED", "0"))

# Differentiable primitives the op table does not reach directly, with the reason.
NOT_IN_TABLE = {
    "custom_vmap_call": "user-defined batching rules: tests/test_custom_vmap.py",
    "pure_callback": "a user's Python callback, not differentiable: tests/test_pure_callback.py",
    "linear_solve": "custom_linear_solve / custom_root with the user's solvers: "
    "tests/test_implicit.py",
    "custom_jvp_call": "user-defined rules: tests/test_ad.py and the custom-rule tests",
    "custom_vjp_call": "user-defined rules: tests/test_ad.py and the custom-rule tests",
    "jit_call": "reached by every nested check (jit(grad), jit(vmap(grad)))",
    "stop_gradient": "an identity with a zero derivative: tests/test_ad.py",
    "name": "checkpoint_name's identity tag: tests/test_jax_api_extras.py",
    "device_put": "a move between devices, made only when a CPU scalar meets a GPU tensor: "
    "tests/test_devices.py (rules on the CPU) and tests/test_cuda.py",
    "log_softmax_jvp": "log_softmax's tangent, only in forward mode (the table stages f and grad): "
    "tests/test_composite.py",
    "sdpa_jvp": "attention's tangent, only in forward mode (the table stages f and grad): "
    "tests/test_composite_attention.py",
    "rnn_jvp": "a recurrent layer's tangent, only in forward mode (the table stages f and grad): "
    "tests/test_lowering_kernels.py (a Hessian-vector product) and tests/test_composite.py",
    "max_pool_gather": "max_pool's tangent, only in forward mode (the table stages f and grad): "
    "tests/test_composite.py and tests/test_composite_cnn.py",
    "layer_norm_affine_tangent": "layer_norm's tangent with its affine, only in forward mode (the "
    "table stages f and grad): tests/test_composite.py and tests/test_layer_norm_affine.py",
    "channel_norm_affine_tangent": "batch and group norm's tangent with their affine, only in "
    "forward mode (the table stages f and grad): tests/test_composite.py and "
    "tests/test_channel_norm_affine.py",
    **{
        n: "complex values: derivatives vs torch.func in tests/test_complex.py"
        for n in ("real", "imag", "conj", "complex")
    },
    "fft": "complex values: derivatives vs torch.func in tests/test_fft.py",
    "no_grad": "stop_gradient for reverse mode only (torch's no_grad blocks): tests/test_semantics.py",
    **{
        p: "control flow (higher-order): tests/test_control_flow.py"
        for p in ("cond", "scan", "while", "checkpoint")
    },
    **{
        p: "linear algebra decompositions (merged late): they need well-conditioned or "
        "symmetric inputs the op table does not draw yet; their own tests cover them"
        for p in ("cholesky", "eigh", "expm", "expm_frechet", "lu", "qr", "svd", "triangular_solve")
        + ("eig",)
    },
    "conv_kernel_grad": "conv's weight cotangent: it appears only in conv's derivative, never in "
    "a forward program the table draws; its own rules: tests/test_conv.py",
    "conv_input_grad": "conv's input cotangent: it appears only in conv's derivative, never in "
    "a forward program the table draws; its own rules: tests/test_conv.py",
    "debug_callback": "a host callback (printing), no value of its own: tests/test_api_pieces.py",
    **{
        p: "a collective over a named axis, or shard_map's boundary: bound only inside "
        "vmap(axis_name=) or shard_map; tests/test_distributed.py"
        for p in (
            "all_gather",
            "all_to_all",
            "pmax",
            "pmin",
            "ppermute",
            "psum",
            "psum_scatter",
            "shard_gather",
            "shard_slice",
        )
    },
}


def test_bounded_profile_has_no_failure_outside_the_known_table(capsys):
    report = D.run(seed=SEED, programs=12)
    with capsys.disabled():
        print("\n" + report.summary(verbose=False))
    assert report.cases >= len(OPS) - 2, "every op of the table should give a case"
    assert report.programs >= 8
    unexpected = report.unexpected()
    assert not unexpected, report.summary()


def test_known_failure_entries_still_fail():
    """A fixed failure must leave the table (or the table hides the next regression)."""
    stale = D.stale_entries()
    assert not stale, "stale entries in KNOWN_FAILURES or DELIBERATE:\n" + "\n".join(stale)


def test_every_differentiable_primitive_is_in_the_op_table():
    rng = random.Random(0)
    reached = set()
    for op in OPS.values():
        # three draws at each edge, so that a param choosing a kernel path (sdpa's heads) is seen
        for edge in ("normal", "one") * 3:
            case = make_case(op, edge, rng)
            if case is None:
                continue
            xs, ks = case.args[: case.ndiff], case.args[case.ndiff :]
            for f in (lambda *a: case.fn(*a), tx.grad(lambda *a: case.fn(*a).sum())):
                try:
                    closed = tx.make_jaxpr(f)(*xs, *ks)
                except Exception:  # noqa: BLE001 - a known failure (KNOWN_FAILURES) of this op
                    continue
                reached |= {e.prim.name for e in closed.jaxpr.eqns}
    differentiable = {p.name for p in jvp_rules}
    missing = differentiable - reached - set(NOT_IN_TABLE)
    assert not missing, f"differentiable primitives no op of the table reaches: {sorted(missing)}"


def test_finite_differences_decide_which_side_is_wrong():
    x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    fd = lambda f: lambda: dc.fd_jacobian(f, [x])  # noqa: E731
    right = torch.cos(x)
    # a wrong thunderx value at a differentiable point
    found = dc.classify(
        "jvp", right * 1.5, right, lambda: tuple(j.diagonal() for j in fd(torch.sin)())
    )
    assert found.category == "thunderx-wrong"
    # torch wrong, thunderx right
    found = dc.classify(
        "jvp", right, right * 1.5, lambda: tuple(j.diagonal() for j in fd(torch.sin)())
    )
    assert found.category == "torch-wrong"
    # a kink: relu at 0 (one-sided differences 0 and 1)
    z = torch.zeros(1, dtype=torch.float64)
    found = dc.classify(
        "grad",
        torch.ones(1, dtype=torch.float64),
        torch.zeros(1, dtype=torch.float64),
        lambda: tuple(j.reshape(-1) for j in dc.fd_jacobian(torch.relu, [z])),
    )
    assert found.category == "kink"


def test_a_side_far_sharper_than_finite_differences_allow_decides(monkeypatch):
    """Both sides within FD_RTOL of the differences: a side that agrees with them to 1e-8
    while the other is 30x farther away is right (torch's hardsigmoid derivative is a float32
    1/6 in float64); two sides equally near stay unresolved."""
    from thunderx.testing import diff_verdict

    # the tolerance an earlier case's scale set
    monkeypatch.setattr(diff_verdict, "_CASE_RTOL", [diff_verdict.RTOL])
    x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    fd = lambda: tuple(j.diagonal() for j in dc.fd_jacobian(torch.sin, [x]))  # noqa: E731
    right, off = torch.cos(x), torch.cos(x) * (1 + 3e-6)
    assert dc.classify("jvp", right, off, fd).category == "torch-wrong"
    assert dc.classify("jvp", off, right, fd).category == "thunderx-wrong"
    assert dc.classify("jvp", off, right * (1 - 3e-6), fd).category == "unresolved"
    # the run's finding: hardsigmoid > pow > square under jvp
    assert D.reproduce_program(None, "one", 181886, "jvp", length=3) == set()
    h = torch.tensor(0.5, dtype=torch.float64)
    assert tx.grad(torch.nn.functional.hardsigmoid)(h).item() == 1 / 6


def test_central_differences_cancel_their_truncation_error():
    """The differences are extrapolated from two steps (Richardson), so a function with large
    third derivatives is still resolved to 1e-8: sin(300 x) has f'''/f' = 9e4, which leaves
    1.5e-8 of the derivative in a central difference at step 1e-6 alone."""
    x = torch.tensor([0.01, -0.002, 0.3], dtype=torch.float64)
    central, forward, _ = dc.fd_jacobian(lambda v: torch.sin(300 * v), [x])
    exact = 300 * torch.cos(300 * x)
    assert ((central.diagonal() - exact).abs() <= 1e-9 * exact.abs()).all()
    assert ((forward.diagonal() - exact).abs() > 1e-5 * exact.abs()).any()  # one-sided: O(h)
    # the run's finding (seed 2601458): torch's float32 1/6 in hardsigmoid's float64 derivative,
    # magnified 70x by cancellation in digamma > einsum > cube, is torch's, not thunderx's
    for check in ("jvp", "linearize", "vmap(jvp)"):
        assert D.reproduce_program(None, "tie", 2601458, check, length=4) == set()


def test_non_finite_derivatives_where_differences_overflow_are_a_note():
    # cosh(sinh(x)) at x = 800: the derivative overflows, finite differences too
    x = torch.tensor([800.0, 0.5], dtype=torch.float64)
    f = lambda v: torch.cosh(torch.sinh(v))  # noqa: E731
    fd = lambda: tuple(j.diagonal() for j in dc.fd_jacobian(f, [x]))  # noqa: E731
    nan, inf = float("nan"), float("inf")
    right = torch.tensor([inf, 0.0], dtype=torch.float64)
    right[1] = torch.func.grad(lambda v: f(v).sum())(x[1:])[0]
    both = dc.classify("grad", right, torch.tensor([nan, right[1]], dtype=torch.float64), fd)
    assert both.category == "overflow" and "overflow" in D.NOTES
    # a finite answer where the other side and the differences are not: still a finding
    one = dc.classify("grad", torch.tensor([1.0, right[1]], dtype=torch.float64), right, fd)
    assert one.category == "unresolved"
    # beside a pole: 1 / x^3's second derivative at x = 1e-2 is 1.2e11, finite differences
    # with steps of 1e-6 too; inf against nan there is an overflow note, a finite side is not
    p = torch.tensor([1e-2], dtype=torch.float64)
    g = lambda v: 12 / v**5  # noqa: E731 (d2/dx2 of 1 / x^3)
    fdp = lambda: tuple(j.diagonal() for j in dc.fd_jacobian(lambda v: -3 / v**4, [p]))  # noqa: E731
    assert abs(fdp()[0].item()) > 1e10
    pole = dc.classify("hessian", torch.tensor([inf]), torch.tensor([nan]), fdp)
    assert pole.category == "overflow"
    assert dc.classify("hessian", g(p), torch.tensor([nan]), fdp).category != "overflow"
    assert D.reproduce_program(None, "zero", 212937, "hessian", length=4) == set()


def _lying_op():
    """An op whose traced form computes something else than eager torch: a planted bug."""

    def fn(x):
        return x * 3 if isinstance(x, Tracer) else x * 2

    return Op("planted", fn, lambda rng, base: ([base], None, {}))


def test_a_planted_bug_is_found_and_blamed_on_its_op(monkeypatch):
    monkeypatch.setitem(OPS, "planted", _lying_op())
    report = D.run(ops=["planted"], checks=["jit", "grad", "vmap(jvp)"], programs=0)
    keys = set(report.failures)
    assert ("planted", "jit", "forward") in keys
    assert ("planted", "grad", "thunderx-wrong") in keys
    assert report.unexpected(), "a planted bug must never count as known"
    # inside a program the finding is localized to the planted step
    rng = random.Random(1)
    x = torch.randn(3, dtype=torch.float64)
    steps = [D.Step("sin", [-1], [], {}), D.Step("planted", [-1], [], {})]
    prog = Case(
        "program:sin>planted", "normal", lambda v: OPS["planted"].fn(torch.sin(v)), [x], 1, {}
    )
    report = D.Report()
    D.check_program(prog, steps, ["jit"], report, rng.randrange(100))
    assert ("planted", "jit", "forward") in report.failures


def test_a_check_that_overwrites_the_callers_input_is_a_failure():
    x = torch.randn(3, dtype=torch.float64)

    def fn(v):
        if isinstance(v, Tracer):
            x.mul_(2)  # planted: the traced program writes into the caller's tensor
        return v * 1

    case = Case("planted", "normal", fn, [x], 1, {})
    found = dc.run_check("grad", dc.Ctx(case, 0))
    assert found.category == "forward" and "overwrote" in found.detail
    # jit writes captured tensors back after the call, and refuses one that is also its
    # argument (tests/test_captured_write_refusals.py): an error, never a silent overwrite
    found = dc.run_check("jit", dc.Ctx(case, 0))
    assert found.category == "error" and "shares memory" in found.detail


def test_every_edge_kind_builds_cases():
    rng = random.Random(0)
    for edge in EDGES:
        built = [make_case(op, edge, rng) for op in OPS.values()]
        assert sum(c is not None for c in built) > len(OPS) // 3, edge


def test_against_jax():
    from thunderx.testing import diff_jax

    if not diff_jax.AVAILABLE:
        pytest.skip("JAX is not installed (optional extra: pip install 'thunderx[jax]')")
    # jax.grad compiles per case: a rotating quarter of the ops keeps this test short
    ops = sorted(diff_jax.JAX_FNS)[SEED % 4 :: 4]
    report = D.run(seed=SEED, ops=ops, checks=["jax(grad)"], programs=0)
    assert report.per_check["jax(grad)"] >= len(ops) // 2
    assert not report.unexpected(), report.summary()


@pytest.mark.parametrize("loss", ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"])
def test_mean_loss_of_no_elements_is_nan_as_in_torch(loss):
    """Found by the differential test: thunderx gave 0 (a silent wrong answer)."""
    fn = getattr(torch.nn.functional, loss)
    x = torch.zeros(0, 3, dtype=torch.float64)
    assert torch.isnan(fn(x, x))
    assert torch.isnan(tx.jit(fn)(x, x))
    assert torch.isnan(tx.vmap(fn)(x[None].expand(2, 0, 3), x[None].expand(2, 0, 3))).all()


@pytest.mark.parametrize("module", ["diff_ops", "differential"])
def test_docstring_examples(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"thunderx.testing.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_rounding_noise_beside_large_entries_is_not_a_finding():
    """An entry that cancels to ~0 carries the rounding of the terms it sums (2^-23 beside a
    Hessian of 8.5e8, cosine_similarity at a zero vector); a real difference there is found."""
    want = torch.tensor([-8.5e8, 0.0], dtype=torch.float64)
    never = lambda: pytest.fail("finite differences are not needed")  # noqa: E731
    assert dc._derivative("hessian", want + torch.tensor([0.0, 2.0**-23]), want, never) is None
    fd = lambda: (want, want, want)  # noqa: E731
    found = dc._derivative("hessian", want + torch.tensor([0.0, 1.0]), want, fd)
    assert found is not None and found.category == "thunderx-wrong"


def test_a_vmap_torch_func_refuses_too_is_not_a_finding():
    """vmap_axes with an unbatched base written with a batched value: thunderx's MutationError
    and torch.func.vmap's RuntimeError agree (the eager loop alone would work)."""
    found = D.reproduce("setitem_dynamic", "big", 5, "vmap_axes")
    assert not found, found
    # a thunderx error where torch.func.vmap works is still a finding
    x = torch.randn(3, dtype=torch.float64)

    def fn(v):
        if isinstance(v, Tracer):
            raise RuntimeError("planted")
        return v * 2

    case = Case("planted", "normal", fn, [x], 1, {})
    assert dc.run_check("vmap_axes", dc.Ctx(case, 0)).category == "error"


def test_a_program_without_outputs_does_not_kill_the_run():
    # torch 2.13's jacrev of it vmaps batch_norm's VJP over an empty basis and dies of SIGFPE:
    # the long profile (--minutes 8, seed 0) met this program after ~41K cases. In a child
    # process, so that a regression fails this test instead of killing the suite.
    code = textwrap.dedent(
        """
        import torch, torch.nn.functional as F
        from thunderx.testing import differential as D
        from thunderx.testing.diff_ops import Case
        g = torch.Generator().manual_seed(0)
        x, w, b = (torch.randn(s, dtype=torch.float64, generator=g) for s in ((2, 3, 2), 3, 3))
        idx = torch.zeros(0, 3, 2, dtype=torch.int64)
        def fn(x, w, b, i):
            y = F.batch_norm(x, None, None, w, b, training=True)
            return torch.take_along_dim(y, i, 0)
        case = Case("program:batch_norm>take_along_dim", "normal", fn, [x, w, b, idx], 3, {})
        report = D.Report()
        D.check_case(case, ["jacrev", "jacfwd", "hessian", "grad"], report, 0)
        assert not report.failures, report.summary()
        print("checked")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and "checked" in done.stdout, (done.returncode, done.stderr[-2000:])


def test_a_hessians_own_asymmetry_bounds_its_rounding_noise():
    """Differential seed 1331365: gelu > exp > softmax at a tie of two exp(30) values. The exact
    Hessian block of the tied pair (40-digit arithmetic) is diag(8.916218e11, -8.916218e11) and
    0 off the diagonal: torch's is 0 and -5.2e9 off it (its own asymmetry), thunderx's
    +-1.96e9, both rounding of products of exp(30)^2 that cancel. A difference within torch's
    asymmetry is not a finding; one beyond it still is."""
    assert D.reproduce_program(None, "big", 1331365, "hessian", length=3) == set()
    want = torch.tensor([[8.9162e11, 0.0], [-5.2e9, -8.8640e11]], dtype=torch.float64)
    assert dc._asymmetry(want.reshape(-1)) == 5.2e9
    got = torch.tensor([[8.8967e11, 1.96e9], [-1.96e9, -8.8967e11]], dtype=torch.float64)
    never = lambda: pytest.fail("finite differences are not needed")  # noqa: E731
    noise = dc._asymmetry(want.reshape(-1))
    assert dc._derivative("hessian", got.reshape(-1), want.reshape(-1), never, noise) is None
    far = got.clone()
    far[0, 1] = 2e10  # four times torch's asymmetry
    fd = lambda: (want.reshape(-1),) * 3  # noqa: E731
    assert dc._derivative("hessian", far.reshape(-1), want.reshape(-1), fd, noise) is not None
    # a kink's asymmetry (more than 1% of the largest entry) is no measure of rounding
    assert dc._asymmetry(torch.tensor([1.0, 0.0, 0.5, 1.0], dtype=torch.float64)) == 0.0


def test_a_value_that_cancels_beside_large_terms_is_rounding():
    """Differential seed 1371236: vmap of expm1 > einsum where expm1(30) * -30 meets
    expm1(30) * 30: exactly 0 from the float64 inputs, -0.0117 by torch's mm and by thunderx
    (an ulp of the terms is 0.0625), 0.0 by torch.einsum and torch.func.vmap. A difference
    of the order of the values is still found."""
    assert D.reproduce_program(None, "big", 1371236, "vmap_axes", length=2) == set()
    want = torch.tensor([3.2e14, 0.0], dtype=torch.float64)
    assert dc._values("vmap", want + torch.tensor([0.0, -0.0117]), want) is None
    assert dc._values("vmap", want + torch.tensor([0.0, 1e3]), want) is not None


def test_a_tangent_with_no_entries_is_the_symbolic_zero():
    # the run's finding (seed 3105763): relu6(acos(var(x))) over an empty dim. Its Jacobian has
    # no columns, so every jvp is the empty sum 0; thunderx gives 0 unbatched and under vmap
    # (the loop's answer), where torch.func gives nan unbatched and 0 under vmap
    def f(x):
        return F.relu6(torch.acos(torch.var(x, dim=-2)))

    x, t = torch.zeros(3, 0, 2, dtype=torch.float64), torch.zeros(3, 0, 2, dtype=torch.float64)
    assert dc.fd_jacobian(f, [x])[0].shape == (6, 0)
    zeros = torch.zeros(3, 2, dtype=torch.float64)
    assert torch.equal(tx.jvp(f, (x,), (t,))[1], zeros)
    xb = torch.zeros(4, 3, 0, 2, dtype=torch.float64)
    assert torch.equal(tx.vmap(lambda b: tx.jvp(f, (b,), (t,))[1])(xb), zeros.expand(4, 3, 2))
    assert torch.equal(tx.jacfwd(f)(x), torch.zeros(3, 2, 3, 0, 2, dtype=torch.float64))
    assert D.reproduce_program(None, "empty", 3105763, "vmap(jvp)", length=3) == set()


def test_a_composition_over_no_elements_is_keyed_by_that():
    # findings of programs with an input or a step's value of no elements, where no single op
    # is to blame (seeds 3200762 index_select, 3301302 narrow, 3309639 a norm over an empty dim,
    # 3400876 mse_loss of x - s with x empty, 3500294 narrow to length 0 inside), share one key
    # instead of one per op
    key = (D.NO_ELEMENTS, "*", "unresolved")
    for edge, seed, check, n in (
        ("zero", 3200762, "jacfwd", 4),
        ("normal", 3301302, "jacfwd", 2),
        ("empty", 3309639, "jvp", 4),
        ("empty", 3400876, "jacfwd", 2),
        ("big", 3500294, "jacfwd", 4),  # narrow to length 0 inside: inputs all have elements
    ):
        found = D.reproduce_program(None, edge, seed, check, length=n)
        assert [D.known(k) for k in found] == [key]
    # a program whose inputs and step values all have elements never gets that key
    prog, steps = D.make_program(random.Random(3313647), "zero", 4)
    assert all(a.numel() > 0 for a in prog.args)
    assert all(v.numel() > 0 for *_, v in D.run_steps(steps, prog.args, prog.ndiff))
    assert all(k[0] != D.NO_ELEMENTS for k in D.reproduce_program(None, "zero", 3313647, "grad", 4))


def test_an_entry_within_the_oracles_own_rounding_noise_is_no_disagreement(monkeypatch):
    """torch's answers at the inputs scaled by an ulp or a few (NOISE_SCALES) measure the
    rounding noise of each entry; at a differentiable point a side inside that band agrees,
    while a wrong value beside noiseless entries is still found."""
    from thunderx.testing import diff_verdict

    # the tolerance an earlier case's scale set
    monkeypatch.setattr(diff_verdict, "_CASE_RTOL", [diff_verdict.RTOL])
    x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    fd = lambda: tuple(j.diagonal() for j in dc.fd_jacobian(torch.sin, [x]))  # noqa: E731
    right = torch.cos(x)

    def at1(t, v):
        t = t.clone()
        t[1] = v
        return t

    # an entry torch computes as 1e-3 or -2e-3 by the rounding of its inputs: 3e-3 is noise
    noisy = at1(right, 1e-3)
    again = lambda: [noisy * 1, at1(noisy, -2e-3)]  # noqa: E731
    got = at1(noisy, 3e-3)
    assert dc.classify("jvp", got, noisy, fd, again=again) is None
    # beyond the band (its width on each side), or where the band has no width: findings
    assert dc.classify("jvp", at1(noisy, 7e-3), noisy, fd, again=again) is not None
    assert dc.classify("jvp", got, noisy, fd, again=lambda: [noisy, noisy]) is not None
    # a wrong entry is found however noisy another entry is
    wrong = got.clone()
    wrong[0] *= 1.5
    assert dc.classify("jvp", wrong, noisy, fd, again=again) is not None
    assert dc.classify("jvp", at1(wrong, 1e-3), noisy, fd, again=again).category == (
        "thunderx-wrong"
    )
    # the run's findings: cosh > fmod > flip > layer_norm at +-30, fmod's divisor gradient is
    # -1.8e11 times a sum that is exactly 0 (thunderx's batched order 0.31, torch's 0.044);
    # square > normalize along a dim of one element, Hessian entries exactly 0 (torch 3e-8)
    assert D.reproduce_program(None, "big", 3104449, "jit(vmap(grad))", length=4) == set()
    assert D.reproduce_program(None, "one", 2505379, "hessian", length=2) == set()
    # the scaled inputs move by an ulp or a few, and keep zeros, signs and ties
    case = make_case(OPS["maximum"], "tie", random.Random(0))
    c = dc.Ctx(case, 0)
    for s in NOISE_SCALES:
        for x, y in zip(c.xs, c.scaled(s).xs):
            assert (
                not torch.equal(x, y)
                and ((y - x).abs() <= 8 * torch.finfo(x.dtype).eps * x.abs()).all()
            )
            assert torch.equal(x == 0, y == 0) and torch.equal(x.sign(), y.sign())
        assert torch.equal(c.xs[0] == c.xs[1], c.scaled(s).xs[0] == c.scaled(s).xs[1])
