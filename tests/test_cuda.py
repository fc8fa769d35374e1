"""thunderx on a CUDA device: the transforms over CUDA tensors, every executor that can run there
(torch codegen, inductor with Triton in both of its modes, nvFuser when it imports) and control
flow, each against torch eager or torch.func on the same device.

Without a CUDA device the module is skipped with that reason. `THUNDERX_TEST_DEVICE=cpu` runs the
same tests on CPU tensors, as a rehearsal of the test code before a GPU run."""

import os

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx
from thunderx import lax
from thunderx.executors import inductor_exec, inductor_whole
from thunderx.executors.inductor_exec import inductor_unavailable_reason
from thunderx.executors.nvfuser_exec import nvfuser_available, nvfuser_import_error

DEV = os.environ.get("THUNDERX_TEST_DEVICE", "cuda")

pytestmark = pytest.mark.skipif(
    DEV == "cuda" and not torch.cuda.is_available(),
    reason="no CUDA device here (THUNDERX_TEST_DEVICE=cpu rehearses these tests on CPU)",
)

EXECUTORS = [
    "torch",
    pytest.param(
        "inductor",
        marks=pytest.mark.skipif(
            inductor_unavailable_reason() is not None,
            reason=f"inductor cannot run here: {inductor_unavailable_reason()}",
        ),
    ),
    pytest.param(
        "nvfuser",
        marks=pytest.mark.skipif(
            DEV != "cuda" or not nvfuser_available(),
            reason=f"nvFuser not usable here: {nvfuser_import_error()}",
        ),
    ),
]


def _close(got, want, tol=1e-5):
    got, want = tx.tree.leaves(got), tx.tree.leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device == w.device, (g.device, w.device)
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)


def _mlp(seed=0, dims=(12, 32, 32, 5), dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    params = [
        (
            (torch.randn(a, b, generator=g, dtype=dtype) / a**0.5).to(DEV),
            (0.1 * torch.randn(b, generator=g, dtype=dtype)).to(DEV),
        )
        for a, b in zip(dims[:-1], dims[1:])
    ]
    x = torch.randn(16, dims[0], generator=g, dtype=dtype).to(DEV)
    y = torch.randint(0, dims[-1], (16,), generator=g).to(DEV)
    return params, x, y


def _loss(params, x, y):
    for i, (w, b) in enumerate(params):
        x = x @ w + b
        if i < len(params) - 1:
            x = F.gelu(torch.relu(x) + 0.1 * torch.tanh(x))
    return F.cross_entropy(x, y)


@pytest.fixture(autouse=True)
def _matmul_in_float32():
    # TF32 would make GEMMs differ from torch's in the 3rd digit on Ampere and later
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def test_transforms_of_a_loss_on_the_device_are_torch_funcs():
    params, x, y = _mlp()
    _close(tx.grad(_loss)(params, x, y), tf.grad(_loss)(params, x, y))
    per_ex = tx.vmap(tx.grad(_loss), in_axes=(None, 0, 0))(params, x[:, None], y[:, None])
    _close(per_ex, tf.vmap(tf.grad(_loss), in_dims=(None, 0, 0))(params, x[:, None], y[:, None]))
    f = lambda v: torch.tanh(v @ params[0][0]).sum(-1)  # noqa: E731
    v = x[:3].clone()
    _close(tx.jacrev(f)(v), tf.jacrev(f)(v))
    _close(tx.jacfwd(f)(v), tf.jacfwd(f)(v))
    s = lambda v: (torch.sin(v) * v).sum()  # noqa: E731
    _close(tx.hessian(s)(v[0]), tf.hessian(s)(v[0]))
    t = torch.ones_like(v)
    _close(tx.jvp(f, (v,), (t,)), tf.jvp(f, (v,), (t,)))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_jit_per_example_grads_and_an_sgd_step(executor):
    params, x, y = _mlp(1)
    pe = tx.jit(tx.vmap(tx.grad(_loss), in_axes=(None, 0, 0)), executor=executor)
    want = tf.vmap(tf.grad(_loss), in_dims=(None, 0, 0))(params, x[:, None], y[:, None])
    for _ in range(2):  # the first call compiles, the second takes the cached path
        _close(pe(params, x[:, None], y[:, None]), want, 1e-4)

    def step(params, x, y):
        gs = tx.grad(_loss)(params, x, y)
        return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, gs)]

    gs = tf.grad(_loss)(params, x, y)
    want = [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, gs)]
    j = tx.jit(step, executor=executor)
    for _ in range(2):
        _close(j(params, x, y), want, 1e-4)
    assert j.lower(params, x, y).executor == executor


@pytest.mark.parametrize("executor", EXECUTORS)
def test_jit_transformer_layer_gradients(executor):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).to(DEV)
    params = {k: v.detach() for k, v in layer.named_parameters()}
    x = torch.randn(3, 10, 32, device=DEV)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(10, device=DEV)

    def loss(p, x, call):
        return call(layer, p, (x,), {"src_mask": mask, "is_causal": True}).square().mean()

    j = tx.jit(tx.grad(lambda p, x: loss(p, x, tx.functional_call)), executor=executor)
    want = tf.grad(lambda p, x: loss(p, x, tf.functional_call))(params, x)
    for _ in range(2):
        _close(j(params, x), want, 1e-4)


@pytest.mark.skipif(inductor_unavailable_reason() is not None, reason="inductor unavailable")
@pytest.mark.parametrize("whole", [True, False], ids=["whole-program", "regions"])
def test_inductor_modes_on_the_device(monkeypatch, whole):
    monkeypatch.setattr(inductor_whole, "WHOLE_PROGRAM", [whole])
    monkeypatch.setattr(inductor_exec, "CPU_MIN_ELEMENTS", 0)
    inductor_exec.clear_kernel_cache()

    def f(x, w, b):
        h = x @ w + b
        g = 0.5 * h * (1 + torch.tanh(0.7978845608 * (h + 0.044715 * h**3)))
        return g * torch.sigmoid(h), (g * g).sum(0)

    g = torch.Generator().manual_seed(2)
    x, w, b = (torch.randn(*s, generator=g).to(DEV) for s in ((64, 48), (48, 40), (40,)))
    j = tx.jit(f, executor="inductor")
    for _ in range(2):
        _close(j(x, w, b), f(x, w, b), 1e-5)
    text = j.lower(x, w, b).as_text()
    if whole:
        assert "the whole program is one inductor graph" in text
    else:
        assert "fusion regions compiled by inductor" in text
    # torch autograd through the compiled call runs the torch executor's program
    wr = w.clone().requires_grad_()
    (gw,) = torch.autograd.grad(j(x, wr, b)[0].sum(), wr)
    _close(gw, tf.grad(lambda w: f(x, w, b)[0].sum())(w), 1e-4)


def test_default_executor_on_the_device():
    x = torch.randn(64, 128, device=DEV)
    f = lambda x: F.gelu(x).sum(-1)  # noqa: E731
    j = tx.jit(f)
    _close(j(x), f(x))
    want = "nvfuser" if DEV == "cuda" and nvfuser_available() else "torch"
    assert j.lower(x).executor == want


@pytest.mark.parametrize("executor", EXECUTORS)
def test_control_flow_on_the_device(executor):
    x = torch.randn(5, 4, device=DEV)
    w = torch.randn(4, 4, device=DEV) / 2

    def body(i, c):
        return torch.tanh(c @ w) + i

    def f(x):
        y = lax.fori_loop(0, 3, body, x)
        return lax.cond(y.sum() > 0, lambda a: a * 2, lambda a: a - 1, y)

    def ref(x):
        y = x
        for i in range(3):
            y = torch.tanh(y @ w) + i
        return y * 2 if y.sum() > 0 else y - 1

    j = tx.jit(f, executor=executor)
    _close(j(x), ref(x), 1e-5)
    _close(j(-x), ref(-x), 1e-5)
    gx = tx.jit(tx.grad(lambda x: f(x).sum()), executor=executor)(x)
    _close(gx, torch.func.grad(lambda x: ref(x).sum())(x), 1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_grads_on_the_device(dtype):
    params, x, y = _mlp(3, dtype=dtype)
    got = tx.jit(tx.grad(_loss))(params, x, y)
    want = tf.grad(_loss)(params, x, y)
    for g, w in zip(tx.tree.leaves(got), tx.tree.leaves(want)):
        assert g.dtype == dtype and g.device == w.device
        torch.testing.assert_close(g.float(), w.float(), rtol=5e-2, atol=5e-2)


def test_dropout_under_jit_draws_on_the_device():
    x = torch.ones(256, 256, device=DEV)
    j = tx.jit(lambda x: F.dropout(x, 0.25, training=True))
    a, b = j(x), j(x)
    assert a.device == x.device
    kept = (a != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.02
    torch.testing.assert_close(a[a != 0], torch.full_like(a[a != 0], 1 / 0.75))
    assert not torch.equal(a, b)  # a fresh draw on every call


@pytest.mark.parametrize("executor", EXECUTORS)
def test_torch_autograd_through_a_jitted_call(executor):
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(32, 16, generator=g).to(DEV), torch.randn(16, 8, generator=g).to(DEV)
    f = lambda x, w: torch.tanh(x @ w) * torch.sigmoid(x @ w) + 2 * x.sum()  # noqa: E731
    j = tx.jit(f, executor=executor)
    _close(j(x, w), f(x, w))  # built without grad first
    wr = w.clone().requires_grad_()
    (gw,) = torch.autograd.grad(j(x, wr).square().sum(), wr)
    _close(gw, tf.grad(lambda w: f(x, w).square().sum())(w), 1e-4)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_cpu_scalar_learning_rate_beside_device_parameters(executor):
    # torch lets a 0-dim CPU tensor join CUDA tensors; under jit it is moved (device_put)
    params, x, y = _mlp(5)
    lr = torch.tensor(0.05)

    def step(params, x, y, lr):
        gs = tx.grad(_loss)(params, x, y)
        return [(w - lr * gw, b - lr * gb) for (w, b), (gw, gb) in zip(params, gs)]

    gs = tf.grad(_loss)(params, x, y)
    want = [(w - lr * gw, b - lr * gb) for (w, b), (gw, gb) in zip(params, gs)]
    _close(tx.jit(step, executor=executor)(params, x, y, lr), want, 1e-5)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_conv_batchnorm_training_and_an_lstm_on_the_device(executor):
    # the torch executor's kernel groups on the device: conv with bias, batch norm's training
    # forward and backward in torch's kernels (running statistics written back), torch's LSTM
    import copy

    torch.manual_seed(0)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU()
    ).to(DEV)
    ref = copy.deepcopy(cnn)
    x = torch.randn(4, 3, 8, 8, device=DEV)
    j = tx.jit(cnn, executor=executor)
    for _ in range(2):
        _close(j(x), ref(x).detach(), 1e-4)
    _close(list(cnn.buffers()), list(ref.buffers()), 1e-5)  # running statistics, count
    lstm = torch.nn.LSTM(6, 8, num_layers=2, batch_first=True).to(DEV)
    params = {k: v.detach() for k, v in lstm.named_parameters()}
    s = torch.randn(3, 5, 6, device=DEV)

    def loss(p, call):
        return call(lstm, p, (s,))[0].square().sum()

    # the oracle is torch.autograd: torch.func.grad cannot run cuDNN's LSTM (flatten_parameters
    # reads the data pointer of its functional tensors); cuDNN's TF32 (on by default) is turned
    # off so that the oracle and the unrolled backward both compute in float32
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        got = tx.jit(tx.grad(lambda p: loss(p, tx.functional_call)), executor=executor)(params)
        leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
        want = torch.autograd.grad(loss(leaves, tf.functional_call), list(leaves.values()))
        _close(got, dict(zip(leaves, want)), 1e-4)
        with torch.no_grad():
            _close(tx.jit(lstm, executor=executor)(s)[0], lstm(s)[0], 1e-5)
