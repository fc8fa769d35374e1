"""Checks of derivatives and transforms against independent oracles: central finite differences
in float64, Python loops for vmap, eager execution for jit, the dot-product identity for
transposes."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from thunderx import tree, validate
from thunderx.errors import ArgumentTypeError, ArgumentValueError, user_frame


def _check_entry(f, args, api: str) -> None:
    validate.check_callable(f, api, "f")
    if not isinstance(args, (tuple, list)):
        raise ArgumentTypeError(
            f"{api}: args must be a tuple or list of arguments, got {type(args).__name__} "
            f"(at {user_frame()})"
        )


def _f64(x):
    if isinstance(x, torch.Tensor) and x.dtype.is_floating_point:
        return x.detach().to(torch.float64)
    return x


def _is_float(x):
    return isinstance(x, torch.Tensor) and x.dtype.is_floating_point


def _random_like(x, gen):
    return torch.randn(x.shape, dtype=x.dtype, generator=gen) if _is_float(x) else None


def _inner(a, b) -> torch.Tensor:
    la, lb = tree.leaves(a), tree.leaves(b)
    total = torch.zeros((), dtype=torch.float64)
    for x, y in zip(la, lb):
        if _is_float(x) and _is_float(y):
            total = total + (x.to(torch.float64) * y.to(torch.float64)).sum()
    return total


def numerical_jvp(f: Callable, args: Sequence, tangents: Sequence, eps: float = 1e-6):
    """Central difference (f(x + eps t) - f(x - eps t)) / (2 eps), leafwise, in float64."""
    plus = [a + eps * t if t is not None else a for a, t in zip(args, tangents)]
    minus = [a - eps * t if t is not None else a for a, t in zip(args, tangents)]
    fp, fm = f(*plus), f(*minus)

    def quotient(p, m):
        if _is_float(p):
            return (p - m) / (2 * eps)
        # an integer output (indices) has no derivative; a placeholder keeps outputs aligned
        return torch.zeros_like(p) if isinstance(p, torch.Tensor) else None

    return tree.map(quotient, fp, fm)


def _assert_close(actual, expected, rtol, atol, what):
    la, le = tree.leaves(actual), tree.leaves(expected)
    if len(la) != len(le):
        raise AssertionError(f"{what}: {len(la)} outputs, expected {len(le)}")
    for i, (a, e) in enumerate(zip(la, le)):
        if e is None or not _is_float(e):
            continue
        a = torch.as_tensor(a, dtype=torch.float64)
        e = e.to(torch.float64)
        if a.shape != e.shape:
            raise AssertionError(
                f"{what}: output {i} has shape {tuple(a.shape)}, expected {tuple(e.shape)}"
            )
        err = (a - e).abs() - (atol + rtol * e.abs())
        both_nan = torch.isnan(a) & torch.isnan(e)
        err = torch.where(both_nan, torch.full_like(err, -1.0), err)
        bad = torch.isnan(err) | (err > 0)
        if bad.any():
            flat = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err).reshape(
                -1
            )
            k = int(flat.argmax())
            idx = (
                tuple(int(v) for v in torch.unravel_index(torch.tensor(k), a.shape))
                if a.dim()
                else ()
            )
            raise AssertionError(
                f"{what}: output {i} differs at index {idx}: got {a.reshape(-1)[k].item():.10g}, "
                f"expected {e.reshape(-1)[k].item():.10g} (rtol={rtol}, atol={atol}; "
                f"{int(bad.sum())} of {bad.numel()} elements off)"
            )


def check_grads(
    f: Callable,
    args: Sequence,
    order: int = 1,
    modes: Sequence[str] = ("fwd", "rev"),
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    seed: int = 0,
    _level: int = 1,
) -> None:
    """Check thunderx's derivatives of `f` at `args` against central finite differences in
    float64, up to `order`: forward mode compares jvp with the difference quotient along a random
    direction; reverse mode checks <ct, J t> == <vjp(ct), t>. Raises AssertionError naming the
    worst element and both values."""
    import thunderx

    _check_entry(f, args, "check_grads")
    validate.check_int(order, "check_grads", "order", minimum=1)
    if isinstance(modes, str) or not set(modes) <= {"fwd", "rev"} or not modes:
        raise ArgumentValueError(
            f"check_grads: modes must be a non-empty sequence of 'fwd' and 'rev', got {modes!r} "
            f"(at {user_frame()})"
        )
    args = tuple(_f64(a) for a in args)
    gen = torch.Generator().manual_seed(seed)
    tangents = [_random_like(a, gen) for a in args]
    zero_t = [t if t is not None else torch.zeros_like(a) for a, t in zip(args, tangents)]
    expected = numerical_jvp(f, args, tangents, eps)
    if "fwd" in modes:
        _, got = thunderx.jvp(f, args, tuple(zero_t))
        _assert_close(
            got, expected, rtol, atol, f"check_grads: forward mode, derivative of order {_level}"
        )
    if "rev" in modes:
        out, f_vjp = thunderx.vjp(f, *args)
        ct = tree.map(
            lambda o: (
                torch.randn(o.shape, dtype=o.dtype, generator=gen)
                if _is_float(o)
                else torch.zeros_like(o)
            ),
            out,
        )
        cts_in = f_vjp(ct)
        lhs = _inner(ct, expected)
        rhs = _inner(
            cts_in, [t if t is not None else torch.zeros_like(a) for a, t in zip(args, tangents)]
        )
        _assert_close(
            rhs,
            lhs,
            rtol,
            atol * max(1.0, float(lhs.abs())),
            f"check_grads: reverse mode <vjp(ct), t> vs <ct, J t>, derivative of order {_level}",
        )
    if order > 1:

        def directional(*xs):
            return thunderx.jvp(f, xs, tuple(zero_t))[1]

        check_grads(directional, args, order - 1, modes, eps, rtol, atol, seed + 1, _level + 1)


def check_vmap(f: Callable, args: Sequence, in_axes=0, out_axes=0, rtol=1e-6, atol=1e-6) -> None:
    """vmap(f) equals a Python loop over the batch, stacked along out_axes."""
    import thunderx

    _check_entry(f, args, "check_vmap")

    got = thunderx.vmap(f, in_axes, out_axes)(*args)
    flat_args, in_tree = tree.flatten(tuple(args))
    axes = tree.broadcast_prefix(
        in_axes
        if isinstance(in_axes, tuple) or in_axes is None or isinstance(in_axes, int)
        else tuple(in_axes),
        tuple(args),
    )
    size = next(a.shape[ax] for a, ax in zip(flat_args, axes) if ax is not None)
    results = []
    for b in range(size):
        sl = [a.select(ax, b) if ax is not None else a for a, ax in zip(flat_args, axes)]
        results.append(f(*tree.unflatten(in_tree, sl)))
    out_leaves, out_tree = tree.flatten(results[0])
    oaxes = tree.broadcast_prefix(out_axes, results[0])
    stacked = []
    for i, oax in enumerate(oaxes):
        col = [tree.leaves(r)[i] for r in results]
        stacked.append(
            col[0] if oax is None else torch.stack([torch.as_tensor(c) for c in col], oax)
        )
    expected = tree.unflatten(out_tree, stacked)
    _assert_close(got, expected, rtol, atol, "check_vmap: vmap vs loop")
    _check_same_dtypes(got, expected, "check_vmap")


def check_jit(f: Callable, args: Sequence, rtol=1e-6, atol=1e-6) -> None:
    """jit(f) equals f run eagerly."""
    import thunderx

    _check_entry(f, args, "check_jit")

    got = thunderx.jit(f)(*args)
    expected = f(*args)
    _assert_close(got, expected, rtol, atol, "check_jit: jit vs eager")
    _check_same_dtypes(got, expected, "check_jit")


def _check_same_dtypes(got, expected, what):
    for i, (a, e) in enumerate(zip(tree.leaves(got), tree.leaves(expected))):
        if isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor) and a.dtype != e.dtype:
            raise AssertionError(f"{what}: output {i} has dtype {a.dtype}, expected {e.dtype}")


def check_transpose(linear_f: Callable, args: Sequence, rtol=1e-6, atol=1e-6, seed=0) -> None:
    """For a function linear in `args`: <ct, L(t)> == <L^T(ct), t> on random t and ct, with L^T
    computed by thunderx's transposition (vjp)."""
    import thunderx

    _check_entry(linear_f, args, "check_transpose")

    gen = torch.Generator().manual_seed(seed)
    args = tuple(_f64(a) for a in args)
    ts = [torch.randn(a.shape, dtype=a.dtype, generator=gen) for a in args]
    out, f_vjp = thunderx.vjp(linear_f, *ts)
    ct = tree.map(lambda o: torch.randn(o.shape, dtype=o.dtype, generator=gen), out)
    lhs = _inner(ct, linear_f(*ts))
    rhs = _inner(f_vjp(ct), ts)
    _assert_close(
        rhs,
        lhs,
        rtol,
        atol * max(1.0, float(lhs.abs())),
        "check_transpose: <L^T ct, t> vs <ct, L t>",
    )
