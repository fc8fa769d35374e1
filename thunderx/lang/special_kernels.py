"""torch.special functions thunderx has no decomposition or derivative for (Bessel and Airy
functions, orthogonal polynomials, zeta, the incomplete gamma functions; also gcd and lcm):
torch's elementwise kernels. Under jit each is one opaque call; under vmap the kernel runs once
on the whole batch (elementwise, so the operands' batch axes only need to line up in front, as
torch.func's fallback gives), nested vmaps and jit included. Differentiation refuses them,
naming the function: torch has no derivative for most of them (torch.func's gradient of
bessel_j0 is a silent 0)."""

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
        from thunderx.transforms.vmap import BatchTrace

        trace = current_trace()
        if isinstance(trace, BatchTrace) and any(
            isinstance(a, Tracer) and a._trace is trace for a in args
        ):
            return _batched(trace, fn, args)
        return opaque_call(fn, args, {})  # staged under jit; refused under differentiation

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
    register(_fn)(_kernel(_fn))
for _fn, _name in METHODS.items():
    register(_fn, methods=(_name,))(_kernel(_fn))
