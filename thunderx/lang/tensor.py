"""Tensor methods and properties that are static under tracing or change dtype/device, plus
creation functions that take a traced tensor (`zeros_like`, `new_zeros`, ...)."""

from __future__ import annotations

import torch

from thunderx.core import Tracer
from thunderx.errors import ShapeError, concretization, unsupported, user_frame
from thunderx.lang._base import (
    aval,
    canon_dim,
    convert,
    dtype,
    known_value,
    ndim,
    register,
    shape,
)
from thunderx.lang.assertions import is_skipped_check
from thunderx.primitives import creation as C
from thunderx.primitives import higher_order as H


def _parse_to(args, kwargs):
    dt = kwargs.get("dtype")
    dev = kwargs.get("device")
    for a in args:
        if isinstance(a, torch.dtype):
            dt = a
        elif isinstance(a, (torch.device, str)):
            dev = torch.device(a)
        elif hasattr(a, "aval") or isinstance(a, torch.Tensor):
            dt = dtype(a)
            dev = aval(a).device
    return dt, dev


@register(methods=("to",))
def _to(x, *args, **kwargs):
    dt, dev = _parse_to(args, kwargs)
    if dev is not None and torch.device(dev) != aval(x).device:
        raise unsupported("Tensor.to(device) on a traced value", "move inputs before the transform")
    return convert(x, dt) if dt is not None else x


@register(methods=("type",))
def _type(x, dtype_=None, **kw):
    if dtype_ is None:
        raise unsupported("Tensor.type() without a dtype")
    return convert(x, dtype_)


for _name, _dt in (
    ("float", torch.float32),
    ("double", torch.float64),
    ("half", torch.float16),
    ("bfloat16", torch.bfloat16),
    ("long", torch.int64),
    ("int", torch.int32),
    ("bool", torch.bool),
    ("short", torch.int16),
    ("byte", torch.uint8),
    ("char", torch.int8),
    ("cfloat", torch.complex64),
    ("cdouble", torch.complex128),
    ("chalf", torch.complex32),
):
    register(methods=(_name,))((lambda dt: lambda x, memory_format=None: convert(x, dt))(_dt))


@register(torch.is_signed, methods=("is_signed",))
def _is_signed(x):
    return dtype(x).is_signed


@register(methods=("type_as",))
def _type_as(x, other):
    return convert(x, dtype(other))


@register(methods=("contiguous",))
def _contiguous(x, memory_format=None):
    return x


@register(torch.clone, methods=("clone",))
def _clone(x, memory_format=None):
    # a new value equal to x: mutating the clone leaves x (an input, a view) alone, and a clone
    # returned by jit is not the caller's tensor (the optimizer keeps only such copies)
    return H.copy(x) if isinstance(x, Tracer) else x.clone()


@register(torch.detach, methods=("detach",))
def _detach(x):
    return H.stop_gradient(x)


@register(methods=("detach_",))
def _detach_(x):
    # torch: x itself leaves the autograd graph (later uses carry no derivative); a view
    # cannot (torch refuses it too)
    from thunderx.lang.views import assign, view_of

    va = view_of(x) if isinstance(x, Tracer) else None
    if va is not None and va.chain:
        raise RuntimeError(f"Can't detach views in-place. Use detach() instead (at {user_frame()})")
    if isinstance(x, Tracer):
        assign(x, H.stop_gradient(x))
    return x


@register(methods=("requires_grad_",))
def _requires_grad_(x, requires_grad=True):
    from thunderx.lang.autograd_grad import requires_grad_

    return requires_grad_(x, requires_grad)


@register(methods=("cpu", "cuda"))
def _cpu(x, *a, **k):
    return x


@register(methods=("size",))
def _size(x, dim=None):
    s = torch.Size(shape(x))
    return s if dim is None else s[canon_dim(dim, len(s))]


@register(methods=("dim", "ndimension"))
def _dim(x):
    return ndim(x)


@register(torch.numel, methods=("numel", "nelement"))
def _numel(x):
    n = 1
    for s in shape(x):
        n *= s
    return n


@register(torch.is_floating_point, methods=("is_floating_point",))
def _is_floating_point(x):
    return dtype(x).is_floating_point


@register(torch.is_complex, methods=("is_complex",))
def _is_complex(x):
    return dtype(x).is_complex


@register(methods=("element_size",))
def _element_size(x):
    return torch.empty((), dtype=dtype(x)).element_size()


def _concrete(method, what):
    def impl(x, *a, **k):
        value = known_value(x)
        if value is None:
            if method in ("__bool__", "item") and is_skipped_check(x):
                return True  # an assertion on values unknown while tracing (lang/assertions.py)
            raise concretization(what, aval(x))
        return getattr(value, method)(*a, **k)

    return impl


for _m, _what in (
    ("item", ".item()"),
    ("tolist", ".tolist()"),
    ("numpy", ".numpy()"),
    ("__bool__", "bool()"),
    ("__int__", "int()"),
    ("__float__", "float()"),
    ("__index__", "use as an index"),
    ("__array__", "numpy conversion"),
):
    register(methods=(_m,))(_concrete(_m, _what))


def _integer_data_dependent(fn):
    """Integer outputs of a data-dependent shape: computed from the value where the transform
    knows it (reverse mode on concrete values); no derivative flows through indices."""

    def impl(x, *a, **k):
        value = known_value(x)
        if value is None:
            raise concretization(f"{fn.__name__} (a data-dependent output shape)", aval(x))
        return fn(value, *a, **k)

    return impl


register(torch.nonzero, methods=("nonzero",))(_integer_data_dependent(torch.nonzero))
register(torch.argwhere, methods=("argwhere",))(_integer_data_dependent(torch.argwhere))


@register(torch.masked_select, methods=("masked_select",))
def _masked_select(x, mask):
    """Boolean indexing of the broadcast operands: differentiable in x, with the mask's value
    needed (concrete, or known to the transform) as it fixes the output's shape."""
    shp = torch.broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    return x.expand(shp).reshape(-1)[mask.expand(shp).reshape(-1)]


@register(torch.unique, methods=("unique",))
def _unique(x, *a, **k):
    """torch.unique on the value where the transform knows it. Its derivative is not defined
    (torch raises when differentiating it), so a differentiated input is refused rather than
    given a silently constant result; `x.detach().unique()` is the way to use it there."""
    from thunderx.ad_util import Zero
    from thunderx.transforms.jvp import JVPTracer

    value = known_value(x)
    if value is None:
        raise concretization("unique (a data-dependent output shape)", aval(x))
    v = x
    while isinstance(v, JVPTracer):
        if type(v.tangent) is not Zero and (value.is_floating_point() or value.is_complex()):
            raise NotImplementedError(
                "the derivative of torch.unique is not defined (torch raises too): use "
                "x.detach().unique() where its values are only counted or compared"
            )
        v = v.primal
    return torch.unique(value, *a, **k)


# ------------------------------------------------------------------------------------ creation


def _at_level(fn):
    """A tensor created from a traced one lives at that value's transform level (as in
    torch.func), so an in-place update of it with traced values can be functionalized."""

    def created(x, *args, **kwargs):
        out = fn(x, *args, **kwargs)
        if isinstance(x, Tracer) and not (isinstance(out, Tracer) and _above(out._trace, x._trace)):
            return x._trace.lift_created(out)
        return out

    created.__name__ = fn.__name__
    return created


def _above(trace, level) -> bool:
    """Whether `trace` is `level` or a trace nested inside it: a value made there (`ones_like` of
    a closed-over outer value inside an inner jit) is already at least at that level."""
    while trace is not None:
        if trace is level:
            return True
        trace = trace.parent
    return False


def _like_dtype(x, dt):
    return dt if dt is not None else dtype(x)


@register(torch.zeros_like)
@_at_level
def _zeros_like(
    x, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None
):
    return C.full(shape(x), 0, _like_dtype(x, dtype), device or aval(x).device)


@register(torch.ones_like)
@_at_level
def _ones_like(x, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    return C.full(shape(x), 1, _like_dtype(x, dtype), device or aval(x).device)


@register(torch.empty_like)
@_at_level
def _empty_like(
    x, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None
):
    return _zeros_like(x, dtype=dtype, device=device)


@register(torch.full_like)
@_at_level
def _full_like(
    x, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None
):
    return C.full(shape(x), fill_value, _like_dtype(x, dtype), device or aval(x).device)


def _size_arg(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        return tuple(size[0])
    return tuple(size)


@register(methods=("new_zeros",))
@_at_level
def _new_zeros(
    x, *size, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False
):
    return C.full(_size_arg(size), 0, _like_dtype(x, dtype), device or aval(x).device)


@register(methods=("new_ones",))
@_at_level
def _new_ones(
    x, *size, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False
):
    return C.full(_size_arg(size), 1, _like_dtype(x, dtype), device or aval(x).device)


@register(methods=("new_empty",))
@_at_level
def _new_empty(
    x, *size, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False
):
    return _new_zeros(x, *size, dtype=dtype, device=device)


@register(methods=("new_empty_strided",))
@_at_level
def _new_empty_strided(
    x, size, stride, *, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False
):
    """Uninitialized values, so only the shape is observable; a traced value has no memory
    layout (its stride() answers as for a contiguous tensor), so `stride` is checked only."""
    if len(stride) != len(size):
        raise ShapeError(
            f"Tensor.new_empty_strided: mismatch in length of strides and shape ({len(stride)} "
            f"strides for size {tuple(size)}) (at {user_frame()})"
        )
    return _new_zeros(x, *size, dtype=dtype, device=device)


@register(methods=("new_full",))
@_at_level
def _new_full(
    x,
    size,
    fill_value,
    *,
    dtype=None,
    device=None,
    requires_grad=False,
    layout=None,
    pin_memory=False,
):
    return C.full(tuple(size), fill_value, _like_dtype(x, dtype), device or aval(x).device)


@register(methods=("new_tensor",))
def _new_tensor(x, data, *, dtype=None, device=None, requires_grad=False):
    return torch.tensor(data, dtype=_like_dtype(x, dtype), device=device or aval(x).device)
