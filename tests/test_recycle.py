"""Recycled output buffers (executors/recycle.py): a large output is written into a buffer kept
across calls only once nothing outside the program refers to it. Every out= form is checked
against the primitive's implementation, random programs are run with every output recycled
while earlier results are held, and each way a caller can keep a result's memory is checked."""

import contextlib
import gc
import threading

import pytest
import torch
import torch.func as tf
from hypothesis import example, given, note, settings

import thunderx as tx
from thunderx import core
from thunderx.executors import cpu_gemm, recycle
from thunderx.executors.torch_codegen import compile_jaxpr
from thunderx.passes import closure_convert
from thunderx.testing.programs import Program, random_programs, run_program

from .program_oracles import per_example_grads_reference
from .test_nvfuser import _single_eqn_program
from .test_properties import CHECKED, _samples


@contextlib.contextmanager
def every_output_recycled():
    """Recycle outputs and intermediates of any size (the thresholds keep small ones out in
    normal use)."""
    old = recycle.RECYCLE_BYTES, recycle.INTERMEDIATE_BYTES
    recycle.RECYCLE_BYTES = recycle.INTERMEDIATE_BYTES = 0
    try:
        yield
    finally:
        recycle.RECYCLE_BYTES, recycle.INTERMEDIATE_BYTES = old


def _exact(got, want):
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


RECYCLED_PRIMS: set = set()


@pytest.mark.parametrize("name", CHECKED)
def test_every_out_form_computes_what_the_primitive_does(name):
    prim = core.primitives[name]
    if prim.multiple_results or prim.props.effects:
        return  # never recycled (one-output equations only; random draws differ per call)
    for sample in _samples(name, 6):
        closed, tensors, _ = _single_eqn_program(name, sample)
        with every_output_recycled():
            prog = compile_jaxpr(closure_convert(closed.jaxpr))
        if "_recycled" not in prog.source:
            continue
        RECYCLED_PRIMS.add(name)
        want = core.impl_rules[prim](*sample.args, **sample.params)
        first = prog(*closed.consts, *tensors)[0]
        _exact(first, want)
        ptr = first.untyped_storage().data_ptr()
        held = prog(*closed.consts, *tensors)[0]  # `first` is held: another buffer
        assert held.numel() == 0 or held.untyped_storage().data_ptr() != ptr
        _exact(held, want)
        _exact(first, want)
        del first, held
        again = prog(*closed.consts, *tensors)[0]  # both dropped: a kept buffer, rewritten
        assert again.numel() == 0 or any(
            again.untyped_storage().data_ptr() == s.data_ptr()
            for pool in _pools(prog)
            for s in pool.storages
        )
        _exact(again, want)


def _pools(prog, intermediates=True):
    prog = getattr(prog, "torch", prog)  # the tiered executor's (jit's default) torch program
    return [
        fn.__self__
        for k, fn in prog.fn.__globals__.items()
        if k.startswith("_recycled") and (intermediates or not k.startswith("_recycled_t"))
    ]


def _jit_pools(f, intermediates=True):
    """The pools of every program jit function `f` has compiled."""
    return [p for e in f.jit_function._cache.values() for p in _pools(e.program, intermediates)]


def test_the_out_forms_cover_the_kernels_that_make_large_results():
    # runs after the parametrized test above (pytest keeps file order)
    if not RECYCLED_PRIMS:
        pytest.skip("run with the parametrized out-form test")
    for name in (
        "mul",
        "add",
        "exp",
        "dot_general",
        "reduce_sum",
        "tanh_backward",
        "convert_element_type",
    ):
        assert name in RECYCLED_PRIMS, f"{name} has no recycled out= form"


@settings(max_examples=3 * settings.default.max_examples)
@given(random_programs())
# torch.func refuses to differentiate batch norm's running statistics, batched or not
@example(Program(in_shapes=[(2,), (2,)], steps=[("unary", "batch_norm_eval", [0], {})], seed=0))
def test_random_programs_with_every_output_recycled(prog):
    xs = prog.example_inputs()
    ys = [x * 0.5 + 0.25 for x in xs]
    f = lambda *v: run_program(prog, *v)  # noqa: E731
    scalar = lambda *v: (run_program(prog, *v) ** 2).sum()  # noqa: E731
    with every_output_recycled():
        jf = tx.jit(f)
        note(jf.lower(*xs).program_text())
        first = jf(*xs)
        kept = first.clone()
        second = jf(*ys)  # while `first` is held
        _exact(first, kept)
        torch.testing.assert_close(second, f(*ys), rtol=1e-8, atol=1e-8)
        del first, second
        torch.testing.assert_close(jf(*xs), f(*xs), rtol=1e-8, atol=1e-8)
        # per-example gradients, results kept across calls
        bxs = prog.example_inputs(batch=3)
        g = tx.jit(tx.vmap(tx.grad(scalar, argnums=(0, 1))))
        r1 = g(*bxs)
        keep = [r.clone() for r in r1]
        r2 = g(*[b * 0.5 for b in bxs])
        ref = per_example_grads_reference(scalar, [b * 0.5 for b in bxs])
        for a, b in zip(r1, keep):
            _exact(a, b)
        for a, b in zip(r2, ref):
            torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7)


def _outer(a, b):
    return torch.einsum("bi,bj->bij", a, b)


A, B = torch.randn(64, 256), torch.randn(64, 160)  # a 10 MiB output: recycled by default


def _ptr(t):
    return t.untyped_storage().data_ptr()


def test_a_large_output_is_recycled_once_dropped():
    f = tx.jit(_outer)
    assert "out=" in f.lower(A, B).program_text()
    r = f(A, B)
    p = _ptr(r)
    del r
    r = f(A * 2, B)
    assert _ptr(r) == p, "a dropped result's buffer is written again"
    _exact(r, _outer(A * 2, B))


@pytest.mark.parametrize(
    "keep",
    [
        lambda r: r,
        lambda r: r[3],
        lambda r: r.view(-1)[5:9],
        lambda r: r.untyped_storage(),
        lambda r: r.numpy(),
        lambda r: r.detach(),
        lambda r: torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(r)),
        lambda r: torch.nn.Parameter(r),
        lambda r: [r],
    ],
    ids=["tensor", "row", "slice", "storage", "numpy", "detach", "dlpack", "parameter", "list"],
)
def test_memory_a_caller_still_refers_to_is_never_written(keep):
    f = tx.jit(_outer)
    r = f(A, B)
    want = _as_tensor(keep(r.clone())).clone()
    held = keep(r)
    p = _ptr(r)
    del r
    gc.collect()
    for k in range(3):  # later calls, with other values, never touch the held memory
        r2 = f(A * (k + 3), B)
        assert _ptr(r2) != p
        _exact(r2, _outer(A * (k + 3), B))
        del r2
    _exact(_as_tensor(held), want)


def _as_tensor(held):
    if isinstance(held, list):
        return held[0]
    if isinstance(held, torch.UntypedStorage):
        return torch.empty(0).set_(held, 0, (held.nbytes() // 4,))
    if not isinstance(held, torch.Tensor):
        return torch.from_numpy(held)
    return held


def test_a_result_fed_back_alternates_between_two_buffers(monkeypatch):
    monkeypatch.setattr(cpu_gemm, "_chosen", False)  # MKL's product, which has an out= form
    w = torch.randn(320, 320) / 320**0.5

    def step(x):  # the output is a matmul's: written into a recycled buffer
        return torch.tanh(x) @ w

    f = tx.jit(step)
    x = want = torch.randn(8192, 320)  # 10 MiB
    ptrs = set()
    for _ in range(8):
        x = f(x)
        want = step(want)
        ptrs.add(_ptr(x))
    torch.testing.assert_close(x, want)
    # (tanh(x), 10 MiB, is an intermediate with a pool of its own: one buffer, reused)
    kept = {s.data_ptr() for p in _jit_pools(f, intermediates=False) for s in p.storages}
    assert len(kept) == 2 and ptrs == kept, "a result fed back alternates between two buffers"


def test_at_most_keep_buffers_are_kept_per_output():
    f = tx.jit(_outer)
    results = [f(A, B) for _ in range(5)]  # all held: five buffers, only KEEP of them kept
    assert len({_ptr(r) for r in results}) == 5
    pools = _jit_pools(f)
    assert pools and all(len(p.storages) <= recycle.KEEP for p in pools)
    for r in results:
        _exact(r, _outer(A, B))


def test_a_storage_resized_by_the_caller_is_not_reused():
    f = tx.jit(_outer)
    r = f(A, B)
    r.untyped_storage().resize_(0)
    del r
    r = f(A, B)
    _exact(r, _outer(A, B))


def _outer_of_intermediates(a, b):
    # the outer product is an intermediate too (10 MiB), read after other threads may have run
    o = _outer(a.sin(), b)
    return o * 2.0 + o.cos()


@pytest.mark.parametrize("fn", [_outer, _outer_of_intermediates], ids=["output", "intermediates"])
def test_threads_never_share_a_buffer(fn):
    # the torch executor pinned: the exact comparison below is with eager's rounding, which a
    # program tiered up to inductor need not keep (tests/test_tiered.py)
    f = tx.jit(fn, executor="torch")
    f(A, B)
    errors = []

    def work(scale):
        for _ in range(30):
            r = f(A * scale, B)
            if not torch.equal(r, fn(A * scale, B)):
                errors.append(scale)

    threads = [threading.Thread(target=work, args=(s,)) for s in (1.0, 2.0, 3.0, 4.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and not errors


def test_modes_where_outputs_are_not_recycled():
    f = tx.jit(_outer)
    with torch.inference_mode():
        r = f(A, B)
    assert r.is_inference()
    _exact(r, _outer(A, B))
    # under torch.func transforms the operands are wrapped: the program allocates its results
    got = tf.vmap(f)(A.expand(2, 64, 256), B.expand(2, 64, 160))
    _exact(got, _outer(A, B).expand(2, 64, 256, 160))
    # torch autograd runs through the variant without reuse
    a = A.clone().requires_grad_()
    f(a, B).sum().backward()
    _exact(a.grad, B.sum(1, keepdim=True).expand(64, 256))


def test_turned_off_no_output_is_recycled():
    old = recycle.enabled
    recycle.enabled = False
    try:
        f = tx.jit(_outer)
        assert "_recycled" not in f.lower(A, B).program_text()
        r = f(A, B)
        p = _ptr(r)
        del r
        _exact(f(A, B), _outer(A, B))
        assert p is not None
    finally:
        recycle.enabled = old


def _chain(x):
    # intermediates the program makes and drops, one returned as a view, one reduced
    h = x.exp() * 0.5
    g = torch.tanh(h) + h
    return g[1:], (g * h).sum(0)


def test_large_intermediates_are_recycled_and_an_escaping_view_keeps_its_buffer():
    x = torch.randn(64, 32, dtype=torch.float64)
    with every_output_recycled():
        f = tx.jit(_chain)
        assert "_recycled_t" in f.lower(x).program_text(), f.lower(x).program_text()
        first_view, first_sum = f(x)
        kept = first_view.clone()
        for k in range(3):  # `first_view` still refers to its intermediate's buffer
            y = x * (k + 2.0)
            got = f(y)
            want = _chain(y)
            _exact(got[0], want[0])
            _exact(got[1], want[1])
            assert _ptr(got[0]) != _ptr(first_view)
            _exact(first_view, kept)
        _exact(first_sum, _chain(x)[1])
        pools = [p for p in _jit_pools(f) if p.storages]
        assert pools and all(len(p.storages) <= p.keep for p in pools)


def test_an_intermediate_buffer_is_the_same_memory_call_after_call():
    x = torch.randn(48, 40)

    def f(x):
        return (torch.sin(x) * 3.0 + x).sum()

    with every_output_recycled():
        jf = tx.jit(f)
        src = jf.lower(x).program_text()
        assert "_recycled_t" in src, src
        for _ in range(2):
            torch.testing.assert_close(jf(x), f(x))
        pools = [p for p in _jit_pools(jf) if p.storages]
        before = [[s.data_ptr() for s in p.storages] for p in pools]
        for _ in range(3):
            torch.testing.assert_close(jf(x), f(x))
        assert [[s.data_ptr() for s in p.storages] for p in pools] == before
        assert all(len(p.storages) == 1 for p in pools), pools


@pytest.mark.parametrize(
    "make_x",
    [
        lambda x: x,  # (4, 6, 8) rows
        lambda x: x[1],  # one matrix
        lambda x: x[0, 0],  # a single vector
        lambda x: x.transpose(0, 1)[:, 1:3],  # strided rows
    ],
    ids=["3d", "2d", "1d", "strided"],
)
@pytest.mark.parametrize("stored_transposed", [False, True])
def test_a_linear_layer_writes_into_a_recycled_buffer(make_x, stored_transposed):
    # F.linear (and the addmm of 2-D rows) into recycled outputs and intermediates
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 8, generator=g, dtype=torch.float64)
    w = torch.randn(5, 8, generator=g, dtype=torch.float64)
    w = w.t().contiguous() if stored_transposed else w  # (8, 5): read as w.t()
    b = torch.randn(5, generator=g, dtype=torch.float64)
    w2 = torch.randn(3, 5, generator=g, dtype=torch.float64)

    def f(x, w, b, w2):
        h = torch.nn.functional.linear(make_x(x).sin(), w.t() if stored_transposed else w, b)
        return torch.nn.functional.linear(h.tanh(), w2, b[:3])

    with every_output_recycled():
        jf = tx.jit(f)
        src = jf.lower(x, w, b, w2).program_text()
        addmms = [ln for ln in src.splitlines() if "torch.addmm(" in ln and "out=" in ln]
        # (a vector's product is a tensordot, with its own out= form)
        assert len(addmms) == (0 if make_x(x).ndim == 1 else 2) and src.count("out=") >= 2, src
        first = jf(x, w, b, w2)
        kept = first.clone()
        for k in range(3):
            got = jf(x * (k + 1.5), w, b, w2)
            torch.testing.assert_close(got, f(x * (k + 1.5), w, b, w2), rtol=1e-12, atol=1e-12)
        _exact(first, kept)


def test_intermediates_of_one_shape_share_a_pool_as_large_as_the_most_alive_at_once():
    # many same-shaped temporaries, each dead soon after it is made: the program keeps as many
    # buffers as are ever alive together (a few), not one per equation
    def f(x, y):
        acc = x
        for k in range(8):
            acc = acc * torch.sin(y * (k + 1.0)) + torch.cos(acc + k)
        return acc.sum()

    x, y = torch.randn(32, 16, dtype=torch.float64), torch.randn(32, 16, dtype=torch.float64)
    with every_output_recycled():
        jf = tx.jit(f)
        src = jf.lower(x, y).program_text()
        sites = src.count("_recycled_t0()")
        for k in range(3):
            torch.testing.assert_close(jf(x, y * k), f(x, y * k), rtol=1e-12, atol=1e-12)
        (pool,) = [p for p in _jit_pools(jf) if p.shape == (32, 16)]
        assert sites >= 8 and pool.keep <= 4 and len(pool.storages) <= pool.keep, (sites, pool)
