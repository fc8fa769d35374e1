"""Which kernel the torch executor calls for a large float32 matrix product on CPU.

Eager torch runs a float32 GEMM on CPU through MKL (`torch.mm`, `addmm`, `F.linear`). On CPUs
where MKL takes a slow code path (this project's AMD EPYC machines: 2-2.3x oneDNN's time for
products from 128^3 up), oneDNN's GEMM is the better kernel; torch ships it for its compiled
inference path as `torch.ops.mkldnn._linear_pointwise` (`x @ w.T + b` for rows `x`). The choice
is made once per process, from `mode` (env `THUNDERX_CPU_GEMM`):

- `"mkl"`: eager torch's kernels everywhere (results bit for bit eager torch's);
- `"onednn"`: oneDNN for every product of at least MIN_MACS multiply-adds (MIN_MACS_INDUCTOR in
  a graph handed to inductor);
- `"auto"` (default): oneDNN when a calibration finds it faster: one 256x256x256 product timed
  both ways, interleaved (7-10 ms, the first time a program has a product that large), oneDNN
  at most CALIBRATION_RATIO of MKL's time; on a CPU where MKL is about as fast, MKL. The ratios
  are kept in `cpu_gemm.json` under THUNDERX_CACHE_DIR (default ~/.cache/thunderx), by CPU model,
  core count, torch version and thread count: the first CALIBRATIONS processes each add one, and
  the median decides, so that one calibration disturbed by other work (a kept 0.025 on a CPU
  where the ratio is 1.1 sent every later process to the slower kernel) is outvoted, and later
  processes skip the calibration.

Both accumulate in float32; oneDNN sums in another order, so its products differ from eager
torch's in the last bits (about 1e-7 of the row's magnitude; `torch.allclose` at its default
rtol=1e-5 fails for about 1% of the elements of a 1024x256x768 product, the entries near zero),
as torch.compile's fused kernels differ from eager torch. Smaller products (below MIN_MACS, where
oneDNN's ~10 us call overhead loses) stay MKL calls.

Only the program variant that runs outside torch autograd calls oneDNN (its kernel has no
derivative), and only outside torch.func transforms and torch dispatch or function modes: the
program checks these once per call (`_dnn = _onednn_ok()`) and otherwise runs the MKL call.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time

import torch

from thunderx.executors.sources import closes_at_end, closing_bracket, split_top

mode = os.environ.get("THUNDERX_CPU_GEMM", "auto")
# products of at least this many multiply-adds (m * k * n) go to oneDNN when it is chosen.
# Measured alone (2 threads, AMD EPYC): oneDNN/MKL time 6x at 16^3, 2.2x at 64^3, 1.1-1.25x
# at 16x256x256 and 256x128x10, 0.84-0.87x at 2048x32x32 and 128^3, 0.45-0.6x from 256^3 up;
# in programs (A/B, one process): a jacfwd's 32x32x2048 product 8-25% faster on oneDNN, a batched
# Hessian's 512x64x64 ones 2% slower (within noise), a d=64 transformer layer the same with the
# threshold at 2M or 4M (3% slower at 8M)
MIN_MACS = 1 << 21
# in a graph handed to inductor, which calls oneDNN's kernel as an extern kernel: the d=64
# layer's 3-4M products made it 6% slower, the d=256 layers' 64M+ ones 35% faster
MIN_MACS_INDUCTOR = 1 << 24
# oneDNN copies rows given transposed (a weight gradient's `a.t() @ b`) before its product, and
# the product's column count n decides whether that pays: measured alone over k 256-4096 and
# m 64-1024 (2M-256M multiply-adds), oneDNN/MKL time 0.56-0.94x with n of 256 or more, 1.1-1.4x
# with n of 64 or 128 (but for 0.85-0.93x at m = 1024)
MIN_COLUMNS_TRANSPOSED = 256
CALIBRATION_RATIO = 0.8
CALIBRATIONS = 3  # kept per machine key; the decision is their median
MAX_ENTRIES = 512  # calibrations kept in the cache file (per machine and choice, shape)
NAME = "_onednn_linear"  # the kernel's name in generated code
GUARD = "_onednn_ok"

_C = torch._C
_chosen: bool | None = None


def _kernel():
    try:
        return torch.ops.mkldnn._linear_pointwise.default
    except (AttributeError, RuntimeError):
        return None


def _works(op) -> bool:
    """The kernel exists in this torch build and computes `x @ w.T + b`."""
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(s, generator=g) for s in ((6, 5), (4, 5), (4,)))
    try:
        y = op(x, w, b, "none", [], "")
        z = op(x.t().contiguous().t(), w.t().contiguous().t(), None, "none", [], "")
    except RuntimeError:
        return False
    ref = x.double() @ w.double().T
    return torch.allclose(y.double(), ref + b.double(), atol=1e-5) and torch.allclose(
        z.double(), ref, atol=1e-5
    )


def _calibrate(op) -> float:
    """oneDNN's time over MKL's for one 256^3 product (best of interleaved rounds)."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    calls = {"mkl": lambda: torch.mm(x, w.t()), "onednn": lambda: op(x, w, None, "none", [], "")}
    # oneDNN makes its primitive on the first call; both warm their threads
    best = interleaved_best(calls, warm=3, rounds=7)
    return best["onednn"] / best["mkl"]


def interleaved_best(calls: dict, warm: int, rounds: int) -> dict:
    """{name: the fastest of `rounds` timings of calls[name]()}, after `warm` calls of each; the
    rounds interleave the calls, so that a disturbance of the machine reaches all of them."""
    for f in calls.values():
        for _ in range(warm):
            f()
    best = dict.fromkeys(calls, math.inf)
    for _ in range(rounds):
        for name, f in calls.items():
            t0 = time.perf_counter()
            f()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def chosen() -> bool:
    """Whether large float32 CPU products call oneDNN in this process (decided once)."""
    global _chosen
    if _chosen is None:
        _chosen = _decide()
    return _chosen


def _decide() -> bool:
    if mode not in ("auto", "mkl", "onednn"):
        raise ValueError(f"THUNDERX_CPU_GEMM must be auto, mkl or onednn, got {mode!r}")
    if mode == "mkl" or not torch.backends.mkldnn.is_available():
        return False
    op = _kernel()
    with torch.no_grad():
        if op is None or not _works(op):
            return False
        if mode == "onednn":
            return True
        return calibrated_choice(lambda: _calibrate(op))


def calibrated_choice(measure, what: str = "") -> bool:
    """Whether this machine's kept ratios (of the choice `what`, the GEMM's by default) say the
    alternative kernel is faster: a process finding fewer than CALIBRATIONS adds `measure()`'s
    ratio (the alternative's time over the default's) and keeps it; their median decides."""
    ratios = _cached_ratios(what)
    if len(ratios) < CALIBRATIONS:
        ratios.append(measure())
        _store_ratios(ratios, what)
    return statistics.median(ratios) <= CALIBRATION_RATIO


def _cache_file() -> str:
    root = os.environ.get("THUNDERX_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "thunderx"
    )
    return os.path.join(root, "cpu_gemm.json")


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo, or None where there is none to read."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return None


def _machine_key() -> str:
    model = cpu_model() or "unknown CPU"
    threads = torch.get_num_threads()
    return f"{model}|{os.cpu_count()} cores|torch {torch.__version__}|{threads} threads"


def _cached_ratios(what: str = "") -> list[float]:
    """This machine's oneDNN/MKL ratios (or, with `what`, the ratios of that other choice)
    calibrated by earlier processes (a single number, as earlier versions kept, counts as one);
    entries that are not positive numbers are dropped."""
    try:
        with open(_cache_file()) as f:
            kept = json.load(f)[_machine_key() + what]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    kept = kept if isinstance(kept, list) else [kept]
    return [float(r) for r in kept if isinstance(r, (int, float)) and r > 0][:CALIBRATIONS]


def _store_ratios(ratios: list[float], what: str = "") -> None:
    """Keeps the ratios for later processes; a cache that cannot be written is skipped."""
    path = _cache_file()
    try:
        try:
            with open(path) as f:
                data = json.load(f)
            data = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            data = {}
        key = _machine_key() + what
        data.pop(key, None)
        data[key] = ratios  # newest last: the oldest entries go beyond MAX_ENTRIES
        data = dict(list(data.items())[-MAX_ENTRIES:])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)  # whole, whatever another process writes meanwhile
    except OSError:
        pass


def runtime_ok() -> bool:
    """Outside torch.func transforms and torch dispatch / function modes (whose tensors the
    oneDNN kernel has no rule for)."""
    return not (
        _C._are_functorch_transforms_active()
        or _C._len_torch_dispatch_stack()
        or _C._is_torch_function_mode_enabled()
    )


def namespace_entries() -> dict:
    return {NAME: _kernel(), GUARD: runtime_ok}


def product(out_aval, k: int, columns: int) -> tuple[int, int] | None:
    """(multiply-adds, columns) of a float32 CPU product with result `out_aval`, contraction
    size `k` and `columns` columns (the right operand's free size); None for any other (another
    dtype or device: never oneDNN's)."""
    if out_aval.dtype != torch.float32 or torch.device(out_aval.device).type != "cpu":
        return None
    return math.prod(out_aval.shape) * k, columns


def _weight(b: str) -> str:
    """The (n, k) weight oneDNN reads for a right operand `b` of shape (k, n)."""
    return b[:-4] if b.endswith(".t()") else f"{b}.t()"


def onednn_source(
    expr: str, product: tuple[int, int] | None, least: int | None = None
) -> str | None:
    """The oneDNN call computing `expr`, one of the torch executor's GEMM forms: `torch.mm(a, b)`,
    `torch.addmm(bias, a, b)`, `torch.matmul(x, b)` (rows x, matrix b), `F.linear(x, w, bias)`,
    each possibly followed by a `.reshape(...)` or `.permute(...)` of its result, when oneDNN is
    this process's choice and faster for a product of `(multiply-adds, columns)` (at least
    `least` multiply-adds, MIN_MACS by default); None otherwise and for any other expression (a
    scaled addmm, a batched or vector product)."""
    least = MIN_MACS if least is None else least
    if product is None or product[0] < least:
        return None
    for prefix in ("torch.mm(", "torch.addmm(", "torch.matmul(", "torch.nn.functional.linear("):
        if expr.startswith(prefix):
            break
    else:
        return None
    end = closing_bracket(expr, len(prefix) - 1)
    if end is None:
        return None
    call, suffix = expr[: end + 1], expr[end + 1 :]
    if suffix and not (
        (suffix.startswith(".reshape(") or suffix.startswith(".permute("))
        and closes_at_end(suffix, suffix.index("("))
    ):
        return None
    args = split_top(call[len(prefix) : -1], ", ")
    if any("=" in a for a in args):  # alpha=, out=
        return None
    if prefix == "torch.matmul(" and suffix:
        return None  # a matrix times a stack of matrices (permuted), not rows times one
    if prefix in ("torch.mm(", "torch.matmul(") and len(args) == 2:
        x, w, b = args[0], _weight(args[1]), "None"
    elif prefix == "torch.addmm(" and len(args) == 3:
        x, w, b = args[1], _weight(args[2]), args[0]
    elif prefix.startswith("torch.nn") and len(args) == 3:
        x, w, b = args
    else:
        return None
    if x.endswith(".t()") and product[1] < MIN_COLUMNS_TRANSPOSED or not chosen():
        return None
    if b != "None":  # the kernel reads the bias as contiguous: a strided or expanded one (a
        # slice of a larger vector, a broadcast scalar) gave wrong sums
        b = f"{b}.contiguous()"
    return f"{NAME}({x}, {w}, {b}, 'none', [], ''){suffix}"
