"""torch.autocast on CPU under thunderx's transforms: torch's cast policy applied where a torch
function is called on traced values, so that the traced program holds autocast's casts as
explicit `convert_element_type` equations (differentiated, batched and staged like any other),
and runs with autocast off.

torch applies autocast at its dispatcher, per aten operator, on CPU tensors that are floating
point and not float64 (`is_autocast_eligible`):

- `lower_precision_fp` operators (matrix products, convolutions, attention) cast such inputs to
  the autocast dtype (`torch.get_autocast_dtype("cpu")`, bfloat16 by default);
- `fp32` operators (losses, linear algebra, FFTs, `prod`, `cdist`...) cast them to float32;
- `promote` operators (`cat`, `stack`, `index_copy`) cast them to the widest of their dtypes.

The lists below are torch's AutocastCPU registrations (aten/src/ATen/autocast_mode.cpp, torch
2.13). Inside a listed operator autocast is off, and so it is here: the torch calls a
decomposition makes run without the policy.

A torch function that is not listed may still reach a listed operator inside its C++ or Python
implementation (`einsum` and `tensordot` run `bmm`/`mm`, `multi_head_attention_forward` runs
`linear`). For those, torch's own result dtypes under autocast are found by running torch's
function once per signature, on stand-in tensors of the arguments' shapes and dtypes (or, where
that fails, on fake tensors: `FakeTensorMode`): where torch returns the autocast dtype and the
decomposition would not, the inputs are cast to it first; where the dtypes still differ, or
torch's cannot be found, the call is refused naming the function and the user's line, so that a
program never silently computes in another precision than torch would.

CUDA (and other devices') autocast stays refused under staging and differentiating transforms:
its policy lists differ and are not checked here without a GPU."""

from __future__ import annotations

import contextlib
import threading

import torch

from thunderx.core import Tracer

_LOWER = frozenset(
    """conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm _addmm_activation addbmm linear
    _convolution matmul conv_tbc mkldnn_rnn_layer conv_transpose1d conv_transpose2d
    conv_transpose3d prelu scaled_dot_product_attention _native_multi_head_attention""".split()
)
_FFT = "fft ifft fft2 ifft2 fftn ifftn rfft irfft rfft2 irfft2 rfftn irfftn hfft ihfft"
_FP32 = frozenset(
    f"""avg_pool3d binary_cross_entropy grid_sampler polar prod quantile nanquantile stft cdist
    grid_sampler_2d grid_sampler_3d trace view_as_complex cholesky cholesky_inverse
    cholesky_solve inverse lu_solve orgqr ormqr pinverse max_pool3d max_unpool2d max_unpool3d
    adaptive_avg_pool3d reflection_pad1d reflection_pad2d replication_pad1d replication_pad2d
    replication_pad3d mse_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss
    poisson_nll_loss smooth_l1_loss cross_entropy_loss l1_loss huber_loss margin_ranking_loss
    soft_margin_loss triplet_margin_loss multi_margin_loss ctc_loss kl_div multilabel_margin_loss
    binary_cross_entropy_with_logits {" ".join("fft_" + n for n in _FFT.split())} linalg_cond
    linalg_matrix_rank linalg_solve linalg_cholesky linalg_svdvals linalg_eigvals linalg_eigvalsh
    linalg_inv linalg_householder_product linalg_tensorinv linalg_tensorsolve
    fake_quantize_per_tensor_affine geqrf _lu_with_info qr svd triangular_solve
    fractional_max_pool2d fractional_max_pool3d adaptive_max_pool3d multilabel_margin_loss_forward
    linalg_qr linalg_cholesky_ex linalg_svd linalg_eig linalg_eigh linalg_lstsq
    linalg_inv_ex""".split()
)
_PROMOTE = frozenset({"stack", "cat", "index_copy"})
# Python names whose aten operator has another name
_ATEN_NAME = {
    "__matmul__": "matmul",
    "__rmatmul__": "matmul",
    "cross_entropy": "cross_entropy_loss",
    "grid_sample": "grid_sampler",
    "concat": "cat",
    "concatenate": "cat",
}

_local = threading.local()
_UNKNOWN = object()  # torch's result dtypes could not be found
_probed: dict = {}
_PROBE_CACHE = 4096


def cpu_autocast_on() -> bool:
    return torch._C._is_any_autocast_enabled() and torch.is_autocast_enabled("cpu")


# device types whose autocast is refused under staging and differentiating transforms
OTHER_DEVICES = ("cuda", "xpu", "mps", "hpu")


def other_autocast_on() -> bool:
    """Autocast enabled for a device other than the CPU (refused under transforms)."""
    return any(torch.is_autocast_enabled(d) for d in OTHER_DEVICES)


def check_jit_call(name: str) -> None:
    """A jitted function called under another device's autocast is refused: its program would
    run under casts its trace did not see."""
    if other_autocast_on():
        from thunderx.lang import autocast_refused

        raise autocast_refused(f"around a call of the jitted {name}")


def state() -> tuple:
    """What a traced program depends on: CPU autocast's on/off and dtype (a jit cache key)."""
    if not cpu_autocast_on():
        return ()
    return ("autocast", torch.get_autocast_dtype("cpu"))


def _name(func, name: str | None) -> str:
    n = name or getattr(func, "__name__", "")
    return _ATEN_NAME.get(n, n)


def _eligible(x) -> bool:
    if isinstance(x, Tracer):
        a = x.aval
        dtype, device = a.dtype, getattr(a, "device", None)
    elif isinstance(x, torch.Tensor):
        dtype, device = x.dtype, x.device
    else:
        return False
    return (
        dtype.is_floating_point
        and dtype is not torch.float64
        and (device is None or device.type == "cpu")
    )


def _cast(x, dtype):
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, dtype) for v in x)
    if _eligible(x) and x.dtype is not dtype:
        return x.to(dtype)
    return x


def _leaves(args, kwargs):
    for a in (*args, *kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a


def _promote_dtype(args, kwargs, lower):
    dtype = lower
    for x in _leaves(args, kwargs):
        if _eligible(x) and x.dtype is not dtype:
            dtype = torch.float32
    return dtype


def _cast_all(args, kwargs, dtype):
    return tuple(_cast(a, dtype) for a in args), {k: _cast(v, dtype) for k, v in kwargs.items()}


def call(impl, func, name, args, kwargs, run):
    """`run(impl, args, kwargs)` for a torch call on traced values with CPU autocast on: the
    inputs cast by torch's policy for the function, its own torch calls made with the policy off,
    and its result dtypes checked against torch's."""
    if getattr(_local, "depth", 0) or _calls_user_code(args, kwargs):
        return run(impl, args, kwargs)
    op = _name(func, name)
    lower = torch.get_autocast_dtype("cpu")
    if op in _LOWER:
        return _inside(run, impl, args, kwargs, lower)
    if op in _FP32:
        return _inside(run, impl, args, kwargs, torch.float32)
    if op in _PROMOTE:
        return _inside(run, impl, args, kwargs, _promote_dtype(args, kwargs, lower))
    if not any(_eligible(x) for x in _leaves(args, kwargs)):
        return run(impl, args, kwargs)  # nothing autocast would cast
    want = _torch_dtypes(func, args, kwargs) if func is not None else _UNKNOWN
    if want is _UNKNOWN:
        raise _refused(op, lower, "thunderx cannot tell which dtypes torch computes it in there")
    out = _inside(run, impl, args, kwargs, None)
    if want is None or _dtypes(out) == want:  # None: no tensor results (x.dim(), x.size())
        return out
    # torch reached a listed operator inside (einsum's bmm): its inputs in the autocast dtype
    out = _inside(run, impl, args, kwargs, lower)
    if _dtypes(out) == want:
        return out
    raise _refused(
        op,
        lower,
        f"torch returns {_show(want)} there, thunderx's cast policy {_show(_dtypes(out))}",
    )


def _refused(op, lower, why):
    from thunderx.errors import UnsupportedOperationError, user_frame

    return UnsupportedOperationError(
        f"{op} at {user_frame()} under torch.autocast('cpu', dtype={lower}): {why}; cast its "
        "inputs explicitly, or call it in a `torch.autocast('cpu', enabled=False)` block"
    )


def _inside(run, impl, args, kwargs, dtype):
    """The call with its eligible inputs cast to `dtype` (None: as they are), the casts and the
    function's own torch calls made with the policy off."""
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        if dtype is not None:
            args, kwargs = _cast_all(args, kwargs, dtype)
        return run(impl, args, kwargs)
    finally:
        _local.depth -= 1


def _calls_user_code(args, kwargs) -> bool:
    """A call taking a function or module runs user code, whose own torch calls get the policy
    (and which a fake-tensor run must not call)."""
    return any(
        callable(x) and not isinstance(x, (torch.Tensor, Tracer, type, torch.dtype))
        for x in _leaves(args, kwargs)
    )


def _dtypes(out):
    if isinstance(out, (list, tuple)):
        return tuple(_dtypes(o) for o in out)
    if isinstance(out, (Tracer, torch.Tensor)):
        return out.dtype
    return None


def _show(d) -> str:
    if isinstance(d, tuple):
        return "(" + ", ".join(_show(x) for x in d) + ")"
    return str(d).replace("torch.", "")


def _key(x):
    if isinstance(x, (Tracer, torch.Tensor)):
        return ("T", tuple(x.shape), x.dtype, str(x.device))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_key(v) for v in x))
    if isinstance(x, dict):
        return ("d", tuple((k, _key(v)) for k, v in x.items()))
    if isinstance(x, slice):  # unhashable before Python 3.12
        return ("s", _key(x.start), _key(x.stop), _key(x.step))
    hash(x)
    return x


def _torch_dtypes(func, args, kwargs):
    """Result dtypes of `func(*args, **kwargs)` in torch under the current autocast state
    (cached per signature): from a run on stand-in tensors, else on fake ones; _UNKNOWN where
    both fail."""
    try:
        key = (func, _key(args), _key(kwargs), torch.get_autocast_dtype("cpu"))
    except TypeError:  # an unhashable argument: no caching
        key = None
    if key is not None and key in _probed:
        return _probed[key]
    result = _real_run(func, args, kwargs)
    if result is _UNKNOWN:
        result = _fake_run(func, args, kwargs)
    if key is not None:
        if len(_probed) >= _PROBE_CACHE:
            _probed.clear()
        _probed[key] = result
    return result


def _real_run(func, args, kwargs):
    """Result dtypes of `func` run by torch itself, under the current autocast, on stand-ins:
    a traced value's shape and dtype filled with ones (zeros for integers and booleans: valid
    indices), a concrete tensor's copy (its values, never written). The random number
    generators are restored afterwards. Cheaper than fake tensors, whose first use in a process
    costs about a second."""

    def stand_in(x):
        if isinstance(x, Tracer):
            a = x.aval
            fill = torch.ones if a.dtype.is_floating_point or a.dtype.is_complex else torch.zeros
            return fill(tuple(a.shape), dtype=a.dtype, device=a.device)
        if isinstance(x, torch.Tensor):
            return x.detach().clone()
        return x

    devices = {getattr(x, "device", None) for x in _leaves(args, kwargs)}
    cuda = [d.index or 0 for d in devices if d is not None and d.type == "cuda"]
    return _dtypes_of_run(
        func, args, kwargs, stand_in, torch.random.fork_rng(devices=cuda), torch.no_grad()
    )


def _fake_run(func, args, kwargs):
    """Result dtypes of `func` run by torch on fake tensors of the arguments' shapes and dtypes.
    Where that needs a value (an index or length given as a 0-dim integer tensor: `x[i]`,
    `narrow`), it runs again with 0 for such scalars: dtypes do not depend on their values."""
    out = _fake_call(func, args, kwargs, scalars=False)
    if out is _UNKNOWN and any(_int_scalar(x) for x in _leaves(args, kwargs)):
        out = _fake_call(func, args, kwargs, scalars=True)
    return out


def _int_scalar(x) -> bool:
    if not isinstance(x, (Tracer, torch.Tensor)):
        return False
    return tuple(x.shape) == () and not (x.dtype.is_floating_point or x.dtype.is_complex)


def _fake_call(func, args, kwargs, scalars: bool):
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()

    def fake(x):
        if scalars and _int_scalar(x):
            return False if x.dtype is torch.bool else 0
        if isinstance(x, Tracer):
            a = x.aval
            return torch.empty(tuple(a.shape), dtype=a.dtype, device=a.device)
        if isinstance(x, torch.Tensor):
            return mode.from_tensor(x)
        return x

    return _dtypes_of_run(func, args, kwargs, fake, mode)


def _dtypes_of_run(func, args, kwargs, leaf, *contexts):
    """The result dtypes of torch's `func` on the arguments with each tensor leaf (in lists and
    tuples too) replaced by `leaf(x)`, made and run inside `contexts`; _UNKNOWN where it fails.
    It runs outside any thunderx trace and torch function mode (jit's tracking of the tensors a
    function makes): a stand-in is not a traced value."""
    from thunderx.core import EvalTrace, set_trace

    def convert(x):
        if isinstance(x, (list, tuple)):
            return type(x)(convert(v) for v in x)
        return leaf(x)

    try:
        with contextlib.ExitStack() as stack:
            for c in (set_trace(EvalTrace(None)), torch._C.DisableTorchFunction(), *contexts):
                stack.enter_context(c)
            out = func(*[convert(a) for a in args], **{k: convert(v) for k, v in kwargs.items()})
        return _dtypes(out)
    except Exception:  # noqa: BLE001 - any failure only means this run cannot tell
        return _UNKNOWN
