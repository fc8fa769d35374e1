"""The discrete Fourier transform as one primitive, as JAX's `lax.fft`: `fft_type` over the
trailing `len(fft_lengths)` dims, unnormalized forward and 1/n-normalized inverse (torch's
"backward" norm; the other norms are a scale outside the primitive).

- "fft" / "ifft": complex to complex, `fft_lengths` the trailing dims;
- "rfft": real to complex, the last dim becoming n // 2 + 1 (n = fft_lengths[-1]);
- "irfft": complex to real, `fft_lengths` the output's trailing dims.

All four are linear (over the reals), so the JVP applies the primitive to the tangent.
Transposes are JAX's (pairing Re(ct * t), no conjugation; the reverse-mode entry points convert
to torch's convention): the DFT matrix is symmetric, so fft and ifft are their own transposes;
rfft's transpose is the real part of the full FFT of the zero-padded cotangent; irfft's is the
rfft of the cotangent, with the bins that appear twice in the Hermitian extension doubled and
the 1/n scale, conjugated.
"""

from __future__ import annotations

import math

import torch

from thunderx.ad_util import Zero
from thunderx.avals import ShapedArray
from thunderx.core import declare, get_aval

_COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_REAL_OF = {v: k for k, v in _COMPLEX_OF.items()}
FFT_TYPES = ("fft", "ifft", "rfft", "irfft")


def _dims(fft_lengths) -> tuple[int, ...]:
    return tuple(range(-len(fft_lengths), 0))


def _impl(x, *, fft_type, fft_lengths):
    dims = _dims(fft_lengths)
    if fft_type == "fft":
        return torch.fft.fftn(x, dim=dims)
    if fft_type == "ifft":
        return torch.fft.ifftn(x, dim=dims)
    if fft_type == "rfft":
        return torch.fft.rfftn(x, dim=dims)
    return torch.fft.irfftn(x, s=fft_lengths, dim=dims)


def _abstract_eval(x: ShapedArray, *, fft_type, fft_lengths) -> ShapedArray:
    k = len(fft_lengths)
    if fft_type not in FFT_TYPES:
        raise TypeError(f"fft: fft_type must be one of {FFT_TYPES}, got {fft_type!r}")
    if k < 1 or k > len(x.shape):
        raise TypeError(f"fft: {k} transformed dims for an operand {x.str_short()}")
    lead, tail = tuple(x.shape[: len(x.shape) - k]), tuple(x.shape[len(x.shape) - k :])
    lengths = tuple(fft_lengths)
    if fft_type == "rfft":
        if x.dtype not in _COMPLEX_OF:
            raise TypeError(f"fft: rfft needs a float32/float64 operand, got {x.str_short()}")
        if tail != lengths:
            raise TypeError(f"fft: rfft lengths {lengths} do not match {x.str_short()}")
        out = lead + lengths[:-1] + (lengths[-1] // 2 + 1,)
        return ShapedArray(out, _COMPLEX_OF[x.dtype], x.device)
    if x.dtype not in _REAL_OF:
        raise TypeError(f"fft: {fft_type} needs a complex operand, got {x.str_short()}")
    if fft_type == "irfft":
        if tail != lengths[:-1] + (lengths[-1] // 2 + 1,):
            raise TypeError(f"fft: irfft lengths {lengths} do not match {x.str_short()}")
        return ShapedArray(lead + lengths, _REAL_OF[x.dtype], x.device)
    if tail != lengths:
        raise TypeError(f"fft: {fft_type} lengths {lengths} do not match {x.str_short()}")
    return ShapedArray(x.shape, x.dtype, x.device)


def fft(x, fft_type: str, fft_lengths):
    return fft_p.bind(x, fft_type=fft_type, fft_lengths=tuple(int(n) for n in fft_lengths))


def _transpose(ct, x, *, fft_type, fft_lengths):
    if type(ct) is Zero:
        return [None]
    if fft_type in ("fft", "ifft"):
        return [fft(ct, fft_type, fft_lengths)]
    if fft_type == "rfft":
        return [_rfft_transpose(ct, fft_lengths)]
    return [_irfft_transpose(ct, fft_lengths)]


def _rfft_transpose(ct, fft_lengths):
    # rfft = slice(fft(complex(x))) along the last dim: transpose each step (pad, fft, real)
    from thunderx.primitives import complex as X
    from thunderx.primitives import slicing as L

    n = fft_lengths[-1]
    kept = get_aval(ct).shape[-1]
    config = [(0, 0, 0)] * (len(get_aval(ct).shape) - 1) + [(0, n - kept, 0)]
    full = L.pad(ct, 0.0, tuple(config))
    return X.real(fft(full, "fft", fft_lengths))


def _irfft_transpose(ct, fft_lengths):
    from thunderx.primitives import binary as B
    from thunderx.primitives import complex as X

    x = fft(ct, "rfft", fft_lengths)
    a = get_aval(x)
    m, odd = a.shape[-1], fft_lengths[-1] % 2
    weights = [1.0] + [2.0] * (m - 2 + odd) + [1.0] * (1 - odd)
    scale = torch.tensor(weights, dtype=a.dtype, device=a.device) / math.prod(fft_lengths)
    return X.conj(B.mul(x, scale.expand(a.shape)))


def _batch(args, dims, *, fft_type, fft_lengths):
    from thunderx.primitives.shape import moveaxis

    (x,), (d,) = args, dims
    return fft(moveaxis(x, d, 0), fft_type, fft_lengths), 0


def _codegen(args, avals, *, fft_type, fft_lengths):
    dims = _dims(fft_lengths)
    fn = {"fft": "fftn", "ifft": "ifftn", "rfft": "rfftn", "irfft": "irfftn"}[fft_type]
    s = f"s={tuple(fft_lengths)!r}, " if fft_type == "irfft" else ""
    return f"torch.fft.{fn}({args[0]}, {s}dim={dims!r})"


fft_p = declare(
    "fft",
    impl=_impl,
    abstract_eval=_abstract_eval,
    linear=True,
    transpose=_transpose,
    batch=_batch,
    torch_codegen=_codegen,
)
