"""torch.special functions thunderx has no decomposition or derivative for (Bessel and Airy
functions, orthogonal polynomials, zeta, the incomplete gamma functions; also gcd and lcm):
torch's elementwise kernels. Under jit each is one opaque call; under vmap the kernel runs once
on the whole batch (elementwise, so the operands' batch axes only need to line up in front, as
torch.func's fallback gives), nested vmaps and jit included. The Bessel functions j0, j1, y0,
y1, i0, i1, k0, k1 (scaled too) and spherical j0 are differentiable (their derivatives are
Bessel functions again), where torch has no derivative and torch.func's gradient is a silent 0;
differentiating the others is refused, naming the function."""

from __future__ import annotations

import torch

from thunderx.core import Tracer, current_trace, get_aval, set_trace
from thunderx.lang._base import register
from thunderx.lang.fallback import opaque_call

S = torch.special

UNARY = (
    S.airy_ai,
    S.bessel_j0,
    S.bessel_j1,
    S.bessel_y0,
    S.bessel_y1,
    S.modified_bessel_i0,
    S.modified_bessel_i1,
    S.modified_bessel_k0,
    S.modified_bessel_k1,
    S.scaled_modified_bessel_k0,
    S.scaled_modified_bessel_k1,
    S.spherical_bessel_j0,
)
BINARY = (
    S.chebyshev_polynomial_t,
    S.chebyshev_polynomial_u,
    S.chebyshev_polynomial_v,
    S.chebyshev_polynomial_w,
    S.shifted_chebyshev_polynomial_t,
    S.shifted_chebyshev_polynomial_u,
    S.shifted_chebyshev_polynomial_v,
    S.shifted_chebyshev_polynomial_w,
    S.hermite_polynomial_h,
    S.hermite_polynomial_he,
    S.laguerre_polynomial_l,
    S.legendre_polynomial_p,
    S.zeta,
    S.gammainc,
    S.gammaincc,
)
# the same kernels under torch's other names, which are Tensor methods too
METHODS = {torch.igamma: "igamma", torch.igammac: "igammac", torch.gcd: "gcd", torch.lcm: "lcm"}


def _kernel(fn):
    def impl(*args):
        if not any(isinstance(a, Tracer) for a in args):
            return fn(*args)  # concrete values (a derivative rule's primal): torch's kernel
        from thunderx.transforms.vmap import BatchTrace

        trace = current_trace()
        if isinstance(trace, BatchTrace) and any(
            isinstance(a, Tracer) and a._trace is trace for a in args
        ):
            return _batched(trace, fn, args)
        return opaque_call(fn, args, {})  # staged under jit; refused under differentiation

    return impl


def _over_x(v, x, at_zero):
    """v / x, with its limit `at_zero` where x is 0."""
    zero = x == 0
    return torch.where(zero, at_zero, v / torch.where(zero, 1.0, x))


# d/dx of the Bessel functions, from the functions themselves (y is the function's value);
# torch has none (its autograd refuses them and torch.func returns 0)
DERIVATIVES = {
    S.bessel_j0: lambda x, y: -S.bessel_j1(x),
    S.bessel_j1: lambda x, y: S.bessel_j0(x) - _over_x(y, x, 0.5),
    S.bessel_y0: lambda x, y: -S.bessel_y1(x),
    S.bessel_y1: lambda x, y: S.bessel_y0(x) - y / x,
    S.modified_bessel_i0: lambda x, y: S.modified_bessel_i1(x),
    S.modified_bessel_i1: lambda x, y: S.modified_bessel_i0(x) - _over_x(y, x, 0.5),
    S.modified_bessel_k0: lambda x, y: -S.modified_bessel_k1(x),
    S.modified_bessel_k1: lambda x, y: -S.modified_bessel_k0(x) - y / x,
    # e^x K(x): its derivative adds the function itself
    S.scaled_modified_bessel_k0: lambda x, y: y - S.scaled_modified_bessel_k1(x),
    S.scaled_modified_bessel_k1: lambda x, y: y - S.scaled_modified_bessel_k0(x) - y / x,
    S.spherical_bessel_j0: lambda x, y: _spherical_j0_slope(x, y),
}


def _spherical_j0_slope(x, y):
    """(cos x - sin(x) / x) / x, and its series -x/3 + x^3/30 near 0 (exact to 1e-13 there;
    differentiable again, so second derivatives at 0 are right)."""
    small = x.abs() < 1e-2
    series = x * (x * x / 30.0 - 1.0 / 3.0)
    return torch.where(small, series, _over_x(torch.cos(x) - y, x, 0.0))


def _differentiable(fn, derivative):
    """The kernel with its derivative as a custom_jvp rule (made on first use)."""
    made = []

    def impl(x):
        if not made:
            from thunderx.transforms.custom import custom_jvp

            f = custom_jvp(_kernel(fn))

            @f.defjvp
            def _(primals, tangents):
                (v,), (t,) = primals, tangents
                y = f(v)
                return y, t * derivative(v, y)

            made.append(f)
        return made[0](x)

    return impl


def _batched(bt, fn, args):
    """fn on the batch at once: each batched operand's batch axis moved to the front, every
    tensor operand given the same rank (leading 1s) so that broadcasting lines the rest up."""
    from thunderx.transforms.vmap import BatchTracer

    pairs = [bt.unpack(a) if isinstance(a, Tracer) else (a, None) for a in args]

    def rank(v, d):
        return len(get_aval(v).shape) - (d is not None)

    tensors = [(v, d) for v, d in pairs if isinstance(v, (Tracer, torch.Tensor))]
    top = max(rank(v, d) for v, d in tensors)
    with set_trace(bt.parent):
        vals = []
        for v, d in pairs:
            if not isinstance(v, (Tracer, torch.Tensor)):
                vals.append(v)  # a Python scalar
                continue
            shape = tuple(get_aval(v).shape)
            if d is None:
                vals.append(v.reshape((1,) * (top + 1 - len(shape)) + shape))
            else:
                v = torch.movedim(v, d, 0)
                pad = (1,) * (top - rank(v, 0))
                vals.append(v.reshape(shape[d : d + 1] + pad + tuple(v.shape[1:])))
        out = fn(*vals)
    return BatchTracer(bt, out, 0)


for _fn in UNARY + BINARY:
    register(_fn)(_differentiable(_fn, DERIVATIVES[_fn]) if _fn in DERIVATIVES else _kernel(_fn))
for _fn, _name in METHODS.items():
    register(_fn, methods=(_name,))(_kernel(_fn))
