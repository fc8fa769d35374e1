"""The table from torch callables to decompositions, and helpers the decompositions share:
torch's broadcasting and type promotion made explicit before any primitive is bound."""

from __future__ import annotations

import functools
from typing import Callable

import torch

from thunderx.avals import ShapedArray, category, is_float, result_dtype
from thunderx.core import Tracer, get_aval
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U

# torch callable (function, builtin, or Tensor method/operator) -> decomposition
torch_table: dict[Callable, Callable] = {}
# Tensor method name -> decomposition, installed on Tracer
method_table: dict[str, Callable] = {}

SCALARS = (bool, int, float, complex)


def register(*fns, methods: tuple = ()):
    """Map torch callables (and Tensor method names) to the decorated decomposition; a None
    callable (an `optional` one this torch lacks) is skipped."""

    def deco(impl):
        for f in fns:
            if f is not None:
                torch_table[f] = impl
        for name in methods:
            method_table[name] = impl
            tensor_method = getattr(torch.Tensor, name, None)
            if tensor_method is not None:
                torch_table[tensor_method] = impl
        return impl

    return deco


def optional(owner, name: str):
    """`owner.name`, or None where this torch has no such function: for torch APIs newer than the
    oldest torch thunderx supports (torch 2.11 has no F.linear_cross_entropy)."""
    return getattr(owner, name, None)


def known_value(x):
    """x's value: x itself when it is not traced, else what the enclosing transform knows of it
    (a concrete tensor under reverse mode on values; None while staging or batching)."""
    return x.to_concrete() if isinstance(x, Tracer) else x


def aval(x) -> ShapedArray:
    return get_aval(x)


def shape(x) -> tuple:
    return tuple(get_aval(x).shape)


def ndim(x) -> int:
    return len(get_aval(x).shape)


def dtype(x) -> torch.dtype:
    return get_aval(x).dtype


def is_tensor(x) -> bool:
    return isinstance(x, (Tracer, torch.Tensor))


def canon_dim(d: int, n: int, what: str = "dim") -> int:
    if not isinstance(d, int):
        raise TypeError(f"{what} must be an int, got {d!r}")
    m = max(n, 1)
    if not -m <= d < m:
        raise IndexError(f"{what} {d} is out of range for a tensor of rank {n}")
    return d % m if n > 0 else 0


def canon_dims(dim, n: int) -> tuple:
    """None -> all dims; int or sequence -> sorted, non-negative. A rank-0 tensor accepts dim 0
    or -1 (as torch does) and has nothing to reduce."""
    if dim is None:
        return tuple(range(n))
    if isinstance(dim, int):
        dim = (dim,)
    dims = tuple(sorted({canon_dim(d, n) for d in dim}))
    return () if n == 0 else dims


def torch_dtype_name(dt: torch.dtype) -> str:
    """torch's spelling of a dtype in its own error messages: Float, Long, ComplexDouble."""
    return torch.empty((), dtype=dt, device="meta").type().split(".")[-1].replace("Tensor", "")


def convert(x, new_dtype: torch.dtype):
    if type(x) in SCALARS:
        if new_dtype is torch.bool:
            return bool(x)
        if new_dtype.is_complex:
            return complex(x)
        if isinstance(x, complex):  # promotion never narrows a complex scalar
            raise TypeError(f"a complex scalar {x!r} cannot be cast to {new_dtype}")
        return float(x) if is_float(new_dtype) else int(x)
    if dtype(x) == new_dtype:
        return x
    return U.convert(x, new_dtype)


HALF_FLOATS = (torch.float16, torch.bfloat16)


def in_opmath(fn: Callable | None = None, *, cpu_only: bool = False) -> Callable:
    """`fn` computed as torch's kernel computes it for float16 and bfloat16 operands: in
    float32 (their opmath type), rounded once to the operands' dtype at the end. A
    decomposition into primitives would otherwise round every step to the half type (var in
    bfloat16 was 20x torch's error, sinc 3x). Where the floating tensor operands are not all
    of one half dtype, or a `dtype` keyword is given, torch's promotion decides and `fn` runs as
    it is. `cpu_only`: products (addmm) keep their half operands on an accelerator, whose half
    GEMM accumulates in float32 itself, many times faster than a float32 one."""
    if fn is None:
        return lambda f: in_opmath(f, cpu_only=cpu_only)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        tensors = [a for a in args if is_tensor(a)]
        floats = {dtype(a) for a in tensors if is_float(dtype(a))}
        if len(floats) != 1 or not floats <= set(HALF_FLOATS) or kwargs.get("dtype"):
            return fn(*args, **kwargs)
        if cpu_only and any(aval(a).device.type != "cpu" for a in tensors):
            return fn(*args, **kwargs)
        (half,) = floats
        up = [convert(a, torch.float32) if is_tensor(a) and dtype(a) == half else a for a in args]
        out = fn(*up, **kwargs)

        def down(v):
            return convert(v, half) if is_tensor(v) and dtype(v) == torch.float32 else v

        if not isinstance(out, tuple):
            return down(out)
        vals = [down(v) for v in out]
        return type(out)(*vals) if hasattr(out, "_fields") else type(out)(vals)

    return wrapped


def broadcast_shapes(*shapes) -> tuple:
    ndim_ = max((len(s) for s in shapes), default=0)
    out = [1] * ndim_
    for s in shapes:
        for i, d in enumerate(s):
            j = ndim_ - len(s) + i
            if out[j] == 1:
                out[j] = d
            elif d != 1 and d != out[j]:
                raise ValueError(
                    f"shapes {', '.join(str(tuple(x)) for x in shapes)} are not broadcastable"
                )
    return tuple(out)


def broadcast_to(x, shp):
    if type(x) in SCALARS:
        return x
    return S.broadcast_to(x, tuple(shp))


def one_device(xs) -> list:
    """torch's device rule for operands of one op: a 0-dim CPU tensor meeting tensors on another
    device moves there (explicitly, by device_put); any other mix of devices is an error."""
    devices = {aval(x).device for x in xs if type(x) not in SCALARS}
    if len(devices) < 2:
        return list(xs)
    others = {d for d in devices if d.type != "cpu"}
    if len(others) == 1:
        (target,) = others
        if all(type(x) in SCALARS or aval(x).device == target or not shape(x) for x in xs):
            return [
                x if type(x) in SCALARS or aval(x).device == target else U.device_put(x, target)
                for x in xs
            ]
    found = ", ".join(sorted(str(d) for d in devices))
    raise RuntimeError(
        f"expected all tensors to be on the same device (a 0-dim CPU tensor may join tensors on "
        f"another device), but found {found}"
    )


def promote(*xs, to_float: bool = False):
    """Apply torch's type promotion and broadcasting; Python scalars stay scalars (literals)."""
    xs = one_device(xs)
    avals = [aval(x) for x in xs]
    dt = result_dtype(*avals)
    if to_float and not is_float(dt):
        dt = torch.get_default_dtype()
    shp = broadcast_shapes(*[a.shape for a in avals if not a.weak_type])
    out = []
    for x in xs:
        x = convert(x, dt)
        if type(x) not in SCALARS and shape(x) != shp:
            x = broadcast_to(x, shp)
        out.append(x)
    return out, dt


def float_operand(x):
    """Unary math on an integer tensor computes in the default float dtype (torch's rule)."""
    if type(x) in SCALARS:
        x = torch.tensor(x)
    dt = dtype(x)
    if not is_float(dt):
        return U.convert(x, torch.get_default_dtype())
    return x


def full_like(x, value, dt=None):
    a = aval(x)
    return C.full(a.shape, value, dt or a.dtype, a.device)


def binary(fn, x, y, to_float=False):
    if type(x) in SCALARS and type(y) in SCALARS:
        x = torch.tensor(x)
    (x, y), _ = promote(x, y, to_float=to_float)
    return fn(x, y)


def compare(fn, x, y):
    if type(x) in SCALARS and type(y) in SCALARS:
        x = torch.tensor(x)
    x, y = one_device((x, y))
    avals = [aval(x), aval(y)]
    dt = result_dtype(*avals)
    if category(dt) == 0:
        # comparisons of bools compare as integers
        dt = torch.int64 if any(category(a.dtype) == 0 for a in avals) else dt
    shp = broadcast_shapes(*[a.shape for a in avals if not a.weak_type])
    ops = []
    for v in (x, y):
        v = convert(v, dt)
        if type(v) not in SCALARS and shape(v) != shp:
            v = broadcast_to(v, shp)
        ops.append(v)
    return fn(*ops)


def keepdims(x, dims, keepdim: bool):
    return S.expand_dims(x, dims) if keepdim and dims else x


def where(c, x, y):
    """torch.where with broadcasting and promotion of the branches."""
    c, x, y = one_device((c, x, y))
    (x, y), _ = promote(x, y)
    shp = broadcast_shapes(shape(c), *[shape(v) for v in (x, y) if type(v) not in SCALARS])
    c = broadcast_to(c, shp)
    x = x if type(x) in SCALARS else broadcast_to(x, shp)
    y = y if type(y) in SCALARS else broadcast_to(y, shp)
    if type(x) in SCALARS and type(y) in SCALARS:
        x = C.full(shp, x, result_dtype(aval(x), aval(y)))
    return U.select(c, x, y)


def isnan(x):
    return B.ne(x, x)


def mul(x, y):
    return binary(B.mul, x, y)


def add(x, y):
    return binary(B.add, x, y)


def sub(x, y):
    return binary(B.sub, x, y)


def div(x, y):
    return binary(B.div, x, y, to_float=True)
