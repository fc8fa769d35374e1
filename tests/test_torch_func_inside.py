"""torch.func's transforms called inside thunderx's (thunderx/torch_func.py): each composition is
compared with the same composition run by torch.func alone, and torch.func outside thunderx's
transforms (at top level, in another thread) is checked to be torch's own."""

import threading

import pytest
import torch
import torch.func as tf
from torch.func import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, vjp, vmap

import thunderx as tx

F64 = torch.float64


def _close(a, b):
    la, lb = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    assert len(la) == len(lb)
    for p, q in zip(la, lb):
        assert isinstance(p, torch.Tensor) and p.dtype == q.dtype
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12)


def _f(v):
    return (v.sin() * v).sum()


def _g(a, b):
    return a * b.sin() + a.exp().sum()


@pytest.fixture
def x():
    return torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(0))


CASES = {
    "vmap(grad)": (lambda x: vmap(grad(_f))(x)),
    "grad(sum(grad))": (lambda x: grad(lambda v: grad(_f)(v).sum())(x)),
    "jacrev": (lambda x: jacrev(lambda v: v.sin() * v.sum())(x[0])),
    "jacrev argnums=1": (lambda x: jacrev(_g, argnums=1)(x[0], x[1])),
    "jacrev argnums=(0, 1)": (lambda x: jacrev(_g, argnums=(0, 1))(x[0], x[1])),
    "jacrev chunk_size": (lambda x: jacrev(torch.tanh, chunk_size=2)(x[0])),
    "jacfwd": (lambda x: jacfwd(lambda v: v.sin() * v.sum())(x[0])),
    "jacfwd argnums=(0, 1)": (lambda x: jacfwd(_g, argnums=(0, 1))(x[0], x[1])),
    "vmap(hessian)": (lambda x: vmap(hessian(_f))(x)),
    "vjp": (lambda x: vjp(torch.sin, x)[1](x.cos())),
    "vjp has_aux": (lambda x: vjp(lambda v: (v.exp(), v.mean()), x, has_aux=True)[1:][0](x)),
    "jvp": (lambda x: jvp(torch.sin, (x,), (x.cos(),))),
    "grad_and_value has_aux": (
        lambda x: grad_and_value(lambda v: (_f(v), v.mean()), has_aux=True)(x)
    ),
    "vmap in_dims/out_dims": (
        lambda x: vmap(lambda a, b: a * b, in_dims=(1, None), out_dims=1)(x, x[:, 0])
    ),
    "vmap(vmap)": (lambda x: vmap(vmap(torch.sin))(x)),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("outer", ["jit", "vmap", "grad"])
def test_torch_func_inside_a_thunderx_transform_equals_torch_func(name, outer, x):
    body = CASES[name]
    if outer == "jit":
        _close(tx.jit(body)(x), body(x))
    elif outer == "vmap":  # over a new leading axis of 2
        xs = torch.stack([x, 2 * x])
        _close(tx.vmap(body)(xs), vmap(body)(xs))
    else:  # differentiate the composition's sum of squares

        def loss(v):
            return sum((t**2).sum() for t in torch.utils._pytree.tree_leaves(body(v)))

        _close(tx.grad(loss)(x), grad(loss)(x))


def test_per_example_gradients_written_with_torch_func_are_staged_by_jit(x):
    # the torch.func per-sample-gradients tutorial's code, inside thunderx's jit
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    model = model.double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    y = torch.randn(4, 1, dtype=F64, generator=torch.Generator().manual_seed(1))

    def loss(p, xb, yb):
        out = tf.functional_call(model, p, (xb[None],))
        return ((out - yb[None]) ** 2).mean()

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    staged = tx.jit(per_example)
    _close(staged(params, x, y), per_example(params, x, y))
    jaxpr = str(tx.make_jaxpr(per_example)(params, x, y))
    assert "dot_general" in jaxpr or "matmul" in jaxpr  # traced into thunderx primitives


def test_torch_func_outside_thunderx_transforms_is_torch_own(x):
    from torch._functorch import apis, eager_transforms
    from torch.nn.utils import stateless

    before = [
        eager_transforms.grad_and_value_impl,
        eager_transforms._vjp_with_argnums,
        eager_transforms._jvp_with_argnums,
        apis.vmap_impl,
        stateless._functional_call,
    ]
    with pytest.raises(RuntimeError):  # an exception inside leaves torch restored too
        tx.jit(lambda v: vmap(lambda u: u.sum().item())(v) + v)(x)
    assert [
        eager_transforms.grad_and_value_impl,
        eager_transforms._vjp_with_argnums,
        eager_transforms._jvp_with_argnums,
        apis.vmap_impl,
        stateless._functional_call,
    ] == before
    seen = []
    grad(lambda v: seen.append(type(v)) or _f(v))(x)
    assert seen == [torch.Tensor]  # functorch's wrapped tensor, not a thunderx tracer


def test_torch_func_in_another_thread_runs_torch_own_while_a_transform_runs(x):
    torch_linearize_code = tf.linearize.__code__
    started, release, seen = threading.Event(), threading.Event(), []

    def slow(v):
        started.set()
        assert release.wait(timeout=60)
        return v * 2

    worker = threading.Thread(target=lambda: seen.append(tx.vmap(slow)(x)), daemon=True)
    worker.start()
    assert started.wait(timeout=60)
    try:  # the patch is installed (process-wide) while the vmap runs: this thread is outside
        types = []
        g = grad(lambda v: types.append(type(v)) or _f(v))(x)
        assert types == [torch.Tensor]
        torch.testing.assert_close(g, x.sin() + x * x.cos())
        assert tf.linearize.__code__ is not torch_linearize_code  # routed while patched
        out, jvp_fn = tf.linearize(torch.sin, x)  # and routed to torch's own here
        assert any(isinstance(c.cell_contents, torch.fx.GraphModule) for c in jvp_fn.__closure__)
        torch.testing.assert_close(jvp_fn(x), x.cos() * x)
    finally:
        release.set()
        worker.join(timeout=60)
    assert not worker.is_alive()
    torch.testing.assert_close(seen[0], x * 2)


def test_torch_func_linearize_inside_transforms_runs_as_thunderx(x):
    t = torch.linspace(-1, 1, x.numel(), dtype=F64).reshape(x.shape)

    # its jvp_fn gives jvp's tangent; its output is the function's value
    def both(v):
        out, jvp_fn = tf.linearize(torch.sin, v)
        return out, jvp_fn(t)

    _close(tx.jit(both)(x), jvp(torch.sin, (x,), (t,)))
    _close(tx.jit(lambda v: tf.linearize(_g, v, v)[1](t, v))(x), jvp(_g, (x, x), (t, x))[1])
    # differentiated through the point of linearization, batched over it
    lin = lambda v: tf.linearize(lambda u: u.sin() * u, v)[1](t).sum()  # noqa: E731
    via_jvp = lambda v: jvp(lambda u: u.sin() * u, (v,), (t,))[1].sum()  # noqa: E731
    _close(tx.grad(lin)(x), grad(via_jvp)(x))
    _close(
        tx.vmap(lambda r: tf.linearize(torch.tanh, r)[1](r))(x),
        vmap(lambda r: jvp(torch.tanh, (r,), (r,))[1])(x),
    )
    # torch.func's contract: the tangents' structure must match the primals'
    with pytest.raises(RuntimeError, match="same argspec|tree"):
        tx.jit(lambda v: tf.linearize(torch.sin, v)[1](v, v))(x)


def test_torch_func_linearize_is_torch_own_outside_transforms(x):
    from torch._functorch import eager_transforms

    code = eager_transforms.linearize.__code__
    with pytest.raises(RuntimeError):  # an exception inside leaves torch's code in place too
        tx.jit(lambda v: tf.linearize(lambda u: u.sum().item() + u, v)[1](v))(x)
    assert (
        eager_transforms.linearize.__code__ is code and tf.linearize is eager_transforms.linearize
    )
    out, jvp_fn = tf.linearize(torch.sin, x)  # torch's make_fx graph
    cells = [c.cell_contents for c in jvp_fn.__closure__]
    assert any(isinstance(c, torch.fx.GraphModule) for c in cells)
    _close(jvp_fn(x), x.cos() * x)


def test_functorch_internals_called_on_traced_values_say_what_to_use(x):
    from torch._functorch import vmap as functorch_vmap

    with pytest.raises(ValueError) as info:  # not a public entry point: not routed
        tx.jit(lambda v: functorch_vmap.vmap_impl(torch.sin, 0, 0, "error", None, v))(x)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "torch.func's own transform (vmap_impl)" in notes and "use thunderx.func " in notes
    assert "test_torch_func_inside.py" in notes


def test_contract_errors_of_torch_func_inside_are_torch_funcs(x):
    with pytest.raises(RuntimeError, match="Expected f\\(\\*args\\) to return a scalar Tensor"):
        tx.jit(grad(lambda v: v))(x)
    with pytest.raises(RuntimeError, match="argnums"):
        tx.vmap(jacrev(_g, argnums=[0]))(x, x)


# ------------------------------------------------------------------ functional_call, tied weights


class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 3, bias=False)
        self.b = torch.nn.Linear(3, 3, bias=False)
        self.b.weight = self.a.weight  # one parameter under two names

    def forward(self, v):
        return self.b(torch.tanh(self.a(v)))


def test_functional_call_replaces_a_tied_weight_under_all_its_names(x):
    m = _Tied().double()
    params = {k: v.detach() for k, v in m.named_parameters()}
    assert list(params) == ["a.weight"]  # named_parameters lists a tied one once

    def loss(call):
        return lambda p: call(m, p, (x,)).pow(2).sum()

    want = tf.grad(loss(tf.functional_call))(params)
    got = tx.grad(loss(tx.functional_call))(params)
    assert torch.equal(got["a.weight"], want["a.weight"])  # both uses of the weight count
    assert got["a.weight"].grad_fn is None
    # untied on request, as torch's tie_weights=False: the second layer keeps its parameter
    untied = tx.grad(lambda p: tx.functional_call(m, p, (x,), tie_weights=False).pow(2).sum())
    with torch.no_grad():
        want = tf.grad(lambda p: tf.functional_call(m, p, (x,), tie_weights=False).pow(2).sum())
        torch.testing.assert_close(untied(params)["a.weight"], want(params)["a.weight"])


def test_functional_call_tied_and_strict_errors_are_torchs(x):
    m = _Tied().double()
    w = m.a.weight.detach()
    for call in (tf.functional_call, tx.functional_call):
        with pytest.raises(ValueError, match="multiple values for keys .*which are tied"):
            call(m, {"a.weight": w, "b.weight": w + 1}, (x,))
        with pytest.raises(RuntimeError, match="Missing key\\(s\\): 'a.weight', 'b.weight'"):
            call(m, {}, (x,), strict=True)
        with pytest.raises(RuntimeError, match="Unexpected key\\(s\\): 'c'"):
            call(m, {"a.weight": w, "b.weight": w, "c": w}, (x,), strict=True)
        # the same value under both names is fine, and strict accepts every name given
        _close(call(m, {"a.weight": w, "b.weight": w}, (x,), strict=True), m(x).detach())
    lin = torch.nn.Linear(3, 2).double()
    p = {k: v.detach() for k, v in lin.named_parameters()}
    _close(tx.functional_call(lin, p, x), tf.functional_call(lin, p, x))  # args not a tuple
