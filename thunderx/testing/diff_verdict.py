"""The verdict on one disagreement between thunderx and torch.func / torch.autograd: float64
finite differences decide which side is wrong. Each check (thunderx/testing/diff_checks.py)
returns None (agreement), or a `Finding` whose category says what kind of disagreement it is:

- `forward`: jit or vmap computes other values than eager torch (no derivative involved);
- `error`: thunderx raised where torch computed a result;
- `thunderx-wrong`: at a point where the function is differentiable (one-sided differences agree)
  finite differences side with torch;
- `kink`: the point is not differentiable (one-sided differences differ), so torch's convention is
  the reference (DESIGN: torch.func is the oracle at kinks and ties);
- `torch-wrong`: differentiable point, finite differences side with thunderx (reported, not a
  thunderx failure); `jax-differs`: thunderx and JAX disagree and finite differences do not
  side with JAX at a differentiable point (reported);
- `unresolved`: differentiable point, finite differences agree with neither (or are not finite);
- `overflow`: finite differences are not finite, or beyond POLE_FD (steps beside a pole), and
  neither side is finite where they differ (inf against nan: the derivative overflows, and
  where each chain rule meets inf - inf or inf * 0 decides which non-finite value it gives);
  reported, not a failure.

At a differentiable point, entries within the rounding noise torch's answer shows of itself (its
answers at the inputs scaled by an ulp or a few, `NOISE_SCALES`) are no disagreement: an entry
that cancels large terms is noise in every evaluation order.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from thunderx import tree

F64 = torch.float64
RTOL, ATOL = 1e-6, 1e-8  # thunderx vs torch: the same math in float64
FD_RTOL, FD_ATOL = 1e-4, 1e-5  # either side vs central differences


@dataclasses.dataclass
class Finding:
    check: str
    category: str
    detail: str


def _flat(x) -> torch.Tensor:
    leaves = [t for t in tree.leaves(x) if isinstance(t, torch.Tensor)]
    if not leaves:
        return torch.zeros(0, dtype=F64)
    return torch.cat([t.reshape(-1).to(F64) for t in leaves])


# The relative tolerance of thunderx vs torch for the case being checked (set by run_check): a
# case whose values reach magnitude M carries rounding noise of about 1e-16 * M in any float64
# evaluation order (logits of 5e12 give a loss of 0.1 with an error near 1e-3).
_CASE_RTOL = [RTOL]


def _close(a, b, rtol=None, atol=ATOL) -> torch.Tensor:
    """Elementwise agreement (NaN matches NaN, inf matches the same inf)."""
    rtol = _CASE_RTOL[0] if rtol is None else rtol
    if a.shape != b.shape:
        return torch.zeros(max(a.numel(), b.numel(), 1), dtype=torch.bool)
    same = (a == b) | (a.isnan() & b.isnan())
    # a finite value is never close to an infinite one (rtol * inf would admit any)
    return same | (torch.isfinite(b) & ((a - b).abs() <= atol + rtol * b.abs()))


def _same_structure(got, want) -> str | None:
    gl, wl = tree.leaves(got), tree.leaves(want)
    if len(gl) != len(wl):
        return f"{len(gl)} outputs, torch {len(wl)}"
    for g, w in zip(gl, wl):
        if isinstance(w, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                return f"{type(g).__name__} where torch gives a tensor"
            if g.shape != w.shape or g.dtype != w.dtype:
                return f"{g.dtype}{tuple(g.shape)} where torch gives {w.dtype}{tuple(w.shape)}"
    return None


# --------------------------------------------------------------------- finite differences


def fd_jacobian(f: Callable, xs: list, eps: float = 1e-6):
    """(central, forward, backward) Jacobians of flat(f(*xs)) by the flattened float inputs."""
    sizes = [x.numel() for x in xs]
    base = torch.cat([x.reshape(-1) for x in xs]) if xs else torch.zeros(0, dtype=F64)

    def at(v):
        parts, off = [], 0
        for x, n in zip(xs, sizes):
            parts.append(v[off : off + n].reshape(x.shape))
            off += n
        return _flat(f(*parts))

    f0 = at(base)
    cols_c, cols_f, cols_b = [], [], []
    for j in range(base.numel()):
        h = eps * max(1.0, abs(float(base[j])))
        e = torch.zeros_like(base)
        e[j] = h
        fp, fm = at(base + e), at(base - e)
        c_h = (fp - fm) / (2 * h)
        # Richardson's extrapolation from steps h and h/2: the central difference's O(h^2)
        # truncation error cancels, leaving rounding near 1e-10 of the function's scale
        # (digamma cubed near 0.24 has third derivatives of 4e5: 6e-8 at h alone)
        c_half = (at(base + e / 2) - at(base - e / 2)) / h
        rich = (4 * c_half - c_h) / 3
        cols_c.append(torch.where(torch.isfinite(rich), rich, c_h))
        cols_f.append((fp - f0) / h)
        cols_b.append((f0 - fm) / h)
    if not cols_c:
        empty = torch.zeros(f0.numel(), 0, dtype=F64)
        return empty, empty, empty
    return torch.stack(cols_c, 1), torch.stack(cols_f, 1), torch.stack(cols_b, 1)


def _smooth(jf, jb) -> bool:
    scale = 1 + jf.abs() + jb.abs()
    ok = ((jf - jb).abs() <= 1e-3 * scale) | (jf.isnan() & jb.isnan())
    return bool(ok.all())


# Central differences in float64 with steps of 1e-6 carry rounding errors near 1e-10 of the
# function's scale: a side within SHARP_RTOL of them where the other is at least SHARP_FACTOR times
# farther away is the right one, though both are inside FD_RTOL (torch's hardsigmoid derivative is
# 1.0f / 6.0f, a float32 constant, even in float64: 3e-8 off, 5e-8 after cancellation)
SHARP_RTOL, SHARP_FACTOR = 1e-8, 30.0
POLE_FD = 1e10  # |differences| where neither side is finite: the derivative overflows

# The oracle's own rounding noise, measured: the inputs scaled by factors one to four roundings
# from 1. A common factor keeps zeros, signs and ties (equal inputs stay equal); the derivatives
# at a differentiable point move by far less than any tolerance, except in entries that cancel
# large terms, which carry those terms' rounding in every evaluation order: -trunc(y / m) = -1.8e11
# times a sum of gradients that is exactly 0 gives 0.31 in one order and 0.044 in another.
NOISE_SCALES = (1 + 2.0**-52, 1 - 2.0**-53, 1 + 2.0**-50, 1 - 2.0**-51)


def within_noise(g: torch.Tensor, w: torch.Tensor, again: list) -> torch.Tensor:
    """Per entry: whether `g` lies within the rounding noise torch's answer `w` shows of itself
    over `again` (torch's answers at the inputs scaled by NOISE_SCALES): inside the band of those
    answers widened by its own width on each side, or (non-finite) equal to one of them."""
    if not again or any(a.shape != w.shape for a in again):
        return torch.zeros(g.shape, dtype=torch.bool)
    stack = torch.stack([w, *again])
    finite = torch.isfinite(stack).all(0)
    lo = torch.where(finite, stack.amin(0), 0.0)
    hi = torch.where(finite, stack.amax(0), 0.0)
    width = hi - lo
    inside = finite & (width > 0) & (g >= lo - width) & (g <= hi + width)
    equal = ((stack == g) | (stack.isnan() & g.isnan())).any(0)
    return inside | (~torch.isfinite(g) & equal)


def _closer_than_differences_err(a, other, c) -> bool:
    """Whether `a` agrees with the central differences `c` so closely that `other` cannot."""
    da, do = (a - c).abs(), (other - c).abs()
    near = da <= SHARP_RTOL * (1 + c.abs())
    return bool((near & (do >= SHARP_FACTOR * torch.clamp(da, min=1e-14 * (1 + c.abs())))).all())


def classify(
    check: str,
    got,
    want,
    fd: Callable[[], tuple],
    atol: float = ATOL,
    again: Callable[[], list] | None = None,
) -> Finding | None:
    """A derivative disagreement: `fd()` -> (central, forward, backward) of the same quantity;
    `again()` -> torch's answers at the inputs scaled by NOISE_SCALES. None where the point is
    differentiable and every differing entry is within the rounding noise those answers show."""
    g, w = _flat(got), _flat(want)
    bad = ~_close(g, w, atol=atol)
    c, fwd, bwd = fd()
    where = f"{int(bad.sum())} of {bad.numel()} entries differ"
    if not _smooth(fwd, bwd):
        return Finding(check, "kink", f"{where}; non-differentiable point: {_pair(g, w, bad)}")
    if again is not None and _noise_only(g, w, bad, again):
        return None
    cb, gb, wb = c[bad], g[bad], w[bad]
    neither_finite = bool(bad.any()) and not (torch.isfinite(gb).any() or torch.isfinite(wb).any())
    if not torch.isfinite(cb).all():
        detail = f"{where}; differences not finite: {_pair(g, w, bad)}"
        if neither_finite:
            # no side finite where the differences overflow too: each chain rule's inf - inf
            # or inf * 0 decides between nan and inf, and no answer is the right one
            return Finding(check, "overflow", detail)
        return Finding(check, "unresolved", detail)
    if neither_finite and bool((cb.abs() >= POLE_FD).all()):
        # inf against nan beside a pole: the differences are finite only because the steps
        # stay off it, and are too large for either non-finite answer to be checked
        return Finding(check, "overflow", f"{where}; differences near a pole: {_pair(g, w, bad)}")
    ok_w = bool(_close(wb, cb, FD_RTOL, FD_ATOL).all())
    ok_g = bool(_close(gb, cb, FD_RTOL, FD_ATOL).all())
    if ok_w and ok_g:
        ok_w, ok_g = (
            _closer_than_differences_err(wb, gb, cb),
            _closer_than_differences_err(gb, wb, cb),
        )
    cat = (
        "thunderx-wrong"
        if ok_w and not ok_g
        else "torch-wrong"
        if ok_g and not ok_w
        else ("unresolved")
    )
    return Finding(check, cat, f"{where}: {_pair(g, w, bad)}, finite differences {cb[:4].tolist()}")


def _noise_only(g, w, bad, again: Callable[[], list]) -> bool:
    """Whether every differing entry is rounding noise of torch's own answer. Asked only at a
    differentiable point: at a kink or a threshold (an integer, a clamp's bound) a scaled input
    can cross it and change torch's answer by more than rounding."""
    try:
        answers = [_flat(a) for a in again()]
    except Exception:  # noqa: BLE001 - torch cannot compute a scaled input's answer: no noise known
        return False
    return bool(within_noise(g[bad], w[bad], [a[bad] for a in answers if a.shape == w.shape]).all())


def _pair(g, w, bad) -> str:
    return f"thunderx {g[bad][:4].tolist()} vs torch {w[bad][:4].tolist()}"
