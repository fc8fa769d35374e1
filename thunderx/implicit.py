"""Implicit differentiation with JAX's API: `custom_linear_solve` and `custom_root`.

A solver's own iterations are never differentiated. `custom_linear_solve` differentiates
x = A^{-1} b through A and b (forward mode through the solve of the tangent, reverse mode through
a solve with A's transpose), `custom_root` differentiates a root x of f(x, params) = 0 through
the implicit function theorem, dx = -(df/dx)^{-1} (df/dparams) dparams, with the user's
`tangent_solve`. Both work under every transform (grad, jvp, vmap, jit, jacfwd, hessian) and
outside them.

>>> A = torch.tensor([[2.0, 1.0], [1.0, 3.0]])
>>> solve = lambda mv, b: torch.linalg.solve(A, b)
>>> custom_linear_solve(lambda x: A @ x, torch.tensor([3.0, 5.0]), solve, symmetric=True)
tensor([0.8000, 1.4000])
"""

from __future__ import annotations

from typing import Callable

import torch

from thunderx import tree
from thunderx.core import Tracer, get_aval
from thunderx.errors import user_frame

__all__ = ["custom_linear_solve", "custom_root"]


def _number(x) -> bool:
    return type(x) in (bool, int, float)


def _weak(linear: Callable, like) -> Callable:
    """`linear` taking a Python number for a tensor of `like`'s dtype and shape (JAX's weak types:
    `tangent_solve`'s `g(1.0)` for a scalar root)."""

    def call(v):
        return linear(tree.map(lambda t, p: _full(p, t) if _number(t) else t, v, like))

    return call


def _full(like, value) -> torch.Tensor:
    """A tensor of `like`'s shape, dtype and device holding `value`, made from those static facts
    only (inside a trace it is that trace's constant, whatever level `like` belongs to)."""
    return torch.full(tuple(like.shape), value, dtype=like.dtype, device=like.device)


def _leaves(x, what: str, where: str) -> tuple[list, object]:
    leaves, treedef = tree.flatten(x)
    for v in leaves:
        if not isinstance(v, (Tracer, torch.Tensor)):
            raise TypeError(
                f"{what} must be a tensor or a pytree of tensors, got "
                f"{type(v).__name__} (at {where})"
            )
    return leaves, treedef


def _trace(fun: Callable, in_avals: list, what: str, where: str):
    """fun(*leaves) traced: (closure-converted jaxpr, consts, out_tree)."""
    from thunderx.ir import closure_convert
    from thunderx.tracing import trace_flat

    def flat(*xs):
        out = fun(*xs)
        leaves, out_tree = tree.flatten(out)
        for v in leaves:
            if not isinstance(v, (Tracer, torch.Tensor)):
                raise TypeError(
                    f"{what} returned a {type(v).__name__}; it must return tensors (at {where})"
                )
        return leaves, out_tree

    closed, out_tree = trace_flat(flat, in_avals)
    return closure_convert(closed.jaxpr), list(closed.consts), out_tree


def custom_linear_solve(
    matvec: Callable,
    b,
    solve: Callable,
    transpose_solve: Callable | None = None,
    symmetric: bool = False,
    has_aux: bool = False,
):
    """`x = solve(matvec, b)`, a solution of `matvec(x) == b`, differentiated implicitly: the
    derivatives of x in b and in the values `matvec` closes over are those of A^{-1} b, whatever
    `solve` does (an iterative method, a factorization, torch.linalg.solve). `matvec` must be
    linear in x; x has b's structure, shapes and dtypes. Reverse mode (grad, vjp, jacrev) needs
    `transpose_solve(vecmat, b)`, a solve with A's transpose, or `symmetric=True` (A = A^T).
    With `has_aux`, `solve` (and `transpose_solve`) return `(x, aux)` and the call returns
    `(x, aux)`; aux has no derivative.
    """
    from thunderx.primitives.linear_solve import check_solution, linear_solve_p

    where = user_frame()
    for name, fn in (("matvec", matvec), ("solve", solve)):
        if not callable(fn):
            raise TypeError(f"custom_linear_solve: {name} must be callable (at {where})")
    if symmetric:
        transpose_solve = solve
    b_leaves, b_tree = _leaves(b, "custom_linear_solve: b", where)
    b_avals = [get_aval(v).strip_weak() for v in b_leaves]

    def as_x(leaves):
        return tree.unflatten(b_tree, list(leaves))

    def mv_flat(*xs):
        out = matvec(as_x(xs))
        _, out_tree = tree.flatten(out)
        if out_tree != b_tree:
            raise TypeError(
                f"custom_linear_solve: matvec returned the structure {out_tree} for "
                f"x of b's structure {b_tree} (at {where})"
            )
        return out

    mv_j, mv_c, _ = _trace(mv_flat, b_avals, "custom_linear_solve: matvec", where)

    def solver(fn, lin, what):
        def flat(*bs):
            out = fn(lin, as_x(bs))
            x, aux = out if has_aux else (out, None)
            _, x_tree = tree.flatten(x)
            if x_tree != b_tree:
                raise TypeError(
                    f"custom_linear_solve: {what} returned the structure {x_tree}; "
                    f"x must have b's structure {b_tree} (at {where})"
                )
            return (x, aux) if has_aux else x

        return _trace(flat, b_avals, f"custom_linear_solve: {what}", where)

    s_j, s_c, s_tree = solver(solve, matvec, "solve")
    check_solution(s_j, b_avals, "solve")
    params = dict(matvec=mv_j, solve=s_j, tsolve=None, n_mv=len(mv_c), n_s=len(s_c), n_ts=0)
    operands = [*mv_c, *s_c]
    if transpose_solve is not None:
        if not callable(transpose_solve):
            raise TypeError(f"custom_linear_solve: transpose_solve must be callable (at {where})")
        vecmat = matvec if symmetric else _vecmat(mv_j, mv_c, b_tree)
        t_j, t_c, t_tree = solver(transpose_solve, vecmat, "transpose_solve")
        check_solution(t_j, b_avals, "transpose_solve")
        if t_tree != s_tree:
            raise TypeError(
                f"custom_linear_solve: transpose_solve returned the structure "
                f"{t_tree}, solve {s_tree} (at {where})"
            )
        params.update(tsolve=t_j, n_ts=len(t_c))
        operands += t_c
    n_x = len(b_leaves)
    params["n_aux"] = len(s_j.outvars) - n_x
    outs = linear_solve_p.bind(*operands, *b_leaves, **params)
    return tree.unflatten(s_tree, outs)


def _vecmat(mv_j, mv_c: list, b_tree) -> Callable:
    """c -> A^T c: matvec's jaxpr transposed in x (what transpose_solve receives, as in JAX)."""
    from thunderx.ir import eval_jaxpr
    from thunderx.primitives._subjaxpr import transpose_jaxpr

    n_x = len(mv_j.outvars)
    tj, t_consts = transpose_jaxpr(mv_j, (False,) * len(mv_c) + (True,) * n_x, (True,) * n_x)

    def vecmat(c):
        return tree.unflatten(b_tree, eval_jaxpr(tj, [], *t_consts, *mv_c, *tree.leaves(c)))

    return vecmat


def custom_root(
    f: Callable,
    initial_guess,
    solve: Callable,
    tangent_solve: Callable,
    has_aux: bool = False,
):
    """A root x of `f(x) == 0` found by `solve(f, initial_guess)`, differentiated implicitly in
    the values `f` closes over: dx = -J^{-1} (df/dparams) dparams with J = df/dx at the root,
    applied by `tangent_solve(g, y)`, which solves the linear map `g` (J's action) for y (for a
    scalar x: `lambda g, y: y / g(1.0)`). The solver's iterations and the initial guess are not
    differentiated; `solve` reaches the parameters through `f` (a value it closes over itself
    must not be one being differentiated). With `has_aux`, `solve` returns `(x, aux)` and the call returns `(x, aux)`;
    aux has no derivative.
    """
    from thunderx.primitives.higher_order import stop_gradient
    from thunderx.transforms.ad import jvp, linearize
    from thunderx.transforms.closure import closure_convert
    from thunderx.transforms.custom import custom_jvp

    where = user_frame()
    for name, fn in (("f", f), ("solve", solve), ("tangent_solve", tangent_solve)):
        if not callable(fn):
            raise TypeError(f"custom_root: {name} must be callable (at {where})")
    g_leaves, g_tree = _leaves(initial_guess, "custom_root: initial_guess", where)
    guess = tree.unflatten(g_tree, [stop_gradient(v) for v in g_leaves])
    # the values f closes over become explicit, so the rule below can differentiate in them
    f_c, consts = closure_convert(f, guess)

    @custom_jvp
    def root(guess, *consts):
        out = solve(lambda x: f_c(x, *consts), guess)
        x, aux = out if has_aux else (out, None)
        x_leaves, x_tree = _leaves(x, "custom_root: solve's result", where)
        if x_tree != g_tree or any(
            tuple(get_aval(v).shape) != tuple(get_aval(g).shape) for v, g in zip(x_leaves, g_leaves)
        ):
            raise TypeError(
                f"custom_root: solve returned {x_tree} of other shapes than the initial guess "
                f"{g_tree} (at {where})"
            )
        return (x, aux) if has_aux else x

    @root.defjvp
    def root_jvp(primals, tangents):
        guess, *cs = primals
        _, *dcs = tangents
        out = root(guess, *cs)
        x = out[0] if has_aux else out
        # rhs = -(df/dparams)(x) dparams, x held
        _, moved = jvp(lambda *c: f_c(x, *c), tuple(cs), tuple(dcs))
        rhs = tree.map(lambda t: -t, moved)
        _, jac = linearize(lambda z: f_c(z, *cs), x)
        dx = custom_linear_solve(
            _weak(jac, x),
            rhs,
            tangent_solve,
            transpose_solve=lambda vm, y: tangent_solve(_weak(vm, x), y),
        )
        if has_aux:
            aux_t = tree.map(lambda a: torch.zeros_like(a), out[1])
            return out, (dx, aux_t)
        return out, dx

    return root(guess, *consts)
