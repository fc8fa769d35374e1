"""The autodiff API: jvp, linearize, vjp, grad, value_and_grad, jacfwd, jacrev, hessian.

Reverse mode is linearize + transpose: the function's jvp runs under online partial evaluation,
so its primal part runs now on the caller's values (in the caller's trace context) while its
linear part is staged into a jaxpr, which is transposed when cotangents arrive.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import torch

from thunderx import tree, validate
from thunderx.ad_util import Zero, instantiate, tangent_aval
from thunderx.avals import is_float
from thunderx.core import get_aval, is_tensor_like, new_trace
from thunderx.errors import (
    ArgumentValueError,
    IndependentOutputError,
    TransformArgumentTypeError,
    TransformArgumentValueError,
    user_frame,
)
from thunderx.ir import Jaxpr, eval_jaxpr
from thunderx.tracing import StagingTracer
from thunderx.transforms import holomorphic as H
from thunderx.transforms.jvp import jvp_flat, no_grad_outputs
from thunderx.transforms.partial_eval import PartialEvalTrace, check_versions
from thunderx.transforms.transpose import backward_pass

_SCALARS = (bool, int, float)


def _as_value(x, what: str):
    """Leaves of differentiated arguments: tensors or tracers; Python floats become tensors."""
    if is_tensor_like(x):
        return x
    if type(x) in (int, float):
        return torch.tensor(float(x)) if type(x) is float else torch.tensor(x)
    raise TypeError(
        f"{what}: arguments must be torch tensors, Python scalars or pytrees of them, "
        f"got {type(x).__name__} (at {user_frame()})"
    )


def _split_aux(out, has_aux: bool, name: str):
    if not has_aux:
        return out, None
    return validate.split_aux(out, name)


def _checked_outputs(fun, name):
    """`fun` whose outputs must be tensors or Python scalars (aux already filtered to tensors)."""

    def checked(*args):
        out = fun(*args)
        validate.check_leaves(out, name, "the function's outputs")
        return out

    return checked


def _check_api(fun, has_aux, name, argnums=None):
    """Construction-time checks shared by the entry points."""
    validate.check_callable(fun, name)
    validate.check_bool(has_aux, name, "has_aux")
    if argnums is not None:
        validate.check_argnums(argnums, name)


class _Linearized:
    """The result of staging a function's jvp and splitting it (see `linearize_flat`)."""

    __slots__ = (
        "primal_outs",
        "out_tree",
        "aux",
        "linear",
        "residuals",
        "tangent_unknown",
        "tangent_avals",
        "in_diff",
        "in_avals",
        "versions",
        "input_hooks",
        "deferred_writes",
    )


def linearize_flat(
    flat_fun, primals, has_aux=False, name="vjp", reverse: bool = True, defer_writes=False
) -> _Linearized:
    """`flat_fun(*leaves) -> out` (a pytree, or (out, aux) with has_aux). Computes the primal
    outputs now and returns the linear map's jaxpr with its residuals.

    The jvp of `flat_fun` runs under an online partial-evaluation trace (see
    transforms/partial_eval.py): primals are known, so the primal computation runs as it is
    reached (eagerly, or staged into an enclosing jit) and sees concrete values; tangents are
    unknown and their equations are staged into the linear jaxpr, whose constants are the
    residuals."""
    in_avals = [get_aval(p).strip_weak() for p in primals]
    in_diff = [tangent_aval(a) is not None for a in in_avals]
    meta = {}

    def inner(*xs):
        out, aux = _split_aux(flat_fun(*xs), has_aux, name)
        out_leaves, meta["out_tree"] = tree.flatten(out)
        aux_leaves, meta["aux_tree"] = tree.flatten(aux)
        meta["n_out"] = len(out_leaves)
        return out_leaves + aux_leaves

    with new_trace(PartialEvalTrace) as trace:
        t_in = [trace.new_arg(a) if d else None for a, d in zip(in_avals, in_diff)]
        # with defer_writes, in-place updates of the inputs are the caller's to write back
        # (`deferred_writes`) once the linear map has read the values before them
        deferred = [] if defer_writes else None
        p_outs, t_outs = jvp_flat(inner, primals, t_in, reverse, deferred=deferred)
        for p in p_outs:
            if type(p) is StagingTracer and p._trace is trace:
                raise RuntimeError("internal error: a primal output depends on a tangent")
        t_outs = t_outs[: meta["n_out"]]
        unknown = [type(t) is not Zero for t in t_outs]
        # built once, unchecked: the trace defines each variable once by construction
        outvars = [trace.atom(t) for t, u in zip(t_outs, unknown) if u]
        invars = [t._var for t in t_in if t is not None]
    lin = _Linearized()
    lin.primal_outs = p_outs[: meta["n_out"]]
    lin.aux = tree.unflatten(meta["aux_tree"], p_outs[meta["n_out"] :]) if has_aux else None
    lin.out_tree = meta["out_tree"]
    lin.residuals = trace.consts
    lin.linear = Jaxpr([], trace.constvars + invars, trace.eqns, outvars, walk=False)
    lin.tangent_unknown = unknown
    lin.tangent_avals = [t.aval if type(t) is Zero else get_aval(t).strip_weak() for t in t_outs]
    lin.in_diff = in_diff
    lin.in_avals = in_avals
    lin.versions = trace.versions
    lin.deferred_writes = deferred or ()
    # Tensor.register_hook on an input: its gradient goes through the hooks (lang/hooks.py)
    lin.input_hooks = {
        i: trace.hooks[id(t._var)]
        for i, t in enumerate(t_in)
        if t is not None and id(t._var) in trace.hooks
    }
    if lin.versions:
        check_versions(lin.linear, lin.residuals, lin.versions, "later in the same function")
    return lin


_AFTER = "after the function returned, before the derivative was evaluated"


def _transpose_linearized(lin: _Linearized, cts: list, holomorphic: bool = False) -> list:
    # torch's cotangent convention for complex values, unless JAX's holomorphic one is asked for
    cts = cts if holomorphic else H.conj_leaves(cts)
    cts_unknown = [ct for ct, u in zip(cts, lin.tangent_unknown) if u]
    if lin.versions:
        check_versions(lin.linear, lin.residuals, lin.versions, _AFTER)
    cts_in = backward_pass(lin.linear, lin.residuals, cts_unknown)
    it = iter(cts_in)
    out = []
    for a, d in zip(lin.in_avals, lin.in_diff):
        ct = next(it) if d else Zero(a)
        out.append(instantiate(ct))
    out = out if holomorphic else H.conj_leaves(out)
    if lin.input_hooks:
        from thunderx.lang.hooks import run_hooks

        out = [
            run_hooks(lin.input_hooks[i], g) if i in lin.input_hooks else g
            for i, g in enumerate(out)
        ]
    # evaluated in a no_grad block (of an enclosing transform's function): no derivative there
    return out if torch.is_grad_enabled() else no_grad_outputs(out)


def _apply_linearized(lin: _Linearized, tangents: list) -> list:
    ts = [t for t, d in zip(tangents, lin.in_diff) if d]
    if lin.versions:
        check_versions(lin.linear, lin.residuals, lin.versions, _AFTER)
    outs = iter(eval_jaxpr(lin.linear, [], *lin.residuals, *ts))
    out = [
        next(outs) if u else instantiate(Zero(a))
        for u, a in zip(lin.tangent_unknown, lin.tangent_avals)
    ]
    return out if torch.is_grad_enabled() else no_grad_outputs(out)


def _flatten_args(args, name):
    leaves, treedef = tree.flatten(args)
    return [_as_value(x, name) for x in leaves], treedef


# ----------------------------------------------------------------------------------------- API


def jvp(
    fun: Callable,
    primals: Sequence,
    tangents: Sequence,
    has_aux: bool = False,
    *,
    strict: bool = False,
):
    """Forward-mode derivative: returns `(fun(*primals), J @ tangents)`. With `strict=True`
    (torch.func's flag) an output that does not depend on the inputs is an error.

    >>> thunderx.jvp(torch.sin, (torch.tensor(0.),), (torch.tensor(1.),))
    (tensor(0.), tensor(1.))
    """
    _check_api(fun, has_aux, "jvp")
    if not isinstance(primals, (tuple, list)):
        raise TransformArgumentTypeError(
            f"jvp: Expected primals to be a tuple (primals and tangents must be tuples or lists "
            f"of arguments), got "
            f"{type(primals).__name__} (at {user_frame()})"
        )
    if not isinstance(tangents, (tuple, list)):
        raise TransformArgumentValueError(
            f"jvp: Expected tangents to have the same python structure as primals (a tuple or "
            f"list of arguments), got {type(tangents).__name__} (at {user_frame()})"
        )
    p_leaves, p_tree = _flatten_args(tuple(primals), "jvp")
    t_leaves, t_tree = _flatten_args(tuple(tangents), "jvp")
    if p_tree != t_tree:
        raise TransformArgumentValueError(
            f"jvp: Expected tangents to have the same python structure as primals: tangents "
            f"tree {t_tree}, primals tree {p_tree} (at {user_frame()})"
        )
    validate.check_tangents([get_aval(p) for p in p_leaves], t_leaves, "jvp")
    meta = {}
    user_fun = validate.AuxPassthrough(fun, "jvp") if has_aux else fun
    checked = _checked_outputs(user_fun, "jvp")

    def flat(*xs):
        out, aux = _split_aux(checked(*tree.unflatten(p_tree, xs)), has_aux, "jvp")
        leaves, meta["tree"] = tree.flatten(out)
        aux_leaves, meta["aux_tree"] = tree.flatten(aux)
        meta["n"] = len(leaves)
        return leaves + aux_leaves

    p_out, t_out = jvp_flat(flat, p_leaves, t_leaves, write_back=True)
    if not torch.is_grad_enabled():  # inside a no_grad block: see `jvp_flat`
        t_out = [t if type(t) is Zero else no_grad_outputs(t) for t in t_out]
    n = meta["n"]
    if strict and any(type(x) is Zero for x in t_out[:n]):
        raise IndependentOutputError(
            f"jvp(f, primals, tangents, strict=True): an output of the function at "
            f"{user_frame()} is independent of the inputs, which strict=True does not allow"
        )
    out = tree.unflatten(meta["tree"], p_out[:n])
    t = tree.unflatten(meta["tree"], [instantiate(x) for x in t_out[:n]])
    if has_aux:
        return out, t, user_fun.rebuild(tree.unflatten(meta["aux_tree"], p_out[n:]))
    return out, t


def linearize(fun: Callable, *primals, has_aux: bool = False):
    """Returns `(fun(*primals), f_jvp)` where `f_jvp(*tangents)` applies the linearized map;
    the primal computation is done once. With `has_aux` (`fun` returns `(out, aux)`), returns
    `(out, f_jvp, aux)` as JAX does.

    >>> y, f_jvp = thunderx.linearize(torch.sin, torch.tensor(0.))
    >>> f_jvp(torch.tensor(2.))
    tensor(2.)
    """
    _check_api(fun, has_aux, "linearize")
    leaves, in_tree = _flatten_args(primals, "linearize")
    user_fun = validate.AuxPassthrough(fun, "linearize") if has_aux else fun
    checked = _checked_outputs(user_fun, "linearize")
    lin = linearize_flat(
        lambda *xs: checked(*tree.unflatten(in_tree, xs)),
        leaves,
        has_aux,
        name="linearize",
        reverse=False,
    )

    def f_jvp(*tangents):
        t_leaves, t_tree = tree.flatten(tangents)
        if t_tree != in_tree:
            raise ArgumentValueError(
                f"linearize: the tangents' tree {t_tree} does not match the primals' {in_tree} "
                f"(at {user_frame()})"
            )
        validate.check_tangents(lin.in_avals, t_leaves, "linearize's f_jvp")
        return tree.unflatten(lin.out_tree, _apply_linearized(lin, t_leaves))

    out = tree.unflatten(lin.out_tree, lin.primal_outs)
    return (out, f_jvp, user_fun.rebuild(lin.aux)) if has_aux else (out, f_jvp)


def vjp(fun: Callable, *primals, has_aux: bool = False):
    """Returns `(fun(*primals), vjp_fn)`; `vjp_fn(ct)` gives one cotangent per primal.

    >>> out, f_vjp = thunderx.vjp(torch.sin, torch.tensor(0.))
    >>> f_vjp(torch.tensor(1.))
    (tensor(1.),)
    """
    _check_api(fun, has_aux, "vjp")
    leaves, in_tree = _flatten_args(primals, "vjp")
    user_fun = validate.AuxPassthrough(fun, "vjp") if has_aux else fun
    checked = _checked_outputs(user_fun, "vjp")
    lin = linearize_flat(lambda *xs: checked(*tree.unflatten(in_tree, xs)), leaves, has_aux, "vjp")

    def vjp_fn(ct):
        ct_leaves, ct_tree = tree.flatten(ct)
        if ct_tree != lin.out_tree:
            raise TransformArgumentValueError(
                f"vjp: the cotangent's tree {ct_tree} does not match the output's {lin.out_tree}: "
                f"Expected pytree structure of the cotangents to be the same as the output's "
                f"(at {user_frame()})"
            )
        validate.check_tangents(lin.tangent_avals, ct_leaves, "vjp", "cotangent")
        cts = _transpose_linearized(lin, ct_leaves)
        return tuple(tree.unflatten(in_tree, cts))

    out = tree.unflatten(lin.out_tree, lin.primal_outs)
    if has_aux:
        return out, vjp_fn, user_fun.rebuild(lin.aux)
    return out, vjp_fn


def _normalize_argnums(argnums, nargs: int, name: str):
    return validate.normalize_argnums(argnums, nargs, name)


def _partial(fun, args, kwargs, argnums):
    def f(*dyn):
        full = list(args)
        for i, a in zip(argnums, dyn):
            full[i] = a
        return fun(*full, **kwargs)

    return f


def _check_float_args(dyn, argnums, name):
    for i, a in zip(argnums, dyn):
        for leaf in tree.leaves(a):
            aval = get_aval(leaf)
            if not is_float(aval.dtype):
                raise TypeError(
                    f"{name} requires floating-point inputs, but argument {i} has a leaf of dtype "
                    f"{aval.dtype} (at {user_frame()}). Convert it with .float(), or leave it out "
                    "of argnums."
                )


def value_and_grad(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False):
    """Like `grad`, returning `(value, gradient)` (or `((value, aux), gradient)`).
    `holomorphic=True`: the complex derivative of a complex function of complex inputs (JAX's).

    >>> thunderx.value_and_grad(lambda x: (x ** 2).sum())(torch.tensor([3.]))
    (tensor(9.), tensor([6.]))
    """
    _check_api(fun, has_aux, "grad", argnums)

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        single, nums = _normalize_argnums(argnums, len(args), "grad")
        dyn = [tree.map(lambda x: _as_value(x, "grad"), args[i]) for i in nums]
        _check_float_args(dyn, nums, "grad")
        H.check(holomorphic, dyn, "grad")
        res = vjp(_partial(fun, args, kwargs, nums), *dyn, has_aux=has_aux)
        out, vjp_fn = res[0], res[1]
        leaves = tree.leaves(out)
        aval = get_aval(leaves[0]) if len(leaves) == 1 else None
        if aval is None or aval.shape != () or not is_float(aval.dtype):
            desc = aval.str_short() if aval is not None else f"a pytree with {len(leaves)} leaves"
            raise TypeError(
                f"grad requires a function with a scalar floating output, got {desc} "
                f"(at {user_frame()}). Reduce it first (e.g. .sum()), or use jacrev for "
                "non-scalar outputs."
            )
        H.check_output(holomorphic, aval, "grad")
        from thunderx.primitives import creation

        g = vjp_fn(creation.full((), 1.0, aval.dtype, aval.device))
        # vjp_fn gives torch's conj(f'(z)) for the real cotangent 1; holomorphic wants f'(z)
        g = g[0] if single else g
        if holomorphic:
            g = H.conj_tree(g)
        return ((out, res[2]) if has_aux else out), g

    wrapper.__thunderx_transform__ = ("value_and_grad", fun, None)
    return wrapper


def grad(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False):
    """Gradient of a scalar function with respect to argument(s) `argnums`; for complex inputs
    torch's convention (the conjugate Wirtinger derivative, times 2), or with `holomorphic=True`
    the complex derivative (JAX's).

    >>> thunderx.grad(lambda x: (x ** 2).sum())(torch.tensor([1., 2.]))
    tensor([2., 4.])
    """
    _check_api(fun, has_aux, "grad", argnums)
    vg = value_and_grad(fun, argnums, has_aux, holomorphic)

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        (out, g) = vg(*args, **kwargs)
        if has_aux:
            return g, out[1]
        return g

    wrapper.__thunderx_transform__ = ("grad", fun, None)
    return wrapper
