"""vmap: the batch trace carries (value, batch_dim) pairs through each primitive's batch rule."""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from thunderx import tree, validate
from thunderx.avals import ShapedArray
from thunderx.core import (
    NamedAxis,
    Trace,
    Tracer,
    abstract_eval,
    axis_batch_rules,
    axis_names_rules,
    batch_rules,
    extend_axis_env,
    get_aval,
    is_tensor_like,
    missing_rule,
    new_trace,
    set_trace,
)
from thunderx.errors import ArgumentValueError, user_frame
from thunderx.transforms.input_updates import mutated_inputs, write_back


class BatchTracer(Tracer):
    __slots__ = ()

    def __init__(self, trace, val, bdim: int):
        self._trace = trace
        self.val = val
        self.bdim = bdim

    @property
    def aval(self) -> ShapedArray:
        val, bdim = self.val, self.bdim
        try:  # read often (24 times per primitive in eager vmap): kept for a concrete value
            cached = _AVAL_SLOT.__get__(self)
            if cached[0] is val and cached[1] == bdim:
                return cached[2]
        except AttributeError:
            pass
        a = get_aval(val)
        aval = ShapedArray(a.shape[:bdim] + a.shape[bdim + 1 :], a.dtype, a.device)
        if isinstance(val, torch.Tensor):  # a tracer's aval may change with an in-place update
            _AVAL_SLOT.__set__(self, (val, bdim, aval))
        return aval


_AVAL_SLOT = Tracer._aval  # the slot's descriptor (reading it skips Tracer.__getattr__)


class BatchTrace(Trace):
    __slots__ = ("axis_size", "randomness", "axis")
    # An in-place update of an input under vmap is written back to the caller's tensor when the
    # vmap ends (torch.func's semantics: the batched input is the caller's memory)
    writes_back_inputs = True
    foreign_write_hint = (
        " (vmap: inplace arithmetic(self, *extra_args) is not possible because there exists a "
        "Tensor `other` in extra_args that has more elements than `self`: `other` is vmapped "
        "over and `self` is not)"
    )

    def __init__(self, parent, axis_size: int, randomness: str = "error", axis_name=None):
        super().__init__(parent)
        self.axis_size = axis_size
        self.randomness = randomness
        # The named axis this trace binds (vmap's axis_name), or None.
        self.axis = None if axis_name is None else NamedAxis(axis_name, axis_size)

    def unpack(self, x):
        if type(x) is BatchTracer and x._trace is self:
            return x.val, x.bdim
        if isinstance(x, Tracer):
            self.check_foreign(x)
        return x, None

    def process_primitive(self, prim, args, params):
        if self.axis is not None:
            named = self.process_named(prim, args, params)
            if named is not None:
                return named
        vals, dims = [], []
        batched = False
        for a in args:
            v, d = self.unpack(a)
            vals.append(v)
            dims.append(d)
            batched = batched or d is not None
        with set_trace(self.parent):
            if not batched:
                return prim.bind(*vals, **params)
            rule = batch_rules.get(prim)
            if rule is None:
                raise missing_rule(prim, "batching (vmap)", params)
            out, out_dim = rule(vals, dims, **params)
        if prim.multiple_results:
            return [self.wrap(o, d) for o, d in zip(out, out_dim)]
        return self.wrap(out, out_dim)

    def process_named(self, prim, args, params):
        """A collective over this trace's axis name reduces over the batch dim (even where its
        operands are unbatched); a call whose body uses the name is evaluated inline here."""
        names = axis_names_rules.get(prim)
        if names is not None:
            if self.axis not in names(**params):
                return None
            abstract_eval(prim, [get_aval(a) for a in args], params)  # checks shapes, as JAX
            vals, dims = zip(*[self.unpack(a) for a in args]) if args else ((), ())
            with set_trace(self.parent):
                out, out_dim = axis_batch_rules[prim](self.axis, list(vals), list(dims), **params)
            if prim.multiple_results:
                return [self.wrap(o, d) for o, d in zip(out, out_dim)]
            return self.wrap(out, out_dim)
        sub = params.get("jaxpr")
        if sub is not None and _uses_axis(sub, self.axis):
            from thunderx.ir import eval_jaxpr

            return eval_jaxpr(sub, [], *args)
        return None

    def lift(self, value):
        from thunderx.primitives import shape as S

        with set_trace(self.parent):
            return BatchTracer(self, S.broadcast_batch(value, self.axis_size, 0), 0)

    def lift_created(self, value):
        """A tensor created from a batched value (`x.new_zeros(n)`, `zeros_like(x)`) is one per
        example, as in torch.func, so traced values can be written into it in place."""
        return self.lift(value)

    def wrap(self, val, bdim):
        if bdim is None:
            return val
        return BatchTracer(self, val, bdim)


def _uses_axis(jaxpr, axis) -> bool:
    for e in jaxpr.eqns:
        names = axis_names_rules.get(e.prim)
        if names is not None and axis in names(**e.params):
            return True
        sub = e.params.get("jaxpr")
        if sub is not None and hasattr(sub, "eqns") and _uses_axis(sub, axis):
            return True
    return False


def _axes_for(spec, args, what: str):
    """One axis per leaf of `args` (as tree.leaves gives them). A None in `args` is an empty
    subtree, not a leaf: its entry in `spec` is skipped, so later arguments keep their axes."""
    try:
        axes = tree.broadcast_prefix(spec, args)
    except (ValueError, TypeError) as e:
        torch_name, values = ("in_dims", "inputs") if what == "in_axes" else ("out_dims", "outputs")
        raise ValueError(
            f"vmap {what} specification {spec!r} does not match the structure of the "
            f"{'arguments' if what == 'in_axes' else 'outputs'} ({e}): {torch_name} is not "
            f"compatible with the structure of `{values}` (at {user_frame()})"
        ) from None
    import optree

    with_none = optree.tree_leaves(args, none_is_leaf=True, namespace=tree.NAMESPACE)
    return [ax for ax, leaf in zip(axes, with_none) if leaf is not None]


class _DefaultAxis(int):
    """The default `in_axes`/`out_axes` (0), told apart from an explicit 0 so that passing both
    a JAX name and its torch.func alias (`in_dims`, `out_dims`) is an error."""

    def __repr__(self) -> str:
        return "0"


class _Unset:
    """The default of `in_dims` / `out_dims`: not given (None is a valid value)."""

    def __repr__(self) -> str:
        return "<unset>"


_AXIS0 = _DefaultAxis(0)
_UNSET: Any = _Unset()


def _alias(jax_value, torch_value, jax_name: str, torch_name: str):
    if torch_value is _UNSET:
        return jax_value
    if jax_value is not _AXIS0:
        raise TypeError(f"vmap: pass {jax_name} or {torch_name} (its torch.func name), not both")
    return torch_value


def vmap(
    fun: Callable,
    in_axes: Any = _AXIS0,
    out_axes: Any = _AXIS0,
    axis_size: int | None = None,
    randomness: str = "error",
    *,
    in_dims: Any = _UNSET,
    out_dims: Any = _UNSET,
    chunk_size: int | None = None,
    axis_name: str | None = None,
) -> Callable:
    """Vectorize `fun` over a batch axis of its inputs.

    `in_axes`: an int, None, or a pytree prefix of the positional arguments; `out_axes` likewise
    for the outputs (`in_dims` / `out_dims` are torch.func's names for them). `randomness`:
    'error' (default), 'different' or 'same' for random ops. `chunk_size`: map over at most this
    many batch elements at a time and concatenate (torch.func's memory bound; the result is the
    same as without it). `axis_name` names the batch axis for collectives
    (`thunderx.lax.psum(x, axis_name)` sums over the batch), so an SPMD program written for
    `shard_map` also runs under `vmap`.

    >>> thunderx.vmap(torch.dot, in_axes=(0, None))(torch.ones(5, 3), torch.ones(3)).shape
    torch.Size([5])
    >>> thunderx.vmap(torch.sum, in_dims=1, chunk_size=2)(torch.ones(4, 5))
    tensor([4., 4., 4., 4., 4.])
    >>> thunderx.vmap(lambda x: x / thunderx.lax.psum(x, "i"), axis_name="i")(torch.ones(4))
    tensor([0.2500, 0.2500, 0.2500, 0.2500])
    """
    validate.check_callable(fun, "vmap")
    in_axes = _alias(in_axes, in_dims, "in_axes", "in_dims")
    out_axes = _alias(out_axes, out_dims, "out_axes", "out_dims")
    if axis_name is not None and not isinstance(axis_name, str):
        raise TypeError(f"vmap: axis_name must be a str, got {axis_name!r}")
    if axis_name is not None and chunk_size is not None:
        raise ValueError(
            "vmap: chunk_size cannot be combined with axis_name: a collective over the axis "
            "needs all of its members at once"
        )
    if randomness not in ("error", "different", "same"):
        raise ArgumentValueError(
            f"vmap: randomness must be 'error', 'different' or 'same', not {randomness!r} "
            f"(at {user_frame()})"
        )
    if axis_size is not None:
        validate.check_int(axis_size, "vmap", "axis_size", minimum=0)
    validate.check_axis_spec(in_axes, "vmap", "in_axes")
    validate.check_axis_spec(out_axes, "vmap", "out_axes")
    if chunk_size is not None and (
        not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1
    ):
        raise ValueError(f"vmap: chunk_size must be a positive int or None, not {chunk_size!r}")
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)

    @functools.wraps(fun)
    def batched(*args, **kwargs):
        spec = in_axes
        if isinstance(spec, tuple) and len(spec) != len(args):
            raise ValueError(
                f"vmap in_axes has {len(spec)} entries but the function got {len(args)} "
                f"positional arguments: in_dims is not compatible with the structure of `inputs` "
                f"(at {user_frame()})"
            )
        # keyword arguments are always batched along axis 0 (JAX's rule)
        flat_args, in_tree = tree.flatten((args, kwargs))
        axes = _axes_for(spec, args, "in_axes") + [0] * len(tree.leaves(kwargs))
        sizes = {}
        norm_axes = []
        for i, (x, ax) in enumerate(zip(flat_args, axes)):
            if ax is None:
                norm_axes.append(None)
                continue
            if not isinstance(ax, int):
                raise TypeError(f"vmap in_axes entries must be int or None, got {ax!r}")
            if not is_tensor_like(x):
                raise ValueError(
                    f"vmap got in_axes={ax} for a non-tensor argument leaf {type(x).__name__} "
                    f"(Got in_dim={ax} for an input but the input is of type {type(x).__name__}) "
                    f"(at {user_frame()}); use None for it"
                )
            nd = len(x.shape)
            if not -nd <= ax < nd:
                raise ValueError(
                    f"vmap in_axes={ax} is out of range for an argument of rank {nd} "
                    f"(shape {tuple(x.shape)}; Got in_dim={ax} for some input, but that input is "
                    f"a Tensor of dimensionality {nd}) (at {user_frame()})"
                )
            ax = ax % nd
            norm_axes.append(ax)
            sizes[i] = x.shape[ax]
        distinct = set(sizes.values())
        if len(distinct) > 1:
            listing = ", ".join(f"leaf {i}: {s}" for i, s in sizes.items())
            raise ValueError(
                "vmap: Expected all tensors to have the same size in the mapped dimension, got "
                f"inconsistent batch sizes across arguments ({listing}) (at {user_frame()})"
            )
        if distinct:
            size = distinct.pop()
            if axis_size is not None and axis_size != size:
                raise ArgumentValueError(
                    f"vmap axis_size={axis_size} but the inputs have size {size} "
                    f"(at {user_frame()})"
                )
        elif axis_size is None:
            what = "got no inputs" if not flat_args else "got no batched Tensor inputs"
            raise ValueError(
                f"vmap: {what}; it needs at least one Tensor batched (in_axes not all None) or "
                f"an explicit axis_size (at {user_frame()})"
            )
        else:
            size = axis_size

        def run(xs, n, chunked=True):
            return _vmap_flat(
                fun, xs, norm_axes, in_tree, n, randomness, out_axes, axis_name, chunked
            )

        if chunk_size is None or size <= chunk_size:
            out_tree, results, _ = run(flat_args, size, chunked=False)
        else:
            out_tree, results = _chunked(run, flat_args, norm_axes, size, chunk_size, randomness)
        return tree.unflatten(out_tree, results)

    batched.__thunderx_transform__ = ("vmap", fun, in_axes)
    return batched


def _vmap_flat(
    fun, flat_args, norm_axes, in_tree, size, randomness, out_axes, axis_name=None, chunked=False
):
    """Run `fun` batched over `size` elements: (out tree, outputs, their normalized out axes)."""
    with new_trace(BatchTrace, size, randomness, axis_name) as trace:
        ins = [
            x if ax is None else BatchTracer(trace, x, ax) for x, ax in zip(flat_args, norm_axes)
        ]
        trace.input_ids.update(id(t) for t in ins)
        before = [None if ax is None else (t.val, t.bdim) for t, ax in zip(ins, norm_axes)]
        env = () if trace.axis is None else (trace.axis,)
        with _random_mode(trace), extend_axis_env(env):
            call_args, call_kwargs = tree.unflatten(in_tree, ins)
            out = fun(*call_args, **call_kwargs)
        out_leaves, out_tree = tree.flatten(out)
        validate.check_leaves(out_leaves, "vmap", "the function's outputs")
        unpacked = [trace.unpack(o) for o in out_leaves]
        mutated = mutated_inputs(trace, ins, before, trace.unpack)
    if mutated:
        write_back(mutated, flat_args, norm_axes, size, chunked)
    # an output that is an updated input is the caller's tensor (a view of it), as in torch.func
    aliased = {id(ins[i]): (flat_args[i], norm_axes[i]) for i, _ in mutated}
    try:
        oaxes = _axes_for(out_axes, out, "out_axes")
    except ValueError:
        # torch.func's rule: a one-element tuple of out_dims also stands for a single tensor
        # output (`out_dims=(1,)`), never for several outputs
        single = len(out_leaves) == 1 and tree.structure(out) == tree.structure(out_leaves[0])
        if not (isinstance(out_axes, (tuple, list)) and len(out_axes) == 1 and single):
            raise
        oaxes = _axes_for(out_axes[0], out, "out_axes")
    from thunderx.primitives import shape as S

    results, norm_oaxes = [], []
    for o, (val, bdim), oax in zip(out_leaves, unpacked, oaxes):
        if oax is None:
            if bdim is not None:
                raise ValueError(
                    f"vmap out_axes=None for an output that depends on the batched inputs "
                    f"(at {user_frame()})"
                )
            results.append(val)
            norm_oaxes.append(None)
            continue
        if not is_tensor_like(val):
            from thunderx.primitives import creation

            val = creation.full((), val, get_aval(val).dtype)
        nd = len(get_aval(val).shape) + (1 if bdim is None else 0)
        oax = validate.normalize_axis(
            oax, nd, "vmap", "out_axes", f"an output of rank {nd} (with the batch axis)"
        )
        norm_oaxes.append(oax)
        view = _caller_view(o, ins, flat_args, norm_axes, oax, val, bdim)
        if id(o) in aliased:
            x, ax = aliased[id(o)]
            results.append(x if ax == oax else torch.movedim(x, ax, oax))
        elif view is not None:
            results.append(view)
        elif bdim is None:
            results.append(S.broadcast_batch(val, size, oax))
        else:
            results.append(S.moveaxis(val, bdim, oax))
    return out_tree, results, norm_oaxes


def _caller_view(o, ins, flat_args, norm_axes, oax, val, bdim):
    """An output that is a view of an input is, as in torch.func, a view of the caller's tensor
    (`vmap(torch.diagonal)(x)._base is x`): the view chain replayed on the caller's tensor with
    torch's own batched view functions. Only for a tensor from eager code; None otherwise."""
    if not isinstance(o, Tracer) or bdim is None:
        return None
    from thunderx.lang.views import read_chain, view_of_input

    found = view_of_input(o, ins)
    if found is None:
        return None
    i, chain = found
    x, ax = flat_args[i], norm_axes[i]
    if ax is None or isinstance(x, Tracer) or not isinstance(x, torch.Tensor):
        return None
    try:
        # torch's own batching: not `torch.func.vmap`, which a user may have rebound to ours
        # and which runs ours inside a transform (thunderx/torch_func.py)
        from torch._functorch.vmap import vmap_impl

        view = vmap_impl(lambda e: read_chain(e, chain, concrete=True), ax, oax, "error", None, x)
    except Exception:  # a view torch cannot batch: the computed value stands
        return None
    want = get_aval(val)
    shape = list(want.shape)
    shape.insert(oax, shape.pop(bdim))
    if tuple(view.shape) != tuple(shape) or view.dtype != want.dtype:
        return None
    return view


def _chunked(run, flat_args, norm_axes, size, chunk_size, randomness):
    """torch.func's chunked vmap: map over slices of the batch, concatenate along the out axes.
    With randomness='same' every chunk starts from the same RNG state, so all draw alike."""
    from thunderx.core import is_top_level
    from thunderx.primitives.slicing import concatenate, slice_in_dim

    rng = None
    if randomness == "same":
        if not is_top_level():
            raise ValueError(
                "vmap(chunk_size=..., randomness='same') inside another transform cannot replay "
                f"the random draws for each chunk; drop chunk_size there (at {user_frame()})"
            )
        rng = _rng_state()
    chunks = []
    for start in range(0, size, chunk_size):
        stop = min(start + chunk_size, size)
        xs = [
            x if ax is None else slice_in_dim(x, start, stop, 1, ax)
            for x, ax in zip(flat_args, norm_axes)
        ]
        if rng is not None:
            _set_rng_state(rng)
        chunks.append(run(xs, stop - start))
    out_tree, _, oaxes = chunks[0]
    results = []
    for i, oax in enumerate(oaxes):
        parts = [c[1][i] for c in chunks]
        # out_axes=None: the output does not depend on the batch, every chunk has it whole
        results.append(parts[0] if oax is None else concatenate(parts, oax))
    return out_tree, results


def _rng_state():
    import torch

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state):
    import torch

    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def _random_mode(trace):
    from thunderx.lang.random import RandomnessMode

    return RandomnessMode(trace)
