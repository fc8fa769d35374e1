"""F.interpolate (every mode) and the adaptive average pools under jit, grad and vmap: values
against torch eager, gradients against torch.func, vmap against a loop."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

F64 = torch.float64


def _x(*shape):
    return torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(sum(shape)))


CASES = {
    "linear": (lambda x: F.interpolate(x, size=11, mode="linear"), (2, 3, 7)),
    "linear_align": (
        lambda x: F.interpolate(x, size=4, mode="linear", align_corners=True),
        (2, 3, 7),
    ),
    "bilinear_scale": (
        lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear"),
        (2, 3, 5, 6),
    ),
    "bilinear_recompute": (
        lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
        (2, 3, 5, 6),
    ),
    "bicubic": (lambda x: F.interpolate(x, size=(3, 9), mode="bicubic"), (2, 3, 5, 6)),
    "bicubic_align": (
        lambda x: F.interpolate(x, size=(8, 4), mode="bicubic", align_corners=True),
        (2, 3, 5, 6),
    ),
    "trilinear": (
        lambda x: F.interpolate(x, scale_factor=(0.6, 1.5, 2.0), mode="trilinear"),
        (1, 2, 3, 4, 5),
    ),
    "nearest": (lambda x: F.interpolate(x, scale_factor=(1.5, 0.7), mode="nearest"), (2, 3, 5, 6)),
    "nearest_exact": (
        lambda x: F.interpolate(x, size=(5, 3, 7), mode="nearest-exact"),
        (1, 2, 3, 4, 5),
    ),
    "area": (lambda x: F.interpolate(x, size=(4, 5), mode="area"), (2, 3, 5, 6)),
    "adaptive_avg_pool1d": (lambda x: F.adaptive_avg_pool1d(x, 4), (2, 3, 7)),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 4)), (2, 3, 5, 6)),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, (2, 3, None)), (1, 2, 3, 4, 5)),
}


@pytest.mark.parametrize("name", CASES)
def test_values_grads_and_vmap(name):
    f, shp = CASES[name]
    x = _x(*shp)
    want = f(x)
    torch.testing.assert_close(tx.jit(f)(x), want)
    w = torch.arange(want.numel(), dtype=F64).reshape(want.shape).cos()

    def loss(x):
        return (f(x) * w).sum()

    torch.testing.assert_close(tx.grad(loss)(x), tf.grad(loss)(x))
    xs = torch.stack([x, 2 * x, x - 1])
    torch.testing.assert_close(tx.vmap(f)(xs), torch.stack([f(r) for r in xs]))


def test_an_infinite_input_stays_where_torch_puts_it():
    # weights never multiply elements they do not select: no inf * 0 = nan elsewhere
    x = _x(1, 1, 6)
    x[0, 0, 0] = float("inf")
    for mode in ("linear", "area", "nearest"):
        f = lambda x: F.interpolate(x, size=4, mode=mode)  # noqa: E731
        torch.testing.assert_close(tx.jit(f)(x), f(x), equal_nan=True)


def test_bad_arguments_raise_torchs_errors():
    with pytest.raises(ValueError, match="align_corners"):
        tx.jit(lambda x: F.interpolate(x, size=4, mode="nearest", align_corners=True))(_x(1, 1, 3))
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        tx.jit(lambda x: F.interpolate(x, size=4, scale_factor=2.0))(_x(1, 1, 3))
