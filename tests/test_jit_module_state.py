"""A jitted program follows changes of the torch modules its trace used, as torch.compile's guards
do: train/eval, a replaced layer or parameter, load_state_dict(assign=True), a changed dropout
probability. Oracle: the module called eagerly after the same change."""

import pytest
import torch
import torch.nn as nn

import thunderx as tx
from thunderx.lang import module_state


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.5), nn.Linear(8, 2))


X = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))


def seeded(fn, seed=3):
    torch.manual_seed(seed)
    return fn()


CHANGES = {
    "eval then train": (lambda m: m.eval(), lambda m: m.train()),
    "train then eval": (lambda m: m.train(), lambda m: m.eval()),
    "parameter rebound": (
        lambda m: m.eval(),
        lambda m: setattr(m[0], "weight", nn.Parameter(torch.randn(8, 4))),
    ),
    "layer replaced": (lambda m: m.eval(), lambda m: m.__setitem__(3, nn.Linear(8, 2))),
    "load_state_dict(assign=True)": (
        lambda m: m.eval(),
        lambda m: m.load_state_dict(
            {k: torch.randn_like(v) for k, v in m.state_dict().items()}, assign=True
        ),
    ),
    "dropout probability": (lambda m: m.train(), lambda m: setattr(m[2], "p", 0.1)),
    "forward replaced": (
        lambda m: m.eval(),
        lambda m: setattr(m[1], "forward", lambda x: torch.sigmoid(x)),
    ),
    "forward hook added": (
        lambda m: m.eval(),
        lambda m: m[0].register_forward_hook(lambda mod, inp, out: out * 10),
    ),
    "forward hook removed": (
        lambda m: (
            m.eval(),
            setattr(m, "_h", m[3].register_forward_pre_hook(lambda mod, a: (a[0] * 3,))),
        ),
        lambda m: m._h.remove(),
    ),
    "buffer replaced": (
        lambda m: m.eval(),
        lambda m: m[0].register_buffer("unused", torch.ones(1)),
    ),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("how", ["module", "function"])
def test_jit_follows_a_change_of_the_module(change, how):
    m = mlp()
    before, after = CHANGES[change]
    before(m)
    f = tx.jit(m) if how == "module" else tx.jit(lambda x: m(x).square().sum(1))
    eager = m if how == "module" else (lambda x: m(x).square().sum(1))
    close(seeded(lambda: f(X)), seeded(lambda: eager(X)))
    after(m)
    close(seeded(lambda: f(X)), seeded(lambda: eager(X)))
    close(seeded(lambda: f(X)), seeded(lambda: eager(X)))  # the fast path of the new program


def test_a_parameter_read_without_calling_the_module_is_guarded_too():
    lin = nn.Linear(3, 2)
    f = tx.jit(lambda x: x @ lin.weight.T)
    x = torch.randn(5, 3)
    close(f(x), x @ lin.weight.T)
    lin.weight = nn.Parameter(torch.randn(2, 3))
    close(f(x), x @ lin.weight.T)


def test_functional_call_under_jit_follows_the_module_mode():
    m = mlp()
    params = dict(m.named_parameters())
    f = tx.jit(lambda p, x: tx.functional_call(m, p, (x,)))
    m.eval()
    close(f(params, X), m(X))
    m.train()
    close(seeded(lambda: f(params, X)), seeded(lambda: m(X)))


def test_in_place_updates_keep_the_program():
    m = mlp().eval()
    f = tx.jit(m)
    f(X)
    misses = f.cache_info()["misses"]
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(3):  # optimizer steps write the parameters in place: no new trace
        opt.zero_grad()
        m(X).sum().backward()
        opt.step()
        close(f(X), m(X))
    guard = module_state.ModuleGuard([m])
    assert guard._version == 0
    assert f.cache_info()["misses"] == misses
    m.train()
    assert guard._version == 1
    f(X)
    assert f.cache_info()["misses"] == misses + 1  # traced again for the training mode
