"""torch.stft / torch.istft under jit, grad, vjp, jvp and vmap: values against torch eager,
derivatives (input and window) against torch.autograd and torch.func, vmap against a loop, and
torch's errors for bad arguments."""

import warnings

import pytest
import torch
import torch.func as tf

import thunderx as tx

C128 = torch.complex128
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _x(*shape, complex_=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    if complex_:
        return torch.randn(*shape, dtype=C128, generator=g)
    return torch.randn(*shape, dtype=torch.float64, generator=g)


def _window(n, seed=5, complex_=False):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(n, dtype=torch.float64, generator=g) + 0.5
    return torch.complex(w, torch.rand(n, dtype=torch.float64, generator=g)) if complex_ else w


# name -> (kwargs without window, window length or None, complex input, complex window)
STFT = {
    "default": (dict(n_fft=8, return_complex=True), None, False, False),
    "real_view": (dict(n_fft=8, return_complex=False), None, False, False),
    "hop_nocenter": (dict(n_fft=10, hop_length=3, center=False, return_complex=True), None, 0, 0),
    "window": (dict(n_fft=8, hop_length=2, return_complex=True), 8, False, False),
    "short_window": (dict(n_fft=8, hop_length=2, win_length=5, return_complex=True), 5, 0, 0),
    "short_window_none": (dict(n_fft=8, win_length=6, return_complex=True), None, False, False),
    "constant_pad": (dict(n_fft=8, pad_mode="constant", return_complex=True), 8, False, False),
    "replicate_normalized": (
        dict(n_fft=9, pad_mode="replicate", normalized=True, return_complex=True),
        9,
        False,
        False,
    ),
    "twosided": (dict(n_fft=8, onesided=False, return_complex=True), 8, False, False),
    "complex_input": (dict(n_fft=8, hop_length=3), 8, True, False),
    "complex_window": (dict(n_fft=8, win_length=6, return_complex=True), 6, False, True),
    "align_to_window": (
        dict(n_fft=8, hop_length=3, win_length=6, center=False, align_to_window=True),
        6,
        False,
        False,
    ),
}


def _stft_case(name, batch_shape=(2,)):
    kwargs, wlen, cin, cwin = STFT[name]
    if name == "align_to_window":
        kwargs = dict(kwargs, return_complex=True)
    x = _x(*batch_shape, 30, complex_=bool(cin))
    w = None if wlen is None else _window(wlen, complex_=bool(cwin))
    return kwargs, x, w


def _loss(y):
    wt = torch.arange(y.numel(), dtype=torch.float64).reshape(y.shape).cos()
    return (y.abs() ** 2 * wt).sum() if y.is_complex() else (y * wt).sum()


@pytest.mark.parametrize("name", STFT)
def test_stft_values_grads_jvp_and_vmap(name):
    kwargs, x, w = _stft_case(name)
    f = lambda a, win: torch.stft(a, window=win, **kwargs)  # noqa: E731
    want = f(x, w)
    got = tx.jit(f)(x, w)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want)
    # 1-d input, and the Tensor method
    torch.testing.assert_close(tx.jit(lambda a: a.stft(window=w, **kwargs))(x[0]), f(x[0], w))

    # reverse mode: input and window, against torch.autograd
    args = (x, w) if w is not None else (x,)
    g = lambda *a: _loss(f(*a) if len(a) == 2 else f(a[0], None))  # noqa: E731
    leaves = [a.clone().requires_grad_() for a in args]
    want_grads = torch.autograd.grad(g(*leaves), leaves)
    got_grads = tx.grad(g, argnums=tuple(range(len(args))))(*args)
    for gg, wg in zip(got_grads, want_grads):
        torch.testing.assert_close(gg, wg)

    # forward mode against torch.func
    tangents = tuple(torch.randn_like(a) for a in args)
    h = lambda *a: f(*a) if len(a) == 2 else f(a[0], None)  # noqa: E731
    torch.testing.assert_close(tx.jvp(h, args, tangents)[1], tf.jvp(h, args, tangents)[1])

    # vmap over the signal (1-d and 2-d per example) and over the window
    batch = torch.stack([x, 2 * x, x + 1])
    torch.testing.assert_close(
        tx.vmap(lambda a: f(a, w))(batch), torch.stack([f(r, w) for r in batch])
    )
    torch.testing.assert_close(
        tx.vmap(lambda a: f(a, w))(batch[:, 0]), torch.stack([f(r, w) for r in batch[:, 0]])
    )
    if w is not None:
        ws = torch.stack([w, w + 0.25, 2 * w])
        torch.testing.assert_close(
            tx.vmap(lambda win: f(x, win))(ws), torch.stack([f(x, v) for v in ws])
        )
        torch.testing.assert_close(
            tx.jit(tx.vmap(tx.grad(g, argnums=(0, 1)), in_axes=(0, None)))(batch, w),
            tf.vmap(tf.grad(g, argnums=(0, 1)), in_dims=(0, None))(batch, w),
        )


def test_stft_gradient_in_the_window_alone():
    # only the window is traced: torch.functional.stft runs on the concrete signal and hands a
    # traced window to aten's stft (torch._VF.stft)
    x, w = _x(2, 30), _window(8)
    g = lambda win: _loss(torch.stft(x, 8, window=win, return_complex=True))  # noqa: E731
    leaf = w.clone().requires_grad_()
    (want,) = torch.autograd.grad(g(leaf), leaf)
    torch.testing.assert_close(tx.grad(g)(w), want)
    torch.testing.assert_close(tx.jit(tx.grad(g))(w), want)


# name -> (stft kwargs used to make the spectrum, extra istft kwargs)
ISTFT = {
    "default": (dict(n_fft=8), {}),
    "hop_window": (dict(n_fft=10, hop_length=3), {}),
    "short_window": (dict(n_fft=8, hop_length=2, win_length=6), {}),
    "normalized": (dict(n_fft=8, normalized=True), {}),
    "nocenter": (dict(n_fft=8, hop_length=2, center=False), {}),
    "length_short": (dict(n_fft=8), dict(length=20)),
    "length_long": (dict(n_fft=8, hop_length=2), dict(length=36)),
    "twosided": (dict(n_fft=8, onesided=False), {}),
    "twosided_complex": (dict(n_fft=8, onesided=False), dict(return_complex=True)),
}


@pytest.mark.parametrize("name", ISTFT)
@pytest.mark.parametrize("with_window", [True, False])
def test_istft_values_grads_jvp_and_vmap(name, with_window):
    skw, ikw = ISTFT[name]
    wlen = skw.get("win_length", skw["n_fft"])
    w = _window(wlen) if with_window else None
    x = _x(2, 30)
    spec = torch.stft(x, window=w, return_complex=True, **skw)
    spec = spec + 0.1 * _x(*spec.shape, complex_=True, seed=3)  # not an exact stft
    kw = {k: v for k, v in skw.items() if k != "pad_mode"} | ikw
    f = lambda s, win: torch.istft(s, window=win, **kw)  # noqa: E731
    want = f(spec, w)
    got = tx.jit(f)(spec, w)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(tx.jit(lambda s: s.istft(window=w, **kw))(spec[0]), f(spec[0], w))

    args = (spec, w) if w is not None else (spec,)
    g = lambda *a: _loss(f(*a) if len(a) == 2 else f(a[0], None))  # noqa: E731
    leaves = [a.clone().requires_grad_() for a in args]
    want_grads = torch.autograd.grad(g(*leaves), leaves)
    got_grads = tx.grad(g, argnums=tuple(range(len(args))))(*args)
    for gg, wg in zip(got_grads, want_grads):
        torch.testing.assert_close(gg, wg)
    tangents = tuple(torch.randn_like(a) for a in args)
    h = lambda *a: f(*a) if len(a) == 2 else f(a[0], None)  # noqa: E731
    torch.testing.assert_close(tx.jvp(h, args, tangents)[1], tf.jvp(h, args, tangents)[1])
    out = h(*args)
    ct = _x(*out.shape, complex_=out.is_complex(), seed=4)
    for gg, wg in zip(tx.vjp(h, *args)[1](ct), tf.vjp(h, *args)[1](ct)):
        torch.testing.assert_close(gg, wg)

    batch = torch.stack([spec, 2 * spec, spec + 1])
    torch.testing.assert_close(
        tx.vmap(lambda s: f(s, w))(batch), torch.stack([f(s, w) for s in batch])
    )
    if w is not None:
        ws = torch.stack([w, w + 0.25, 2 * w])
        torch.testing.assert_close(
            tx.vmap(lambda win: f(spec, win))(ws), torch.stack([f(spec, v) for v in ws])
        )


def test_istft_inverts_stft_under_jit_and_vmap():
    x, w = _x(3, 40), torch.hann_window(16, dtype=torch.float64)

    def roundtrip(a):
        s = torch.stft(a, 16, hop_length=4, window=w, return_complex=True)
        return torch.istft(s, 16, hop_length=4, window=w, length=a.shape[-1])

    torch.testing.assert_close(tx.jit(roundtrip)(x), x)
    torch.testing.assert_close(tx.vmap(roundtrip)(x), x)
    torch.testing.assert_close(tx.grad(lambda a: roundtrip(a).sum())(x), torch.ones_like(x))


def _raises_like_torch(f, *args):
    with pytest.raises(Exception) as want:
        f(*args)
    with pytest.raises(type(want.value)) as got:
        tx.jit(f)(*args)
    return str(want.value), str(got.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda a: torch.stft(a, 8),  # return_complex required for real input
        lambda a: torch.stft(a, 8, hop_length=0, return_complex=True),
        lambda a: torch.stft(a, 8, win_length=9, return_complex=True),
        lambda a: torch.stft(a, 8, window=torch.ones(7, dtype=a.dtype), return_complex=True),
        lambda a: torch.stft(a, 40, center=False, return_complex=True),
        lambda a: torch.stft(a.to(C128), 8, onesided=True),
        lambda a: torch.stft(a, 8, align_to_window=True, return_complex=True),
    ],
)
def test_stft_errors_match_torch(call):
    _raises_like_torch(call, _x(30))


@pytest.mark.parametrize(
    "call",
    [
        lambda s: torch.istft(s.real, 8),  # real input
        lambda s: torch.istft(s, 6),  # frequency size does not match
        lambda s: torch.istft(s, 8, hop_length=9),
        lambda s: torch.istft(s, 8, onesided=False),
        lambda s: torch.istft(s, 8, return_complex=True),  # onesided and complex output
        lambda s: torch.istft(s, 8, window=torch.ones(7, dtype=torch.float64)),
    ],
)
def test_istft_errors_match_torch(call):
    spec = torch.stft(_x(30), 8, return_complex=True)
    _raises_like_torch(call, spec)


def test_istft_nola_check_on_a_known_window():
    # a window that vanishes where only one frame covers the signal: torch refuses (NOLA)
    spec = torch.stft(_x(30), 8, hop_length=8, return_complex=True, center=False)
    w = torch.ones(8, dtype=torch.float64)
    w[0] = 0.0
    f = lambda win: torch.istft(spec, 8, hop_length=8, window=win, center=False)  # noqa: E731
    with pytest.raises(RuntimeError, match="window overlap add min"):
        f(w)
    with pytest.raises(RuntimeError, match="window overlap add min"):
        tx.jit(lambda s: torch.istft(s, 8, hop_length=8, window=w, center=False))(spec)
    with pytest.raises(RuntimeError, match="window overlap add min"):
        tx.grad(lambda win: f(win).sum())(w)  # eager grad knows the window's value


def test_generated_code_calls_torch_fft():
    f = lambda a: torch.stft(a, 8, return_complex=True)  # noqa: E731
    text = tx.jit(f).lower(_x(2, 30)).as_text()
    assert "torch.fft.rfftn" in text
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(tx.jit(f)(_x(2, 30)), f(_x(2, 30)))


def test_second_order_and_jacobians_through_stft_and_istft():
    x, w = _x(20), _window(8)

    def f(a, win):
        s = torch.stft(a, 8, hop_length=2, window=win, return_complex=True)
        back = torch.istft(s * (1 + 0.1j), 8, hop_length=2, window=win)
        return (s.abs() ** 2).sum() + back.pow(3).sum()

    torch.testing.assert_close(tx.hessian(f)(x, w), tf.hessian(f)(x, w))
    torch.testing.assert_close(
        tx.jit(tx.hessian(f, argnums=1))(x, w), tf.hessian(f, argnums=1)(x, w)
    )
    g = lambda a: torch.stft(a, 8, window=w, return_complex=True).abs()  # noqa: E731
    torch.testing.assert_close(tx.jacrev(g)(x), tf.jacrev(g)(x))
    torch.testing.assert_close(tx.jacfwd(g)(x), tf.jacfwd(g)(x))
