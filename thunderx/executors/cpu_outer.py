"""Which kernel the torch executor calls for a batched outer product on CPU (a contraction whose
contracting dims all have size 1: the per-example weight gradient `bmm(a.mT, b)` with K=1).

Two kernels compute it with one product per output element: a broadcast multiply
(`a[:, :, None] * b[:, None, :]`) and a batched GEMM (`torch.bmm`). Which is faster depends on the
CPU and the shape, and by a factor of 2-3 either way:

- AMD EPYC (2 threads, torch 2.13): the multiply at 0.04-1.1x the batched GEMM's time over batch
  8-256, rows 4-1024 and last dims 1-31 (0.77x at the per-example MLP's [256,128,1]x[256,1,10]);
- Intel Xeon with AVX-512 (2 threads, torch 2.13): the multiply 2-3x slower when the last dim is
  not a multiple of 16 (59 us against 28 us at [256,128,1]x[256,1,10]), 1.3x faster when it is
  (23 us against 31 us at last dim 16; 280 us against 380 us at 128).

So the choice is measured, per machine and shape, the way cpu_gemm.py measures oneDNN against
MKL: the first time a program holds a batched float32 or float64 CPU outer product of at most
MAX_CALIBRATED elements, both kernels run on that shape (best of interleaved rounds, about 1 ms),
and the batched GEMM is chosen when it takes at most cpu_gemm.CALIBRATION_RATIO of the
multiply's time. The ratios are kept in cpu_gemm.json beside the GEMM's, by machine and shape; the
first cpu_gemm.CALIBRATIONS processes each add one and the median decides. Larger products stay
multiplies (memory-bound: the multiply measured as fast or faster on both machines).

The values are the same either way; only the sign of a zero product differs: the multiply gives
-0.0 for (-1) * 0 as eager torch's per-example loop does (its unbatched GEMM), the batched GEMM
+0.0 as torch.func's batched rule does (its GEMM adds the product to a +0.0). Set
THUNDERX_CPU_OUTER to `mul` or `bmm` to fix the choice (`auto`, the default, measures).
"""

from __future__ import annotations

import math
import os

import torch

from thunderx.executors import cpu_gemm

mode = os.environ.get("THUNDERX_CPU_OUTER", "auto")
# outputs of at most this many elements are measured (16 MiB of float32: ~10 ms of calibration)
MAX_CALIBRATED = 1 << 22
_DTYPES = (torch.float32, torch.float64)
_decided: dict = {}  # (batch, rows, columns, dtype) -> whether the batched GEMM runs it


def bmm_source(x: str, y: str, avals, dimension_numbers, out_aval) -> str | None:
    """`torch.bmm` of the operands laid out as (batch, rows, 1) and (batch, 1, columns) for the
    batched outer product of `x` and `y` (`dimension_numbers` of a dot_general), when it is this
    machine's faster kernel for the shape; None otherwise (the multiply runs) and for any other
    contraction."""
    from thunderx.primitives.linalg import _layout, outer_product_layout

    lay = outer_product_layout(avals, dimension_numbers)
    if lay is None or out_aval.dtype not in _DTYPES:
        return None
    if torch.device(out_aval.device).type != "cpu":
        return None
    perms, batch, xf, yf = lay
    b, m, n = math.prod(batch), math.prod(xf), math.prod(yf)
    if not _bmm_chosen(b, m, n, out_aval.dtype):
        return None
    call = f"torch.bmm({_layout(x, perms[0], [b, m, 1])}, {_layout(y, perms[1], [b, 1, n])})"
    shape = tuple(out_aval.shape)
    return call if shape == (b, m, n) else f"{call}.reshape({shape})"


def _bmm_chosen(b: int, m: int, n: int, dtype) -> bool:
    if mode not in ("auto", "mul", "bmm"):
        raise ValueError(f"THUNDERX_CPU_OUTER must be auto, mul or bmm, got {mode!r}")
    if mode != "auto":
        return mode == "bmm"
    if b * m * n > MAX_CALIBRATED or b * m * n == 0:
        return False
    key = (b, m, n, dtype)
    if key not in _decided:
        if not cpu_gemm.runtime_ok():  # tensors made here would be wrapped: decide later
            return False
        what = f"|outer {b}x{m}x{n} {str(dtype).removeprefix('torch.')}"
        _decided[key] = cpu_gemm.calibrated_choice(lambda: _calibrate(b, m, n, dtype), what)
    return _decided[key]


def _calibrate(b: int, m: int, n: int, dtype) -> float:
    """The batched GEMM's time over the multiply's for one (b, m, 1) x (b, 1, n) outer product
    (each the best of interleaved rounds, after warm-up calls)."""
    with torch.no_grad(), torch.inference_mode():
        x = torch.linspace(-1, 1, b * m, dtype=dtype).reshape(b, m, 1)
        y = torch.linspace(-2, 2, b * n, dtype=dtype).reshape(b, 1, n)
        o1, o2 = torch.empty(b, m, n, dtype=dtype), torch.empty(b, m, n, dtype=dtype)
        calls = {
            "mul": lambda: torch.mul(x, y, out=o1),
            "bmm": lambda: torch.bmm(x, y, out=o2),
        }
        best = cpu_gemm.interleaved_best(calls, warm=2, rounds=5)
    return best["bmm"] / best["mul"]
