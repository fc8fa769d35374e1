"""jit: trace once per signature, optimize, and run generated code; a cache hit costs a
signature check and one call. Under another transform, jit binds `jit_call` (a higher-order
primitive holding the jaxpr), so `grad(jit(f))` and `vmap(jit(f))` do not retrace `f`."""

from __future__ import annotations

import collections
import functools
import inspect
import threading
from typing import Any, Callable

import optree
import torch

from thunderx import tree, validate
from thunderx.config import switches
from thunderx.core import EvalTrace, Tracer, _state, axis_env, get_aval, is_top_level
from thunderx.errors import ArgumentValueError, user_frame
from thunderx.executors import default_executor, executor_names
from thunderx.ir import ClosedJaxpr
from thunderx.lang import autocast, module_state
from thunderx.lang.captured import check_write_aliases, write_back, write_traced
from thunderx.passes import closure_convert
from thunderx.tracing import trace_flat
from thunderx.transforms.jaxpr_cache import compiled_for
from thunderx.transforms.jit_autocast import AutocastCalls
from thunderx.transforms.jit_guard import LEAF_TYPES, MISS, fast_call
from thunderx.transforms.jit_key import (
    SCALAR_KEYS,
    SCALARS,
    any_requires_grad,
    complete_statics,
    grad_flags,
    leaf_key,
    needs_autograd,
    reads_hold,
    scalar_leaf,
    weak_aval,
)

# ----------------------------------------------------------------------------------- jit API


class _Entry:
    # writes: (const index, grad mode) per trailing output of `jaxpr` that is copied into that
    # captured tensor after each call (an in-place update of a module buffer; lang/captured.py)
    __slots__ = (
        "jaxpr",
        "consts",
        "out_tree",
        "program",
        "closed",
        "writes",
        "value_reads",
        "__weakref__",
    )


class JitFunction:
    """The callable `jit` returns; see `jit`."""

    def __init__(self, fun, static_argnums, static_argnames, cache_size, executor):
        functools.update_wrapper(self, fun)
        if not hasattr(self, "__name__"):  # a module or other callable object
            self.__name__ = type(fun).__name__
        self.fun = fun
        static_argnums, static_argnames = complete_statics(fun, static_argnums, static_argnames)
        self.static_argnums = tuple(static_argnums)
        self.static_argnames = tuple(static_argnames)
        try:
            self._positional = [
                p.name
                for p in inspect.signature(fun).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        except (TypeError, ValueError):
            self._positional = []
        self.cache_size = cache_size
        self.executor = executor
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.RLock()
        self.hits = 0
        self.misses = 0
        # Fast path for calls with only plain tensor positional arguments and no static ones:
        # key = per-argument (shape, dtype, device), value = (program, consts, single output).
        self._fast: dict = {}
        self._fast_hits = [0]
        self._fast_ok = not self.static_argnums and not self.static_argnames
        self._autocast_calls = AutocastCalls(self)
        # generated checks-and-calls for the signatures seen on the fast path (jit_guard.py),
        # the newest first
        self._guards: list = [()]
        # set once a trace asked which values require grad (torch.autograd.grad inside): from
        # then on the arguments' requires_grad flags are part of each key, off the fast path
        self._grad_keyed = False
        # torch's default dtype when the fast path's programs were traced (another default
        # takes the general path, whose key holds it)
        self._fast_default = [torch.get_default_dtype()]

    # -- signature
    def _split(self, args, kwargs):
        n = len(args)
        statics = []
        if self.static_argnums:
            nums = self._static_positions(n, kwargs)
            statics = [args[i] for i in sorted(nums)]
            args = tuple(None if i in nums else a for i, a in enumerate(args))
        if kwargs:
            skw = {k: kwargs[k] for k in self.static_argnames if k in kwargs}
            kwargs = {k: v for k, v in kwargs.items() if k not in skw}
            statics.append(tuple(sorted(skw.items())))
        for s in statics:
            try:
                hash(s)
            except TypeError:
                raise TypeError(
                    f"jit: static arguments must be hashable, got {type(s).__name__} "
                    f"(at {user_frame()})"
                ) from None
        return args, kwargs, tuple(statics)

    def _static_positions(self, n, kwargs) -> set:
        """Static positions present in this call; one passed by keyword instead is fine."""
        nums = set()
        for a in self.static_argnums:
            if -n <= a < n:
                nums.add(a % n)
            elif not (0 <= a < len(self._positional) and self._positional[a] in kwargs):
                raise ValueError(
                    f"jit: static_argnums {a} is out of range for a call with {n} positional "
                    f"arguments (at {user_frame()})"
                )
        return nums

    def _key(self, args, kwargs):
        dyn_args, dyn_kwargs, statics = self._split(args, kwargs)
        leaves, treedef = tree.flatten((dyn_args, dyn_kwargs))
        keys = tuple(leaf_key(x) for x in leaves)
        if SCALAR_KEYS.intersection(keys):
            # Python scalars are dynamic and weakly typed (as in JAX): they travel as 0-dim
            # tensors, floats in float64 so that no precision is lost before they meet a tensor
            leaves = [scalar_leaf(x) if type(x) in SCALARS else x for x in leaves]
        # named axes in scope (vmap axis_name, shard_map mesh dims) shape the trace
        # torch's default dtype shapes the trace too (torch.zeros(3), an int tensor times 0.5)
        # and CPU autocast's state (its casts are part of the trace)
        key = (treedef, keys, (statics, axis_env(), torch.get_default_dtype(), autocast.state()))
        if self._grad_keyed:
            key += (grad_flags(leaves),)
        return key, leaves, dyn_args, dyn_kwargs

    # -- tracing
    def _trace(self, args, kwargs, leaves, treedef_args, keys, grad_args):
        static_pos = self._static_positions(len(args), kwargs)

        def flat(*xs):
            dyn_args, dyn_kwargs = tree.unflatten(treedef_args, xs)
            full = [args[i] if i in static_pos else a for i, a in enumerate(dyn_args)]
            full_kwargs = dict(kwargs)
            full_kwargs.update(dyn_kwargs)
            out = self.fun(*full, **full_kwargs)
            out_leaves, out_tree = tree.flatten(out)
            return out_leaves, out_tree

        in_avals = [
            weak_aval(get_aval(x)) if k in SCALAR_KEYS else get_aval(x)
            for x, k in zip(leaves, keys)
        ]
        # the modules the trace uses: a later change of one (model.eval(), a replaced layer or
        # parameter) traces again (thunderx/lang/module_state.py)
        with module_state.recording() as modules:
            closed, out_tree = trace_flat(flat, in_avals, writeback=True, grad_args=grad_args)
        guard = modules.guard()
        entry = _Entry()
        entry.closed = closed
        entry.jaxpr = closure_convert(closed.jaxpr)
        entry.consts = closed.consts
        entry.out_tree = out_tree
        entry.program = None
        entry.writes = closed.writes
        entry.value_reads = closed.value_reads + ((guard, 0),) if guard else closed.value_reads
        if closed.writes:  # consts among themselves, once (each call checks the arguments)
            n = len(closed.consts)
            check_write_aliases(
                closed.consts, [w for w in closed.writes if w[0] < n], self.__name__
            )
        return entry

    def _lookup(self, args, kwargs):
        key, leaves, dyn_args, dyn_kwargs = self._key(args, kwargs)
        # One lock around lookup, reordering and eviction: another thread's eviction between
        # `get` and `move_to_end` would raise KeyError.
        with self._lock:
            entry = self._cache.get(key)
            if entry is not None and not reads_hold(entry.value_reads):
                entry = None  # a value it read from a captured tensor at trace time has changed
            if entry is not None:
                self.hits += 1
                self._cache.move_to_end(key)
                return entry, leaves
            self.misses += 1
            _, treedef = tree.flatten((dyn_args, dyn_kwargs))
            flags = grad_flags(leaves)
            entry = self._trace(args, kwargs, leaves, treedef, key[1], flags)
            if entry.closed.reads_arg_grad and not self._grad_keyed:
                self._grad_keyed = True  # earlier programs stay valid: they read no flags
                self._fast.clear()
                self._guards[0] = ()
                key += (flags,)
            if not any(isinstance(c, Tracer) for c in entry.consts):
                self._cache[key] = entry
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return entry, leaves

    def make_caller(self) -> Callable:
        """The function `jit` returns: a cache hit runs a generated check of a signature seen
        before and calls its program (jit_guard.py); else a key built from each leaf's (shape,
        dtype, device), one dict lookup and the call."""
        fast, slow, state, counts = self._fast, self._call_slow, _state, self._fast_hits
        flatten, NAMESPACE = optree.tree_flatten, tree.NAMESPACE  # noqa: N806
        grad_enabled = torch.is_grad_enabled
        any_autocast = torch._C._is_any_autocast_enabled
        default_dtype, fast_default = torch.get_default_dtype, self._fast_default
        fast_ok, autocast_calls = self._fast_ok, self._autocast_calls
        name = self.__name__
        guards = self._guards

        def writing(consts, args, writes, fn, out_tree):
            """A program that writes into captured tensors or arguments: checked, written back."""
            operands = (*consts, *args)
            check_write_aliases(operands, writes, name, len(consts))
            return tree.unflatten(out_tree, write_back(operands, writes, fn(*operands)))

        def jitted(*args, **kwargs):
            if switches.jit_disabled:  # thunderx.disable_jit(): the function itself, op by op
                return self.fun(*args, **kwargs)
            if any_autocast():  # programs traced with autocast's casts (jit_autocast.py)
                return autocast_calls(args, kwargs)
            if fast_ok and not kwargs and default_dtype() is fast_default[0]:
                # a generated check of a signature seen before, and the call (jit_guard.py)
                for call in guards[0]:
                    out = call(args)
                    if out is not MISS:
                        return out
                flat = args
                try:
                    if len(args) == 1:
                        a = args[0]
                        hit = fast.get((a.shape, a.dtype, a.device))
                        if hit is not None and state.trace.__class__ is EvalTrace:
                            fn, fn_plain, consts, single, consts_need_grad, writes, reads = hit
                            if reads and not reads_hold(reads):
                                return slow(args, kwargs)
                            if (consts_need_grad or a.requires_grad) and grad_enabled():
                                fn = fn_plain
                            counts[0] += 1
                            if writes is not None:
                                return writing(consts, (a,), writes, fn, single)
                            if single is True:  # fn returns the one output itself
                                return fn(*consts, a) if consts else fn(a)
                            return tree.unflatten(single, fn(*consts, a) if consts else fn(a))
                        return slow(args, kwargs)
                    key = tuple([(a.shape, a.dtype, a.device) for a in args])
                except AttributeError:
                    # other pytrees of tensors: the key is their structure and each leaf's
                    # (shape, dtype, device)
                    flat, treedef = flatten(args, namespace=NAMESPACE)
                    try:
                        key = (treedef, tuple([(a.shape, a.dtype, a.device) for a in flat]))
                    except AttributeError:  # a Python scalar leaf: the general path
                        return slow(args, kwargs)
                hit = fast.get(key)
                if hit is not None and state.trace.__class__ is EvalTrace:
                    fn, fn_plain, consts, single, consts_need_grad, writes, reads = hit
                    if reads and not reads_hold(reads):
                        return slow(args, kwargs)
                    # torch autograd through the call needs the variant without in-place reuse
                    if grad_enabled() and (consts_need_grad or any_requires_grad(flat)):
                        fn = fn_plain
                    counts[0] += 1
                    if writes is not None:
                        return writing(consts, flat, writes, fn, single)
                    outs = fn(*consts, *flat) if consts else fn(*flat)
                    return outs if single is True else tree.unflatten(single, outs)
            return slow(args, kwargs)

        return jitted

    def __call__(self, *args, **kwargs):
        return self._call_slow(args, kwargs)

    def _call_slow(self, args, kwargs):
        if torch._C._is_any_autocast_enabled() and is_top_level():
            autocast.check_jit_call(self.__name__)  # other devices' autocast: refused
            return self._autocast_calls.run(args, kwargs)[1]
        entry, leaves = self._lookup(args, kwargs)
        if is_top_level():
            return self._run_top(entry, leaves, args, kwargs)
        from thunderx.primitives.higher_order import jit_call_p

        outs = jit_call_p.bind(*entry.consts, *leaves, jaxpr=entry.jaxpr, name=self.__name__)
        if entry.writes:
            outs = write_traced((*entry.consts, *leaves), entry.writes, outs, self.__name__)
        if not torch.is_grad_enabled():  # called in a no_grad block of a traced function
            from thunderx.primitives.higher_order import stop_gradient

            outs = stop_gradient(outs)
        return tree.unflatten(entry.out_tree, outs)

    def _run_top(self, entry, leaves, args, kwargs, remember=True):
        """The program for `entry` called on concrete `leaves` (compiled on its first call);
        `remember`: the signature goes to the fast path (not for a program traced under CPU
        autocast, which the fast path's key does not tell apart)."""
        prog = entry.program
        if prog is None:
            prog = entry.program = compiled_for(entry.jaxpr, self._executor_for(leaves))
        if entry.writes:
            operands = (*entry.consts, *leaves)
            check_write_aliases(operands, entry.writes, self.__name__, len(entry.consts))
        if needs_autograd(leaves, entry.consts):
            outs = prog.fn_plain(*entry.consts, *leaves)
        else:
            outs = prog.fn(*entry.consts, *leaves)
        if entry.writes:
            outs = write_back(operands, entry.writes, outs)
        # the fast path's key has no axis env: only programs traced without one go there
        fast = remember and self._fast_ok and not kwargs and not axis_env() and not self._grad_keyed
        if fast and all(type(a) in _PLAIN for a in args):
            key = self._remember_fast(args, entry, prog)
            self._remember_call(args, leaves, key)
        elif fast and all(type(a) in _PLAIN for a in leaves):
            flat, treedef = tree.flatten(args)
            if len(flat) == len(leaves) and all(a is b for a, b in zip(flat, leaves)):
                keys = tuple((a.shape, a.dtype, a.device) for a in leaves)
                self._remember_fast(leaves, entry, prog, key=(treedef, keys))
                self._remember_call(args, leaves, (treedef, keys))
        return tree.unflatten(entry.out_tree, outs)

    def _remember_call(self, args, leaves, key):
        """A generated check-and-call for this signature (jit_guard.py), tried first."""
        hit = self._fast.get(key)
        call = hit and fast_call(args, leaves, hit, _state, EvalTrace, self._fast_hits)
        if call is not None:
            with self._lock:
                keep = min(_GUARDS, self.cache_size) - 1  # a program per signature kept
                self._guards[0] = (call, *self._guards[0][:keep])

    def _remember_fast(self, args, entry, prog, key=None):
        if key is None:
            keys = tuple((a.shape, a.dtype, a.device) for a in args)
            key = keys[0] if len(args) == 1 else keys  # as `make_caller` builds it
        single = entry.out_tree.num_leaves == 1 and tree.unflatten(entry.out_tree, [0]) == 0
        default = torch.get_default_dtype()
        with self._lock:
            if len(self._fast) >= self.cache_size or self._fast_default[0] is not default:
                self._fast.clear()
                self._guards[0] = ()
                self._fast_default[0] = default
            single_fn = single and prog.fn_single is not None and not entry.writes
            self._fast[key] = (
                prog.fn_single if single_fn else prog.fn,
                prog.fn_single_plain if single_fn else prog.fn_plain,
                tuple(entry.consts),
                True if single_fn else entry.out_tree,
                any_requires_grad(entry.consts),
                tuple(entry.writes) if entry.writes else None,
                entry.value_reads,
            )
        return key

    def _executor_for(self, leaves):
        if self.executor is not None:
            return self.executor
        devices = {x.device.type for x in leaves if isinstance(x, torch.Tensor)}
        return default_executor(devices or {"cpu"}).name

    # -- inspection
    def cache_info(self) -> dict:
        return {
            "hits": self.hits + self._fast_hits[0],
            "misses": self.misses,
            "size": len(self._cache),
            "maxsize": self.cache_size,
        }

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._fast.clear()
            self._guards[0] = ()
            self._autocast_calls.clear()

    def trace(self, *args, **kwargs) -> ClosedJaxpr:
        entry, _ = self._lookup(args, kwargs)
        return entry.closed

    def lower(self, *args, executor: str | None = None, **kwargs):
        """The staged program for these arguments: `.as_text()` shows the optimized jaxpr and
        the execution program of the executor that runs it (generated torch code, nvFuser or
        inductor regions), named in its header."""
        from thunderx.lowering import Lowered

        entry, leaves = self._lookup(args, kwargs)
        return Lowered(
            entry, executor or self._executor_for(leaves), self.__name__, (self, args, kwargs)
        )


_PLAIN = LEAF_TYPES
# generated calls kept per jit function (the signatures tried first, newest first)
_GUARDS = 4


def jit(
    fun: Callable | None = None,
    static_argnums: int | tuple = (),
    static_argnames: str | tuple = (),
    *,
    cache_size: int = 256,
    executor: str | None = None,
) -> Any:
    """Stage `fun` out once per signature and run it as generated code.

    The signature is the pytree structure, each leaf's (shape, dtype, device) and the values of
    static arguments; Python side effects in `fun` run only when it is traced.

    `executor` names who runs the program (`thunderx.executors.executor_names()`): "torch"
    (generated torch code), "nvfuser" (fusion regions as nvFuser definitions; the default on CUDA
    when nvFuser imports) or "inductor" (fusion regions compiled by torch.compile: opt-in, its
    first call compiles for seconds). None picks the default for the arguments' devices.

    >>> f = thunderx.jit(lambda x: torch.sin(x) * 2)
    >>> f(torch.zeros(3))
    tensor([0., 0., 0.])
    """
    if fun is None:
        return lambda f: jit(
            f, static_argnums, static_argnames, cache_size=cache_size, executor=executor
        )
    validate.check_callable(fun, "jit")
    static_argnums, static_argnames = validate.check_static_args(
        fun, static_argnums, static_argnames, "jit"
    )
    validate.check_int(cache_size, "jit", "cache_size", minimum=1)
    if executor is not None and executor not in executor_names():
        names = ", ".join(repr(n) for n in executor_names())
        raise ArgumentValueError(
            f"jit: executor must be one of {names} or None, not {executor!r} (at {user_frame()})"
        )
    impl = JitFunction(fun, static_argnums, static_argnames, cache_size, executor)
    jitted = functools.wraps(fun)(impl.make_caller())
    for name in ("lower", "trace", "cache_info", "clear_cache"):
        setattr(jitted, name, getattr(impl, name))
    jitted.jit_function = impl
    jitted.__thunderx_transform__ = ("jit", fun, None)
    return jitted
