"""PyTorch's official torch.func tutorials, run as written with thunderx swapped in for torch.func.

Each test follows one tutorial's steps (same models, shapes and seeds; `torch.func` imports
replaced by `thunderx`) and keeps the tutorial's own assertions, at the tutorial's tolerances:
the oracle is what the tutorial compares against (torch.autograd, a Python loop, a second
method). Where a tutorial only prints, the test also compares with torch.func run on the
same inputs. Tutorials: "Jacobians, Hessians, hvp, vhp, and more", "Per-sample gradients",
"Model ensembling", "Neural Tangent Kernels" (pytorch.org/tutorials/intermediate/*_tutorial).
"""

from __future__ import annotations

import copy
from functools import partial

import torch
import torch.func as tf
import torch.nn as nn
import torch.nn.functional as F

import thunderx as tx

# --- Jacobians, Hessians, hvp, vhp, and more: composing function transforms -----------------


def _predict(weight, bias, x):
    return F.linear(x, weight, bias).tanh()


def _jacobian_setup():
    torch.manual_seed(0)
    D = 16
    weight = torch.randn(D, D)
    bias = torch.randn(D)
    x = torch.randn(D)
    return D, weight, bias, x


def _autograd_jacobian(D, weight, bias, x):
    primal = x.clone().requires_grad_()
    cotangents = torch.eye(D)
    rows = [
        torch.autograd.grad(_predict(weight, bias, primal), primal, c, retain_graph=True)[0]
        for c in cotangents
    ]
    return torch.stack(rows)


def test_jacobians_tutorial_vjp_and_jacrev():
    D, weight, bias, x = _jacobian_setup()
    jacobian = _autograd_jacobian(D, weight, bias, x)

    _, vjp_fn = tx.vjp(partial(_predict, weight, bias), x)
    unit_vectors = torch.eye(D)
    (ft_jacobian,) = tx.vmap(vjp_fn)(unit_vectors)
    assert torch.allclose(ft_jacobian, jacobian)

    ft_jacobian = tx.jacrev(_predict, argnums=2)(weight, bias, x)
    assert torch.allclose(ft_jacobian, jacobian)


def test_jacobians_tutorial_argnums_and_forward_mode():
    D, weight, bias, x = _jacobian_setup()
    ft_jac_weight, ft_jac_bias = tx.jacrev(_predict, argnums=(0, 1))(weight, bias, x)
    ref_w, ref_b = tf.jacrev(_predict, argnums=(0, 1))(weight, bias, x)
    assert ft_jac_weight.shape == (D, D, D) and ft_jac_bias.shape == (D, D)
    assert torch.allclose(ft_jac_weight, ref_w) and torch.allclose(ft_jac_bias, ref_b)

    jacobian = _autograd_jacobian(D, weight, bias, x)
    ft_jacobian = tx.jacfwd(_predict, argnums=2)(weight, bias, x)
    assert torch.allclose(ft_jacobian, jacobian)
    assert torch.allclose(tx.jacrev(_predict, argnums=2)(weight, bias, x), ft_jacobian)


def test_jacobians_tutorial_hessians():
    torch.manual_seed(0)
    Din, Dout = 32, 16
    weight = torch.randn(Dout, Din)
    bias = torch.randn(Dout)
    x = torch.randn(Din)
    hess_api = tx.hessian(_predict, argnums=2)(weight, bias, x)
    hess_fwdfwd = tx.jacfwd(tx.jacfwd(_predict, argnums=2), argnums=2)(weight, bias, x)
    hess_revrev = tx.jacrev(tx.jacrev(_predict, argnums=2), argnums=2)(weight, bias, x)
    ref = tf.hessian(_predict, argnums=2)(weight, bias, x)
    assert hess_api.shape == (Dout, Din, Din)
    for h in (hess_api, hess_fwdfwd, hess_revrev):
        assert torch.allclose(h, ref, atol=1e-5)


def test_jacobians_tutorial_batch_jacobian_and_hessian():
    torch.manual_seed(0)
    batch_size, Din, Dout = 64, 31, 33
    weight = torch.randn(Dout, Din)
    bias = torch.randn(Dout)
    x = torch.randn(batch_size, Din)

    compute_batch_jacobian = tx.vmap(tx.jacrev(_predict, argnums=2), in_dims=(None, None, 0))
    batch_jacobian0 = compute_batch_jacobian(weight, bias, x)

    def predict_with_output_summed(weight, bias, x):
        return _predict(weight, bias, x).sum(0)

    batch_jacobian1 = tx.jacrev(predict_with_output_summed, argnums=2)(weight, bias, x).movedim(
        1, 0
    )
    assert torch.allclose(batch_jacobian0, batch_jacobian1)
    ref = tf.vmap(tf.jacrev(_predict, argnums=2), in_dims=(None, None, 0))(weight, bias, x)
    assert torch.allclose(batch_jacobian0, ref, atol=1e-6)

    compute_batch_hessian = tx.vmap(tx.hessian(_predict, argnums=2), in_dims=(None, None, 0))
    batch_hess = compute_batch_hessian(weight, bias, x)
    assert batch_hess.shape == (batch_size, Dout, Din, Din)
    ref = tf.vmap(tf.hessian(_predict, argnums=2), in_dims=(None, None, 0))(weight, bias, x)
    assert torch.allclose(batch_hess, ref, atol=1e-5)


def test_jacobians_tutorial_hvp_and_vhp():
    def hvp(f, primals, tangents):
        return tx.jvp(tx.grad(f), primals, tangents)[1]

    def f(x):
        return x.sin().sum()

    torch.manual_seed(0)
    x = torch.randn(2048)
    tangent = torch.randn(2048)
    result = hvp(f, (x,), (tangent,))

    def hvp_revrev(f, primals, tangents):
        _, vjp_fn = tx.vjp(tx.grad(f), *primals)
        return vjp_fn(*tangents)

    result_hvp_revrev = hvp_revrev(f, (x,), (tangent,))
    assert torch.allclose(result, result_hvp_revrev[0])
    # closed form: the Hessian of sum(sin x) is diag(-sin x)
    assert torch.allclose(result, -x.sin() * tangent, atol=1e-6)


# --- Per-sample gradients ---------------------------------------------------------------------


class _SimpleCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def test_per_sample_grads_tutorial():
    torch.manual_seed(0)

    def loss_fn(predictions, targets):
        return F.nll_loss(predictions, targets)

    batch_size = 64
    data = torch.randn(batch_size, 1, 28, 28)
    targets = torch.randint(10, (batch_size,))
    model = _SimpleCNN()

    def compute_grad(sample, target):
        sample = sample.unsqueeze(0)
        target = target.unsqueeze(0)
        prediction = model(sample)
        loss = loss_fn(prediction, target)
        return torch.autograd.grad(loss, list(model.parameters()))

    def compute_sample_grads(data, targets):
        sample_grads = [compute_grad(data[i], targets[i]) for i in range(batch_size)]
        sample_grads = zip(*sample_grads)
        return [torch.stack(shards) for shards in sample_grads]

    per_sample_grads = compute_sample_grads(data, targets)

    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def compute_loss(params, buffers, sample, target):
        batch = sample.unsqueeze(0)
        targets = target.unsqueeze(0)
        predictions = tx.functional_call(model, (params, buffers), (batch,))
        return loss_fn(predictions, targets)

    ft_compute_grad = tx.grad(compute_loss)
    ft_compute_sample_grad = tx.vmap(ft_compute_grad, in_dims=(None, None, 0, 0))
    ft_per_sample_grads = ft_compute_sample_grad(params, buffers, data, targets)

    assert len(per_sample_grads) == len(ft_per_sample_grads)
    for per_sample_grad, ft_per_sample_grad in zip(per_sample_grads, ft_per_sample_grads.values()):
        assert torch.allclose(per_sample_grad, ft_per_sample_grad, atol=3e-3, rtol=1e-5)

    # the tutorial's closing step: the same under jit
    jitted = tx.jit(ft_compute_sample_grad)(params, buffers, data, targets)
    for per_sample_grad, g in zip(per_sample_grads, jitted.values()):
        assert torch.allclose(per_sample_grad, g, atol=3e-3, rtol=1e-5)


# --- Model ensembling -------------------------------------------------------------------------


class _SimpleMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = x.flatten(1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        x = F.relu(x)
        return self.fc3(x)


def test_model_ensembling_tutorial():
    torch.manual_seed(0)
    num_models = 10
    data = torch.randn(100, 64, 1, 28, 28)
    models = [_SimpleMLP() for _ in range(num_models)]

    minibatches = data[:num_models]
    predictions_diff_minibatch_loop = [m(mb) for m, mb in zip(models, minibatches)]
    minibatch = data[0]
    predictions2 = [m(minibatch) for m in models]

    params, buffers = tx.stack_module_state(models)
    base_model = copy.deepcopy(models[0]).to("meta")

    def fmodel(params, buffers, x):
        return tx.functional_call(base_model, (params, buffers), (x,))

    assert [p.size(0) for p in params.values()] == [num_models] * 6
    assert minibatches.shape == (num_models, 64, 1, 28, 28)

    predictions1_vmap = tx.vmap(fmodel)(params, buffers, minibatches)
    assert torch.allclose(
        predictions1_vmap, torch.stack(predictions_diff_minibatch_loop), atol=1e-3, rtol=1e-5
    )
    predictions2_vmap = tx.vmap(fmodel, in_dims=(0, 0, None))(params, buffers, minibatch)
    assert torch.allclose(predictions2_vmap, torch.stack(predictions2), atol=1e-3, rtol=1e-5)


# --- Neural Tangent Kernels -------------------------------------------------------------------


class _NtkCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, (3, 3))
        self.conv2 = nn.Conv2d(32, 32, (3, 3))
        self.conv3 = nn.Conv2d(32, 32, (3, 3))
        self.fc = nn.Linear(21632, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = x.relu()
        x = self.conv2(x)
        x = x.relu()
        x = self.conv3(x)
        x = x.flatten(1)
        return self.fc(x)


def _ntk_jacobian_contraction(fnet_single, params, x1, x2, compute="full"):
    jac1 = tx.vmap(tx.jacrev(fnet_single), (None, 0))(params, x1)
    jac1 = [j.flatten(2) for j in jac1.values()]
    jac2 = tx.vmap(tx.jacrev(fnet_single), (None, 0))(params, x2)
    jac2 = [j.flatten(2) for j in jac2.values()]
    einsum_expr = {"full": "Naf,Mbf->NMab", "trace": "Naf,Maf->NM", "diagonal": "Naf,Maf->NMa"}
    result = torch.stack([torch.einsum(einsum_expr[compute], j1, j2) for j1, j2 in zip(jac1, jac2)])
    return result.sum(0)


def _ntk_vps(func, params, x1, x2, compute="full"):
    def get_ntk(x1, x2):
        def func_x1(params):
            return func(params, x1)

        def func_x2(params):
            return func(params, x2)

        output, vjp_fn = tx.vjp(func_x1, params)

        def get_ntk_slice(vec):
            vjps = vjp_fn(vec)
            _, jvps = tx.jvp(func_x2, (params,), vjps)
            return jvps

        basis = torch.eye(output.numel(), dtype=output.dtype).view(output.numel(), -1)
        return tx.vmap(get_ntk_slice)(basis)

    result = tx.vmap(tx.vmap(get_ntk, (None, 0)), (0, None))(x1, x2)
    if compute == "full":
        return result
    if compute == "trace":
        return torch.einsum("NMKK->NM", result)
    return torch.einsum("NMKK->NMK", result)


def test_ntk_tutorial():
    torch.manual_seed(0)
    x_train = torch.randn(20, 3, 32, 32)
    x_test = torch.randn(5, 3, 32, 32)
    net = _NtkCNN()
    params = {k: v.detach() for k, v in net.named_parameters()}

    def fnet_single(params, x):
        return tx.functional_call(net, params, (x.unsqueeze(0),)).squeeze(0)

    result = _ntk_jacobian_contraction(fnet_single, params, x_train, x_test)
    assert result.shape == (20, 5, 10, 10)
    trace = _ntk_jacobian_contraction(fnet_single, params, x_train, x_test, "trace")
    assert torch.allclose(trace, torch.einsum("NMKK->NM", result), rtol=1e-4, atol=1e-3)

    result_from_ntk_vps = _ntk_vps(fnet_single, params, x_train, x_test)
    assert torch.allclose(result_from_ntk_vps, result, atol=1e-5 * result.abs().max())

    # independent oracle: the same contraction with torch.func's jacobians
    def tf_single(params, x):
        return tf.functional_call(net, params, (x.unsqueeze(0),)).squeeze(0)

    j1 = tf.vmap(tf.jacrev(tf_single), (None, 0))(params, x_train)
    j2 = tf.vmap(tf.jacrev(tf_single), (None, 0))(params, x_test)
    ref = sum(
        torch.einsum("Naf,Mbf->NMab", a.flatten(2), b.flatten(2))
        for a, b in zip(j1.values(), j2.values())
    )
    assert torch.allclose(result, ref, rtol=1e-4, atol=1e-4 * ref.abs().max())

    # jit of the vjp/jvp method gives the same kernel
    jitted = tx.jit(partial(_ntk_vps, fnet_single))(params, x_train, x_test)
    assert torch.allclose(jitted, result_from_ntk_vps, rtol=1e-4, atol=1e-5 * result.abs().max())
