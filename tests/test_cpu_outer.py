"""The kernel of a batched outer product on CPU (executors/cpu_outer.py): a broadcast multiply or
a batched GEMM, measured per machine and shape. Both give eager torch's values; the sign of a zero
product follows the kernel (the multiply's as eager torch's per-example loop, the batched GEMM's
as torch.func's batched rule), checked against those oracles here."""

import json
import math

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx
from thunderx.avals import ShapedArray
from thunderx.executors import cpu_gemm, cpu_outer

SPECIALS = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 1.5, -3.0, 1e-40])


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """No decision kept in this process, an empty cache file."""
    monkeypatch.setenv("THUNDERX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_outer, "_decided", {})
    return tmp_path / "cpu_gemm.json"


def _code(f, *args):
    return tx.jit(f).lower(*args).as_text().split("# execution program")[1]


def _same_bits(got, want):
    """Equal values, nan where nan, and the same sign on every zero."""
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(got), torch.signbit(want)), (got, want)


# (einsum spec, operand shapes): batch dims first or not, several free dims, a transposed operand
OUTERS = [
    ("bi,bj->bij", (16, 64), (16, 10)),
    ("bi,jb->bij", (16, 24), (3, 16)),
    ("abi,abjk->abijk", (4, 3, 5), (4, 3, 2, 7)),
    ("bik,bkj->bij", (16, 24, 1), (16, 1, 5)),
]


def _operands(shapes, dtype):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, generator=g, dtype=dtype) for s in shapes)
    a.view(-1)[:8], b.view(-1)[: min(8, b.numel())] = SPECIALS, SPECIALS[: min(8, b.numel())]
    return a, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("spec, xs, ys", OUTERS)
def test_each_kernel_gives_torchs_values_and_its_own_zero_signs(monkeypatch, spec, xs, ys, dtype):
    a, b = _operands((xs, ys), dtype)
    f = lambda a, b: torch.einsum(spec, a, b)
    want = torch.einsum(spec, a, b)
    monkeypatch.setattr(cpu_outer, "mode", "bmm")
    code = _code(f, a, b)
    assert "torch.bmm(" in code and " * " not in code, code
    got_bmm = tx.jit(f)(a, b)
    monkeypatch.setattr(cpu_outer, "mode", "mul")
    code = _code(f, a, b)
    assert "bmm" not in code and " * " in code, code
    got_mul = tx.jit(f)(a, b)
    for got in (got_bmm, got_mul):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    # the sign of each zero product: the multiply's, and a batched GEMM's of the same operands
    x, y, (nb, nr, nc), shape = _layouts(spec, a, b)
    _same_bits(got_mul, (x.reshape(nb, nr, 1) * y.reshape(nb, 1, nc)).reshape(shape))
    _same_bits(got_bmm, torch.bmm(x.reshape(nb, nr, 1), y.reshape(nb, 1, nc)).reshape(shape))


def _layouts(spec, a, b):
    """a as (batch, rows, summed) and b as (batch, summed, columns), their flat sizes and the
    output's shape."""
    ins, out = spec.split("->")
    xl, yl = ins.split(",")
    size = {c: n for letters, t in ((xl, a), (yl, b)) for c, n in zip(letters, t.shape)}
    batch = [c for c in out if c in xl and c in yl]
    rows = [c for c in out if c in xl and c not in yl]
    cols = [c for c in out if c in yl and c not in xl]
    x = a.permute([xl.index(c) for c in batch + rows + [c for c in xl if c not in out]])
    y = b.permute([yl.index(c) for c in batch + [c for c in yl if c not in out] + cols])
    flat = [math.prod(size[c] for c in part) for part in (batch, rows, cols)]
    return x, y, flat, [size[c] for c in out]


def _pe_loss(w, x, y):
    return F.cross_entropy(torch.relu(x @ w[0]) @ w[1], y)


@pytest.mark.parametrize("kernel", ["mul", "bmm"])
def test_per_example_gradients_with_either_kernel(monkeypatch, kernel):
    # zeros in the input: the weight gradient's zero products get the kernel's sign, and the
    # batched GEMM's are torch.func's bit for bit
    monkeypatch.setattr(cpu_outer, "mode", kernel)
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(12, 16, generator=g), torch.randn(16, 10, generator=g))
    x, y = torch.randn(8, 1, 12, generator=g), torch.randint(0, 10, (8, 1), generator=g)
    x[:, :, ::3] = 0.0
    x[:, :, 1::3] *= -1
    f = tx.jit(tx.vmap(tx.grad(_pe_loss), in_axes=(None, 0, 0)))
    assert ("torch.bmm(" in f.lower(w, x, y).as_text()) == (kernel == "bmm")
    want = tf.vmap(tf.grad(_pe_loss), in_dims=(None, 0, 0))(w, x, y)
    got = f(w, x, y)
    for gw, ww in zip(got, want):
        torch.testing.assert_close(gw, ww, rtol=1e-5, atol=1e-6)
    zeros = want[0] == 0
    assert zeros.any()
    if kernel == "bmm":
        assert torch.equal(torch.signbit(got[0][zeros]), torch.signbit(want[0][zeros]))


def test_other_dtypes_and_devices_keep_the_multiply(monkeypatch):
    monkeypatch.setattr(cpu_outer, "mode", "bmm")
    a, b = torch.arange(12).reshape(4, 3), torch.arange(8).reshape(4, 2)
    code = _code(lambda a, b: torch.einsum("bi,bj->bij", a, b), a, b)
    assert "bmm" not in code, code  # integers: torch's CPU bmm has no fast kernel for them
    torch.testing.assert_close(
        tx.jit(lambda a, b: torch.einsum("bi,bj->bij", a, b))(a, b),
        torch.einsum("bi,bj->bij", a, b),
    )
    dn = (((), ()), ((0,), (0,)))
    meta = [ShapedArray((4, 3), torch.float32, torch.device("meta"))] * 2
    out = ShapedArray((4, 3, 3), torch.float32, torch.device("meta"))
    assert cpu_outer.bmm_source("a", "b", meta, dn, out) is None
    cpu = [ShapedArray((4, 3), torch.float32, torch.device("cpu"))] * 2
    cpu_out = ShapedArray((4, 3, 3), torch.float32, torch.device("cpu"))
    assert cpu_outer.bmm_source("a", "b", cpu, dn, cpu_out).startswith("torch.bmm(")
    # a contraction over a dim longer than 1 is no outer product
    dn2 = (((1,), (1,)), ((0,), (0,)))
    assert cpu_outer.bmm_source("a", "b", cpu, dn2, ShapedArray((4,), torch.float32)) is None


def test_auto_measures_each_shape_once_and_keeps_it(monkeypatch, fresh):
    monkeypatch.setattr(cpu_outer, "mode", "auto")
    timed = []

    def calibrate(b, m, n, dtype):
        timed.append((b, m, n, dtype))
        return 0.5 if n == 10 else 1.5  # the batched GEMM twice as fast at last dim 10 only

    monkeypatch.setattr(cpu_outer, "_calibrate", calibrate)
    f = lambda a, b: torch.einsum("bi,bj->bij", a, b)
    a = torch.randn(16, 64)
    assert "torch.bmm(" in _code(f, a, torch.randn(16, 10))
    assert "torch.bmm(" not in _code(f, a, torch.randn(16, 16))
    assert "torch.bmm(" in _code(f, a, torch.randn(16, 10))  # decided: not timed again
    assert timed == [(16, 64, 10, torch.float32), (16, 64, 16, torch.float32)]
    key = cpu_gemm._machine_key()
    kept = json.loads(fresh.read_text())
    assert kept == {f"{key}|outer 16x64x10 float32": [0.5], f"{key}|outer 16x64x16 float32": [1.5]}
    # later processes add theirs up to CALIBRATIONS; the median decides
    for ratio, chosen in ((1.5, False), (1.5, False)):
        monkeypatch.setattr(cpu_outer, "_decided", {})
        monkeypatch.setattr(cpu_outer, "_calibrate", lambda *a, r=ratio: r)
        assert cpu_outer._bmm_chosen(16, 64, 10, torch.float32) is chosen
    assert json.loads(fresh.read_text())[f"{key}|outer 16x64x10 float32"] == [0.5, 1.5, 1.5]
    monkeypatch.setattr(cpu_outer, "_decided", {})
    monkeypatch.setattr(cpu_outer, "_calibrate", lambda *a: pytest.fail("calibrated again"))
    assert cpu_outer._bmm_chosen(16, 64, 10, torch.float32) is False


def test_auto_times_neither_large_products_nor_under_transforms(monkeypatch, fresh):
    monkeypatch.setattr(cpu_outer, "mode", "auto")
    monkeypatch.setattr(cpu_outer, "_calibrate", lambda *a: pytest.fail("timed"))
    big = cpu_outer.MAX_CALIBRATED // 100 + 1
    assert cpu_outer._bmm_chosen(10, 10, big, torch.float32) is False  # memory-bound: multiply
    monkeypatch.setattr(cpu_gemm, "runtime_ok", lambda: False)
    assert cpu_outer._bmm_chosen(16, 64, 10, torch.float32) is False
    assert cpu_outer._decided == {} and not fresh.exists()  # decided later, outside


def test_the_real_calibration_times_both_kernels():
    ratio = cpu_outer._calibrate(8, 16, 10, torch.float32)
    assert 0 < ratio < float("inf")


def test_an_unknown_mode_is_refused(monkeypatch):
    monkeypatch.setattr(cpu_outer, "mode", "fast")
    with pytest.raises(ValueError, match="THUNDERX_CPU_OUTER must be auto, mul or bmm, got 'fast'"):
        cpu_outer._bmm_chosen(4, 4, 4, torch.float32)


def test_the_cache_file_keeps_the_newest_entries(monkeypatch, fresh):
    monkeypatch.setattr(cpu_gemm, "MAX_ENTRIES", 3)
    for n in range(5):
        cpu_gemm._store_ratios([float(n + 1)], f"|outer 1x1x{n} float32")
    kept = json.loads(fresh.read_text())
    assert [k.rsplit("x", 1)[1] for k in kept] == ["2 float32", "3 float32", "4 float32"]
    cpu_gemm._store_ratios([9.0], "|outer 1x1x2 float32")  # rewritten: now the newest
    assert list(json.loads(fresh.read_text()).values()) == [[4.0], [5.0], [9.0]]
