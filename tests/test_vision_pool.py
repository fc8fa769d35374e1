"""conv_transpose, adaptive max pooling, max_unpool, fractional max pooling and embedding_bag under
jit, grad and vmap (float64): values against torch eager, gradients against torch.autograd, vmap
against a Python loop."""

import pytest
import torch
import torch.nn.functional as F

import thunderx as tx

F64 = torch.float64
GEN = torch.Generator().manual_seed(11)


def rand(*shape):
    return torch.randn(*shape, dtype=F64, generator=GEN)


def conv_t(nsp, **kw):
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[nsp]
    return lambda x, w, b: fn(x, w, b, **kw)


def adaptive_max(nsp, size):
    fn = getattr(F, f"adaptive_max_pool{nsp}d")
    return lambda x: fn(x, size, return_indices=True)


def ties(*shape):
    # few distinct values: windows hold ties, where torch picks the first maximum
    return torch.randint(0, 3, shape, generator=GEN).to(F64)


def unpool(nsp, kernel, stride, padding):
    pool = getattr(F, f"max_pool{nsp}d")
    unp = getattr(F, f"max_unpool{nsp}d")

    def make(x0):
        _, idx = pool(x0, kernel, stride, padding, return_indices=True)
        return lambda y: unp(y, idx, kernel, stride, padding, output_size=x0.shape[-nsp:])

    return make


CASES = [
    (
        "conv_t1d",
        conv_t(1, stride=2, padding=1, output_padding=1),
        (rand(2, 4, 5), rand(4, 3, 3), rand(3)),
    ),
    (
        "conv_t2d_groups_dilation",
        conv_t(2, stride=(2, 1), padding=(0, 2), output_padding=(1, 0), groups=2, dilation=(1, 2)),
        (rand(2, 4, 4, 5), rand(4, 3, 3, 2), rand(6)),
    ),
    (
        "conv_t2d_unbatched",
        conv_t(2, stride=3, padding=1),
        (rand(2, 3, 4), rand(2, 2, 2, 3), rand(2)),
    ),
    (
        "conv_t3d",
        conv_t(3, stride=(1, 2, 2), padding=1, output_padding=(0, 1, 0)),
        (rand(1, 2, 3, 3, 4), rand(2, 3, 2, 3, 2), rand(3)),
    ),
    ("adaptive_max1d", adaptive_max(1, 3), (rand(2, 3, 7),)),
    ("adaptive_max2d_nondiv", adaptive_max(2, (3, 4)), (rand(2, 2, 7, 5),)),
    ("adaptive_max2d_ties", adaptive_max(2, (2, 3)), (ties(2, 2, 5, 7),)),
    ("adaptive_max3d", adaptive_max(3, (2, None, 3)), (rand(1, 2, 5, 3, 4),)),
    ("adaptive_max2d_grow", adaptive_max(2, (6, 4)), (rand(2, 4, 3),)),
]


def _values(out):
    return out if isinstance(out, tuple) else (out,)


def _float_sum(out):
    return sum(
        (o * torch.linspace(0.5, 2.0, o.numel(), dtype=o.dtype).reshape(o.shape)).sum()
        for o in _values(out)
        if o.dtype.is_floating_point
    )


def check(fn, args):
    want = _values(fn(*args))
    got = _values(tx.jit(fn)(*args))
    for w, g in zip(want, got, strict=True):
        assert w.dtype == g.dtype and w.shape == g.shape
        torch.testing.assert_close(g, w, atol=1e-12, rtol=1e-12)
    # gradients: thunderx.grad of a weighted sum against torch.autograd
    floats = [i for i, a in enumerate(args) if a.dtype.is_floating_point]
    leaves = [a.detach().clone().requires_grad_(True) for a in args]
    tg = torch.autograd.grad(_float_sum(fn(*leaves)), [leaves[i] for i in floats])
    xg = tx.grad(lambda *a: _float_sum(fn(*a)), argnums=tuple(floats))(*args)
    for w, g in zip(tg, xg, strict=True):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-10)
    # vmap over a batch of the first argument against a loop
    batch = torch.stack([args[0], args[0] * 0.5 + 1, -args[0]])
    got_v = _values(tx.vmap(lambda a0: fn(a0, *args[1:]))(batch))
    loop = [_values(fn(b, *args[1:])) for b in batch]
    for k, g in enumerate(got_v):
        torch.testing.assert_close(g, torch.stack([lp[k] for lp in loop]), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("name,fn,args", CASES, ids=[c[0] for c in CASES])
def test_against_torch(name, fn, args):
    check(fn, args)


@pytest.mark.parametrize(
    "nsp,shape,kernel,stride,padding",
    [
        (1, (2, 3, 9), 3, 2, 1),
        (2, (1, 2, 5, 6), 3, 2, 1),  # overlapping windows: repeated indices, last write wins
        (2, (2, 2, 6, 6), 2, 2, 0),
        (3, (1, 2, 4, 5, 4), 2, 1, 0),
    ],
)
def test_max_unpool(nsp, shape, kernel, stride, padding):
    x0 = rand(*shape)
    fn = unpool(nsp, kernel, stride, padding)(x0)
    y = getattr(F, f"max_pool{nsp}d")(x0, kernel, stride, padding)
    check(fn, (y,))


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="output_padding"):
        tx.jit(lambda x, w: F.conv_transpose1d(x, w, stride=1, output_padding=1))(
            rand(1, 2, 4), rand(2, 2, 3)
        )
    with pytest.raises(ValueError, match="indices"):
        tx.jit(lambda x: F.max_unpool1d(x, torch.zeros(1, 2, 3, dtype=torch.long), 2))(
            rand(1, 2, 4)
        )


def bag(**kw):
    def fn(weight, psw=None):
        extra = {"per_sample_weights": psw} if psw is not None else {}
        return F.embedding_bag(
            kw["idx"], weight, **{k: v for k, v in kw.items() if k != "idx"}, **extra
        )

    return fn


IDX1 = torch.tensor([4, 1, 4, 0, 2, 4, 3, 1])
OFFS = torch.tensor([0, 3, 3, 6])
BAG_CASES = [
    ("sum_offsets", bag(idx=IDX1, offsets=OFFS, mode="sum"), (rand(5, 3),)),
    ("mean_offsets_empty_bag", bag(idx=IDX1, offsets=OFFS, mode="mean"), (rand(5, 3),)),
    ("max_offsets", bag(idx=IDX1, offsets=OFFS, mode="max"), (rand(5, 3),)),
    ("max_ties", bag(idx=IDX1, offsets=OFFS, mode="max"), (ties(5, 3),)),
    ("sum_weights", bag(idx=IDX1, offsets=OFFS, mode="sum"), (rand(5, 3), rand(8))),
    ("mean_2d", bag(idx=IDX1.reshape(2, 4), mode="mean"), (rand(5, 3),)),
    ("max_2d_padding", bag(idx=IDX1.reshape(4, 2), mode="max", padding_idx=4), (rand(5, 3),)),
    ("mean_padding_neg", bag(idx=IDX1, offsets=OFFS, mode="mean", padding_idx=-1), (rand(5, 3),)),
    (
        "sum_last_offset",
        bag(idx=IDX1, offsets=torch.tensor([0, 2, 5, 8]), mode="sum", include_last_offset=True),
        (rand(5, 3),),
    ),
]


@pytest.mark.parametrize("name,fn,args", BAG_CASES, ids=[c[0] for c in BAG_CASES])
def test_embedding_bag(name, fn, args):
    check(fn, args)


@pytest.mark.parametrize(
    "idx,kw",
    [
        (IDX1.reshape(2, 4), {"mode": "sum"}),  # torch divides row 2 by 2 and row 4 by 1 here
        (IDX1, {"offsets": OFFS, "mode": "mean", "padding_idx": 1}),
        (torch.tensor([3, 3, 1, 0, 3]), {"offsets": torch.tensor([0, 2]), "mode": "sum"}),
    ],
)
def test_embedding_bag_freq_scaling_matches_torch(idx, kw):
    check(lambda w: F.embedding_bag(idx, w, scale_grad_by_freq=True, **kw), (rand(5, 3),))


def test_embedding_bag_freq_scaling_refuses_max():
    with pytest.raises(ValueError, match="max mode"):
        tx.jit(
            lambda w: F.embedding_bag(IDX1.reshape(2, 4), w, mode="max", scale_grad_by_freq=True)
        )(rand(5, 3))


def fractional(nsp, kernel, samples, **kw):
    fn = getattr(F, f"fractional_max_pool{nsp}d")
    return lambda x: fn(x, kernel, return_indices=True, _random_samples=samples, **kw)


def uniform(*shape):
    return torch.rand(*shape, dtype=F64, generator=GEN)


FRACTIONAL_CASES = [
    ("2d_size", fractional(2, 3, uniform(2, 3, 2), output_size=(3, 4)), (rand(2, 3, 9, 10),)),
    (
        "2d_ratio",
        fractional(2, (2, 3), uniform(1, 2, 2), output_ratio=(0.5, 0.5)),
        (rand(1, 2, 8, 9),),
    ),
    ("2d_ties", fractional(2, 2, uniform(2, 2, 2), output_size=3), (ties(2, 2, 6, 6),)),
    ("2d_unbatched", fractional(2, 2, uniform(1, 3, 2), output_size=(4, 2)), (rand(3, 7, 5),)),
    (
        "3d",
        fractional(3, (2, 1, 3), uniform(2, 2, 3), output_size=(2, 3, 3)),
        (rand(2, 2, 5, 6, 7),),
    ),
]


@pytest.mark.parametrize("name,fn,args", FRACTIONAL_CASES, ids=[c[0] for c in FRACTIONAL_CASES])
def test_fractional_max_pool(name, fn, args):
    check(fn, args)


def test_fractional_max_pool_vmap_over_samples():
    # the random samples themselves batched: each row has its own windows
    x = rand(2, 3, 9, 9)
    samples = uniform(4, 2, 3, 2)

    def fn(s):
        return F.fractional_max_pool2d(x, 3, output_size=4, return_indices=True, _random_samples=s)

    got = tx.vmap(fn)(samples)
    for k in range(4):
        want = fn(samples[k])
        torch.testing.assert_close(got[0][k], want[0], atol=0, rtol=0)
        assert torch.equal(got[1][k], want[1])


def log_probs(*shape):
    return torch.randn(*shape, dtype=F64, generator=GEN).log_softmax(-1)


def ctc(targets, in_len, tg_len, **kw):
    return lambda lp: F.ctc_loss(lp, targets, in_len, tg_len, **kw)


TG = torch.tensor([[1, 2, 2, 3], [4, 4, 1, 0], [2, 0, 0, 0]])  # repeats need a blank between
CTC_CASES = [
    ("mean", ctc(TG, torch.tensor([9, 7, 5]), torch.tensor([4, 3, 1])), (log_probs(9, 3, 5),)),
    ("none_lists", ctc(TG, [9, 9, 4], [4, 2, 0], reduction="none"), (log_probs(9, 3, 5),)),
    (
        "sum_concatenated",
        ctc(torch.tensor([1, 2, 2, 3, 4]), [8, 6], [3, 2], reduction="sum"),
        (log_probs(8, 2, 5),),
    ),
    (
        "zero_infinity",  # the second sequence cannot fit 4 labels with a repeat in 4 steps
        ctc(TG[:2], [6, 4], [3, 4], reduction="none", zero_infinity=True),
        (log_probs(6, 2, 5),),
    ),
    ("blank_last", ctc(TG[:2], [7, 7], [4, 2], blank=4 + 1), (log_probs(7, 2, 6),)),
    (
        "unbatched",
        ctc(torch.tensor([1, 3, 3]), torch.tensor(8), torch.tensor(3)),
        (log_probs(8, 4),),
    ),
]


@pytest.mark.parametrize("name,fn,args", CTC_CASES, ids=[c[0] for c in CTC_CASES])
def test_ctc_loss(name, fn, args):
    check(fn, args)


def test_forward_mode_and_second_order():
    x, w = rand(2, 4, 5), rand(4, 3, 3)
    tx_, tw = rand(2, 4, 5), rand(4, 3, 3)

    def f(x, w):
        return F.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1)

    got = tx.jvp(f, (x, w), (tx_, tw))[1]
    torch.testing.assert_close(got, torch.func.jvp(f, (x, w), (tx_, tw))[1])

    def g(x):
        return F.adaptive_max_pool2d(x, (3, 2)).sin().sum()

    x2 = rand(1, 2, 5, 4)
    torch.testing.assert_close(tx.hessian(g)(x2), torch.func.hessian(g)(x2))

    def c(lp):
        return F.ctc_loss(lp, torch.tensor([[1, 2, 2], [3, 1, 0]]), [6, 5], [3, 2])

    lp = log_probs(6, 2, 5)  # torch has no forward AD for ctc_loss: compare with autograd
    torch.testing.assert_close(tx.jacfwd(c)(lp), torch.autograd.functional.jacobian(c, lp))


def test_ctc_loss_errors_name_the_argument():
    lp = log_probs(4, 2, 5)
    with pytest.raises(ValueError, match="input_lengths"):
        tx.jit(lambda lp: F.ctc_loss(lp, TG[:2], [5, 4], [2, 2]))(lp)
    with pytest.raises(ValueError, match="target_lengths"):
        tx.jit(lambda lp: F.ctc_loss(lp, TG[:2], [4, 4], [5, 2]))(lp)
