"""torch.fft under jit, grad, vjp, jvp and vmap: values against torch eager, derivatives against
torch.func (complex cotangents in torch's convention), vmap against a loop; the `fft`
primitive's transposes against the adjoint identity."""

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx.primitives import fft as P

F = torch.fft
C128 = torch.complex128


def _x(*shape, complex_=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    if complex_:
        return torch.randn(*shape, dtype=C128, generator=g)
    return torch.randn(*shape, dtype=torch.float64, generator=g)


CASES = {
    "fft": (lambda a: F.fft(a), False),
    "fft_n_dim_ortho": (lambda a: F.fft(a, n=8, dim=0, norm="ortho"), False),
    "ifft_trim": (lambda a: F.ifft(a, n=4), True),
    "rfft_forward": (lambda a: F.rfft(a, norm="forward"), False),
    "irfft": (lambda a: F.irfft(a), True),
    "irfft_odd_n": (lambda a: F.irfft(a, n=7, dim=0), True),
    "hfft": (lambda a: F.hfft(a), True),
    "hfft_ortho": (lambda a: F.hfft(a, n=9, norm="ortho"), True),
    "ihfft": (lambda a: F.ihfft(a), False),
    "fft2": (lambda a: F.fft2(a), True),
    "ifftn_s": (lambda a: F.ifftn(a, s=(3, 5)), True),
    "rfftn": (lambda a: F.rfftn(a), False),
    "rfft2_s": (lambda a: F.rfft2(a, s=(5, 4)), False),
    "irfftn": (lambda a: F.irfftn(a, dim=(0, 1)), True),
    "irfft2_s": (lambda a: F.irfft2(a, s=(3, 7)), True),
    "hfftn": (lambda a: F.hfftn(a), True),
    "ihfft2": (lambda a: F.ihfft2(a), False),
    "fftshift": (lambda a: F.fftshift(a), False),
    "ifftshift": (lambda a: F.ifftshift(a, dim=1), False),
}


def _loss(f):
    def loss(a):
        y = f(a)
        w = torch.arange(y.numel(), dtype=torch.float64).reshape(y.shape).sin()
        return (y.abs() ** 2 * w).sum() if y.is_complex() else (y**2 * w).sum()

    return loss


@pytest.mark.parametrize("name", CASES)
def test_values_grads_and_vmap(name):
    f, complex_ = CASES[name]
    a = _x(4, 6, complex_=complex_)
    got, want = tx.jit(f)(a), f(a)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(tx.grad(_loss(f))(a), tf.grad(_loss(f))(a))
    batch = torch.stack([a, 2 * a, a + 1])
    torch.testing.assert_close(tx.vmap(f)(batch), torch.stack([f(r) for r in batch]))
    torch.testing.assert_close(
        tx.jit(tx.vmap(tx.grad(_loss(f))))(batch), tf.vmap(tf.grad(_loss(f)))(batch)
    )


@pytest.mark.parametrize("name", ["fft", "rfft_forward", "irfft", "hfft", "ihfft", "rfftn"])
def test_forward_mode_and_vjp_with_complex_cotangents(name):
    f, complex_ = CASES[name]
    a, t = _x(4, 6, complex_=complex_), _x(4, 6, complex_=complex_, seed=1)
    torch.testing.assert_close(tx.jvp(f, (a,), (t,))[1], tf.jvp(f, (a,), (t,))[1])
    out = f(a)
    ct = _x(*out.shape, complex_=out.is_complex(), seed=2)
    torch.testing.assert_close(tx.vjp(f, a)[1](ct)[0], tf.vjp(f, a)[1](ct)[0])


@pytest.mark.parametrize(
    "fft_type,lengths,in_shape",
    [
        ("fft", (6,), (3, 6)),
        ("ifft", (3, 4), (2, 3, 4)),
        ("rfft", (7,), (2, 7)),
        ("rfft", (3, 6), (3, 6)),
        ("irfft", (6,), (2, 4)),
        ("irfft", (2, 7), (2, 4)),
    ],
)
def test_the_primitives_transpose_is_its_adjoint(fft_type, lengths, in_shape):
    # JAX's pairing Re(sum(ct * t)) (no conjugation): <ct, f(t)> == <f^T(ct), t>
    complex_in = fft_type != "rfft"
    t = _x(*in_shape, complex_=complex_in)
    f = lambda v: P.fft(v, fft_type, lengths)  # noqa: E731
    y = f(t)
    ct = _x(*y.shape, complex_=y.is_complex(), seed=3)
    (ct_in,) = tx.linear_transpose(f, t)(ct)
    lhs = (ct * y).real.sum()
    rhs = (ct_in * t).real.sum()
    torch.testing.assert_close(lhs, rhs)


def test_generated_code_calls_torch_fft():
    text = tx.jit(lambda a: F.rfft(a)).lower(_x(4, 6)).as_text()
    assert "torch.fft.rfftn" in text
