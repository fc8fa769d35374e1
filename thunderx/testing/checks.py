"""Checks of derivatives and transforms against independent oracles: central finite differences
in float64, Python loops for vmap, eager execution for jit, the dot-product identity for
transposes."""

from __future__ import annotations

import math
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
        # equal values (infinities included: inf - inf is nan) and NaN against NaN agree
        agree = (a == e) | (torch.isnan(a) & torch.isnan(e))
        err = torch.where(agree, torch.full_like(err, -1.0), err)
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


# ------------------------------------------------------------------------- special points

# Values where derivative rules go wrong: zero (kinks, sign(x) and select(x > 0) terms), ±1
# (bounds of clamps, hardtanh), ±3 and 6 (hardsigmoid, hardswish, relu6 bounds), large
# magnitudes (saturation, overflow) and infinities.
SPECIAL_VALUES = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 6.0, 30.0, -30.0)
INFINITE_VALUES = (math.inf, -math.inf)
# The values each input domain admits (see thunderx.testing.strategies.values).
DOMAIN_VALUES = {
    "real": SPECIAL_VALUES,
    "nonzero": tuple(v for v in SPECIAL_VALUES if v != 0),
    "positive": (1e-3, 0.5, 1.0, 3.0, 6.0, 30.0),
    "unit": (0.0, -0.0, 0.5, -0.5, 0.9, -0.9),
    "gt1": (1.001, 3.0, 6.0, 30.0),
    "small": (0.0, -0.0, 0.25, -0.25, 0.5, -0.5),
    "probability": (1e-3, 0.1, 0.5, 0.9, 0.999),
}


def special_tensor(shape, domain: str = "real", offset: int = 0, dtype=torch.float64):
    """A tensor of `shape` filled with the domain's special values, cycling from `offset`."""
    vals = DOMAIN_VALUES[domain]
    n = math.prod(shape)
    flat = [vals[(offset + i) % len(vals)] for i in range(n)]
    return torch.tensor(flat, dtype=dtype).reshape(shape)


def check_against_torch(
    f: Callable,
    args: Sequence,
    order: int = 2,
    rtol: float = 1e-6,
    atol: float = 1e-6,
    seed: int = 0,
) -> None:
    """thunderx's derivatives of `f` at `args` against torch.func's, up to second order: the
    reference at kinks and ties, where torch's conventions are what a torch user compares
    against. Checks forward mode (jvp), reverse mode (grad), and for order 2 forward-over-forward
    and reverse-over-reverse; NaNs must match. Where the two disagree at a point where `f` is
    differentiable (one-sided differences in float64 agree) and the difference quotient sides
    with thunderx, torch's derivative is the wrong one and the check passes.

    >>> check_against_torch(torch.abs, (torch.tensor([0.0, 1.0], dtype=torch.float64),))
    """
    import torch.func as tf

    import thunderx

    args = tuple(_f64(a) for a in args)
    floats = [i for i, a in enumerate(args) if _is_float(a)]
    gen = torch.Generator().manual_seed(seed)
    out = f(*args)
    weights = tree.map(lambda o: torch.randn(o.shape, dtype=torch.float64, generator=gen), out)
    dirs = tuple(torch.randn(args[i].shape, dtype=torch.float64, generator=gen) for i in floats)

    def scalar(*xs):
        full = list(args)
        for i, x in zip(floats, xs):
            full[i] = x
        y = f(*full)
        return sum((a * w).sum() for a, w in zip(tree.leaves(y), tree.leaves(weights)))

    primals = tuple(args[i] for i in floats)
    nums = tuple(range(len(primals)))

    def along(s):  # the primals moved by s along the directions
        return tuple(p + s * d for p, d in zip(primals, dirs))

    def nudged(i, k, s):  # primal i's element k moved by s
        xs = [p.clone() for p in primals]
        xs[i].view(-1)[k] += s
        return xs

    def compare(got, want, what, probe):
        try:
            _assert_close(got, want, rtol, atol, f"check_against_torch: {what}")
        except AssertionError:
            if not _torch_is_wrong(got, want, probe, rtol, atol):
                raise

    compare(thunderx.jit(f)(*args), out, "value (jit vs eager)", None)
    compare(
        thunderx.jvp(scalar, primals, dirs)[1],
        tf.jvp(scalar, primals, dirs)[1],
        "jvp",
        lambda i, k, s: scalar(*along(s)),
    )
    compare(
        thunderx.grad(scalar, nums)(*primals),
        tf.grad(scalar, nums)(*primals),
        "grad",
        lambda i, k, s: scalar(*nudged(i, k, s)),
    )
    if order < 2:
        return

    def fwd_fwd(jvp):
        return lambda *xs: jvp(lambda *ys: jvp(scalar, ys, dirs)[1], xs, dirs)[1]

    def rev_rev(grad):
        def inner(*xs):
            return sum((a * d).sum() for a, d in zip(grad(scalar, nums)(*xs), dirs))

        return grad(inner, nums), inner

    torch_jvp = fwd_fwd(tf.jvp)
    compare(
        fwd_fwd(thunderx.jvp)(*primals),
        torch_jvp(*primals),
        "second derivative, forward over forward",
        lambda i, k, s: tf.jvp(scalar, along(s), dirs)[1],
    )
    torch_rev, torch_inner = rev_rev(tf.grad)
    compare(
        rev_rev(thunderx.grad)[0](*primals),
        torch_rev(*primals),
        "second derivative, reverse over reverse",
        lambda i, k, s: torch_inner(*nudged(i, k, s)),
    )


def _torch_is_wrong(got, want, probe, rtol, atol, eps=1e-6) -> bool:
    """For every element where thunderx (`got`) and torch (`want`) differ: `probe(leaf, k, s)`
    is a function of s whose derivative at 0 the element should be. True when at each such
    element the one-sided difference quotients agree (f is differentiable there) and match
    thunderx but not torch."""
    if probe is None:
        return False
    got_leaves, want_leaves = tree.leaves(got), tree.leaves(want)
    if len(got_leaves) != len(want_leaves):
        return False
    for i, (a, e) in enumerate(zip(got_leaves, want_leaves)):
        a = torch.as_tensor(a, dtype=torch.float64).reshape(-1)
        e = torch.as_tensor(e, dtype=torch.float64).reshape(-1)
        if a.shape != e.shape:
            return False
        for k in range(a.numel()):
            ak, ek = float(a[k]), float(e[k])
            if (
                ak == ek
                or (math.isnan(ak) and math.isnan(ek))
                or abs(ak - ek) <= atol + rtol * abs(ek)
            ):
                continue
            g = {s: float(probe(i, k, s * eps)) for s in (-2, -1, 0, 1, 2)}
            # one-sided differences of second order, so curvature does not tell them apart
            right = (-3 * g[0] + 4 * g[1] - g[2]) / (2 * eps)
            left = (3 * g[0] - 4 * g[-1] + g[-2]) / (2 * eps)
            central = (g[1] - g[-1]) / (2 * eps)
            tol = 1e-4 * (1 + abs(central))
            if not all(map(math.isfinite, (right, left, ak))) or abs(right - left) > tol:
                return False  # a kink (or worse): torch's convention decides
            if abs(ak - central) > tol or abs(ek - central) <= tol:
                return False
    return True
