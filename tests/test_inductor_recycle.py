"""The inductor executor's large outputs in buffers recycled across calls (inductor_tail.py):
an outer product or elementwise result stays in inductor's graph, whose kernel stores it into a
recycled buffer passed in; a GEMM's result leaves the graph for torch's out= kernel. Values
against eager torch and torch.autograd, and the caller's memory is never written."""

import pytest
import torch
import torch.func as tf
from hypothesis import given, note, reject, settings

import thunderx as tx
from thunderx.executors import cpu_gemm
from thunderx.executors.inductor_exec import clear_kernel_cache, inductor_unavailable_reason
from thunderx.testing.programs import random_programs, run_program

from .test_recycle import _ptr, every_output_recycled

pytestmark = pytest.mark.skipif(
    inductor_unavailable_reason() is not None,
    reason=f"inductor cannot run here: {inductor_unavailable_reason()}",
)


@pytest.fixture(autouse=True)
def eager_gemm(monkeypatch):
    # eager torch's GEMM in inductor's graph too, so that float32's default tolerance holds
    # (oneDNN's, which sums in another order, is checked in test_cpu_gemm.py)
    monkeypatch.setattr(cpu_gemm, "_chosen", False)


def _per_example(w, b, x):
    # per-example gradients of a tanh layer: two outer products, one 10 MiB
    h = torch.tanh(x @ w + b)
    g = 1 - h * h
    return torch.einsum("bi,bj->bij", x, g), g, torch.einsum("bi,bj->bij", g, h)


W, BIAS, X = torch.randn(256, 160), torch.randn(160), torch.randn(64, 256)


def _check(got, want, **tol):
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, **tol)


def _as_accurate_as_eager(got, eager, exact):
    # the torch executor's program adds the bias in addmm's epilogue, which on AMD EPYC rounds
    # otherwise than eager's product then add (the last bits, up to 2.3e-4 apart after tanh and
    # the sums over 64 examples): each result is held to float64's, as close as eager's is (a
    # wrong buffer is off by the values themselves)
    for a, b, c in zip(got, eager, exact, strict=True):
        err, eager_err = (a.double() - c).abs().max(), (b.double() - c).abs().max()
        assert err <= 2 * eager_err + 1e-6 * c.abs().max(), (err.item(), eager_err.item())


def test_an_outer_product_is_stored_by_the_graph_into_a_recycled_buffer():
    f = tx.jit(_per_example, executor="inductor")
    low = f.lower(W, BIAS, X)
    assert all(r is not None for r in low.regions), "every equation is in inductor's graph"
    assert "1 large output(s) stored by the graph's kernels" in low.program_text()
    first = f(W, BIAS, X)
    _check(first, _per_example(W, BIAS, X))
    p = _ptr(first[0])
    kept = first[0].clone()
    again = f(W, BIAS, X * 2)  # `first` is still held: another buffer
    assert _ptr(again[0]) != p
    _check(again, _per_example(W, BIAS, X * 2))
    torch.testing.assert_close(first[0], kept, rtol=0, atol=0)
    del first, again
    third = f(W, BIAS, X * 3)
    assert _ptr(third[0]) == p, "a dropped result's buffer is written again"
    _check(third, _per_example(W, BIAS, X * 3))


def test_a_large_gemm_result_leaves_the_graph_for_torchs_out_kernel():
    def f(x, w):
        return torch.relu(x) @ w, x.amax()

    x, w = torch.randn(512, 64), torch.randn(64, 4096)  # an 8 MiB product
    jf = tx.jit(f, executor="inductor")
    low = jf.lower(x, w)
    names = [e.prim.name for e, r in zip(low.optimized.eqns, low.regions) if r is None]
    assert names == ["dot_general"]
    assert "host program" in low.program_text() and "out=" in low.program_text()
    got = jf(x, w)
    p = _ptr(got[0])
    _check(got, f(x, w))
    del got
    again = jf(x * 2, w)
    assert _ptr(again[0]) == p
    _check(again, f(x * 2, w))


def test_where_nothing_is_recycled_the_graph_gets_a_fresh_buffer():
    f = tx.jit(_per_example, executor="inductor")
    with torch.inference_mode():
        got = f(W, BIAS, X)
        _check(got, _per_example(W, BIAS, X))
    # torch autograd runs the torch executor's program, without the graph
    w = W.clone().requires_grad_()
    f(w, BIAS, X)[0].sum().backward()
    ref = W.clone().requires_grad_()
    _per_example(ref, BIAS, X)[0].sum().backward()
    exact = W.double().requires_grad_()
    _per_example(exact, BIAS.double(), X.double())[0].sum().backward()
    _as_accurate_as_eager([w.grad], [ref.grad], [exact.grad])


def test_a_refused_graph_runs_the_torch_program_with_the_same_outputs(monkeypatch):
    from torch._inductor import compile_fx

    def refuse(*args, **kwargs):
        raise RuntimeError("no inductor today")

    monkeypatch.setattr(compile_fx, "compile_fx", refuse)
    clear_kernel_cache()
    try:
        program = tx.jit(_per_example, executor="inductor").lower(W, BIAS, X).program
        x64 = (W.double(), BIAS.double(), X.double() * 5)
        eager, exact = _per_example(W, BIAS, X * 5), _per_example(*x64)
        _as_accurate_as_eager(program(W, BIAS, X * 5), eager, exact)
        text = program.as_text()
        assert "inductor refused the program (RuntimeError: no inductor today)" in text
    finally:
        clear_kernel_cache()  # the refusal is not kept for later programs of this structure


def test_an_mlp_layer_keeps_its_bias_out_of_the_gemm_and_matches_eager():
    # the bias add of a product below oneDNN's size is inductor's epilogue, not addmm's
    def layer(w, b, x):
        return torch.relu(x @ w + b).sum(0)

    w, b, x = torch.randn(128, 128), torch.randn(128), torch.randn(256, 128)
    f = tx.jit(layer, executor="inductor")
    assert ".unsqueeze(0)).squeeze(0)" in f.lower(w, b, x).program_text()
    torch.testing.assert_close(f(w, b, x), layer(w, b, x))


def _broadcasts(x, v):
    # outputs broadcasting operands made by elementwise ops (stored first), one operand an
    # input (read as is), one also a program output, one also read by a GEMM
    a = torch.relu(v) * 2
    b = torch.sigmoid(x[0])
    c = x.abs() @ b  # no cancellation: the GEMM kernels may differ (gemv, gemm)
    return a[:, None] * b[None, :], a, torch.exp(v)[:, None] + x, c[:, None] * x, -b


@pytest.mark.parametrize("scale", [1.0, -3.0])
def test_outputs_broadcasting_elementwise_operands_read_stored_buffers(scale):
    x, v = torch.randn(96, 96) * scale, torch.randn(96)
    f = tx.jit(_broadcasts, executor="inductor")
    text = f.lower(x, v).program_text()
    assert text.count("_impl_realize(") >= 3, text
    _check(f(x, v), _broadcasts(x, v))


def test_per_example_gradients_of_an_mlp_match_torch_func():
    import torch.nn.functional as F

    def loss(p, x, y):
        h = torch.relu(x @ p[0] + p[1])
        return F.cross_entropy(h @ p[2] + p[3], y)

    p = [torch.randn(32, 48), torch.randn(48), torch.randn(48, 10), torch.randn(10)]
    x, y = torch.randn(64, 1, 32), torch.randint(0, 10, (64, 1))
    f = tx.jit(tx.vmap(tx.grad(loss), in_axes=(None, 0, 0)), executor="inductor")
    assert "_impl_realize(" in f.lower(p, x, y).program_text()
    _check(f(p, x, y), tf.vmap(tf.grad(loss), in_dims=(None, 0, 0))(p, x, y))


# each example compiles two inductor graphs (a second or two each): a few, with every output
# recycled and every broadcast operand stored, against eager torch and torch.func
@settings(max_examples=6, deadline=None)
@given(random_programs())
def test_random_programs_through_inductor_with_every_output_recycled(prog):
    xs = prog.example_inputs()
    f = lambda *v: run_program(prog, *v)  # noqa: E731
    scalar = lambda *v: (run_program(prog, *v) ** 2).sum()  # noqa: E731
    with every_output_recycled():
        jf = tx.jit(f, executor="inductor")
        note(jf.lower(*xs).program_text())
        first = jf(*xs)
        kept = first.clone()
        second = jf(*[x * 0.5 + 0.25 for x in xs])  # while `first` is held
        torch.testing.assert_close(first, kept, rtol=0, atol=0, equal_nan=True)
        want = f(*[x * 0.5 + 0.25 for x in xs])
        torch.testing.assert_close(second, want, rtol=1e-8, atol=1e-8, equal_nan=True)
        bxs = prog.example_inputs(batch=3)
        g = tx.jit(tx.vmap(tx.grad(scalar, argnums=(0, 1))), executor="inductor")
        try:
            ref = tf.vmap(tf.grad(scalar, argnums=(0, 1)))(*bxs)
        except RuntimeError as e:
            # torch refuses to differentiate some programs (batch_norm_eval's running
            # statistics made from the input: native_batch_norm has no derivative in them)
            if "is not differentiable with respect to" not in str(e):
                raise
            reject()
        for a, b in zip(g(*bxs), ref, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7, equal_nan=True)
