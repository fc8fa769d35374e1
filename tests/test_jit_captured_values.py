"""Computations on captured tensors alone (a module's parameters, closed-over tensors) after the
tensors change in place (an optimizer step, a buffer update): a jitted function computes what
eager torch computes with the new values (lang/captured.py `_read_captured`). One that reads a
parameter is staged; one on other captured tensors runs at trace time and the program is traced
again once their version counters move, as is one that reads a Python value (`.item()`)."""

import copy

import pytest
import torch
import torch.nn.functional as F

import thunderx as tx

F64 = torch.float64


class _Scaled(torch.nn.Module):
    """Parameters used through computations of their own, as real models do: a positive scale
    by softplus, a weight-normalized matrix, a transposed weight, a sliced buffer."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.raw = torch.nn.Parameter(torch.randn(4, generator=g, dtype=F64))
        self.v = torch.nn.Parameter(torch.randn(4, 4, generator=g, dtype=F64))
        self.register_buffer("table", torch.randn(8, 4, generator=g, dtype=F64))

    def forward(self, x):
        w = self.v / self.v.norm(dim=1, keepdim=True)
        return (x @ w.T) * F.softplus(self.raw) + self.table[: x.shape[0]]


def _step(m, x):
    opt = torch.optim.SGD(m.parameters(), lr=0.3)
    m(x).pow(2).sum().backward()
    opt.step()
    opt.zero_grad()
    with torch.no_grad():
        m.table.mul_(2)  # a buffer updated in place too


def test_jit_of_a_module_follows_in_place_updates_of_its_parameters():
    m = _Scaled()
    x = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(1))
    jm = tx.jit(m)
    torch.testing.assert_close(jm(x), m(x).detach(), rtol=1e-12, atol=1e-12)
    for _ in range(3):
        _step(m, x)
        torch.testing.assert_close(jm(x), m(x).detach(), rtol=1e-12, atol=1e-12)
    prims = {e.prim.name for e in tx.make_jaxpr(m)(x).jaxpr.eqns}
    assert "softplus" in prims  # staged, not a constant computed at trace time


def test_gradients_through_jit_reach_parameters_used_through_their_own_computation():
    m = _Scaled()
    x = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(2))
    tx.jit(m)(x).pow(2).sum().backward()
    got = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(x).pow(2).sum().backward()
    for g, p in zip(got, m.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-12, atol=1e-12)


def test_closed_over_tensor_updated_in_place():
    w = torch.randn(3, 3, dtype=F64, generator=torch.Generator().manual_seed(3))
    f = tx.jit(lambda v: v @ w.exp() + w.sum())
    x = torch.randn(2, 3, dtype=F64)
    f(x)
    with torch.no_grad():
        w.add_(0.5)
    torch.testing.assert_close(f(x), x @ w.exp() + w.sum(), rtol=1e-12, atol=1e-12)


def test_tensors_made_inside_the_function_stay_trace_time_constants():
    # torch.ones / arange from no traced value: computed once, as before (nothing to follow)
    def f(v):
        mask = torch.triu(torch.ones(3, 3, dtype=F64), 1)
        return v @ mask + torch.arange(3, dtype=F64)

    x = torch.randn(2, 3, dtype=F64)
    torch.testing.assert_close(tx.jit(f)(x), f(x))
    jaxpr = tx.make_jaxpr(f)(x)
    assert "triu" not in {e.prim.name for e in jaxpr.jaxpr.eqns}


class _InitOnce(torch.nn.Module):
    """ActNorm's data-dependent initialization: a Python branch on a buffer's value."""

    def __init__(self):
        super().__init__()
        self.register_buffer("initialized", torch.tensor(0))
        self.scale = torch.nn.Parameter(torch.ones(3, dtype=F64))

    def forward(self, x):
        if self.initialized.item() == 0:
            with torch.no_grad():
                self.scale.copy_(1.0 / x.std(0))
                self.initialized.fill_(1)
        return x * self.scale


def test_a_python_value_read_from_a_captured_tensor_is_guarded_by_its_version():
    x = torch.randn(5, 3, dtype=F64, generator=torch.Generator().manual_seed(4)) * 4
    m, ref = _InitOnce(), _InitOnce()
    jm = tx.jit(m)
    for k in range(3):  # the first call initializes; the later ones must not again
        torch.testing.assert_close(jm(x * (k + 1)), ref(x * (k + 1)).detach())
    assert m.initialized.item() == 1
    torch.testing.assert_close(m.scale.detach(), ref.scale.detach())
    w = torch.tensor(2.0, dtype=F64)
    f = tx.jit(lambda v: v * float(w.item()))
    ones = torch.ones(2, dtype=F64)
    assert torch.equal(f(ones), 2 * ones)
    assert torch.equal(f(ones), 2 * ones)  # unchanged: the cached program
    with torch.no_grad():
        w.fill_(3.0)
    assert torch.equal(f(ones), 3 * ones)  # traced again for the new value


@pytest.mark.parametrize("wrap", ["spectral_norm", "weight_norm"])
def test_parametrized_modules_under_jit_follow_eager_training(wrap):
    # torch's parametrizations compute the weight from the parameters on each access, and
    # spectral_norm's power iteration updates its buffers in place (F.normalize(..., out=u))
    import copy

    from torch.nn.utils import parametrizations

    torch.manual_seed(0)
    m = getattr(parametrizations, wrap)(torch.nn.Linear(4, 3)).double()
    ref = copy.deepcopy(m)
    jm = tx.jit(m)
    opts = [torch.optim.SGD(n.parameters(), lr=0.1) for n in (m, ref)]
    g = torch.Generator().manual_seed(6)
    for _ in range(3):
        x = torch.randn(5, 4, dtype=F64, generator=g)
        y, want = jm(x), ref(x)
        torch.testing.assert_close(y, want.detach(), rtol=1e-10, atol=1e-12)
        y.pow(2).sum().backward()
        want.pow(2).sum().backward()
        for a, b in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12)
        for opt in opts:
            opt.step()
            opt.zero_grad()
    for a, b in zip(m.buffers(), ref.buffers()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_out_into_a_captured_tensor_or_a_traced_value_under_jit():
    # the result copied into the tensor: a captured one is written back after each call
    # (spectral_norm's power iteration writes its buffer this way), a traced one updated
    buf = torch.zeros(3, dtype=F64)

    def f(a):
        torch.mul(a, 2.0, out=buf)
        local = torch.empty_like(a)
        torch.sin(a, out=local)
        return local + 1

    x = torch.tensor([0.5, -1.0, 2.0], dtype=F64)
    g = tx.jit(f)
    for k in range(2):
        torch.testing.assert_close(g(x + k), torch.sin(x + k) + 1, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(buf, (x + k) * 2, rtol=1e-10, atol=1e-12)


def test_a_training_step_under_jit_with_autograd_grad_matches_eager_and_backward_is_refused():
    # the gradient-as-value form of an SGD step (what the refusal of `loss.backward()` names)
    # updates the module's parameters as the same step run eagerly does, over several steps
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    staged = copy.deepcopy(eager)

    def make_step(model):
        def step(x, y):
            loss = F.mse_loss(model(x), y)
            grads = torch.autograd.grad(loss, list(model.parameters()))
            with torch.no_grad():
                for p, g in zip(model.parameters(), grads):
                    p.sub_(0.1 * g)
            return loss

        return step

    run_eager, run_jit = make_step(eager), tx.jit(make_step(staged))
    for _ in range(3):
        x, y = torch.randn(8, 4), torch.randn(8, 2)
        torch.testing.assert_close(run_jit(x, y), run_eager(x, y))
        for a, b in zip(staged.parameters(), eager.parameters()):
            torch.testing.assert_close(a, b)

    def with_backward(x, y):
        F.mse_loss(staged(x), y).backward()
        return x

    with pytest.raises(tx.errors.UnsupportedOperationError, match=r"backward.*autograd\.grad"):
        tx.jit(with_backward)(x, y)
    assert all(p.grad is None for p in staged.parameters())
