"""A recorded FusionDefinition program: built by calling primitives' nvFuser rules on a recorder
that mimics `fd`, then printed as nvFuser Python, replayed into a real FusionDefinition, or run
by the reference interpreter (torch ops with nvFuser's semantics) on any device."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunderx.core import nvfuser_rules
from thunderx.ir import Literal, Var

_DTYPE_NAMES = {
    torch.float32: "Float",
    torch.float64: "Double",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.int64: "Int",
    torch.int32: "Int32",
    torch.bool: "Bool",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}


class DType:
    """A dtype inside a recording; prints as `DataType.<Name>`."""

    __slots__ = ("torch_dtype",)

    def __init__(self, torch_dtype):
        self.torch_dtype = torch_dtype

    def __repr__(self) -> str:
        return f"DataType.{_DTYPE_NAMES[self.torch_dtype]}"


class Value:
    """A tensor or scalar defined in the recording."""

    __slots__ = ("index", "kind")

    def __init__(self, index: int, kind: str):
        self.index = index
        self.kind = kind

    def __repr__(self) -> str:
        return f"{'T' if self.kind == 'tensor' else 'S'}{self.index}"


class _Ops:
    def __init__(self, rec):
        self._rec = rec

    def __getattr__(self, name):
        def op(*args, **kwargs):
            return self._rec._emit(name, args, kwargs)

        return op


class Recorder:
    """Stands in for `fd` while the nvFuser rules run."""

    def __init__(self):
        self.steps: list[tuple] = []  # (kind, name, args, kwargs, out)
        self.count = 0
        self.ops = _Ops(self)
        self.out_avals: list = []

    def _new(self, kind="tensor") -> Value:
        v = Value(self.count, kind)
        self.count += 1
        return v

    def _emit(self, name, args, kwargs):
        out = self._new()
        self.steps.append(("op", name, args, kwargs, out))
        return out

    def define_tensor(self, **kwargs) -> Value:
        out = self._new()
        self.steps.append(("define_tensor", "define_tensor", (), kwargs, out))
        return out

    def define_scalar(self, value, dtype=None) -> Value:
        out = self._new("scalar")
        self.steps.append(("define_scalar", "define_scalar", (value,), {"dtype": dtype}, out))
        return out

    def add_output(self, v: Value) -> None:
        self.steps.append(("add_output", "add_output", (v,), {}, None))

    @staticmethod
    def dtype_of(torch_dtype) -> DType:
        return DType(torch_dtype)


def _scalar_dtype(value, like_dtype):
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int) and not like_dtype.is_floating_point:
        return torch.int64
    return torch.float64


class FusionRecord:
    def __init__(self, name, steps, inputs, n_outputs):
        self.name = name
        self.steps = steps
        self.inputs = inputs  # (Value, aval) per region input, in order
        self.n_outputs = n_outputs

    # -- printing
    def as_python(self) -> str:
        lines = [f"def {self.name}(fd: FusionDefinition) -> None:"]
        for kind, name, args, kwargs, out in self.steps:
            a = [_fmt(x) for x in args] + [f"{k}={_fmt(v)}" for k, v in kwargs.items()]
            call = (
                f"fd.{name}({', '.join(a)})" if kind != "op" else f"fd.ops.{name}({', '.join(a)})"
            )
            lines.append(f"    {out!r} = {call}" if out is not None else f"    {call}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.as_python()

    # -- reference interpreter
    def interpret(self, ins):
        env: dict[int, object] = {}
        inputs = iter(ins)
        outs = []
        for kind, name, args, kwargs, out in self.steps:
            if kind == "define_tensor":
                env[out.index] = next(inputs)
            elif kind == "define_scalar":
                env[out.index] = args[0]
            elif kind == "add_output":
                outs.append(env[args[0].index])
            else:
                fn = REFERENCE_OPS.get(name)
                if fn is None:
                    raise NotImplementedError(f"reference interpreter: fd.ops.{name}")
                env[out.index] = fn(
                    *[_val(a, env) for a in args], **{k: _val(v, env) for k, v in kwargs.items()}
                )
        return outs

    # -- real nvFuser
    def to_nvfuser(self, module, ins):
        FusionDefinition, DataType = module.FusionDefinition, module.DataType
        env: dict[int, object] = {}
        inputs = iter(ins)
        with FusionDefinition() as fd:
            for kind, name, args, kwargs, out in self.steps:
                if kind == "define_tensor":
                    x = next(inputs)
                    kw = dict(kwargs)
                    kw["dtype"] = getattr(DataType, _DTYPE_NAMES[x.dtype])
                    kw["contiguity"], kw["stride_order"] = _contiguity(x)
                    env[out.index] = fd.define_tensor(**kw)
                elif kind == "define_scalar":
                    dt = kwargs.get("dtype")
                    dt = getattr(DataType, _DTYPE_NAMES[dt.torch_dtype]) if dt is not None else None
                    env[out.index] = fd.define_scalar(args[0], dtype=dt)
                elif kind == "add_output":
                    fd.add_output(env[args[0].index])
                else:
                    conv = lambda v: _nvf_val(v, env, DataType)  # noqa: E731
                    env[out.index] = getattr(fd.ops, name)(
                        *[conv(a) for a in args], **{k: conv(v) for k, v in kwargs.items()}
                    )
        return fd


def _contiguity(x):
    """nvFuser's contiguity flags and stride order for a torch tensor."""
    n = x.dim()
    order = sorted(range(n), key=lambda d: (-x.stride(d), -d))
    stride_order = [0] * n
    for rank, d in enumerate(order):
        stride_order[d] = n - 1 - rank
    contiguity = []
    expected = 1
    for d in reversed(order):
        if x.size(d) == 1:
            contiguity.append((d, None))
            continue
        contiguity.append((d, x.stride(d) == expected))
        expected = x.stride(d) * x.size(d)
    flags = [None] * n
    for d, c in contiguity:
        flags[d] = c
    return flags, stride_order


def _fmt(x) -> str:
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    return repr(x)


def _val(x, env):
    if isinstance(x, Value):
        return env[x.index]
    if isinstance(x, (list, tuple)):
        return type(x)(_val(v, env) for v in x)
    if isinstance(x, DType):
        return x.torch_dtype
    return x


def _nvf_val(x, env, DataType):
    if isinstance(x, Value):
        return env[x.index]
    if isinstance(x, (list, tuple)):
        return type(x)(_nvf_val(v, env, DataType) for v in x)
    if isinstance(x, DType):
        return getattr(DataType, _DTYPE_NAMES[x.torch_dtype])
    return x


def record_region(eqns, inputs, outputs, name="fusion") -> FusionRecord:
    """Run each equation's nvFuser rule on a recorder: define inputs, translate, add outputs."""
    rec = Recorder()
    env: dict[int, Value] = {}
    in_info = []
    for v in inputs:
        shape = [1 if s == 1 else -1 for s in v.aval.shape]
        n = len(shape)
        t = rec.define_tensor(
            shape=shape,
            contiguity=[None if s == 1 else True for s in v.aval.shape],
            dtype=DType(v.aval.dtype),
            is_cpu=False,
            stride_order=list(range(n - 1, -1, -1)),
        )
        env[id(v)] = t
        in_info.append((t, v.aval))
    for e in eqns:
        args = []
        for x in e.inputs:
            if isinstance(x, Literal):
                like = next((y.aval.dtype for y in e.inputs if isinstance(y, Var)), torch.float32)
                args.append(rec.define_scalar(x.val, DType(_scalar_dtype(x.val, like))))
            else:
                args.append(env[id(x)])
        rec.out_avals = [v.aval for v in e.outputs]
        out = nvfuser_rules[e.prim](rec, *args, **e.params)
        outs = out if e.prim.multiple_results else [out]
        for v, o in zip(e.outputs, outs):
            env[id(v)] = o
    for v in outputs:
        rec.add_output(env[id(v)])
    return FusionRecord(name, rec.steps, in_info, len(outputs))


# --------------------------------------------------------------------- reference interpreter


def _prod(x, dims):
    for d in sorted(dims, reverse=True):
        x = torch.prod(x, d)
    return x


def _bid(x, shape, broadcast_dims):
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dims):
        view[d] = x.shape[i]
    return x.reshape(view).expand(list(shape))


def _binary(fn):
    # A scalar operand takes the tensor's dtype, as nvFuser's scalars do.
    def op(a, b):
        if not isinstance(a, torch.Tensor):
            a = torch.tensor(a, dtype=b.dtype, device=b.device)
        if not isinstance(b, torch.Tensor):
            b = torch.tensor(b, dtype=a.dtype, device=a.device)
        return fn(a, b)

    return op


REFERENCE_OPS = {
    "add": _binary(torch.add),
    "sub": _binary(torch.sub),
    "mul": _binary(torch.mul),
    "div": _binary(
        lambda a, b: a / b if a.dtype.is_floating_point else torch.div(a, b, rounding_mode="trunc")
    ),
    "pow": _binary(torch.pow),
    "maximum": _binary(torch.maximum),
    "minimum": _binary(torch.minimum),
    "atan2": _binary(torch.atan2),
    "nextafter": _binary(torch.nextafter),
    "fmod": _binary(torch.fmod),
    "remainder": _binary(torch.remainder),
    "eq": _binary(torch.eq),
    "ne": _binary(torch.ne),
    "lt": _binary(torch.lt),
    "le": _binary(torch.le),
    "gt": _binary(torch.gt),
    "ge": _binary(torch.ge),
    "logical_and": _binary(torch.logical_and),
    "logical_or": _binary(torch.logical_or),
    "bitwise_and": _binary(torch.bitwise_and),
    "bitwise_or": _binary(torch.bitwise_or),
    "bitwise_xor": _binary(torch.bitwise_xor),
    "bitwise_left_shift": _binary(torch.bitwise_left_shift),
    "bitwise_right_shift": _binary(torch.bitwise_right_shift),
    "bitwise_not": torch.bitwise_not,
    "where": lambda p, a, b: torch.where(p, a, b),
    "real": torch.real,
    "cast": lambda x, dtype: x.to(dtype),
    "sum": lambda x, dims, keepdim=False, dtype=None: torch.sum(x, tuple(dims), keepdim),
    "max": lambda x, dims, keepdim=False, dtype=None: torch.amax(x, tuple(dims), keepdim),
    "min": lambda x, dims, keepdim=False, dtype=None: torch.amin(x, tuple(dims), keepdim),
    "prod": lambda x, dims, keepdim=False, dtype=None: _prod(x, dims),
    "broadcast_in_dim": lambda x, shape, broadcast_dims: _bid(x, shape, broadcast_dims),
    "reshape": lambda x, new_shape: x.reshape(list(new_shape)),
    "permute": lambda x, dims: x.permute(list(dims)),
    "squeeze": lambda x, dims: x.squeeze(tuple(dims)),
    "slice": lambda x, start_indices, end_indices, strides: x[
        tuple(slice(s, e, st) for s, e, st in zip(start_indices, end_indices, strides))
    ],
    "cat": lambda xs, dim: torch.cat(list(xs), dim),
    "pad": lambda x, pad_widths, value: F.pad(x, list(pad_widths), value=value),
    "full": lambda shape, fill_value, dtype: torch.full(list(shape), fill_value, dtype=dtype),
    "sigmoid": torch.sigmoid,
}
for _name in (
    "neg",
    "abs",
    "sign",
    "exp",
    "expm1",
    "log",
    "log1p",
    "log2",
    "log10",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "sinh",
    "cosh",
    "tanh",
    "asin",
    "acos",
    "atan",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "erfc",
    "erfinv",
    "lgamma",
    "floor",
    "ceil",
    "round",
    "trunc",
    "logical_not",
    "isfinite",
):
    REFERENCE_OPS[_name] = getattr(torch, _name)
