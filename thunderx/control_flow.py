"""Structured control flow with JAX's names and semantics: `cond`, `switch`, `while_loop`,
`fori_loop`, `scan` and `map` (`checkpoint` is in thunderx/checkpointing.py).

Under a transform each traces its functions once into sub-jaxprs of a higher-order primitive
(primitives/cond.py, scan.py, while_loop.py, remat.py), so `jit(grad(...))` of a loop costs the
same to trace whatever its trip count, and a data-dependent branch or loop works under `jit` and
`vmap`. Outside any transform, with concrete values, each runs eagerly in Python.

Carries, operands, xs and ys are pytrees; a body's output type must match its carry exactly,
else a TypeError names both types and the line of the call.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from thunderx import tree
from thunderx.core import Tracer, get_aval, is_top_level
from thunderx.errors import user_frame

__all__ = [
    "cond",
    "fori_loop",
    "map",
    "scan",
    "switch",
    "while_loop",
]

_SCALARS = (bool, int, float, complex)


# ------------------------------------------------------------------------------------ helpers


def _as_leaf(x, what: str):
    if isinstance(x, (Tracer, torch.Tensor)):
        return x
    if type(x) in _SCALARS:
        return torch.tensor(x)
    raise TypeError(
        f"{what}: values must be tensors, Python scalars or pytrees of them, got "
        f"{type(x).__name__} (at {user_frame()})"
    )


def _flatten(x, what: str):
    leaves, treedef = tree.flatten(x)
    return [_as_leaf(v, what) for v in leaves], treedef


def _concrete(*trees) -> bool:
    """Outside any transform and with no traced value anywhere: run eagerly in Python."""
    return is_top_level() and not any(isinstance(v, Tracer) for t in trees for v in tree.leaves(t))


def _trace(fun: Callable, in_trees: list, in_avals: list, what: str):
    """Trace `fun(*unflattened args)` into a closure-converted jaxpr: (jaxpr, consts, out_tree);
    the jaxpr's leading inputs are the consts (captured values), then the flattened args."""
    from thunderx.passes import closure_convert
    from thunderx.tracing import trace_flat

    sizes = [t.num_leaves for t in in_trees]
    guard = _random_guard(what)

    def flat(*xs):
        args, k = [], 0
        for t, n in zip(in_trees, sizes):
            args.append(tree.unflatten(t, xs[k : k + n]))
            k += n
        if guard is None:
            out = fun(*args)
        else:
            with guard:
                out = fun(*args)
        leaves, out_tree = tree.flatten(out)
        return [_as_leaf(v, what) for v in leaves], out_tree

    closed, out_tree = trace_flat(flat, in_avals)
    return closure_convert(closed.jaxpr), closed.consts, out_tree


def _random_guard(what: str):
    """Random draws in a body are staged, so each iteration draws anew; under
    `vmap(randomness='different')` they would need a batched draw per iteration, which the
    bodies' batching does not do: refuse rather than repeat one draw."""
    from torch.overrides import TorchFunctionMode

    from thunderx.lang.random import RANDOM_FUNCTIONS, _batch_traces

    if not any(bt.randomness == "different" for bt in _batch_traces()):
        return None
    where = user_frame()

    class NoBatchedRandom(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in RANDOM_FUNCTIONS:
                raise NotImplementedError(
                    f"{what}: a random op inside thunderx.lax control flow under "
                    f"vmap(randomness='different') is not supported (at {where}); draw the "
                    "random values outside the loop (as xs of a scan) or use randomness='same'"
                )
            return func(*args, **(kwargs or {}))

    return NoBatchedRandom()


def _check_same(what: str, a_name, a_tree, a_avals, b_name, b_tree, b_avals, where):
    from thunderx.primitives._subjaxpr import join_avals

    if a_tree != b_tree:
        raise TypeError(
            f"{what}: {a_name} has structure {a_tree} but {b_name} has {b_tree} (at {where})"
        )
    join_avals(what, a_avals, b_avals, a_name, b_name, where)


def _avals(leaves):
    return [get_aval(x).strip_weak() for x in leaves]


# --------------------------------------------------------------------------------- cond, switch


def cond(pred, true_fun: Callable, false_fun: Callable, *operands):
    """`true_fun(*operands)` if `pred` else `false_fun(*operands)`, as one traced primitive.

    >>> thunderx.jit(lambda x: cond(x.sum() > 0, torch.sin, torch.cos, x))(torch.ones(2))
    tensor([0.8415, 0.8415])
    """
    if type(pred) is bool or _concrete(pred, operands):
        return (true_fun if bool(pred) else false_fun)(*operands)
    return _switch(pred, [false_fun, true_fun], operands, "cond", ("false_fun", "true_fun"))


def switch(index, branches, *operands):
    """`branches[clamp(index, 0, len(branches) - 1)](*operands)`, as one traced primitive.

    >>> switch(torch.tensor(5), [torch.sin, torch.cos], torch.zeros(1))
    tensor([1.])
    """
    branches = list(branches)
    if not branches:
        raise ValueError(f"switch: needs at least one branch (at {user_frame()})")
    if type(index) is int or _concrete(index, operands):
        return branches[min(max(int(index), 0), len(branches) - 1)](*operands)
    names = tuple(f"branch {k}" for k in range(len(branches)))
    return _switch(index, branches, operands, "switch", names)


def _switch(index, branches, operands, what, names):
    from thunderx.primitives import unary as U
    from thunderx.primitives.cond import cond_p, merge_branch_consts

    where = user_frame()
    a = get_aval(index)
    if a.shape != () or a.dtype.is_floating_point or a.dtype.is_complex:
        raise TypeError(
            f"{what}: the {'predicate' if what == 'cond' else 'index'} must be a bool or integer "
            f"scalar, got {a.str_short()} (at {where})"
        )
    index = U.convert(index, torch.int32)
    leaves, in_tree = _flatten(operands, what)
    avals = _avals(leaves)
    traced = [_trace(lambda ops, b=b: b(*ops), [in_tree], avals, what) for b in branches]
    j0, _, t0 = traced[0]
    for (j, _, t), name in zip(traced[1:], names[1:]):
        _check_same(what, names[0], t0, j0.out_avals, name, t, j.out_avals, where)
    new_branches, consts = merge_branch_consts([(j, c) for j, c, _ in traced])
    outs = cond_p.bind(index, *consts, *leaves, branches=new_branches)
    return tree.unflatten(t0, outs)


# ------------------------------------------------------------------------------------- loops


def while_loop(cond_fun: Callable, body_fun: Callable, init_val):
    """Repeat `val = body_fun(val)` while `cond_fun(val)`; returns the final `val`. Reverse-mode
    differentiable: the forward loop records its trip count and residuals at run time.

    >>> while_loop(lambda x: x < 10, lambda x: x * 2, torch.tensor(1))
    tensor(16)
    """
    from thunderx.primitives.while_loop import while_p

    if _concrete(init_val):
        val = init_val
        while bool(cond_fun(val)):
            val = body_fun(val)
        return val
    where = user_frame()
    leaves, in_tree = _flatten(init_val, "while_loop")
    avals = _avals(leaves)
    cj, cc, c_tree = _trace(cond_fun, [in_tree], avals, "while_loop")
    pred = cj.out_avals
    if c_tree.num_leaves != 1 or pred[0].shape != () or pred[0].dtype is not torch.bool:
        shown = ", ".join(a.str_short() for a in pred)
        raise TypeError(f"while_loop: cond_fun must return a bool scalar, got {shown} (at {where})")
    bj, bc, b_tree = _trace(body_fun, [in_tree], avals, "while_loop")
    _check_same(
        "while_loop", "init_val", in_tree, avals, "body_fun's output", b_tree, bj.out_avals, where
    )
    outs = while_p.bind(
        *cc,
        *bc,
        *leaves,
        cond_jaxpr=cj,
        body_jaxpr=bj,
        cond_nconsts=len(cc),
        body_nconsts=len(bc),
        num_stacked=0,
    )
    return tree.unflatten(in_tree, outs)


def fori_loop(lower, upper, body_fun: Callable, init_val):
    """`for i in range(lower, upper): val = body_fun(i, val)`. With Python-int bounds it is a
    `scan` (reverse mode stores residuals per step, any derivative order); otherwise a
    `while_loop` over `(i, val)`.

    >>> fori_loop(0, 4, lambda i, x: x + i, torch.tensor(0))
    tensor(6)
    """
    if type(lower) is int and type(upper) is int:
        if _concrete(init_val):
            val = init_val
            for i in range(lower, upper):
                val = body_fun(torch.tensor(i), val)
            return val

        def step(carry, _):
            i, val = carry
            return (i + 1, body_fun(i, val)), None

        (_, val), _ = scan(
            step, (torch.tensor(lower), init_val), None, length=max(upper - lower, 0)
        )
        return val
    if _concrete(lower, upper, init_val):
        val = init_val
        for i in range(int(lower), int(upper)):
            val = body_fun(torch.tensor(i), val)
        return val
    lower = _as_leaf(lower, "fori_loop")
    upper = _as_leaf(upper, "fori_loop")

    def body(carry):
        i, hi, val = carry
        return i + 1, hi, body_fun(i, val)

    _, _, val = while_loop(lambda c: c[0] < c[1], body, (lower, upper, init_val))
    return val


def scan(
    f: Callable,
    init,
    xs=None,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
):
    """`carry, y = f(carry, x)` over the leading axis of `xs`; returns `(carry, stacked ys)`.

    `unroll` is accepted for JAX compatibility (the generated loop calls the body once per step).

    >>> scan(lambda c, x: (c + x, c * x), torch.tensor(0.), torch.arange(3.))
    (tensor(3.), tensor([0., 0., 2.]))
    """
    from thunderx.primitives.scan import scan_p

    where = user_frame()
    if not isinstance(unroll, (bool, int)) or (not isinstance(unroll, bool) and unroll < 1):
        raise ValueError(f"scan: unroll must be a positive int or a bool, got {unroll!r}")
    x_leaves, x_tree = _flatten(xs, "scan")
    lengths = {int(get_aval(x).shape[0]) for x in x_leaves if get_aval(x).shape}
    if any(get_aval(x).shape == () for x in x_leaves):
        raise ValueError(f"scan: every xs leaf needs a leading axis to scan over (at {where})")
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise ValueError(
            f"scan: xs leading axes and length disagree or are missing: {sorted(lengths)} "
            f"(at {where})"
        )
    n = lengths.pop()
    if n > 0 and _concrete(init, xs):
        carry, ys = init, []
        for i in reversed(range(n)) if reverse else range(n):
            carry, y = f(carry, tree.unflatten(x_tree, [x[i] for x in x_leaves]))
            ys.append(y)
        if reverse:
            ys.reverse()
        y_leaves = [tree.leaves(y) for y in ys]
        stacked = [
            torch.stack([torch.as_tensor(c[k]) for c in y_leaves]) for k in range(len(y_leaves[0]))
        ]
        return carry, tree.unflatten(tree.structure(ys[0]), stacked)
    c_leaves, c_tree = _flatten(init, "scan")
    c_avals = _avals(c_leaves)
    x_avals = [a.update(shape=a.shape[1:]) for a in _avals(x_leaves)]

    def body(carry, x):
        out = f(carry, x)
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError(f"scan: f must return a pair (carry, y) (at {where})")
        return out

    j, consts, out_tree = _trace(body, [c_tree, x_tree], c_avals + x_avals, "scan")
    dummy = tree.unflatten(out_tree, list(range(out_tree.num_leaves)))
    carry_tree = tree.structure(dummy[0])
    y_tree = tree.structure(dummy[1])
    nc = carry_tree.num_leaves
    _check_same(
        "scan", "init", c_tree, c_avals, "f's carry output", carry_tree, j.out_avals[:nc], where
    )
    outs = scan_p.bind(
        *consts,
        *c_leaves,
        *x_leaves,
        jaxpr=j,
        num_consts=len(consts),
        num_carry=nc,
        length=n,
        reverse=bool(reverse),
    )
    return tree.unflatten(c_tree, outs[:nc]), tree.unflatten(y_tree, outs[nc:])


def map(f: Callable, xs, *, batch_size: int | None = None):  # noqa: A001 - JAX's name
    """`f` applied to each slice of `xs` along the leading axis, results stacked (a scan with no
    carry). With `batch_size`, as JAX: each scan step applies `vmap(f)` to `batch_size` slices,
    and the slices left over (fewer than `batch_size`) go through one more `vmap(f)`.

    >>> map(lambda x: x.sum(), torch.ones(3, 2))
    tensor([2., 2., 2.])
    >>> map(lambda x: x.sum(), torch.ones(5, 2), batch_size=2)
    tensor([2., 2., 2., 2., 2.])
    """
    if batch_size is None:
        _, ys = scan(lambda c, x: (c, f(x)), None, xs)
        return ys
    from thunderx.transforms.vmap import vmap

    where = user_frame()
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"map: batch_size must be a positive int, got {batch_size!r} (at {where})")
    leaves, treedef = _flatten(xs, "map")
    lengths = {int(get_aval(x).shape[0]) for x in leaves if get_aval(x).shape}
    if len(lengths) != 1 or any(get_aval(x).shape == () for x in leaves):
        raise ValueError(f"map: xs leaves need one common leading axis (at {where})")
    n = lengths.pop()
    if n == 0:  # no slices: the unbatched map gives the stacks of length 0 (f's output shapes)
        return map(f, xs)
    steps, rest = divmod(n, batch_size)
    batched = vmap(f)
    parts = []
    if steps:
        chunks = [x[: steps * batch_size].reshape(steps, batch_size, *x.shape[1:]) for x in leaves]
        _, ys = scan(lambda c, x: (c, batched(x)), None, tree.unflatten(treedef, chunks))
        parts.append(tree.map(lambda y: y.reshape(steps * batch_size, *y.shape[2:]), ys))
    if rest:
        parts.append(batched(tree.unflatten(treedef, [x[steps * batch_size :] for x in leaves])))
    if len(parts) == 1:
        return parts[0]
    return tree.map(lambda a, b: torch.cat([a, b]), *parts)


# ------------------------------------------------------------------ torch's own control flow


def _has_tracer(*trees) -> bool:
    return any(isinstance(v, Tracer) for t in trees for v in tree.leaves(t))


def _torch_cond(original):
    @functools.wraps(original)
    def torch_cond(pred, true_fn, false_fn, operands=()):
        if not _has_tracer(pred, tuple(operands)):
            return original(pred, true_fn, false_fn, operands)
        return cond(pred, true_fn, false_fn, *operands)

    return torch_cond


def _torch_while_loop(original):
    @functools.wraps(original)
    def torch_while_loop(cond_fn, body_fn, carried_inputs, *args, **kwargs):
        if not _has_tracer(tuple(carried_inputs)):
            return original(cond_fn, body_fn, carried_inputs, *args, **kwargs)
        out = while_loop(lambda c: cond_fn(*c), lambda c: tuple(body_fn(*c)), tuple(carried_inputs))
        return out

    return torch_while_loop


def _torch_scan(original):
    @functools.wraps(original)
    def torch_scan(combine_fn, init, xs, *, dim: int = 0, reverse: bool = False, **kwargs):
        if not _has_tracer(init, xs):
            return original(combine_fn, init, xs, dim=dim, reverse=reverse, **kwargs)
        xs = tree.map(lambda x: x.movedim(dim, 0), xs)
        carry, ys = scan(lambda c, x: tuple(combine_fn(c, x)), init, xs, reverse=reverse)
        return carry, tree.map(lambda y: y.movedim(0, dim), ys)

    return torch_scan


def install_torch_control_flow() -> None:
    """Route `torch.cond` and `torch._higher_order_ops.while_loop` / `scan` (where this torch has
    them) to thunderx's primitives when a traced value reaches them; otherwise torch runs them."""
    import torch._higher_order_ops as hop

    if not getattr(torch.cond, "__thunderx__", False):
        torch.cond = _torch_cond(torch.cond)
        torch.cond.__thunderx__ = True
    for name, wrap in (("while_loop", _torch_while_loop), ("scan", _torch_scan)):
        fn = getattr(hop, name, None)
        if callable(fn) and not getattr(fn, "__thunderx__", False):
            wrapped = wrap(fn)
            wrapped.__thunderx__ = True
            setattr(hop, name, wrapped)
