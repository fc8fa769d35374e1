"""oneDNN's GEMM in the torch executor (executors/cpu_gemm.py): every product form the executor
emits is rewritten to the right oneDNN call (checked against float64 torch at float32's
tolerance, and by random chains of products), small, batched, scaled and non-float32 products
stay MKL calls, and the MKL call runs instead under torch autograd, torch.func transforms and
torch dispatch modes. The thresholds are set to 0 here so that small shapes exercise oneDNN."""

import json

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F
from hypothesis import given, note
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import thunderx as tx
from thunderx.executors import cpu_gemm
from thunderx.executors.torch_codegen import generate_source

KERNEL = cpu_gemm._kernel()
pytestmark = pytest.mark.skipif(
    KERNEL is None or not torch.backends.mkldnn.is_available() or not cpu_gemm._works(KERNEL),
    reason="this torch build has no oneDNN linear kernel (torch.ops.mkldnn._linear_pointwise)",
)


@pytest.fixture
def onednn(monkeypatch):
    """oneDNN chosen, for products of any size."""
    monkeypatch.setattr(cpu_gemm, "_chosen", True)
    monkeypatch.setattr(cpu_gemm, "MIN_MACS", 0)
    monkeypatch.setattr(cpu_gemm, "MIN_COLUMNS_TRANSPOSED", 0)
    monkeypatch.setattr(cpu_gemm, "MIN_MACS_INDUCTOR", 0)


def _r(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _close(got, f, *args):
    """float32 results against torch in float64: a product's rounding, however it sums."""
    want = f(*[a.double() for a in args])
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * want.abs().max())


X, W, B = _r(23, 17), _r(9, 17, seed=1), _r(9, seed=2)
X3 = _r(4, 6, 17, seed=3)
Y = _r(23, 9, seed=4)
FORMS = {
    "x @ w.T": (lambda x, w: x @ w.T, (X, W)),
    "x @ m": (lambda x, m: x @ m, (X, W.T.contiguous())),
    "x.T @ y": (lambda x, y: x.T @ y, (X, Y)),
    "x.T @ m.T": (lambda x, m: x.T @ m.T, (X, Y.T.contiguous())),
    "rows @ m": (lambda x, m: x @ m, (X3, W.T.contiguous())),
    "linear": (lambda x, w, b: F.linear(x, w, b), (X, W, B)),
    "linear of 3-d rows": (lambda x, w, b: F.linear(x, w, b), (X3, W, B)),
    "linear of transposed rows": (lambda x, w, b: F.linear(x.transpose(0, 1), w, b), (X3, W, B)),
    "x @ m + b": (lambda x, m, b: x @ m + b, (X, W.T.contiguous(), B)),
    "weight gradient of 3-d rows": (
        lambda x, g: torch.einsum("bsi,bso->io", x, g),
        (X3, _r(4, 6, 9, seed=5)),
    ),
}


@pytest.mark.parametrize("form", FORMS)
def test_each_product_form_runs_on_onednn_with_torchs_values(onednn, form):
    f, args = FORMS[form]
    jf = tx.jit(f)
    src = jf.lower(*args).program_text()
    assert cpu_gemm.NAME in src, src
    _close(jf(*args), f, *args)


@pytest.mark.parametrize(
    "form",
    ["matrix @ stack", "batched", "scaled update", "float64", "vector"],
)
def test_products_onednn_does_not_take_stay_mkl_calls(onednn, form):
    f, args = {
        "matrix @ stack": (lambda m, s: m @ s, (W, _r(3, 17, 5))),
        "batched": (lambda a, b: a @ b, (_r(3, 8, 5), _r(3, 5, 7))),
        "scaled update": (lambda w, x, g: w - 0.1 * (x.T @ g), (_r(17, 9), X, Y)),
        "float64": (lambda x, w: x @ w.T, (X.double(), W.double())),
        "vector": (lambda x, v: x @ v, (X, _r(17))),
    }[form]
    jf = tx.jit(f)
    assert cpu_gemm.NAME not in jf.lower(*args).program_text()
    _close(jf(*args), f, *args)


def test_only_products_above_the_thresholds_take_onednn(monkeypatch):
    monkeypatch.setattr(cpu_gemm, "_chosen", True)
    small, large = _r(64, 64), _r(256, 256)
    text = lambda f, *a: tx.jit(f).lower(*a).program_text()  # noqa: E731
    assert cpu_gemm.NAME not in text(lambda a, b: a @ b, small, small)
    assert cpu_gemm.NAME in text(lambda a, b: a @ b, large, large)
    # a weight gradient reads its rows transposed, which oneDNN copies: that pays from 256
    # columns on, whatever the size
    rows, grads = _r(256, 64), _r(256, 128)  # 64 x 256 x 128: 2M multiply-adds
    assert cpu_gemm.NAME in text(lambda x, g: x @ g, rows.T.contiguous(), grads)
    assert cpu_gemm.NAME not in text(lambda x, g: x.T @ g, rows, grads)
    assert cpu_gemm.NAME not in text(lambda x, g: x.T @ g, _r(4096, 256), _r(4096, 128))
    assert cpu_gemm.NAME in text(lambda x, g: x.T @ g, rows, _r(256, 256))
    # the flattened weight gradient of a linear layer on (batch, seq, features) rows
    x3, g3 = _r(8, 32, 64), _r(8, 32, 256)
    assert cpu_gemm.NAME in text(lambda x, g: torch.einsum("bsi,bso->io", x, g), x3, g3)
    assert cpu_gemm.NAME not in text(lambda x, g: torch.einsum("bsi,bso->io", x, g), g3, x3)
    # a graph for inductor calls oneDNN only from 16M multiply-adds
    for a, inside in ((_r(192, 192), False), (_r(256, 256), True)):  # 7M, 16M
        jaxpr = tx.make_jaxpr(lambda a: a @ a)(a).jaxpr
        src, _ = generate_source(jaxpr, reuse_buffers=False, onednn=True)
        assert (cpu_gemm.NAME in src) is inside and "_dnn" not in src, src


def test_mkl_chosen_means_no_onednn_call(monkeypatch):
    monkeypatch.setattr(cpu_gemm, "_chosen", False)
    a = _r(256, 256)
    jf = tx.jit(lambda a: a @ a)
    assert cpu_gemm.NAME not in jf.lower(a).program_text()
    torch.testing.assert_close(jf(a), a @ a, rtol=0, atol=0)  # eager torch's kernel, bit for bit


@pytest.mark.parametrize("value", ["mkl", "onednn", "auto", "fast"])
def test_the_mode_decides_once_per_process(monkeypatch, value):
    monkeypatch.setattr(cpu_gemm, "mode", value)
    monkeypatch.setattr(cpu_gemm, "_chosen", None)
    if value == "fast":
        with pytest.raises(ValueError, match="THUNDERX_CPU_GEMM must be auto, mkl or onednn"):
            cpu_gemm.chosen()
        return
    first = cpu_gemm.chosen()
    assert first is {"mkl": False, "onednn": True}.get(value, first)
    monkeypatch.setattr(cpu_gemm, "mode", "mkl")
    assert cpu_gemm.chosen() is first  # decided: later changes of mode do not apply


def _mlp(p, x):
    h = torch.relu(F.linear(x, p["w1"], p["b1"]))
    return (h @ p["w2"]).tanh().square().mean()


P = {"w1": _r(12, 17, seed=6), "b1": _r(12, seed=7), "w2": _r(12, 5, seed=8)}


def test_gradients_through_onednn_products_match_torch_func(onednn):
    jg = tx.jit(tx.grad(_mlp))
    assert cpu_gemm.NAME in jg.lower(P, X3).program_text()
    got, want = jg(P, X3), tf.grad(_mlp)(P, X3)
    for k in P:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_torch_autograd_through_a_jit_call_runs_the_mkl_variant(onednn):
    jf = tx.jit(_mlp)
    p = {k: v.clone().requires_grad_() for k, v in P.items()}
    loss = jf(p, X3)
    loss.backward()
    q = {k: v.clone().requires_grad_() for k, v in P.items()}
    _mlp(q, X3).backward()
    for k in P:
        torch.testing.assert_close(p[k].grad, q[k].grad, rtol=1e-5, atol=1e-6)


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def test_under_a_dispatch_mode_the_program_runs_mkl(onednn):
    jf = tx.jit(lambda x, w, b: F.linear(x, w, b))
    jf(X, W, B)  # compiled outside the mode
    with _Ops() as mode:
        out = jf(X, W, B)
    assert not any("_linear_pointwise" in n for n in mode.names), mode.names
    assert any("addmm" in n or "linear" in n for n in mode.names), mode.names
    _close(out, lambda x, w, b: F.linear(x, w, b), X, W, B)


@pytest.mark.parametrize("transform", ["grad", "vmap", "jacrev"])
def test_torch_func_transforms_of_a_jit_function_match_torch_func(onednn, transform):
    jf = tx.jit(lambda x, w: (x @ w.T).sin().sum())
    jf(X, W)  # compiled, with oneDNN, outside the transform
    t = {"grad": tf.grad, "jacrev": tf.jacrev, "vmap": lambda f: tf.vmap(f, in_dims=(0, None))}
    xs = X if transform != "vmap" else X3.reshape(4, 6, 17)
    got = t[transform](jf)(xs, W)
    want = t[transform](lambda x, w: (x @ w.T).sin().sum())(xs, W)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_product_in_a_loop_body_runs_on_onednn(onednn):
    def f(x, w):
        return tx.lax.fori_loop(0, 3, lambda i, h: torch.tanh(h @ w), x)

    w = _r(17, 17, seed=9) / 17**0.5
    jf = tx.jit(f)
    src = jf.lower(X, w).program_text()
    assert src.count(f"_dnn = {cpu_gemm.GUARD}()") >= 1 and cpu_gemm.NAME in src, src

    def ref(x, w):
        for _ in range(3):
            x = torch.tanh(x @ w)
        return x

    _close(jf(X, w), ref, X, w)


@st.composite
def product_chains(draw):
    """x (rows, possibly 3-d) through 1-3 products, each with its operand stored either way
    round, an optional bias and an elementwise op between; every tensor possibly a strided
    view (every other element of a larger one)."""
    dims = [draw(st.integers(1, 12)) for _ in range(draw(st.integers(2, 4)))]
    lead = draw(st.sampled_from([(), (3,), (2, 3)]))
    steps = []
    for _ in dims[1:]:
        steps.append((draw(st.booleans()), draw(st.booleans()), draw(st.sampled_from("tsr"))))
    strided = draw(st.lists(st.booleans(), min_size=7, max_size=7))
    return lead, dims, steps, strided


@given(product_chains())
def test_random_product_chains_match_torch_and_torch_func(chain):
    lead, dims, steps, strided = chain
    note(f"lead {lead} dims {dims} steps {steps} strided {strided}")
    seed, layouts = iter(range(100)), iter(strided)

    def make(*shape):  # contiguous, or every other element of a larger tensor along the last dim
        if next(layouts):
            return _r(*shape[:-1], 2 * shape[-1], seed=next(seed))[..., ::2]
        return _r(*shape, seed=next(seed))

    x = make(*lead, 5, dims[0])
    ws = []
    for (stored_nk, bias, _), k, n in zip(steps, dims, dims[1:]):
        w = make(n, k) if stored_nk else make(k, n)
        ws.append((w, make(n)) if bias else (w,))

    def f(x, ws):
        for (stored_nk, _, op), (w, *b) in zip(steps, ws):
            b = b[0] if b else None
            x = F.linear(x, w, b) if stored_nk else (x @ w if b is None else x @ w + b)
            x = {"t": torch.tanh, "s": torch.sin, "r": torch.relu}[op](x)
        return x

    old = cpu_gemm._chosen, cpu_gemm.MIN_MACS, cpu_gemm.MIN_COLUMNS_TRANSPOSED
    cpu_gemm._chosen, cpu_gemm.MIN_MACS, cpu_gemm.MIN_COLUMNS_TRANSPOSED = True, 0, 0
    try:
        jf = tx.jit(f)
        note(jf.lower(x, ws).program_text())
        got = jf(x, ws)
        loss = lambda x, ws: f(x, ws).square().sum()  # noqa: E731
        grads = tx.jit(tx.grad(loss, argnums=(0, 1)))(x, ws)
    finally:
        cpu_gemm._chosen, cpu_gemm.MIN_MACS, cpu_gemm.MIN_COLUMNS_TRANSPOSED = old
    want = f(x.double(), [tuple(t.double() for t in w) for w in ws])
    # float32 rounding of sums of products, relative to each result's largest entry
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5 * want.abs().max())
    ref = tf.grad(loss, argnums=(0, 1))(x, ws)
    for g, r in zip(tx.tree.leaves(grads), tx.tree.leaves(ref)):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5 * r.abs().max() + 1e-6)


@pytest.mark.parametrize("shape", [(4, 2, 2), (64, 64, 64), (300, 200, 100)])
def test_nan_and_inf_reach_the_same_entries_as_in_torch(onednn, shape):
    m, k, n = shape
    x, w = _r(m, k), _r(n, k, seed=1)
    x[1, 0], x[2, k - 1] = float("nan"), float("inf")
    w[0] = 0.0  # inf * 0 is nan, as in eager torch's product
    jf = tx.jit(lambda x, w: x @ w.T)
    assert cpu_gemm.NAME in jf.lower(x, w).program_text()
    got, want = jf(x, w), x @ w.T
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    finite = want.isfinite()
    torch.testing.assert_close(got[finite], want[finite], rtol=1e-5, atol=1e-4)


def test_the_inductor_executor_calls_onednn_as_an_extern_kernel(onednn):
    from thunderx.executors.inductor_exec import inductor_unavailable_reason

    if inductor_unavailable_reason() is not None:
        pytest.skip(inductor_unavailable_reason())
    jg = tx.jit(tx.grad(_mlp), executor="inductor")
    text = jg.lower(P, X3).as_text()
    assert f"{cpu_gemm.NAME}(" in text and "_dnn" not in text, text  # traced: no MKL branch
    got, want = jg(P, X3), tf.grad(_mlp)(P, X3)
    for k in P:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6)
    # torch.func's tensors, and torch autograd, run the torch executor's program
    x = X3.clone().requires_grad_()
    jf = tx.jit(_mlp, executor="inductor")
    jf(P, X3)
    (through_autograd,) = torch.autograd.grad(jf(P, x), x)
    want = tf.grad(_mlp, argnums=1)(P, X3)
    torch.testing.assert_close(through_autograd, want, rtol=1e-5, atol=1e-7)
    g = tf.grad(jf, argnums=1)(P, X3)
    torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("bias", ["strided", "expanded", "offset"])
def test_a_bias_of_any_layout_is_added_right(onednn, bias):
    # oneDNN's kernel reads its bias as contiguous: the program hands it a contiguous one
    big = _r(2 * 9 + 3, seed=11)
    b = {"strided": big[::2][:9], "expanded": big[:1].expand(9), "offset": big[3:12]}[bias]
    f = lambda x, w, b: F.linear(x, w, b)  # noqa: E731
    args = (X, W, b)
    jf = tx.jit(f)
    assert cpu_gemm.NAME in jf.lower(*args).program_text()
    _close(jf(*args), f, *args)


def test_threads_calling_one_program_get_their_own_products(onednn):
    import threading

    jf = tx.jit(lambda x, w, b: torch.tanh(F.linear(x, w, b)) @ w)
    assert jf.lower(X, W, B).program_text().count(cpu_gemm.NAME) == 2
    inputs = [_r(23, 17, seed=20 + i) for i in range(4)]
    want = [torch.tanh(F.linear(x, W, B)) @ W for x in inputs]
    errors = []

    def work(k):
        for _ in range(25):
            got = jf(inputs[k], W, B)
            if not torch.allclose(got, want[k], rtol=1e-5, atol=1e-5):
                errors.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors


def test_the_calibration_is_kept_for_later_processes(monkeypatch, tmp_path):
    monkeypatch.setenv("THUNDERX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_gemm, "mode", "auto")
    key = cpu_gemm._machine_key()
    cache = tmp_path / "cpu_gemm.json"

    def decide():
        monkeypatch.setattr(cpu_gemm, "_chosen", None)
        return cpu_gemm.chosen()

    decide()  # the first process calibrates and keeps its ratio
    kept = json.loads(cache.read_text())
    assert list(kept) == [key] and len(kept[key]) == 1 and kept[key][0] > 0
    # one disturbed calibration is outvoted: processes add theirs up to CALIBRATIONS, the
    # median decides (a kept 0.025 on a CPU where oneDNN is slower sent every process to it)
    cache.write_text(json.dumps({key: [0.025]}))
    monkeypatch.setattr(cpu_gemm, "_calibrate", lambda op: 1.1)
    decide()
    assert decide() is False
    assert json.loads(cache.read_text()) == {key: [0.025, 1.1, 1.1]}
    # with CALIBRATIONS kept, a later process reads them and does not time anything
    monkeypatch.setattr(cpu_gemm, "_calibrate", lambda op: pytest.fail("calibrated again"))
    assert decide() is False
    cache.write_text(json.dumps({key: [0.5, 0.6, 5.0]}))
    assert decide() is True
    # a single number (an earlier version's file) counts as one calibration
    cache.write_text(json.dumps({key: 5.0}))
    monkeypatch.setattr(cpu_gemm, "_calibrate", lambda op: 0.5)
    assert decide() is False  # the median of 5.0 and 0.5: 2.75
    assert decide() is True  # of 5.0, 0.5 and 0.5
    assert json.loads(cache.read_text()) == {key: [5.0, 0.5, 0.5]}
    # a damaged file means calibrating again
    cache.write_text("{not json")
    assert decide() is True
    assert json.loads(cache.read_text()) == {key: [0.5]}


def test_an_unwritable_cache_only_costs_the_calibration(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("THUNDERX_CACHE_DIR", str(blocker / "sub"))  # under a file: no directory
    monkeypatch.setattr(cpu_gemm, "mode", "auto")
    monkeypatch.setattr(cpu_gemm, "_chosen", None)
    monkeypatch.setattr(cpu_gemm, "_calibrate", lambda op: 0.5)
    assert cpu_gemm.chosen() is True
