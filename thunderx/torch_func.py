"""torch.func's transforms called inside thunderx's: run as thunderx's own (`thunderx.func`, which
keeps torch.func's contract), so code that uses torch.func internally (a loss built on
`torch.func.jacrev`, per-example gradients written with `torch.func.vmap(torch.func.grad(...))`)
can itself be transformed, staged by `jit` and lowered.

torch.func's transforms run on functorch's wrapped tensors and refuse anything else ("Thing
passed to transform API must be Tensor"), so a traced value reaching one raised deep inside
torch. The public functions (`torch.func.grad`, `vmap`, `vjp`, `jvp`, `jacrev`, `jacfwd`,
`hessian`, `grad_and_value`) are bound by the user's imports, so they cannot be replaced; what
they call when they run can: their implementations look up `grad_and_value_impl`,
`_vjp_with_argnums`, `_jvp_with_argnums` (torch._functorch.eager_transforms) and `vmap_impl`
(torch._functorch.apis) as module globals at call time, as `torch.func.functional_call` does
`torch.nn.utils.stateless._functional_call`. Those five are replaced while a thunderx
transform runs (`patch_during_transforms`) and, in a thread inside one, run thunderx's transform;
`jacrev`, `jacfwd` and `hessian` are torch's own compositions of vjp / jvp and vmap, so they follow.
Elsewhere (another thread, or no thunderx transform on this one) torch's own runs unchanged.

`functional_call` runs as `thunderx.functional_call` (torch's swap of module attributes refuses
traced values). For the same reason torch's `set_tensor` and `swap_tensor`
(torch.nn.utils._named_member_accessor, what `make_functional` and `NamedMemberAccessor` call to
put a model's weights in place) set a traced value themselves while a transform runs: into the
module's parameter or buffer table where the name is one, else as an attribute.

`torch.func.linearize` calls no such entry point (it traces with make_fx and
forward-mode dual tensors), and the function object is what users' imports bind, so while a
thunderx transform runs its code is swapped for an entry that routes the same way (the function
object, its name and signature stay torch's; torch's code is put back when the transform ends)."""

from __future__ import annotations

import functools
import types

import torch

from thunderx.core import Tracer, is_top_level
from thunderx.lang.patching import patch_during_transforms


def _index(argnums, n: int) -> tuple[int, ...]:
    idx = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    return tuple(i % n if -n <= i < n else i for i in idx)


def _with(primals: tuple, idx: tuple, values) -> list:
    args = list(primals)
    for i, v in zip(idx, values):
        args[i] = v
    return args


def _grad_and_value(func, argnums, has_aux, args, kwargs):
    from thunderx import func as txf

    return txf.grad_and_value(func, argnums, has_aux)(*args, **kwargs)


def _vmap(func, in_dims, out_dims, randomness, chunk_size, *args, **kwargs):
    from thunderx import func as txf

    return txf.vmap(func, in_dims, out_dims, randomness, chunk_size=chunk_size)(*args, **kwargs)


def _vjp_with_argnums(func, *primals, argnums=None, has_aux=False):
    from thunderx import func as txf

    if argnums is None:  # torch.func.vjp
        return txf.vjp(func, *primals, has_aux=has_aux)
    # jacrev: the cotangents of the argnums inputs only, one value for an int argnums
    idx = _index(argnums, len(primals))
    res = txf.vjp(
        lambda *d: func(*_with(primals, idx, d)), *[primals[i] for i in idx], has_aux=has_aux
    )

    @functools.wraps(res[1])
    def vjp_fn(cotangents, *rest, **kw):
        cts = res[1](cotangents, *rest, **kw)
        return cts[0] if isinstance(argnums, int) else cts

    return (res[0], vjp_fn, *res[2:])


def _jvp_with_argnums(func, primals, tangents, argnums, *, strict=False, has_aux):
    from thunderx import func as txf

    if argnums is None or not isinstance(primals, tuple):  # torch.func.jvp (or its error)
        return txf.jvp(func, primals, tangents, strict=strict, has_aux=has_aux)
    # jacfwd: tangents for the argnums inputs, as a tuple
    idx = _index(argnums, len(primals))
    return txf.jvp(
        lambda *d: func(*_with(primals, idx, d)),
        tuple(primals[i] for i in idx),
        tangents,
        strict=strict,
        has_aux=has_aux,
    )


def _functional_call(module, parameters_and_buffers, args=None, kwargs=None, **options):
    from thunderx.api import functional_call

    return functional_call(module, parameters_and_buffers, args, kwargs, **options)


def _check_member(module, name: str) -> None:
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{module} is not an instance of torch.nn.Module")
    if not name or "." in name:
        raise KeyError(f"{name!r} is not the name of one member of a module")


def _put_member(module, name: str, value, missing) -> None:
    """Set (or, for the `missing` sentinel, delete) the module's member `name`."""
    for table in (module._parameters, module._buffers):
        if name in table:
            if value is missing:
                del table[name]
            else:
                table[name] = value
            return
    if value is not missing:
        setattr(module, name, value)
    elif hasattr(module, name):
        delattr(module, name)


def _member_setter(torch_impl, missing, swap: bool):
    """torch's `set_tensor` (`swap`: `swap_tensor`, which returns the member it replaced), with
    traced values allowed: torch's own runs when neither the new value nor the one replaced is
    traced."""

    @functools.wraps(torch_impl)
    def impl(module, name, tensor, allow_missing=False):
        args = (allow_missing,) if swap else ()
        old = missing
        if isinstance(module, torch.nn.Module) and name:
            tables = (module._parameters, module._buffers)
            held = next((t[name] for t in tables if name in t), missing)
            old = held if held is not missing else getattr(module, name, missing)
        if not (isinstance(tensor, Tracer) or (swap and isinstance(old, Tracer))):
            return torch_impl(module, name, tensor, *args)
        _check_member(module, name)
        if old is missing and swap and not allow_missing:
            raise AttributeError(f"{type(module).__name__} has no attribute `{name}`")
        _put_member(module, name, tensor, missing)
        return old if swap else None

    return impl


def _linearize(func, *primals):
    from thunderx import func as txf

    return txf.linearize(func, *primals)


_linearize_routed = None  # _routed(_linearize, torch's linearize), set by install()


def _linearize_entry(func, *primals):
    # the code torch.func.linearize runs during transforms, with torch's module globals: it
    # imports what it calls
    from thunderx.torch_func import _linearize_routed

    return _linearize_routed(func, *primals)


def _routed(ours, torch_impl):
    """torch's implementation where no thunderx transform runs on this thread, else ours (same
    signature)."""

    @functools.wraps(torch_impl)
    def impl(*args, **kwargs):
        return (torch_impl if is_top_level() else ours)(*args, **kwargs)

    return impl


def install() -> None:
    """Patch torch.func's call-time entry points, where this torch has them (private names:
    a torch without one keeps its own behaviour for that transform)."""
    try:
        from torch._functorch import apis, eager_transforms
        from torch.nn.utils import _named_member_accessor as accessor
        from torch.nn.utils import stateless
    except ImportError:  # pragma: no cover - every supported torch has them
        return
    ours = [
        (eager_transforms, "grad_and_value_impl", _grad_and_value),
        (eager_transforms, "_vjp_with_argnums", _vjp_with_argnums),
        (eager_transforms, "_jvp_with_argnums", _jvp_with_argnums),
        (apis, "vmap_impl", _vmap),
        (stateless, "_functional_call", _functional_call),
    ]
    patches = [
        (owner, name, _routed(f, vars(owner)[name]))
        for owner, name, f in ours
        if name in vars(owner)
    ]
    lin = vars(eager_transforms).get("linearize")
    if isinstance(lin, types.FunctionType) and not lin.__code__.co_freevars:
        global _linearize_routed
        torchs = types.FunctionType(lin.__code__, lin.__globals__, lin.__name__, lin.__defaults__)
        torchs.__kwdefaults__ = lin.__kwdefaults__
        _linearize_routed = _routed(_linearize, torchs)
        patches.append((lin, "__code__", _linearize_entry.__code__))
    missing = getattr(accessor, "_MISSING", object())
    for name, swap in (("set_tensor", False), ("swap_tensor", True)):
        if name in vars(accessor):
            patches.append((accessor, name, _member_setter(vars(accessor)[name], missing, swap)))
    patch_during_transforms(patches)
