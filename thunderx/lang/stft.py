"""torch.stft / torch.istft on the `fft` primitive, as aten's SpectralOps.cpp computes them:
stft gathers the (window-padded) frames, multiplies by the window and transforms each frame
(rfft for real input and window unless onesided=False, fft otherwise); istft inverts each frame,
windows it, overlap-adds the frames (an index_add) and divides by the overlap-added squared
window. Every step is a thunderx primitive, so both are differentiable and batchable.

istft's NOLA check (the squared-window envelope must not vanish) needs the window's value: it
runs where the window is concrete (None, a constant, or a traced value whose primal the
transform knows, as in eager grad/vjp/jvp); a staged or batched window skips it, as torch.func
skips data-dependent validation, and a vanishing envelope then shows as inf/nan."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunderx.core import Tracer
from thunderx.lang._base import dtype, is_tensor, ndim, register, shape

_VF_STFT = torch._C._VariableFunctions.stft


def _frames_index(n_frames: int, size: int, hop: int, device) -> torch.Tensor:
    """Flat positions of every frame's samples: frame f covers [f*hop, f*hop + size)."""
    idx = torch.arange(n_frames)[:, None] * hop + torch.arange(size)[None, :]
    return idx.reshape(-1).to(device)


def _device(x):
    from thunderx.lang._base import aval

    return aval(x).device


def _padded_window(window, win_length: int, n_fft: int, like):
    """The window centred in n_fft samples (zeros around it); None stays None when no padding."""
    left = (n_fft - win_length) // 2
    if window is None:
        if win_length == n_fft:
            return None
        window = torch.ones(win_length, dtype=_real_dtype(dtype(like)), device=_device(like))
    if win_length == n_fft:
        return window
    return F.pad(window, (left, n_fft - win_length - left))


def _real_dtype(dt: torch.dtype) -> torch.dtype:
    return {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dt, dt)


def _check_window(window, win_length: int, what: str) -> None:
    if window is not None and (ndim(window) != 1 or shape(window)[0] != win_length):
        raise RuntimeError(
            f"{what}: expected a 1D window tensor of size equal to win_length={win_length}, "
            f"but got window with size {list(shape(window))}"
        )


@register(_VF_STFT)  # reached when only the window is traced
def _aten_stft(
    input,  # noqa: A002 - torch's argument names
    n_fft,
    hop_length=None,
    win_length=None,
    window=None,
    normalized=False,
    onesided=None,
    return_complex=None,
    align_to_window=None,
):
    """aten::stft: no centring (torch.functional.stft pads before it)."""
    dt = dtype(input)
    if not (dt.is_floating_point or dt.is_complex):
        raise RuntimeError("stft: expected a tensor of floating point or complex values")
    complex_window = window is not None and dtype(window).is_complex
    if return_complex is None:
        if not (dt.is_complex or complex_window):
            raise RuntimeError(
                "stft requires the return_complex parameter be given for real inputs, and will "
                "further require that return_complex=True in a future PyTorch release."
            )
        return_complex = True
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    if ndim(input) not in (1, 2):
        raise RuntimeError(f"stft: expected a 1D or 2D tensor, but got {ndim(input)}D")
    x = input if ndim(input) == 2 else input.unsqueeze(0)
    length = shape(x)[1]
    if n_fft <= 0 or n_fft > length:
        raise RuntimeError(f"stft: expected 0 < n_fft < {length}, but got n_fft={n_fft}")
    if hop <= 0:
        raise RuntimeError(f"stft: expected hop_length > 0, but got hop_length={hop}")
    if win <= 0 or win > n_fft:
        raise RuntimeError(f"stft: expected 0 < win_length <= n_fft, but got win_length={win}")
    _check_window(window, win, "stft")
    w = _padded_window(window, win, n_fft, input)
    if align_to_window:
        n_frames = 1 + (length - win) // hop
        side = (n_fft - win) // 2
        x = F.pad(x, (side, side))
    else:
        n_frames = 1 + (length - n_fft) // hop
    idx = _frames_index(n_frames, n_fft, hop, _device(x))
    frames = x.index_select(1, idx).reshape(shape(x)[0], n_frames, n_fft)
    if w is not None:
        frames = frames * w
    two_sided = frames.is_complex()
    if onesided is None:
        onesided = not two_sided
    if two_sided and onesided:
        raise RuntimeError("Cannot have onesided output if window or input is complex")
    norm = "ortho" if normalized else "backward"
    if onesided:
        out = torch.fft.rfft(frames, dim=-1, norm=norm)
    else:
        out = torch.fft.fft(frames, dim=-1, norm=norm)
    out = out.transpose(1, 2)
    if ndim(input) == 1:
        out = out.squeeze(0)
    return out if return_complex else torch.view_as_real(out)


@register(torch.functional.stft, methods=("stft",))
def _stft(
    input,  # noqa: A002
    n_fft,
    hop_length=None,
    win_length=None,
    window=None,
    center=True,
    pad_mode="reflect",
    normalized=False,
    onesided=None,
    return_complex=None,
    align_to_window=None,
):
    if center and align_to_window is not None:
        raise RuntimeError("stft align_to_window should only be set when center = false")
    if center:
        if ndim(input) not in (1, 2):
            raise RuntimeError(f"stft: expected a 1D or 2D tensor, but got {ndim(input)}D")
        pad = n_fft // 2
        lead = (1,) * (3 - ndim(input))
        padded = F.pad(input.reshape(lead + shape(input)), (pad, pad), pad_mode)
        input = padded.reshape(shape(padded)[3 - ndim(input) :])  # noqa: A001
    return _aten_stft(
        input,
        n_fft,
        hop_length,
        win_length,
        window,
        normalized,
        onesided,
        return_complex,
        align_to_window,
    )


def _concrete(t):
    if t is None or isinstance(t, torch.Tensor):
        return t
    return t.to_concrete() if isinstance(t, Tracer) else None


@register(torch.istft, methods=("istft",))
def _istft(
    input,  # noqa: A002
    n_fft,
    hop_length=None,
    win_length=None,
    window=None,
    center=True,
    normalized=False,
    onesided=None,
    length=None,
    return_complex=False,
):
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    if not is_tensor(input) or not dtype(input).is_complex:
        raise RuntimeError(
            "istft requires a complex-valued input tensor matching the output from stft with "
            "return_complex=True."
        )
    if 0 in shape(input):
        raise RuntimeError("istft: input tensor cannot be empty.")
    if ndim(input) not in (2, 3):
        raise RuntimeError(
            f"istft: expected a tensor with 2 or 3 dimensions of complex, but got {ndim(input)}"
        )
    fft_size, n_frames = shape(input)[-2], shape(input)[-1]
    expected_len = n_fft + hop * (n_frames - 1)
    if onesided is None:
        onesided = fft_size != n_fft
    if onesided and n_fft // 2 + 1 != fft_size:
        raise RuntimeError(
            "istft: expected the frequency dimension (3rd to the last) of the input tensor to "
            f"match n_fft / 2 + 1 when onesided=True, but got {fft_size}"
        )
    if not onesided and n_fft != fft_size:
        raise RuntimeError(
            "istft: expected the frequency dimension (3rd to the last) of the input tensor to "
            f"match n_fft when onesided=False, but got {fft_size}"
        )
    if not 0 < hop <= win:
        raise RuntimeError("istft: expected 0 < hop_length <= win_length")
    if not 0 < win <= n_fft:
        raise RuntimeError("istft: expected 0 < win_length <= n_fft")
    if window is not None and (ndim(window) != 1 or shape(window)[0] != win):
        raise RuntimeError(
            "istft: Invalid window shape. window has to be 1D and length of `win_length`"
        )
    rdt = _real_dtype(dtype(input))
    device = _device(input)
    if window is None:
        window = torch.ones(win, dtype=rdt, device=device)
    w = _padded_window(window, win, n_fft, input)
    x = input if ndim(input) == 3 else input.unsqueeze(0)
    x = x.transpose(1, 2)  # (channel, n_frames, fft_size)
    norm = "ortho" if normalized else "backward"
    if return_complex:
        if onesided:
            raise RuntimeError("Cannot have onesided output if window or input is complex")
        frames = torch.fft.ifft(x, dim=-1, norm=norm)
    else:
        if dtype(w).is_complex:
            raise RuntimeError("Complex windows are incompatible with return_complex=False")
        if not onesided:
            x = x[..., : n_fft // 2 + 1]
        frames = torch.fft.irfft(x, n=n_fft, dim=-1, norm=norm)
    frames = frames * w
    channels = shape(frames)[0]
    idx = _frames_index(n_frames, n_fft, hop, device)
    zeros = torch.zeros(channels, expected_len, dtype=dtype(frames), device=device)
    y = zeros.index_add(1, idx, frames.reshape(channels, n_frames * n_fft))
    w2 = (w * w).expand(n_frames, n_fft).reshape(n_frames * n_fft)
    envelope = torch.zeros(expected_len, dtype=dtype(w2), device=device).index_add(0, idx, w2)
    start = n_fft // 2 if center else 0
    if length is not None:
        end = start + length
    else:
        end = expected_len - n_fft // 2 if center else expected_len
    stop = min(end, expected_len)
    y = y[:, start:stop]
    envelope = envelope[start:stop]
    known = _concrete(envelope)
    if known is not None and bool((known.abs() < 1e-11).any()):
        lowest = known.abs().min().item()
        raise RuntimeError(f"istft(...): window overlap add min: {lowest}")
    y = y / envelope
    if ndim(input) == 2:
        y = y.squeeze(0)
    if end > expected_len:
        y = F.pad(y, (0, end - expected_len))
    return y
