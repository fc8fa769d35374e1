"""custom_jvp and custom_vjp: user-defined derivative rules, with JAX's semantics.

Under `jvp`/`grad` only the rule runs (the function itself is not traced, so Python control flow
on values inside it is fine, and it runs no extra time); the function runs, or is traced, where a
primal is needed without its derivative (outside any transform, under `vmap`, staged by `jit`).
The rule's outputs are checked against the primal's structure, shapes and dtypes.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable, Sequence

import torch

from thunderx import tree, validate
from thunderx.ad_util import Zero, instantiate
from thunderx.avals import is_float
from thunderx.core import Tracer, get_aval, is_tensor_like, is_top_level
from thunderx.errors import user_frame
from thunderx.transforms import holomorphic as H

_SCALARS = (bool, int, float)


class _Call:
    """One call of a custom function: its static (nondiff) arguments, the flat structure of the
    differentiable ones, and what the rules found out about the output."""

    def __init__(self, fun, args, kwargs, nondiff_argnums, kind):
        self.name = getattr(fun, "__name__", repr(fun))
        self.kind = kind
        args = _resolve_kwargs(fun, args, kwargs, kind)
        for i in nondiff_argnums:
            if not -len(args) <= i < len(args):
                raise ValueError(
                    f"{kind} {self.name}: nondiff_argnums entry {i} is out of range for a call "
                    f"with {len(args)} arguments"
                )
        self.nondiff = sorted({i % len(args) for i in nondiff_argnums}) if args else []
        self.args = list(args)
        dyn = [a for i, a in enumerate(args) if i not in self.nondiff]
        leaves, self.in_tree = tree.flatten(dyn)
        for x in leaves:
            if not (is_tensor_like(x) or type(x) in _SCALARS):
                raise TypeError(
                    f"{kind} {self.name}: argument leaf of type {type(x).__name__} at "
                    f"{user_frame()}; differentiable arguments must be tensors or Python scalars "
                    "(mark others with nondiff_argnums)"
                )
        self.leaves = leaves
        self.in_avals = [get_aval(x) for x in leaves]
        self.out_tree = None

    def full_args(self, dyn_leaves):
        dyn = iter(tree.unflatten(self.in_tree, list(dyn_leaves)))
        return [a if i in self.nondiff else next(dyn) for i, a in enumerate(self.args)]

    def static_args(self):
        return [self.args[i] for i in self.nondiff]

    def set_out_tree(self, out_tree, what):
        if self.out_tree is None:
            self.out_tree = out_tree
        elif out_tree != self.out_tree:
            raise TypeError(
                f"{self.kind} {self.name}: {what} returned the structure {out_tree}, but the "
                f"function's output is {self.out_tree}"
            )

    def flatten_out(self, out, what):
        leaves, out_tree = tree.flatten(out)
        self.set_out_tree(out_tree, what)
        return leaves


def _resolve_kwargs(fun, args, kwargs, kind):
    """Keyword arguments become positional (JAX resolves them against the signature)."""
    if not kwargs:
        return tuple(args)
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"{kind} {getattr(fun, '__name__', fun)}: {e} (at {user_frame()})"
        ) from None
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(
            f"{kind} {getattr(fun, '__name__', fun)}: keyword-only arguments are not supported"
        )
    return tuple(bound.args)


def _check_like(kind, name, what, got, want_avals, allow_none=False):
    """Each leaf of a rule's output must have the primal's shape and dtype."""
    for i, (g, a) in enumerate(zip(got, want_avals)):
        if g is None and allow_none:
            continue
        if type(g) is Zero:
            continue
        if not is_tensor_like(g) and type(g) not in _SCALARS:
            raise TypeError(
                f"{kind} {name}: {what} leaf {i} is a {type(g).__name__}, expected a tensor "
                f"like {a.str_short()}"
            )
        ga = get_aval(g)
        if tuple(ga.shape) != tuple(a.shape) or (
            is_float(a.dtype) and type(g) not in _SCALARS and ga.dtype != a.dtype
        ):
            raise TypeError(
                f"{kind} {name}: {what} leaf {i} is {ga.str_short()}, but the primal is "
                f"{a.str_short()}; a rule must return values of the primal's shape and dtype"
            )


def _needs_bind(leaves, torch_rule: bool = False) -> bool:
    """Under a transform, or on tensors torch autograd records (whose derivative must then be
    the rule: primitives/custom.py)."""
    from thunderx.primitives.custom import torch_records

    if not is_top_level() or any(isinstance(x, Tracer) for x in leaves):
        return True
    return torch_rule and torch_records(leaves)


def _internal(fun) -> bool:
    return (getattr(fun, "__module__", None) or "").startswith("thunderx.")


def _call_name(rule, c) -> str:
    """The call's name param; `INTERNAL_RULE` marks thunderx's own rules."""
    from thunderx.primitives.custom import DERIVATIVE_KEEPERS, INTERNAL_RULE

    if rule.torch_rule or c.name in DERIVATIVE_KEEPERS:
        return c.name
    return INTERNAL_RULE + c.name


class custom_jvp:  # noqa: N801 - JAX's name
    """A function with a custom forward-mode rule; reverse mode is derived by transposition.

    >>> @thunderx.custom_jvp
    ... def f(x):
    ...     return torch.sin(x)
    >>> @f.defjvp
    ... def f_jvp(primals, tangents):
    ...     (x,), (t,) = primals, tangents
    ...     return torch.sin(x), torch.cos(x) * t
    >>> thunderx.grad(f)(torch.tensor(0.))
    tensor(1.)
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        validate.check_callable(fun, "custom_jvp")
        functools.update_wrapper(self, fun)
        self.fun = fun
        # torch autograd takes the rule as the derivative (primitives/custom.py), except for
        # thunderx's own decompositions' rules, whose primal torch keeps differentiating
        self.torch_rule = not _internal(fun)
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable | None = None

    def defjvp(self, jvp: Callable) -> Callable:
        """`jvp(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)`."""
        validate.check_callable(jvp, "custom_jvp.defjvp", "jvp")
        self.jvp = jvp
        return jvp

    def defjvps(self, *jvps: Callable | None) -> None:
        """One rule per argument: `jvp_i(tangent_i, primal_out, *primals)` gives argument i's
        contribution to the output tangent (None: the output does not depend on it).

        >>> @thunderx.custom_jvp
        ... def f(x, y):
        ...     return torch.sin(x) * y
        >>> f.defjvps(lambda tx, ans, x, y: torch.cos(x) * y * tx,
        ...           lambda ty, ans, x, y: torch.sin(x) * ty)
        >>> thunderx.grad(f, argnums=1)(torch.tensor(0.), torch.tensor(2.))
        tensor(0.)
        """
        if self.nondiff_argnums:
            raise TypeError("defjvps cannot be used with nondiff_argnums; use defjvp")
        fun = self.fun

        def jvp(primals, tangents):
            ans = fun(*primals)
            total = None
            for rule, t in zip(jvps, tangents):
                leaves = tree.leaves(t)
                if rule is None or all(type(x) is Zero for x in leaves):
                    continue
                part = rule(tree.map(instantiate, t), ans, *primals)
                total = part if total is None else tree.map(lambda a, b: a + b, total, part)
            if total is None:
                total = tree.map(lambda o: torch.zeros_like(o), ans)
            return ans, total

        self.jvp = jvp
        self._defjvps = True

    def __call__(self, *args, **kwargs):
        if self.jvp is None:
            raise AttributeError(
                f"no JVP rule defined for custom_jvp function {self.__name__}; use .defjvp"
            )
        c = _Call(self.fun, args, kwargs, self.nondiff_argnums, "custom_jvp")
        if not _needs_bind(c.leaves, self.torch_rule):
            return self.fun(*c.args)
        from thunderx.primitives.custom import custom_jvp_call_p

        fun, rule, symbolic = self.fun, self.jvp, getattr(self, "_defjvps", False)

        def call(*dyn):
            return c.flatten_out(fun(*c.full_args(dyn)), "the function")

        def jvp(primals, tangents):
            full = c.full_args(primals)
            dyn_primals = [a for i, a in enumerate(full) if i not in c.nondiff]
            # defjvps skips arguments whose tangent is a symbolic zero; defjvp gets zeros
            ts = list(tangents) if symbolic else [instantiate(t) for t in tangents]
            dyn_tangents = tree.unflatten(c.in_tree, ts)
            res = rule(*c.static_args(), tuple(dyn_primals), tuple(dyn_tangents))
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise TypeError(
                    f"custom_jvp {c.name}: the jvp rule must return a pair "
                    f"(primal_out, tangent_out), got {type(res).__name__}"
                )
            out = c.flatten_out(res[0], "the jvp rule's primal output")
            t_leaves, t_tree = tree.flatten(res[1])
            if t_tree != c.out_tree:
                raise TypeError(
                    f"custom_jvp {c.name}: the jvp rule's tangent output has the structure "
                    f"{t_tree}, but the primal output is {c.out_tree}"
                )
            _check_like(
                "custom_jvp", c.name, "tangent output", t_leaves, [get_aval(o) for o in out]
            )
            return out, t_leaves

        outs = custom_jvp_call_p.bind(
            *c.leaves, call=call, jvp=jvp, jaxpr=None, num_consts=0, name=_call_name(self, c)
        )
        return tree.unflatten(c.out_tree, outs)


class custom_vjp:  # noqa: N801 - JAX's name
    """A function with a custom reverse-mode rule.

    `fwd(*args) -> (out, residuals)`; `bwd(*nondiff_args, residuals, ct)` returns a tuple with one
    cotangent per differentiable argument (None for a zero).

    >>> @thunderx.custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> clip_gradient.defvjp(lambda x: (x, None), lambda _, ct: (ct.clamp(-1, 1),))
    >>> thunderx.grad(lambda x: 5 * clip_gradient(x))(torch.tensor(2.))
    tensor(1.)
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        validate.check_callable(fun, "custom_vjp")
        functools.update_wrapper(self, fun)
        self.fun = fun
        # torch autograd takes the rule as the derivative (primitives/custom.py), except for
        # thunderx's own decompositions' rules, whose primal torch keeps differentiating
        self.torch_rule = not _internal(fun)
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        validate.check_callable(fwd, "custom_vjp.defvjp", "fwd")
        validate.check_callable(bwd, "custom_vjp.defvjp", "bwd")
        self.fwd = fwd
        self.bwd = bwd

    def __call__(self, *args, **kwargs):
        if self.fwd is None or self.bwd is None:
            raise AttributeError(
                f"no VJP rule defined for custom_vjp function {self.__name__}; "
                "use .defvjp(fwd, bwd)"
            )
        c = _Call(self.fun, args, kwargs, self.nondiff_argnums, "custom_vjp")
        if not _needs_bind(c.leaves, self.torch_rule):
            return self.fun(*c.args)
        from thunderx.primitives.custom import custom_vjp_call_p

        fun, user_fwd, user_bwd = self.fun, self.fwd, self.bwd
        state = {}

        def call(*dyn):
            return c.flatten_out(fun(*c.full_args(dyn)), "the function")

        def fwd(*dyn):
            res = user_fwd(*c.full_args(dyn))
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise TypeError(
                    f"custom_vjp {c.name}: fwd must return a pair (output, residuals), "
                    f"got {type(res).__name__}"
                )
            out = c.flatten_out(res[0], "fwd")
            res_leaves, state["res_tree"] = tree.flatten(res[1])
            state["out_avals"] = [get_aval(o) for o in out]
            return out, res_leaves

        def bwd(res_leaves, ct_leaves):
            res = tree.unflatten(state["res_tree"], list(res_leaves))
            # bwd speaks torch's cotangent convention for complex values (transforms/holomorphic)
            ct = tree.unflatten(c.out_tree, H.conj_leaves(list(ct_leaves)))
            cts = user_bwd(*c.static_args(), res, ct)
            n_dyn = len(c.args) - len(c.nondiff)
            if not isinstance(cts, (tuple, list)) or len(cts) != n_dyn:
                got = len(cts) if isinstance(cts, (tuple, list)) else type(cts).__name__
                raise TypeError(
                    f"custom_vjp {c.name}: bwd must return a tuple with one cotangent per "
                    f"differentiable argument ({n_dyn}), got {got}"
                )
            dyn_args = [a for i, a in enumerate(c.args) if i not in c.nondiff]
            out = []
            for a, g in zip(dyn_args, cts):
                n = len(tree.leaves(a))
                if g is None:
                    out.extend([None] * n)
                    continue
                g_leaves, g_tree = tree.flatten(g)
                if g_tree != tree.structure(a):
                    raise TypeError(
                        f"custom_vjp {c.name}: a cotangent from bwd has the structure {g_tree}, "
                        f"but its argument is {tree.structure(a)}"
                    )
                out.extend(g_leaves)
            _check_like("custom_vjp", c.name, "cotangent", out, c.in_avals, allow_none=True)
            return H.conj_leaves(out)

        outs = custom_vjp_call_p.bind(
            *c.leaves,
            call=call,
            fwd=fwd,
            bwd=bwd,
            jaxpr=None,
            num_consts=0,
            name=_call_name(self, c),
        )
        return tree.unflatten(c.out_tree, outs)
