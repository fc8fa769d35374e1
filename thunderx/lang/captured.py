"""In-place writes to captured tensors (module buffers, closed-over tensors) under a transform.

Where the transforms run on values (grad, vjp, jvp, vmap of unbatched values) the write happens
now, on the known value, as torch.func does. Under `jit` (and `make_jaxpr`) it is functionalized,
as torch.compile and Thunder do: the staging trace records the tensor's new value (later reads
of the tensor in the traced function see it) and the staged program returns it as an extra
output, which the compiled callable copies into the tensor after each call (`writes back` in the
printed jaxpr). The tensor itself is one of the program's consts, passed on every call, so each
call reads its current value.

The value written carries no derivative and no batch dimension: a write of a value that depends
on the differentiated inputs (unless computed under `torch.no_grad()` or detached, as torch.func
requires) or of a batched value is an error, as is a write inside a staged body that cannot return
it (lax control flow, custom rules).

Arguments written in place are written back the same way: jit's into the caller's tensors after
each call (torch.compile's input mutation), vmap's batched ones into the caller's batched tensors
when it returns (as torch.func's vmap writes them); grad's and jvp's stay refused (functional).
A traced value read before a write keeps the value it read (`_keep_earlier_reads`)."""

from __future__ import annotations

import threading

import torch

from thunderx.ad_util import Zero
from thunderx.core import Tracer, current_trace
from thunderx.errors import user_frame
from thunderx.lang import unbound
from thunderx.lang.inplace import MutationError
from thunderx.lang.random import RANDOM_FUNCTIONS, RandomnessMode
from thunderx.primitives.higher_order import no_grad_p
from thunderx.tracing import _WRITES, StagingTrace, StagingTracer, written_value


def writeback_trace():
    """The innermost staging trace (partial evaluation's linear jaxprs do not count: values
    written are primal), or None when every enclosing transform runs on values."""
    from thunderx.transforms.partial_eval import PartialEvalTrace

    t = current_trace()
    while t is not None:
        if isinstance(t, StagingTrace) and not isinstance(t, PartialEvalTrace):
            return t
        t = t.parent
    return None


def write_captured(
    target: torch.Tensor,
    value,
    what: str,
    grad_enabled: bool | None = None,
    detached: bool = False,
):
    """`target` (a concrete tensor from outside the transform) takes `value` (its shape and
    dtype): now where values are known, else recorded for write-back after each call. A tensor
    that requires grad keeps its derivative through a write torch's autograd does not see (in
    a `no_grad` block; `detached`: through `.detach()`, as F.embedding's max_norm writes): later
    reads in the trace differentiate to it as before (`lang/views.py` `kept`)."""
    if target.numel() == 0:
        # a write of no elements changes nothing: it needs no batch dimension or derivative
        # (torch.func's vmap accepts it; a zero-element result of constants is one under vmap)
        return
    if grad_enabled is None:
        grad_enabled = torch.is_grad_enabled()
    staging = writeback_trace()
    if staging is not None and not staging.writeback:
        raise MutationError(
            f"{what} writes into a captured tensor at {user_frame()}, inside a staged body "
            "(a lax control-flow body, a custom_jvp/custom_vjp function) that cannot write it "
            "back: update the tensor outside that body, or carry its value through the loop"
        )
    if not grad_enabled and isinstance(value, Tracer):
        # written in a no_grad block: no derivative for reverse-mode levels (forward mode keeps
        # it, as torch's forward AD does, and the write is refused below)
        value = no_grad_p.bind(value)
    value = _value_at(value, staging, what)
    _keep_earlier_reads(target, staging)
    if staging is None:
        if isinstance(value, Tracer):
            value = value.to_concrete()
        with torch.set_grad_enabled(grad_enabled and torch.is_grad_enabled()):
            target.copy_(value)
        return
    read = None
    if target.requires_grad and (detached or not grad_enabled):
        from thunderx.core import set_trace
        from thunderx.lang.views import kept

        with set_trace(staging):
            read = kept(current_value(target, staging), value, forward_sees_write=not detached)
    staging.record_write(target, value, grad_enabled, read)


def input_written(x, value, what: str):
    """An argument of a jit-staged function (`x`) is written in place: the value (as a value of
    x's trace) that x takes, recorded for the copy into the caller's tensor after each call."""
    trace = x._trace
    if not torch.is_grad_enabled() and isinstance(value, Tracer):
        value = no_grad_p.bind(value)
    value = _value_at(value, trace, what)
    trace.written_args[id(x)] = torch.is_grad_enabled()
    return value


def _keep_earlier_reads(target: torch.Tensor, staging) -> None:
    """Traces between the current one and `staging` (partial evaluation's linear jaxpr under
    grad, a loop body) that read `target` as a const evaluate it later: they keep the value
    they read, as a copy (eager) or the value's variable in `staging`."""
    old = None
    t = current_trace()
    while t is not None and t is not staging:
        index = getattr(t, "const_index", None)
        var = None if index is None else index.get(id(target))
        if var is not None:
            if old is None:
                old = target.clone() if staging is None else current_value(target, staging)
            i = next(k for k, v in enumerate(t.constvars) if v is var)
            t.consts[i] = old
            del index[id(target)]  # a read after the write is a new const
        t = t.parent


def _inside(trace, outer) -> bool:
    """Whether `trace` is nested strictly inside `outer` (None: the eager level)."""
    t = trace
    while t is not None:
        if t is outer:
            return t is not trace
        t = t.parent
    return outer is None


def _value_at(value, staging, what: str):
    """value as a value of `staging` (or concrete when None): the transforms nested inside it
    must have nothing of theirs in it (no derivative, no batch dimension)."""
    from thunderx.transforms.jvp import JVPTracer
    from thunderx.transforms.vmap import BatchTracer

    while isinstance(value, Tracer) and _inside(value._trace, staging):
        if isinstance(value, JVPTracer):
            if type(value.tangent) is not Zero:
                raise _needs_derivative(what)
            value = value.primal
        elif isinstance(value, BatchTracer):
            raise MutationError(
                f"{what} writes a batched value (one per vmapped example) into a captured "
                f"tensor at {user_frame()}: the tensor has no batch dimension to hold it. Compute "
                "the update outside vmap, or return the per-example values and reduce them"
                f"{value._trace.foreign_write_hint}"
            )
        else:  # partial evaluation's unknown values come from the tangents
            raise _needs_derivative(what)
    return value


def _needs_derivative(what: str) -> MutationError:
    return MutationError(
        f"{what} would mutate a captured Tensor with a value that depends on the differentiated "
        f"inputs, at {user_frame()}; the write cannot carry a derivative (torch.func refuses it "
        "too): compute the update under torch.no_grad() or from .detach()ed values"
    )


def current_value(target: torch.Tensor, staging: StagingTrace) -> StagingTracer:
    """A fresh tracer of `staging` holding the captured tensor's value now."""
    return StagingTracer(staging, staging.atom(target))


# --------------------------------------------------------- torch calls while a trace stages

# property reads that are values of the tensor (the others, shape, dtype..., are metadata)
_VALUE_PROPERTIES = frozenset({"T", "mT", "H", "mH", "real", "imag"})
# in-place-named methods that change no values
_NOT_WRITES = frozenset({"requires_grad_", "share_memory_", "detach_"})
# methods that read a tensor's metadata or memory, never its values: a written tensor's own
_METADATA = frozenset(
    {"untyped_storage", "data_ptr", "storage_offset", "stride", "is_contiguous", "numel", "dim"}
    | {"size", "element_size", "nelement", "get_device", "is_floating_point", "is_complex"}
)


class StagingMode(RandomnessMode):
    """The torch function mode of a staging trace: random draws as RandomnessMode routes them,
    and every other torch call through `staged_torch_call`."""

    def __init__(self):
        super().__init__(None)
        # the storages of the tensors torch calls allocated while staging (an alias, a view or
        # `.detach()` / `.data` of a captured tensor, shares the captured tensor's storage)
        self.created: set[int] = set()

    def __enter__(self):
        _ACTIVE.modes = (*getattr(_ACTIVE, "modes", ()), self)
        return super().__enter__()

    def __exit__(self, *exc):
        _ACTIVE.modes = _ACTIVE.modes[:-1]
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if unbound.original_of.get(func, func) in RANDOM_FUNCTIONS:
            return super().__torch_function__(func, types, args, kwargs)
        return staged_torch_call(self.created, func, args, kwargs or {})


_ACTIVE = threading.local()  # the staging modes entered on this thread, innermost last


def is_captured(t: torch.Tensor) -> bool:
    """Whether a concrete tensor is captured by the innermost staging trace (not made by the
    traced function), so that an update of it is recorded for write-back."""
    modes = getattr(_ACTIVE, "modes", ())
    return bool(modes) and writeback_trace() is not None and not _created(modes[-1].created, t)


def staged_torch_call(created: set, func, args, kwargs):
    """A torch call made while a staging trace is current (from its torch function mode).

    An in-place method on a concrete tensor the traced function did not create (a captured
    buffer, `self.counter.add_(1)`) is functionalized instead of running once at trace time; a
    call reading a captured tensor written earlier reads its new value. The storages of tensors
    the call allocates are remembered as the trace's own: writing into those (a tensor the traced
    function made from no traced value) stays an eager, trace-time step, as before."""
    name = getattr(func, "__name__", "")
    if (name[-1:] == "_" and name[:1] != "_" and name not in _NOT_WRITES) or (
        name == "__setitem__"
    ):
        target = args[0] if args else None
        if isinstance(target, torch.Tensor) and not _any_tracer(args, kwargs):
            if not _created(created, target):
                return _functionalize(name, target, args[1:], kwargs)
            _keep_earlier_reads(target, None)  # the trace's own tensor: written now
    elif (
        name not in _METADATA
        and not _any_tracer(args, kwargs)
        and (name != "__get__" or getattr(func.__self__, "__name__", "") in _VALUE_PROPERTIES)
        and _reads_captured(created, args, kwargs)
    ):
        out = None if _written_among(args, kwargs) else func(*args, **kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        tensors = out is not None and bool(outs) and all(isinstance(o, torch.Tensor) for o in outs)
        # a result torch's autograd differentiates reads a parameter: staged, so the program
        # reads the parameter on each call (optimizer steps update it in place)
        if out is None or (tensors and any(o.requires_grad for o in outs)):
            new_args, new_kwargs = _read_captured(created, args, kwargs)
            if name == "__get__":  # a value property (`.T`): the traced value's own
                return getattr(new_args[0], func.__self__.__name__)
            return unbound.accepting_tracers(func)(*new_args, **new_kwargs)
        if (not tensors and name != "__len__") or (tensors and _fresh(outs, args, kwargs)):
            _guard_values(created, args, kwargs)  # a value computed now from captured tensors
        return _remembered(created, out, args, kwargs)
    return _remembered(created, func(*args, **kwargs), args, kwargs)


def _remembered(created: set, out, args, kwargs):
    if isinstance(out, torch.Tensor):
        _remember(created, out, args, kwargs)
    elif isinstance(out, (tuple, list)):
        for o in out:
            if isinstance(o, torch.Tensor):
                _remember(created, o, args, kwargs)
    return out


def _remember(created: set, out: torch.Tensor, args, kwargs) -> None:
    s = _storage(out)
    if s in created:
        return
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor) and _storage(a) == s:
            return  # an alias of an argument: the trace's own only if the argument is
    created.add(s)


def _created(created: set, t: torch.Tensor) -> bool:
    """Whether t's memory was allocated by a torch call of the traced function."""
    s = _storage(t)
    return s == 0 or s in created


def _any_tracer(args, kwargs) -> bool:
    for a in args:
        if isinstance(a, Tracer):
            return True
        if isinstance(a, (tuple, list)) and any(isinstance(b, Tracer) for b in a):
            return True
    return any(isinstance(v, Tracer) for v in kwargs.values())


def _functionalize(name: str, target: torch.Tensor, rest, kwargs):
    staging = writeback_trace()
    if staging is None:  # cannot happen under a staging mode; keep torch's behaviour
        return getattr(target, name)(*rest, **kwargs)
    if not staging.writeback:
        write_captured(target, target, f"Tensor.{name}")  # raises the staged-body error
    holder = current_value(target, staging)
    getattr(holder, name)(*rest, **kwargs)  # the language layer's in-place op on a tracer
    if tuple(holder.aval.shape) != tuple(target.shape):
        raise MutationError(
            f"Tensor.{name} changes the shape of a captured tensor at {user_frame()}; a staged "
            "program can write new values into it, not new metadata: build a new tensor instead"
        )
    write_captured(target, holder, f"Tensor.{name}")
    return None if name == "__setitem__" else target


def _tensor_args(args, kwargs):
    for a in (*args, *kwargs.values()):
        for b in a if isinstance(a, (tuple, list)) else (a,):
            if isinstance(b, torch.Tensor) and not isinstance(b, Tracer):
                yield b


def _reads_captured(created: set, args, kwargs) -> bool:
    """Whether the call reads a captured tensor (see `_read_captured`); no side effects."""
    if writeback_trace() is None and not _WRITES[0]:
        return False
    return any(not _created(created, t) for t in _tensor_args(args, kwargs))


def _read_captured(created: set, args, kwargs):
    """(args, kwargs) with each captured tensor (one the traced function did not make: a module's
    parameter or buffer, a closed-over tensor) replaced by its value in the trace: its value
    written earlier in this trace, else the staging trace's const holding it, read on every call.
    (None, None) when the call reads none.

    A computation on captured tensors alone that reads a parameter (`softplus(self.raw_scale)`,
    `w / w.norm()`) is staged this way: run at trace time, its result would be a constant of the
    program, and an optimizer step on the parameter later (in place) would leave the compiled
    program using the old value, a silent wrong answer. One on other captured tensors (a buffer, a
    closed-over constant) still runs at trace time, so Python code may inspect its value
    (torch.distributions' argument checks), and the trace notes the tensors' versions
    (`_guard_values`): jit traces again once one moves. Tensors the traced function made from no
    traced value (`torch.ones(3)`) are computed once at trace time, as before."""
    trace = current_trace()
    staging = writeback_trace()
    changed = False

    def sub(a):
        nonlocal changed
        if isinstance(a, torch.Tensor) and not isinstance(a, Tracer):
            v = written_value(trace, a) if _WRITES[0] else None
            if v is None and staging is not None and not _created(created, a):
                v = current_value(a, staging)
            if v is not None:
                changed = True
                return v
        elif isinstance(a, (tuple, list)) and any(isinstance(b, torch.Tensor) for b in a):
            return type(a)(sub(b) for b in a)
        return a

    new_args = tuple(sub(a) for a in args)
    new_kwargs = {k: sub(v) for k, v in kwargs.items()}
    return (new_args, new_kwargs) if changed else (None, None)


def _guard_values(created: set, args, kwargs) -> None:
    """The program will hold a Python value read from these captured tensors: every enclosing
    staging trace notes their version counters, so that jit traces again once one moves (an
    optimizer step, a buffer update), as torch.compile's guards do."""
    reads = []
    for b in _tensor_args(args, kwargs):
        if not _created(created, b):
            try:
                reads.append((b, b._version))
            except RuntimeError:  # an inference tensor has no version: nothing to follow
                pass
    t = current_trace()
    while t is not None:
        if isinstance(t, StagingTrace):
            t.value_reads.extend(reads)
        t = t.parent


def _written_among(args, kwargs) -> bool:
    """Whether the call reads a captured tensor written earlier in this trace (its eager value is
    stale: the call must read the written one, whatever it returns)."""
    if not _WRITES[0]:
        return False
    trace = current_trace()
    return any(written_value(trace, b) is not None for b in _tensor_args(args, kwargs))


def _fresh(outs, args, kwargs) -> bool:
    """Whether a result has memory of its own (a value computed now), not a view or alias of an
    argument (which reads the captured tensor's memory, current on each call)."""
    mine = {_storage(a) for a in _tensor_args(args, kwargs)}
    return any(_storage(o) not in mine for o in outs)


# ------------------------------------------------ after each call of a compiled program


def _storage(t: torch.Tensor) -> int:
    """The address of t's memory (0 when it has none: empty, sparse, meta); asked past any
    torch function mode (an enclosing staging trace's would read a written tensor's value)."""
    try:
        if torch._C._is_torch_function_mode_enabled():
            with torch._C.DisableTorchFunction():
                return _base_address(t)
        return _base_address(t)
    except (RuntimeError, NotImplementedError):
        return 0


def _base_address(t: torch.Tensor) -> int:
    # the storage's start: the first element's address less the view's offset (no storage
    # object made, as untyped_storage() would)
    return t.data_ptr() - t.storage_offset() * t.element_size() if t.numel() else 0


def check_write_aliases(operands, writes, name: str, fixed: int = 0) -> None:
    """A tensor the program writes (a captured one or an argument) must not share memory with
    another operand: the program would read that operand's old value where eager code sees
    the write. `operands[:fixed]` (the consts, checked among themselves when traced) are
    compared with the arguments only."""

    def storage(j):
        x = operands[j]
        return _storage(x) if isinstance(x, torch.Tensor) else 0

    args = [storage(j) for j in range(fixed, len(operands))]
    for i, _ in writes:
        s = storage(i)
        if not s:
            continue
        if i < fixed:
            clash = s in args
        else:
            clash = args.count(s) > 1 or any(storage(j) == s for j in range(fixed))
        if clash:
            raise MutationError(
                f"{name}: a tensor the function updates in place shares memory with another "
                f"tensor it reads (an argument or a captured tensor), at {user_frame()}; the "
                "staged program cannot order the write against that read: pass a clone"
            )


def write_back(operands, writes, outs):
    """Copy the trailing outputs into the operands they update (consts then arguments, as the
    program takes them); the rest are the function's outputs."""
    n = len(outs) - len(writes)
    targets = {_storage(operands[i]) for i, _ in writes}
    targets.discard(0)
    # an output or a new value that is (a view of) a written tensor keeps the value the call
    # returned: copied before any write (the program may return an operand itself)
    results = [_unaliased(o, targets) for o in outs[:n]]
    news = [
        new if new is operands[i] else _unaliased(new, targets)
        for (i, _), new in zip(writes, outs[n:])
    ]
    grad_now = torch.is_grad_enabled()
    for (i, grad_enabled), new in zip(writes, news):
        target = operands[i]
        if grad_now and not grad_enabled and (new.requires_grad or target.requires_grad):
            with torch.no_grad():  # a write torch autograd does not see
                target.copy_(new)
        else:  # recorded by autograd only where the value or the target requires grad
            target.copy_(new)
    return results


def _unaliased(t, storages: set):
    return t.clone() if isinstance(t, torch.Tensor) and _storage(t) in storages else t


def write_traced(operands, writes, outs, name: str):
    """A staged program called under an enclosing transform (jit_call): its writes are writes
    of the enclosing trace, into a captured tensor (now on known values, or recorded by an
    enclosing jit) or a traced value (functionalized there)."""
    from thunderx.lang.inplace import mutate

    n = len(outs) - len(writes)
    for (i, grad_enabled), new in zip(writes, outs[n:]):
        target, what = operands[i], f"{name} (jit)"
        if isinstance(target, Tracer):
            mutate(target, no_grad_p.bind(new) if not grad_enabled else new, what)
        else:
            write_captured(target, new, what, grad_enabled)
    return outs[:n]
