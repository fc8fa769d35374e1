"""F.layer_norm with a weight (and bias) as torch's kernel with the affine inside
(primitives/composite_norm_affine.py): values and reverse-mode derivatives are torch.autograd's
bits without jit as with it, the other transforms agree with torch.func, and under jit the
backward kernel reads the forward's statistics."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

DTYPES = [torch.float32, torch.float64]


def _inputs(dtype, bias=True):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, 8, dtype=dtype, generator=g)
    w, b = torch.randn(8, dtype=dtype, generator=g), torch.randn(8, dtype=dtype, generator=g)
    return x, w, b if bias else None


def _loss(x, w, b):
    y = F.layer_norm(x, (8,), w, b)
    return (y.exp() * torch.linspace(-1, 1, 8, dtype=x.dtype)).sum()


def _autograd(x, w, b):
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b) if t is not None]
    return torch.autograd.grad(_loss(*leaves, *([None] if b is None else [])), leaves)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_value_and_gradients_are_torchs_bits(dtype, bias):
    x, w, b = _inputs(dtype, bias)
    argnums = (0, 1, 2) if bias else (0, 1)
    want = _autograd(x, w, b)
    ln = lambda x, w, b: F.layer_norm(x, (8,), w, b)  # noqa: E731
    for f in (ln, tx.jit(ln)):
        assert torch.equal(f(x, w, b), ln(x, w, b))
    assert torch.equal(tx.vmap(ln, in_axes=(0, None, None))(x, w, b), ln(x, w, b))
    for how in (tx.grad(_loss, argnums=argnums), tx.jit(tx.grad(_loss, argnums=argnums))):
        for got, ref in zip(how(x, w, b), want, strict=True):
            assert torch.equal(got, ref)
    prims = (x, w, b) if bias else (x, w)
    ln_n = lambda *a: ln(*a, *([] if bias else [None]))  # noqa: E731
    _, pull = tx.vjp(ln_n, *prims)
    _, ref_pull = tf.vjp(ln_n, *prims)
    ct = torch.randn_like(x)
    for got, ref in zip(pull(ct), ref_pull(ct), strict=True):
        assert torch.equal(got, ref)


def test_a_row_that_cancels_gets_torchs_gradient():
    # values near 9e13 that differ by 1 (the differential test's exp > logsumexp > layer_norm):
    # the affine outside the kernel gave -3.3e11 where torch gives +3.3e11
    x = torch.tensor([[9.0e13, 9.0e13 + 1, 9.0e13 + 2]], dtype=torch.float64)
    w, b = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64), torch.zeros(3, dtype=torch.float64)

    def f(x, w, b):
        return (F.layer_norm(x, (3,), w, b) * torch.tensor([1.0, 2.0, -3.0])).sum()

    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(f(*leaves), leaves)
    for got, ref in zip(tx.grad(f, argnums=(0, 1, 2))(x, w, b), want):
        assert torch.equal(got, ref)


@pytest.mark.parametrize("bias", [True, False])
def test_other_transforms_agree_with_torch_func(bias):
    x, w, b = _inputs(torch.float64, bias)
    argnums = (0, 1, 2) if bias else (0, 1)
    ln = lambda x, w, b: F.layer_norm(x, (8,), w, b)  # noqa: E731
    per_example = lambda x, w, b: _loss(x[None], w, b)  # noqa: E731
    if not bias:
        ln = lambda x, w: F.layer_norm(x, (8,), w)  # noqa: E731
        per_example = lambda x, w: _loss(x[None], w, None)  # noqa: E731
    args = (x, w, b) if bias else (x, w)
    axes = (0, None, None) if bias else (0, None)
    for ours, theirs in (
        (
            tx.vmap(tx.grad(per_example, argnums=argnums), in_axes=axes),
            tf.vmap(tf.grad(per_example, argnums=argnums), in_dims=axes),
        ),
        (tx.jacfwd(ln, argnums=argnums), tf.jacfwd(ln, argnums=argnums)),
        (tx.jacrev(ln, argnums=argnums), tf.jacrev(ln, argnums=argnums)),
    ):
        for got, ref in zip(ours(*args), theirs(*args), strict=True):
            torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)
    loss = lambda *a: _loss(*a, *([] if bias else [None]))  # noqa: E731
    small = (x[:1, :2], *args[1:])
    for k in argnums:
        h, ref = tx.hessian(loss, argnums=k)(*small), tf.hessian(loss, argnums=k)(*small)
        torch.testing.assert_close(h, ref, rtol=1e-8, atol=1e-8)
    # a weight per example (an ensemble): vmap over the weight too
    ws = torch.stack([w, w * 2, -w])
    got = tx.vmap(ln, in_axes=(None, 0, *([None] if bias else [])))(x, ws, *args[2:])
    want = torch.stack([ln(x, v, *args[2:]) for v in ws])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_jit_reads_the_forward_statistics_in_the_backward():
    x, w, b = _inputs(torch.float32)
    text = tx.jit(tx.grad(_loss, argnums=(0, 1, 2))).lower(x, w, b).program_text()
    assert text.count("torch.native_layer_norm(") == 1, text
    assert "native_layer_norm_backward" in text, text
