"""Views of traced values, functionalized as torch's functionalization does.

A torch view (`y[0]`, `y.t()`, `y.view(...)`, `y.diagonal()`, ...) shares memory with its base, so
a write through the view changes the base and every other view of it. Tracers are values, so the
language layer models the memory: the first view of a tracer creates a `Storage` holding the
base's value, and each tracer that shares it (the base itself too) records the chain of view calls
that reads it from the storage. A write to any member places the new values into the storage
(by the positions the member's chain reads, found by running the chain on an iota of the
storage), then recomputes every live member from the storage. Under jit the recomputations
nobody reads are removed by dead-code elimination.

>>> def f(x):
...     y = x * 1
...     y[0].add_(100)      # y[0] is a view of y: the write reaches y
...     return y
>>> thunderx.jit(f)(torch.zeros(2, 2))
tensor([[100., 100.],
        [  0.,   0.]])
"""

from __future__ import annotations

import math
import weakref
from typing import Callable, NamedTuple

import torch

from thunderx.core import Tracer

_VALUE_SLOTS = tuple(s for s in Tracer.__slots__ if s not in ("_alias", "_aval", "__weakref__"))


class Storage:
    """The memory a family of views shares: its current value and the tracers reading it."""

    __slots__ = ("value", "members", "readonly", "_prune_at")

    def __init__(self, value, readonly: bool):
        self.value = value
        self.members: list = []
        self.readonly = readonly
        self._prune_at = 16

    def add(self, tracer) -> None:
        self.members.append(weakref.ref(tracer))
        if len(self.members) >= self._prune_at:
            # views made and dropped in a loop (`for i in ...: y[i]`) leave dead references
            self.members = [r for r in self.members if r() is not None]
            self._prune_at = 2 * len(self.members) + 16

    def live(self) -> list:
        return [m for m in (r() for r in self.members) if m is not None]


class Step(NamedTuple):
    """One view call: `impl` reads it from a tracer, `torch_fn` from a torch (meta) tensor."""

    impl: Callable
    torch_fn: Callable
    args: tuple
    kwargs: dict
    index: int | None  # which output, for split / chunk / unbind
    may_overlap: bool  # expand-like: several elements may share one memory location


class ViewOf:
    __slots__ = ("storage", "chain")

    def __init__(self, storage: Storage, chain: tuple):
        self.storage = storage
        self.chain = chain


def alias_of(x):
    """A new tracer object with `x`'s value (a fresh identity: mutating one leaves the other)."""
    y = object.__new__(type(x))
    for slot in _VALUE_SLOTS:
        if hasattr(x, slot):
            object.__setattr__(y, slot, getattr(x, slot))
    return y


def assign(x, new) -> None:
    """`x` takes `new`'s value (and trace): the in-place update of a tracer object."""
    x.__class__ = new.__class__
    for slot in _VALUE_SLOTS:
        if hasattr(new, slot):
            object.__setattr__(x, slot, getattr(new, slot))


_ALIAS_SLOT = Tracer._alias  # the slot's descriptor: reading it skips Tracer.__getattr__


def view_of(x) -> ViewOf | None:
    try:
        return _ALIAS_SLOT.__get__(x)
    except (AttributeError, TypeError):  # never set, or not a tracer: no shared storage
        return None


def view_of_input(out, inputs):
    """(i, chain) when tracer `out` is a view of `inputs[i]` (the base of its storage) reached
    by `chain`, else None."""
    va = view_of(out)
    if va is None or not va.chain or any(_has_tracer((s.args, s.kwargs)) for s in va.chain):
        return None
    for i, t in enumerate(inputs):
        vt = view_of(t)
        if vt is not None and vt.storage is va.storage and not vt.chain:
            return i, va.chain
    return None


def _apply(step: Step, value, *, concrete: bool = False):
    fn = step.torch_fn if concrete else step.impl
    out = fn(value, *step.args, **step.kwargs)
    return out if step.index is None else out[step.index]


def read_chain(value, chain, *, concrete: bool = False):
    """The view `chain` read from `value`; `concrete`: from a torch tensor, with torch's own
    view functions."""
    for step in chain:
        value = _apply(step, value, concrete=concrete)
    return value


def _member(x, out, step: Step):
    """Record `out` as a view of `x` (making `x`'s storage on its first view)."""
    if not isinstance(out, Tracer):
        # a value with no derivative (detach under jvp) comes back as the plain primal: make it
        # a tracer of x's trace so that it can take part in the storage
        try:
            out = x._trace.lift(out)
        except NotImplementedError:
            return out
    va = view_of(x)
    if va is None:
        readonly = id(x) in x._trace_inputs() and not x._trace.writes_back_inputs
        st = Storage(alias_of(x), readonly=readonly)
        va = ViewOf(st, ())
        x._alias = va
        st.add(x)
    if out is x or view_of(out) is not None:
        out = alias_of(out)
    out._alias = ViewOf(va.storage, va.chain + (step,))
    va.storage.add(out)
    return out


def _has_tracer(args) -> bool:
    from thunderx import tree

    return any(isinstance(a, Tracer) for a in tree.leaves(args))


def _layout_is_view(x, torch_fn, args, kwargs) -> bool:
    """Whether torch's reshape-like call returns a view here: replay the view chain on a meta
    tensor (a fresh base is contiguous) and ask torch."""
    va = view_of(x)
    if va is None or not va.chain:
        return True
    if _has_tracer((args, kwargs)) or any(_has_tracer((s.args, s.kwargs)) for s in va.chain):
        return True
    a = va.storage.value.aval
    m = read_chain(torch.empty(a.shape, dtype=a.dtype, device="meta"), va.chain, concrete=True)
    r = torch_fn(m, *args, **kwargs)
    return r is m or r._is_view()


def _basic_index(idx) -> bool:
    """torch returns a view for ints, slices, None, Ellipsis and 0-d integer tensors."""
    for i in idx if isinstance(idx, tuple) else (idx,):
        if i is None or i is Ellipsis or isinstance(i, slice):
            continue
        if isinstance(i, int) and not isinstance(i, bool):
            continue
        if isinstance(i, (Tracer, torch.Tensor)):
            a = i.aval if isinstance(i, Tracer) else i
            if a.ndim == 0 and not a.dtype.is_floating_point and a.dtype is not torch.bool:
                continue
        return False
    return True


def view_function(impl: Callable, torch_fn: Callable, kind: str = "view") -> Callable:
    """Wrap a decomposition whose torch function returns a view of its first argument.

    kind: 'view' (always a view), 'layout' (a view when torch's strides allow: reshape, flatten),
    'getitem' (basic indexing only), 'expand' (a view whose elements may share memory),
    'multi' (a tuple of views: split, chunk, unbind)."""

    def view(x, *args, **kwargs):
        out = impl(x, *args, **kwargs)
        if not isinstance(x, Tracer):
            return out
        if kind == "getitem" and not _basic_index(args[0]):
            return out
        if kind == "layout" and not _layout_is_view(x, torch_fn, args, kwargs):
            return out
        if kind == "multi":
            return tuple(
                _member(x, o, Step(impl, torch_fn, args, kwargs, i, False))
                for i, o in enumerate(out)
            )
        return _member(x, out, Step(impl, torch_fn, args, kwargs, None, kind == "expand"))

    view.__name__ = getattr(impl, "__name__", "view")
    view.__wrapped__ = impl
    return view


# ------------------------------------------------------------------------------------ writes


def write(x, new, what: str, detached: bool = False):
    """The in-place update `x <- new` of a tracer that shares storage with others (`detached`:
    a write no derivative sees, as through `.detach()`)."""
    from thunderx.errors import user_frame
    from thunderx.lang.inplace import MutationError

    va = view_of(x)
    st = va.storage
    if isinstance(new, Tracer) and new._trace is not x._trace:
        if any(id(m) in x._trace_inputs() for m in st.live()):
            from thunderx.lang.inplace import _inner_write

            raise _inner_write(x, new, what)
    through = None
    # torch's autograd does not see a write through `.detach()` / `.data`: the values change,
    # the derivative stays that of the computation before the write
    detaching = detached or any(s.torch_fn in _DETACH for s in va.chain)
    if st.readonly:
        # a write grad's level does not see (no_grad, .detach()) goes to the caller's value
        from thunderx.lang.inplace import _unseen

        through = next((m for m in st.live() if not view_of(m).chain), None)
        if through is None or not _unseen(through, detaching):
            raise MutationError(
                f"{what} writes through a view of an input of the transformed function at "
                f"{user_frame()}; transforms are functional: clone the input first "
                "(y = x.clone()) and mutate the copy"
            )
    if va.chain:
        _check_no_overlap(va.chain, st.value, what)
        _check_no_conjugation(va.chain, st.value, what)
        base = place(st.value, _positions(st.value, va.chain), new)
    else:
        base = new
    base = keep_unseen(st.value, base, detaching)
    if through is not None:
        from thunderx.lang.inplace import _write_through

        base = _write_through(through, base, what)  # the input keeps its derivative
    st.value = alias_of(_tracer(x, base))
    with torch.enable_grad():  # the views read again keep their derivative in a no_grad block
        for m in st.live():
            assign(m, _tracer(m, read_chain(st.value, view_of(m).chain)))
    return x


_DETACH = (torch.detach, torch._C.TensorBase.detach)
_KEEPERS: dict = {}


def kept(old, new, forward_sees_write: bool):
    """The value `new`, bit for bit, written over `old` by a write torch's autograd does not
    see: reverse-mode levels (grad, vjp, jacrev) keep `old`'s derivative; forward-mode levels
    (jvp, jacfwd) take `new`'s where `forward_sees_write` (a write in a `no_grad` block, which
    torch's forward AD sees) and keep `old`'s otherwise (a write through `.detach()`). A
    custom_jvp adding no operation; jit keeps its call (primitives/custom.py
    DERIVATIVE_KEEPERS) for the program torch autograd runs through."""
    if not isinstance(old, Tracer) or not (old.dtype.is_floating_point or old.dtype.is_complex):
        return new
    keep = _KEEPERS.get(forward_sees_write)
    if keep is None:
        from thunderx.transforms.custom import custom_jvp
        from thunderx.transforms.jvp import jvp_reverse

        def keep(old, new):
            return new

        keep.__name__ = (
            "thunderx_keep_reverse_derivative" if forward_sees_write else "thunderx_keep_derivative"
        )
        keep = custom_jvp(keep)

        @keep.defjvp
        def keep_jvp(primals, tangents):
            # the primal through the function again: an enclosing level differentiates it by
            # the same rule (a Hessian keeps the derivative at both levels)
            old_t = not forward_sees_write or jvp_reverse()
            return keep(*primals), tangents[0] if old_t else tangents[1]

        _KEEPERS[forward_sees_write] = keep
    if not isinstance(new, Tracer):
        new = old._trace.lift(new)
    with torch.enable_grad():  # called in the user's no_grad block too
        return keep(old, new)


def keep_unseen(old, new, detached: bool):
    """`new` written over `old` in place: with `old`'s derivative where the write is one torch's
    autograd does not see (`detached`: through `.detach()`; or in a `no_grad` block), else `new`
    itself (`kept`; `with torch.no_grad(): y.clamp_(-1, 1)` passes y's gradient straight
    through)."""
    if not detached and torch.is_grad_enabled():
        return new
    return kept(old, new, forward_sees_write=not detached)


def _tracer(like, value):
    """`value` as a tracer: a view that carries no derivative (detach) reads back as the plain
    primal value, which becomes a value of `like`'s trace again."""
    return value if isinstance(value, Tracer) else like._trace.lift(value)


def _positions(base, chain):
    """For each element of the view, its flat position in the storage (an int64 tensor)."""
    from thunderx.primitives import creation as C
    from thunderx.primitives import shape as S

    a = base.aval
    iota = S.reshape(C.iota(torch.int64, (math.prod(a.shape),), 0, a.device), a.shape)
    return read_chain(iota, chain)


def place(x, positions, v):
    """x with the elements at flat `positions` (any shape, distinct) replaced by `v`."""
    from thunderx.lang._base import SCALARS, aval, dtype, shape
    from thunderx.primitives import binary as B
    from thunderx.primitives import creation as C
    from thunderx.primitives import indexing as I
    from thunderx.primitives import shape as S
    from thunderx.primitives import unary as U

    n = math.prod(shape(x))
    pshape = shape(positions)
    k = math.prod(pshape)
    dev = aval(x).device
    if type(v) in SCALARS:
        v = C.full(pshape, v, dtype(x), dev)
    else:
        v = U.convert(v, dtype(x)) if dtype(v) != dtype(x) else v
        v = S.broadcast_to(v, pshape) if shape(v) != pshape else v
    flat_pos = S.reshape(positions, (k,))
    hit = I.index_add(
        C.full((n,), 0.0, torch.float32, dev), flat_pos, C.full((k,), 1.0, torch.float32, dev), 0
    )
    placed = I.index_add(C.full((n,), 0, dtype(x), dev), flat_pos, S.reshape(v, (k,)), 0)
    return S.reshape(U.select(B.gt(hit, 0.0), placed, S.reshape(x, (n,))), shape(x))


def _check_no_conjugation(chain, base, what: str) -> None:
    """A write through a conjugating view (mH, H, adjoint of a complex tensor) would need its
    values conjugated back: refused rather than written unconjugated."""
    from thunderx.lang import shape_ops

    conjugating = (shape_ops.conj_transpose, shape_ops._h, shape_ops._adjoint)
    if base.aval.dtype.is_complex and any(s.impl in conjugating for s in chain):
        from thunderx.errors import user_frame
        from thunderx.lang.inplace import MutationError

        raise MutationError(
            f"{what} at {user_frame()} writes through a conjugated view (mH, H or adjoint) of a "
            "complex tensor, which thunderx does not support: write through .mT and conjugate "
            "the values yourself"
        )


def _check_no_overlap(chain, base, what: str) -> None:
    if not any(s.may_overlap for s in chain):
        return
    from thunderx.errors import user_frame
    from thunderx.lang.inplace import MutationError

    if _has_tracer(tuple((s.args, s.kwargs) for s in chain)):
        return
    a = base.aval
    pos = read_chain(torch.arange(math.prod(a.shape)).reshape(a.shape), chain, concrete=True)
    if pos.numel() != pos.unique().numel():
        raise MutationError(
            f"{what} at {user_frame()}: unsupported operation: more than one element of the "
            "written-to tensor refers to a single memory location (it is an expanded view); "
            "clone the tensor before writing to it (as torch requires)"
        )


# ------------------------------------------------------------------------- the view functions


def _views():
    from thunderx.lang import shape_ops

    T = torch.Tensor
    layout = [
        (torch.reshape, "reshape"),
        (torch.flatten, "flatten"),
        (torch.unflatten, "unflatten"),
    ]
    layout += [(None, "reshape_as"), (None, "contiguous")]
    view = [(None, "view"), (None, "view_as"), (torch.squeeze, "squeeze")]
    view += [(torch.unsqueeze, "unsqueeze"), (torch.permute, "permute"), (torch.t, "t")]
    view += [(torch.transpose, "transpose"), (torch.swapaxes, "swapaxes")]
    view += [(torch.swapdims, "swapdims"), (torch.adjoint, "adjoint"), (torch.movedim, "movedim")]
    view += [(torch.moveaxis, "moveaxis"), (torch.narrow, "narrow"), (torch.select, "select")]
    view += [(torch.diagonal, "diagonal"), (torch.detach, "detach")]
    expand = [(None, "expand"), (None, "expand_as"), (torch.broadcast_to, "broadcast_to")]
    expand += [(torch.as_strided, "as_strided"), (None, "unfold")]  # windows may overlap
    multi = [(torch.split, "split"), (torch.tensor_split, "tensor_split")]
    multi += [(torch.chunk, "chunk"), (torch.unbind, "unbind")]
    out = [(T.__getitem__, None, "getitem")]
    for kind, entries in (("layout", layout), ("view", view), ("expand", expand), ("multi", multi)):
        out += [(fn, name, kind) for fn, name in entries]
    props = {
        "T": (shape_ops.full_transpose, lambda m: m.T),
        "mT": (shape_ops.matrix_transpose, lambda m: m.mT),
        "mH": (shape_ops.conj_transpose, lambda m: m.mH),
        "H": (shape_ops._h, lambda m: m.H),
    }
    return out, props


def install_views(torch_table: dict, method_table: dict) -> dict:
    """Wrap the registered view decompositions; returns the wrapped properties (T, mT, ...)."""
    entries, props = _views()
    for fn, name, kind in entries:
        if fn is not None and fn in torch_table:
            torch_table[fn] = view_function(torch_table[fn], fn, kind)
        if name is not None and name in method_table:
            tensor_fn = getattr(torch.Tensor, name)
            wrapped = view_function(method_table[name], tensor_fn, kind)
            method_table[name] = wrapped
            torch_table[tensor_fn] = wrapped
    return {name: view_function(impl, torch_fn, "view") for name, (impl, torch_fn) in props.items()}
