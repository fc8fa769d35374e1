"""Groups of primitives the torch executor gives back to one torch kernel, as eager torch runs
them: a convolution with its bias, and batch norm's training forward (normalization, batch
statistics for the running buffers, affine). The numbers are eager torch's own."""

import copy

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx
from thunderx.executors.inductor_exec import inductor_unavailable_reason


def _program(j, *args) -> str:
    return j.lower(*args).as_text().split("# execution program")[1]


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_a_convolution_takes_its_bias_into_torchs_kernel(dims):
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[dims]
    g = torch.Generator().manual_seed(dims)
    x = torch.randn(2, 3, *(6,) * dims, generator=g)
    w = torch.randn(4, 3, *(3,) * dims, generator=g)
    b = torch.randn(4, generator=g)

    def f(x, w, b):
        return conv(x, w, b, stride=1, padding=1)

    j = tx.jit(f)
    src = _program(j, x, w, b)
    assert "bias=c" in src and ".add" not in src and " + " not in src and "expand" not in src, src
    torch.testing.assert_close(j(x, w, b), f(x, w, b), rtol=0, atol=0)  # torch's bits
    # its gradient still has the bias's cotangent, against torch.func
    loss = lambda x, w, b: f(x, w, b).square().sum()  # noqa: E731
    got = tx.jit(tx.grad(loss, (0, 1, 2)))(x, w, b)
    for a, e in zip(got, tf.grad(loss, (0, 1, 2))(x, w, b)):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_a_convolution_read_elsewhere_keeps_the_separate_bias():
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(2, 3, 6, 6, generator=g), torch.randn(4, 3, 3, 3), torch.randn(4)

    def f(x, w, b):
        y = F.conv2d(x, w)
        return y + b[:, None, None], y.sin()

    j = tx.jit(f)
    assert "bias=" not in _program(j, x, w, b)
    for a, e in zip(j(x, w, b), f(x, w, b)):
        torch.testing.assert_close(a, e)


def _bn_model(affine=True):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8, affine=affine)
    ).train()


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_training_forward_is_one_kernel_with_eagers_numbers(affine):
    model = _bn_model(affine)
    ref = copy.deepcopy(model)
    j = tx.jit(model)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, 5, 5, generator=g)
    src = _program(j, x)
    assert src.count("_batch_norm_train(") == 1 and "batch_norm_stats" not in src, src
    assert ("None, None" in src) != affine, src
    for i in range(3):
        x = torch.randn(4, 3, 5, 5, generator=g) + i
        torch.testing.assert_close(j(x), ref(x), rtol=0, atol=0)  # eager torch's bits
        for (name, a), (_, e) in zip(model.named_buffers(), ref.named_buffers()):
            torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-7, msg=name)


def test_batch_norm_training_step_gradients_and_statistics_are_torchs():
    # under grad the normalized value is read by the backward too: the statistics still come
    # from the one kernel call; gradients and running statistics against torch.autograd
    # (torch.func refuses the module's write into its buffers)
    model = _bn_model()
    ref = copy.deepcopy(model)
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = torch.randn(4, 3, 5, 5)

    def loss(p):
        return tx.functional_call(model, p, (x,)).square().mean()

    got = tx.jit(tx.grad(loss))(params)
    ref(x).square().mean().backward()
    for k, p in ref.named_parameters():
        torch.testing.assert_close(got[k], p.grad, rtol=1e-5, atol=1e-6, msg=k)
    for (k, a), (_, e) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-7, msg=k)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
def test_recurrent_layers_run_torchs_sequence_kernel(cls):
    # one call of torch's kernel (the recurrence in C++) with eager's bits; gradients and
    # batching through the cells unrolled over time, against torch.func and a loop
    torch.manual_seed(0)
    m = cls(5, 6, num_layers=2, bidirectional=True, batch_first=True)
    x = torch.randn(3, 4, 5)
    j = tx.jit(m)
    src = _program(j, x)
    assert src.count("_impl_rnn(") == 1 and "torch.mm" not in src, src
    with torch.no_grad():
        for a, e in zip(tx.tree.leaves(j(x)), tx.tree.leaves(m(x))):
            torch.testing.assert_close(a, e, rtol=0, atol=0)
    params = {k: v.detach() for k, v in m.named_parameters()}

    def loss(p, x, call):
        return call(m, p, (x,))[0].square().sum()

    got = tx.jit(tx.grad(lambda p, x: loss(p, x, tx.functional_call)))(params, x)
    want = tf.grad(lambda p, x: loss(p, x, tf.functional_call))(params, x)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-5, msg=k)
    xs = torch.randn(2, 3, 4, 5)
    batched = tx.vmap(lambda x: m(x)[0])(xs)
    with torch.no_grad():
        torch.testing.assert_close(batched, torch.stack([m(x)[0] for x in xs]))


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
@pytest.mark.parametrize("kernel", [True, False])
def test_recurrent_layer_gradients_run_torchs_backward(cls, kernel, monkeypatch):
    # reverse mode, where torch's backward wins (composite_rnn.BACKWARD_KERNEL): one forward
    # kernel call and one backward through torch autograd of the kernel, with eager autograd's
    # numbers (with respect to the input, the initial state and every weight); otherwise the
    # unrolled cells' transpose; forward mode and second derivatives through the unrolled cells
    from thunderx.primitives import composite_rnn

    mode = "lstm" if cls is torch.nn.LSTM else "gru"
    monkeypatch.setitem(composite_rnn.BACKWARD_KERNEL, (mode, "cpu"), kernel)
    torch.manual_seed(1)
    m = cls(3, 4, num_layers=2, bidirectional=True, dtype=torch.float64)
    params = {k: v.detach() for k, v in m.named_parameters()}
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    h0 = torch.randn(4, 2, 4, dtype=torch.float64)
    state = (h0, torch.randn_like(h0)) if cls is torch.nn.LSTM else h0

    def loss(p, x, state):
        out, last = tx.functional_call(m, p, (x, state))
        return out.sin().sum() + tx.tree.leaves(last)[0].square().sum()

    f = tx.jit(tx.grad(loss, (0, 1, 2)))
    src = _program(f, params, x, state)
    assert src.count("_impl_rnn_backward(") == kernel, src
    assert src.count("_impl_rnn(") == (1 if kernel else 0), src
    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    xr = x.clone().requires_grad_()
    sr = tx.tree.map(lambda s: s.clone().requires_grad_(), state)
    out, last = torch.func.functional_call(m, leaves, (xr, sr))
    total = out.sin().sum() + tx.tree.leaves(last)[0].square().sum()
    want = torch.autograd.grad(total, [*leaves.values(), xr, *tx.tree.leaves(sr)])
    got = f(params, x, state)
    got = [*(got[0][k] for k in leaves), got[1], *tx.tree.leaves(got[2])]
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)
    # a Hessian-vector product (forward over reverse) against torch.func, in float64
    v = {k: torch.randn_like(t) for k, t in params.items()}

    def g(p, call):
        out, _ = call(m, p, (x, state))
        return out.sin().sum()

    hvp = tx.jvp(tx.grad(lambda p: g(p, tx.functional_call)), (params,), (v,))[1]
    ref = tf.jvp(tf.grad(lambda p: g(p, tf.functional_call)), (params,), (v,))[1]
    for k in ref:
        torch.testing.assert_close(hvp[k], ref[k], msg=k)


def test_recurrent_backward_under_inductor_and_under_torch_autograd():
    # the backward runs torch autograd, which inductor's one traced graph cannot hold: its
    # fusion regions around the call instead; and a jitted gradient differentiated again by
    # torch autograd keeps the backward in torch's graph (create_graph), against eager torch
    torch.manual_seed(2)
    m = torch.nn.LSTM(3, 4, dtype=torch.float64)
    params = {k: v.detach() for k, v in m.named_parameters()}
    x = torch.randn(5, 2, 3, dtype=torch.float64)

    def loss(p, call):
        return call(m, p, (x,))[0].square().sum()

    want = tf.grad(lambda p: loss(p, tf.functional_call))(params)
    grad = tx.grad(lambda p: loss(p, tx.functional_call))
    if inductor_unavailable_reason() is None:
        ind = tx.jit(grad, executor="inductor")
        assert "rnn_backward runs torch autograd" in ind.lower(params).as_text()
        for k, v in ind(params).items():
            torch.testing.assert_close(v, want[k], msg=k)
    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    total = sum((g * g).sum() for g in tx.jit(grad)(leaves).values())
    got = torch.autograd.grad(total, list(leaves.values()))
    eager = {k: v.clone().requires_grad_() for k, v in params.items()}
    g1 = torch.autograd.grad(
        loss(eager, tf.functional_call), list(eager.values()), create_graph=True
    )
    ref = torch.autograd.grad(sum((g * g).sum() for g in g1), list(eager.values()))
    for a, e in zip(got, ref):
        torch.testing.assert_close(a, e)


def test_recurrent_dropout_between_layers_in_training_is_unrolled():
    torch.manual_seed(0)
    m = torch.nn.LSTM(4, 4, num_layers=2, dropout=0.5).train()
    x = torch.randn(3, 2, 4)
    text = tx.jit(m).lower(x).as_text()
    assert "_impl_rnn(" not in text and "bernoulli" in text, text
    out = tx.jit(m)(x)[0]
    assert out.shape == (3, 2, 4) and torch.isfinite(out).all()


@pytest.mark.parametrize("norm", ["layer", "group"])
def test_a_norms_backward_reads_the_statistics_its_forward_computed(norm):
    # one forward kernel call: the backward kernel takes its mean and rstd instead of running
    # the forward again; the gradient is torch.func's
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 5, 5, generator=g, dtype=torch.float64)

    def f(x):
        y = F.layer_norm(x, (5, 5)) if norm == "layer" else F.group_norm(x, 3)
        return (y * x).sum()

    j = tx.jit(tx.grad(f))
    src = _program(j, x)
    kernel = f"torch.native_{norm}_norm("
    assert src.count(kernel) == 1 and f"native_{norm}_norm_backward.default(" in src, src
    torch.testing.assert_close(j(x), tf.grad(f)(x))


def test_batch_norm_training_backward_reads_the_saved_statistics():
    # the forward's one kernel call saves mean and invstd; the backward kernel reads them
    model = _bn_model()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = torch.randn(4, 3, 5, 5)
    j = tx.jit(tx.grad(lambda p: tx.functional_call(model, p, (x,)).square().mean()))
    src = _program(j, params)
    assert src.count("native_batch_norm(") == 0 and src.count("_batch_norm_train(") == 1, src
    assert "native_batch_norm_backward.default(" in src and "[3], _bn_train" in src, src


def test_layer_norm_with_one_tensor_as_weight_and_bias_is_one_kernel():
    x, w = torch.randn(8, 6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    f = lambda x, w: F.layer_norm(x, (6,), w, w)  # noqa: E731
    j = tx.jit(f)
    assert "native_layer_norm(a, (6,), b, b," in _program(j, x, w)
    torch.testing.assert_close(j(x, w), f(x, w), rtol=0, atol=0)
    loss = lambda x, w: f(x, w).square().sum()  # noqa: E731
    for a, e in zip(tx.jit(tx.grad(loss, (0, 1)))(x, w), tf.grad(loss, (0, 1))(x, w)):
        torch.testing.assert_close(a, e)


def test_a_cat_of_merged_permutes_is_one_stack():
    # attention's q/k/v gradients: (B, H, S, D) permuted to (S, B, H, D), merged to (S, B, H*D)
    # and concatenated: one stack of the permuted views instead of three copies and a cat
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, 5, generator=g) for _ in range(3))

    def f(q, k, v):
        return torch.cat([t.permute(2, 0, 1, 3).reshape(4, 2, 15) for t in (q, k, v)], 2)

    j = tx.jit(f)
    src = _program(j, q, k, v)
    assert "torch.stack(" in src and "torch.cat(" not in src, src
    torch.testing.assert_close(j(q, k, v), f(q, k, v), rtol=0, atol=0)
    # a reshape read elsewhere, or shapes that differ, keep the cat
    h = lambda q, k: (torch.cat([q.reshape(2, 3, 20), k.reshape(2, 3, 20)], 2), q.reshape(2, 3, 20))  # noqa: E731
    assert "torch.cat(" in _program(tx.jit(h), q, k)
    r = torch.randn(2, 3, 2, 10, generator=g)
    m = lambda q, r: torch.cat([q.reshape(2, 3, 20), r.reshape(2, 3, 20)], 2)  # noqa: E731
    assert "torch.cat(" in _program(tx.jit(m), q, r)
    torch.testing.assert_close(tx.jit(m)(q, r), m(q, r), rtol=0, atol=0)


@pytest.mark.parametrize(
    "spec, lc, rc",
    [
        ("bsi,bso->io", (0, 1), (0, 1)),  # a linear layer's weight gradient over (batch, seq)
        ("sbi,bso->io", (0, 1), (1, 0)),  # the two operands in different orders: one permuted
        ("bij,bk->ijk", (0,), (0,)),  # several free dims on one side
    ],
)
def test_a_contraction_over_leading_dims_is_one_mm_of_views(spec, lc, rc):
    # tensordot would copy each operand whose contracting dims must move to the end
    g = torch.Generator().manual_seed(0)
    lhs, rhs = spec.split("->")[0].split(",")
    size = {"b": 3, "s": 5, "i": 4, "o": 6, "j": 2, "k": 7}
    x = torch.randn(*(size[c] for c in lhs), dtype=torch.float64, generator=g)
    y = torch.randn(*(size[c] for c in rhs), dtype=torch.float64, generator=g)

    def f(x, y):
        return torch.tensordot(x, y, dims=(list(lc), list(rc)))

    src = _program(tx.jit(f), x, y)
    assert "torch.mm(" in src and "tensordot" not in src, src
    if lc == rc:
        assert "permute" not in src, src  # views only
    torch.testing.assert_close(tx.jit(f)(x, y), torch.einsum(spec, x, y))
    loss = lambda x, y: f(x, y).sin().sum()  # noqa: E731
    got = tx.jit(tx.grad(loss, (0, 1)))(x, y)
    for a, e in zip(got, tf.grad(loss, (0, 1))(x, y)):
        torch.testing.assert_close(a, e)


def test_recurrent_backward_kernel_gives_each_operand_position_its_gradient():
    # one tensor as both weights of a layer, under an outer torch autograd: each position gets
    # its own gradient (summed once by the transpose), as for two separate tensors in eager torch
    from thunderx.primitives import composite_rnn

    torch.manual_seed(0)
    w = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    x, h = torch.randn(4, 1, 3, dtype=torch.float64), torch.zeros(1, 1, 3, dtype=torch.float64)
    cts = [torch.randn(4, 1, 3, dtype=torch.float64), torch.randn(1, 1, 3, dtype=torch.float64)]
    params = dict(
        mode="rnn_tanh", has_biases=False, num_layers=1, bidirectional=False, batch_first=False
    )
    got = composite_rnn._backward_impl(*cts, x, h, w, w, **params)
    w1, w2 = (w.detach().clone().requires_grad_() for _ in range(2))
    out = torch.rnn_tanh(x, h, [w1, w2], False, 1, 0.0, False, False, False)
    for a, e in zip(got[2:], torch.autograd.grad(out, [w1, w2], cts)):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    assert got[2].requires_grad  # still in the outer graph


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_sum_over_dims_of_size_one_is_a_reshape_with_the_sums_zero(dtype):
    """The bias gradient of a per-example linear is a sum over its one row: torch's sum kernel
    is slow there, so the torch executor writes `x.reshape(out) + 0.0`. The values are the sum's
    bit for bit, -0.0 becoming +0.0 as from its +0.0 accumulator."""
    x = torch.tensor([[-0.0, 1.5, float("nan"), float("-inf"), -2.25, 0.0]], dtype=dtype)
    x = x.reshape(2, 1, 3)
    f = lambda v: torch.sum(v * 1.0, 1)  # noqa: E731
    got, want = tx.jit(f)(x), f(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(torch.signbit(got), torch.signbit(want)) and want[0, 0].item() == 0.0
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    src = tx.jit(f).lower(x).as_text()
    assert "+ 0.0)" in src and "torch.sum(" not in src
    # a dim of another size keeps torch's sum; an integer tensor too
    g = lambda v: torch.sum(v * 1.0, (1, 2))  # noqa: E731
    assert "torch.sum(" in tx.jit(g).lower(x).as_text()
    torch.testing.assert_close(tx.jit(g)(x), g(x), rtol=0, atol=0, equal_nan=True)
    n = torch.arange(6).reshape(2, 1, 3)
    assert torch.equal(tx.jit(lambda v: torch.sum(v, 1))(n), torch.sum(n, 1))
    # its gradient under the transforms is unchanged: torch.func's
    h = lambda v: (torch.sum(v, 1) ** 2).sum()  # noqa: E731
    y = torch.randn(2, 1, 3, dtype=dtype)
    torch.testing.assert_close(tx.jit(tx.grad(h))(y), tf.grad(h)(y))
