"""`torch.autograd.grad` and `requires_grad_()` inside `jit` (lang/autograd_staged.py): each
staged result against the same function run by eager torch (its autograd is the oracle)."""

import pytest
import torch

import thunderx as tx

F64 = torch.float64


def _net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(1, 8),
        torch.nn.Tanh(),
        torch.nn.Linear(8, 8),
        torch.nn.Tanh(),
        torch.nn.Linear(8, 1),
    ).double()


def _pinn(net):
    # a physics-informed residual u'' + sin(x) = 0, written as torch users write it
    def loss(x):
        x = x.clone().requires_grad_(True)
        u = net(x)
        (u_x,) = torch.autograd.grad(u, x, torch.ones_like(u), create_graph=True)
        (u_xx,) = torch.autograd.grad(u_x, x, torch.ones_like(u_x), create_graph=True)
        return ((u_xx + torch.sin(x)) ** 2).mean(), u_x

    return loss


X = torch.linspace(-1, 1, 11, dtype=F64)[:, None]


def test_pinn_residual_and_its_derivatives_equal_eager_autograd():
    net = _net()
    loss = _pinn(net)
    want, want_ux = loss(X)
    got, got_ux = tx.jit(loss)(X)
    torch.testing.assert_close(got, want.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_ux, want_ux.detach(), rtol=1e-12, atol=1e-12)
    # u_x by a closed form of the network: W3 diag(1 - h2^2) W2 diag(1 - h1^2) W1
    w1, w2, w3 = net[0].weight, net[2].weight, net[4].weight
    h1 = torch.tanh(X @ w1.T + net[0].bias)
    h2 = torch.tanh(h1 @ w2.T + net[2].bias)
    closed = ((w3 * (1 - h2**2)) @ w2 * (1 - h1**2)) @ w1
    torch.testing.assert_close(got_ux, closed.detach(), rtol=1e-10, atol=1e-12)


def test_parameter_gradients_of_the_residual_inside_jit_equal_eager_autograd():
    net = _net()
    loss = _pinn(net)
    params = list(net.parameters())

    def step(x):
        value, _ = loss(x)
        return value, torch.autograd.grad(value, params, allow_unused=True)

    want_value, _ = loss(X)
    want = torch.autograd.grad(want_value, params, allow_unused=True)
    got_value, got = tx.jit(step)(X)
    torch.testing.assert_close(got_value, want_value.detach(), rtol=1e-12, atol=1e-12)
    assert want[-1] is None and got[-1] is None  # the last bias drops out of u''
    for g, w in zip(got[:-1], want[:-1]):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_thunderx_grad_around_jit_of_autograd_grad_equals_eager_double_backward():
    net = _net(1)
    names = [n for n, _ in net.named_parameters()]

    def loss(p, x):
        x = x.clone().requires_grad_(True)
        u = torch.func.functional_call(net, p, (x,))
        (u_x,) = torch.autograd.grad(u.sum(), x, create_graph=True)
        return (u_x**2).mean()

    p = {n: v.detach() for n, v in net.named_parameters()}
    got = tx.grad(tx.jit(loss))(p, X)
    value = loss(dict(net.named_parameters()), X)
    want = torch.autograd.grad(value, list(net.parameters()), materialize_grads=True)
    for n, w in zip(names, want):
        torch.testing.assert_close(got[n], w, rtol=1e-10, atol=1e-12)


def test_gradients_without_create_graph_are_detached_as_torchs():
    def f(x):
        x = x.clone().requires_grad_()
        (g,) = torch.autograd.grad((x**3).sum(), x)
        return g, g.requires_grad, (x**3).requires_grad

    g, g_requires, y_requires = f(X)
    torch.testing.assert_close(tx.jit(lambda x: f(x)[0])(X), g)
    assert (g_requires, y_requires) == (False, True)

    # a second grad through a detached gradient is torch's error
    def twice(x):
        x = x.clone().requires_grad_()
        (g,) = torch.autograd.grad((x**3).sum(), x)
        return torch.autograd.grad(g.sum(), x)

    for run in (twice, tx.jit(twice)):
        with pytest.raises(RuntimeError, match="does not require grad"):
            run(X)
    # and thunderx's grad around the jit sees no derivative through it, as torch
    h = tx.grad(lambda x: tx.jit(lambda v: f(v)[0])(x).sum())(X)
    torch.testing.assert_close(h, torch.zeros_like(X))


def test_requires_grad_of_staged_values_follows_torch():
    def flags(x, y):
        x = x.clone().requires_grad_()
        z = x * y
        with torch.no_grad():
            w = x * 2
        return [
            x.requires_grad,
            y.requires_grad,
            z.requires_grad,
            w.requires_grad,
            z.detach().requires_grad,
            (y + 1).requires_grad,
        ]

    seen = []
    tx.make_jaxpr(lambda x, y: seen.append(flags(x, y)) or x)(X, X)
    assert seen == [flags(X, X)] == [[True, False, True, False, False, False]]


def test_detach_and_no_grad_stop_the_staged_gradient():
    net = _net(2)

    def f(x):
        x = x.clone().requires_grad_()
        u = net(x)
        v = u.detach() * x + u * x.detach()
        with torch.no_grad():
            c = (x * 3).exp()
        return torch.autograd.grad((v * c).sum(), x)[0]

    torch.testing.assert_close(tx.jit(f)(X), f(X), rtol=1e-12, atol=1e-12)


def test_errors_are_torchs():
    def not_marked(x):
        return torch.autograd.grad((x * 2).sum(), x)

    def vector_output(x):
        x = x.clone().requires_grad_()
        return torch.autograd.grad(x * 2, x)

    def unused(x, y):
        x = x.clone().requires_grad_()
        y = y.clone().requires_grad_()
        return torch.autograd.grad((x * 2).sum(), (x, y))

    cases = [
        (not_marked, (X,), "does not require grad"),
        (vector_output, (X,), "grad can be implicitly created only for scalar outputs"),
        (unused, (X, X), "appears to not have been used in the graph"),
    ]
    for f, args, msg in cases:
        for run in (f, tx.jit(f)):
            with pytest.raises(RuntimeError, match=msg):
                run(*args)


def test_allow_unused_and_materialize_grads_and_repeated_inputs():
    def f(x, y, allow, materialize):
        x = x.clone().requires_grad_()
        y = y.clone().requires_grad_()
        return torch.autograd.grad(
            (x**2).sum(), (x, y, x), allow_unused=allow, materialize_grads=materialize
        )

    for allow, materialize in ((True, False), (True, True)):
        want = f(X, X, allow, materialize)
        got = tx.jit(lambda x, y: f(x, y, allow, materialize))(X, X)
        assert [g is None for g in got] == [w is None for w in want]
        for g, w in zip(got, want):
            if w is not None:
                torch.testing.assert_close(g, w)


def test_dropout_is_not_drawn_again_for_the_gradient():
    def f(x):
        x = x.clone().requires_grad_()
        y = torch.nn.functional.dropout(x * 2, p=0.5, training=True)
        (g,) = torch.autograd.grad(y.sum(), x)
        return y, g

    y, g = tx.jit(f)(torch.ones(1000, dtype=F64))
    # the gradient uses the mask of the value it differentiates: 2 / (1 - p) where kept
    kept = y != 0
    assert 0 < kept.sum() < 1000
    torch.testing.assert_close(g, torch.where(kept, 4.0, 0.0).to(F64))


def test_the_staged_program_computes_the_forward_once():
    net = _net()
    jaxpr = tx.make_jaxpr(lambda x: _pinn(net)(x)[0])(X)
    prims = [e.prim.name for e in jaxpr.jaxpr.eqns]
    assert prims.count("tanh") == 2  # one per layer: the gradients' replay was merged


def test_requires_grad_attribute_and_list_arguments():
    def f(x):
        x = x.clone()
        x.requires_grad = True
        (g,) = torch.autograd.grad(outputs=[(x**3).sum()], inputs=[x], create_graph=True)
        return g

    torch.testing.assert_close(tx.jit(f)(X), f(X).detach())
    torch.testing.assert_close(tx.jit(f)(X), 3 * X**2)  # closed form


def test_maml_inner_loop_with_captured_parameters_equals_eager():
    # second-order MAML written with torch.autograd.grad over the module's own parameters,
    # which the function uses through their transposes (computations of their own)
    net = _net(3)
    params = list(net.parameters())

    def forward(ps, x):
        h = torch.tanh(x @ ps[0].T + ps[1])
        h = torch.tanh(h @ ps[2].T + ps[3])
        return h @ ps[4].T + ps[5]

    def maml(xs, ys, xq, yq):
        fast = params
        for _ in range(2):
            loss = ((forward(fast, xs) - ys) ** 2).mean()
            grads = torch.autograd.grad(loss, fast, create_graph=True)
            fast = [p - 0.1 * g for p, g in zip(fast, grads)]
        outer = ((forward(fast, xq) - yq) ** 2).mean()
        return outer, torch.autograd.grad(outer, params)

    g = torch.Generator().manual_seed(5)
    data = [torch.randn(6, 1, dtype=F64, generator=g) for _ in range(4)]
    want_loss, want = maml(*data)
    got_loss, got = tx.jit(maml)(*data)
    torch.testing.assert_close(got_loss, want_loss.detach(), rtol=1e-12, atol=1e-12)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _forces(net):
    # a force field's forces as torch users write them: positions that require grad come in,
    # the energy's gradient with respect to them (kept differentiable) goes out
    def forces(pos):
        energy = net(pos).sum()
        (g,) = torch.autograd.grad(energy, pos, create_graph=True)
        return -g

    return forces


def test_arguments_that_require_grad_are_differentiated_inside_jit_as_eager():
    net = _net(1)
    forces = _forces(net)
    pos = torch.linspace(-1, 1, 7, dtype=F64)[:, None].requires_grad_()
    jf = tx.jit(forces)
    want = forces(pos)
    got = jf(pos)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # a force-matching loss trained through the jitted forces: parameter gradients of the
    # staged gradient (double backward) and the positions' own, as eager autograd gives them
    target = torch.sin(pos.detach())
    params = list(net.parameters())[:-1] + [pos]  # forces do not depend on the last bias
    want_g = torch.autograd.grad(((forces(pos) - target) ** 2).sum(), params)
    got_g = torch.autograd.grad(((jf(pos) - target) ** 2).sum(), params)
    for a, b in zip(got_g, want_g, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_which_arguments_require_grad_keys_the_program():
    net = _net(2)
    forces = _forces(net)
    jf = tx.jit(forces)
    pos = torch.linspace(-1, 1, 5, dtype=F64)[:, None]
    torch.testing.assert_close(jf(pos.requires_grad_()), forces(pos))
    # the same shapes without requires_grad: eager torch refuses, and so does the jit (not
    # the program traced for the call above)
    plain = pos.detach()
    with pytest.raises(RuntimeError):
        forces(plain)
    with pytest.raises(RuntimeError, match="does not require grad"):
        jf(plain)
    with torch.no_grad(), pytest.raises(RuntimeError):  # nothing recorded: eager refuses too
        forces(pos)
    with torch.no_grad(), pytest.raises(RuntimeError, match="does not require grad"):
        jf(pos)
    torch.testing.assert_close(jf(pos), forces(pos))  # and the first program again

    def flag(x, y):  # .requires_grad of the arguments, as the caller set it
        return x * 2 if x.requires_grad else y * 3

    a, b = torch.ones(2, dtype=F64), torch.ones(2, dtype=F64)
    jflag = tx.jit(flag)
    for x in (a, a.clone().requires_grad_(), a):
        torch.testing.assert_close(jflag(x, b), flag(x, b))
