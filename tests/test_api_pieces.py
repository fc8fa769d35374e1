"""The JAX / torch.func API pieces: eval_shape, make_jaxpr(return_shape=True), linear_transpose,
chunked vmap / jacobians, torch.func spellings, stack_module_state ensembles, debug printing and
callbacks, jit(...).lower(...).compile() and cost_analysis. Each is checked against torch.func,
torch autograd, a Python loop or a closed form."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx
from thunderx import ShapeDtypeStruct
from thunderx.errors import ConcretizationError
from thunderx.transforms.linear_transpose import NotLinearError

F64 = torch.float64


def _randn(*shape, seed=0, dtype=F64):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ------------------------------------------------------------------------------------ eval_shape


def _struct(t):
    return ShapeDtypeStruct(t.shape, t.dtype, t.device)


def test_eval_shape_matches_the_real_outputs_on_a_pytree():
    def f(x, y, *, scale):
        return {"prod": x @ y, "sum": (x.sum(-1) * scale).to(torch.int32), "pair": (x.T, y[0])}

    x, y = _randn(4, 3), _randn(3, 5)
    real = f(x, y, scale=2.0)
    got = thunderx.eval_shape(f, x, _struct(y), scale=2.0)
    want = thunderx.tree.map(_struct, real)
    assert got == want


def test_eval_shape_follows_torch_type_promotion():
    f = lambda a, b: a * b + 1
    a = torch.ones(3, dtype=torch.int64)
    b = torch.ones(3, dtype=torch.float16)
    assert thunderx.eval_shape(f, a, b) == _struct(f(a, b))
    assert thunderx.eval_shape(f, a, 2.5) == _struct(f(a, 2.5))


def test_eval_shape_runs_nothing_on_shapes_too_large_to_allocate():
    # 2**40 float32 elements (4 TiB): only shapes are propagated
    x = ShapeDtypeStruct((2**20, 2**20), torch.float32)
    out = thunderx.eval_shape(lambda x: torch.tanh(x @ x.T).sum(0), x)
    assert out == ShapeDtypeStruct((2**20,), torch.float32)


def test_eval_shape_keeps_devices_and_rejects_non_arrays():
    x = ShapeDtypeStruct((2,), torch.float32, device="meta")
    assert thunderx.eval_shape(torch.sin, x).device == torch.device("meta")
    with pytest.raises(TypeError, match="eval_shape: .*got str"):
        thunderx.eval_shape(torch.sin, "x")


def test_eval_shape_rejects_python_control_flow_on_values():
    def f(x):
        return x if x.sum() > 0 else -x

    with pytest.raises(ConcretizationError):
        thunderx.eval_shape(f, torch.ones(3))


def test_make_jaxpr_return_shape_gives_the_output_structs():
    f = lambda x, n: (torch.sin(x) * n, {"m": x.mean()})
    x = _randn(2, 3)
    jaxpr, shapes = thunderx.make_jaxpr(f, static_argnums=1, return_shape=True)(x, 3)
    assert shapes == thunderx.tree.map(_struct, f(x, 3))
    assert str(jaxpr) == str(thunderx.make_jaxpr(f, static_argnums=1)(x, 3))
    # ShapeDtypeStruct arguments trace like tensors of that type
    assert str(thunderx.make_jaxpr(f, static_argnums=1)(_struct(x), 3)) == str(jaxpr)


# ------------------------------------------------------------------------------ linear_transpose

W = _randn(3, 4, seed=1)
K = _randn(2, 3, 3, seed=2)

LINEAR = {
    "matmul": (lambda x: W @ x, (4,)),
    "layout": (lambda x: torch.cat([x.T, 2 * x.T], 0)[1:].sum(-1), (3, 2)),
    "broadcast": (lambda x: (x[:, None] * torch.arange(3.0, dtype=F64)).flatten(), (4,)),
    "conv": (lambda x: F.conv1d(x, K, padding=1), (1, 3, 6)),
    "select": (lambda x: torch.where(W[0] > 0, x, torch.zeros_like(x)) - x.flip(0), (4,)),
    "pytree": (lambda x: {"a": x @ W.T, "b": (x.sum(), -x)}, (4,)),
}


@pytest.mark.parametrize("name", sorted(LINEAR))
def test_linear_transpose_equals_the_vjp_of_the_linear_map(name):
    f, shape = LINEAR[name]
    x = _randn(*shape, seed=3)
    out, vjp_fn = tf.vjp(f, x)
    ct = thunderx.tree.map(lambda o: _randn(*o.shape, seed=4), out)
    (got,) = thunderx.linear_transpose(f, ShapeDtypeStruct(shape, F64))(ct)
    (want,) = vjp_fn(ct)
    torch.testing.assert_close(got, want)
    # <ct, f(x)> == <f^T(ct), x>
    lhs = sum((c * o).sum() for c, o in zip(thunderx.tree.leaves(ct), thunderx.tree.leaves(f(x))))
    torch.testing.assert_close(lhs, (got * x).sum())


def test_linear_transpose_of_several_arguments_returns_a_tuple_like_primals():
    f = lambda a, b: W @ a + 3 * b
    a, b = _randn(4), _randn(3)
    ct = _randn(3, seed=5)
    got = thunderx.linear_transpose(f, a, b)(ct)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, tf.vjp(f, a, b)[1](ct)):
        torch.testing.assert_close(g, w)


def test_linear_transpose_under_jit_and_vmap_is_the_same():
    f = lambda x: W @ x
    ct = _randn(3, seed=6)
    want = W.T @ ct
    jitted = thunderx.jit(lambda ct: thunderx.linear_transpose(f, torch.zeros(4, dtype=F64))(ct))
    torch.testing.assert_close(jitted(ct)[0], want)
    # over a batch of cotangents: one transpose per row
    cts = _randn(5, 3, seed=7)
    ft = thunderx.linear_transpose(f, torch.zeros(4, dtype=F64))
    torch.testing.assert_close(thunderx.vmap(ft)(cts)[0], cts @ W)


@pytest.mark.parametrize(
    "f, what",
    [
        (torch.sin, "'sin'"),
        (lambda x: x * x, "mul"),
        (lambda x: torch.relu(x), "'relu'"),
        (lambda x: x + 1, "not zero at zero inputs"),
        (lambda x: 1 / x, "not zero at zero inputs"),
        (lambda x: torch.ones(3, dtype=F64), "not zero at zero inputs"),
    ],
)
def test_linear_transpose_of_a_nonlinear_function_raises(f, what):
    with pytest.raises(NotLinearError, match=what):
        thunderx.linear_transpose(f, torch.zeros(3, dtype=F64))(torch.ones(3, dtype=F64))


def test_linear_transpose_checks_the_cotangent():
    ft = thunderx.linear_transpose(lambda x: W @ x, torch.zeros(4, dtype=F64))
    with pytest.raises(TypeError, match="cotangent leaf 0 is f64\\[4\\], expected f64\\[3\\]"):
        ft(torch.zeros(4, dtype=F64))
    with pytest.raises(TypeError, match="structure"):
        ft((torch.zeros(3, dtype=F64),))


# ------------------------------------------------------------------- chunked vmap and jacobians


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 100])
def test_chunked_vmap_equals_torch_func(chunk_size):
    def f(x, y):
        return torch.tanh(x @ y).sum(0), x.T

    x, y = _randn(7, 2, 3), _randn(3, 4)
    got = thunderx.vmap(f, in_axes=(0, None), out_axes=(0, 2), chunk_size=chunk_size)(x, y)
    want = tf.vmap(f, in_dims=(0, None), out_dims=(0, 2), chunk_size=chunk_size)(x, y)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    unchunked = thunderx.vmap(f, in_axes=(0, None), out_axes=(0, 2))(x, y)
    for g, w in zip(got, unchunked):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_chunked_vmap_maps_at_most_chunk_size_elements_at_a_time():
    # the memory bound: no equation of the traced program holds more than a chunk of the batch
    jaxpr = thunderx.make_jaxpr(thunderx.vmap(torch.sin, in_axes=1, chunk_size=3))(torch.ones(5, 7))
    sins = [e for e in jaxpr.eqns if e.prim.name == "sin"]
    # (the batch stays where in_axes put it: axis 1)
    assert sorted(e.outputs[0].aval.shape for e in sins) == [(5, 1), (5, 3), (5, 3)]
    assert [tuple(v.aval.shape) for v in jaxpr.jaxpr.outvars] == [(7, 5)]


def test_chunked_vmap_out_axes_none_and_nesting_and_jit():
    f = lambda x, c: (x * c, c.sum())
    x, c = _randn(5, 4), _randn(4)
    got, s = thunderx.vmap(f, in_axes=(0, None), out_axes=(1, None), chunk_size=2)(x, c)
    torch.testing.assert_close(got, (x * c).T)
    torch.testing.assert_close(s, c.sum())
    nested = thunderx.jit(thunderx.vmap(thunderx.vmap(torch.sin, chunk_size=2), chunk_size=3))
    torch.testing.assert_close(nested(_randn(5, 4)), torch.sin(_randn(5, 4)))


def test_chunked_vmap_randomness_same_draws_alike_in_every_chunk():
    f = lambda x: x + torch.rand(3)
    out = thunderx.vmap(f, randomness="same", chunk_size=2)(torch.zeros(5, 3))
    assert torch.equal(out, out[:1].expand(5, 3))
    out = thunderx.vmap(f, randomness="different", chunk_size=2)(torch.zeros(5, 3))
    assert len({tuple(r.tolist()) for r in out}) == 5


def test_vmap_torch_func_spellings():
    x, y = _randn(3, 4), _randn(4, 3)
    f = lambda x, y: x * y
    torch.testing.assert_close(
        thunderx.vmap(f, in_dims=(0, 1), out_dims=1)(x, y),
        tf.vmap(f, in_dims=(0, 1), out_dims=1)(x, y),
    )
    with pytest.raises(TypeError, match="in_axes or in_dims"):
        thunderx.vmap(f, in_axes=0, in_dims=0)
    with pytest.raises(TypeError, match="out_axes or out_dims"):
        thunderx.vmap(f, out_axes=1, out_dims=1)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="chunk_size"):
            thunderx.vmap(f, chunk_size=bad)


@pytest.mark.parametrize("chunk_size", [None, 1, 2, 5, 64])
def test_chunked_jacobians_equal_torch_func(chunk_size):
    def f(x, y):
        return {"a": torch.sin(x) * y.sum(), "b": (x[:, None] * y).tanh()}

    x, y = _randn(5), _randn(3, seed=1)
    want = tf.jacrev(f, argnums=(0, 1))(x, y)
    for jac in (thunderx.jacrev, thunderx.jacfwd):
        got = jac(f, argnums=(0, 1), chunk_size=chunk_size)(x, y)
        for g, w in zip(thunderx.tree.leaves(got), thunderx.tree.leaves(want)):
            torch.testing.assert_close(g, w)


# ------------------------------------------------------------------------ ensembles of modules


class _Scaled(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = torch.nn.Linear(3, 8)
        self.fc2 = torch.nn.Linear(8, 2)
        self.register_buffer("scale", torch.rand(2) + 0.5)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) * self.scale


def _models():
    return [_Scaled(seed) for seed in range(4)]


def test_stack_module_state_matches_torch_func():
    models = _models()
    params, buffers = thunderx.stack_module_state(models)
    want_p, want_b = tf.stack_module_state(models)
    assert params.keys() == want_p.keys() and buffers.keys() == want_b.keys()
    for k in params:
        assert torch.equal(params[k], want_p[k])
        assert params[k].requires_grad and params[k].is_leaf
    for k in buffers:
        assert torch.equal(buffers[k], want_b[k]) and not buffers[k].requires_grad


@pytest.mark.parametrize("same_minibatch", [True, False])
def test_ensemble_with_vmap_and_functional_call_matches_a_loop(same_minibatch):
    # the torch.func model-ensembling tutorial, with thunderx's vmap and functional_call
    models = _models()
    params, buffers = thunderx.stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    x = _randn(len(models), 6, 3, dtype=torch.float32)

    def run(p, b, x):
        return thunderx.functional_call(base, (p, b), (x,))

    if same_minibatch:
        got = thunderx.vmap(run, in_axes=(0, 0, None))(params, buffers, x[0])
        want = torch.stack([m(x[0]) for m in models])
    else:
        got = thunderx.vmap(run)(params, buffers, x)
        want = torch.stack([m(xi) for m, xi in zip(models, x)])
    torch.testing.assert_close(got, want)


def test_gradients_of_an_ensemble_match_each_models_autograd():
    models = _models()
    params, buffers = thunderx.stack_module_state(models)
    params = {k: v.detach() for k, v in params.items()}
    base = copy.deepcopy(models[0])
    x = _randn(6, 3, dtype=torch.float32)

    def loss(p, b):
        return thunderx.functional_call(base, (p, b), (x,)).pow(2).mean()

    grads = thunderx.vmap(thunderx.grad(loss))(params, buffers)
    for i, m in enumerate(models):
        m.zero_grad()
        m(x).pow(2).mean().backward()
        for name, p in m.named_parameters():
            torch.testing.assert_close(grads[name][i], p.grad)


def test_stack_module_state_errors():
    with pytest.raises(ValueError, match="at least one model"):
        thunderx.stack_module_state([])
    with pytest.raises(TypeError, match="share one class"):
        thunderx.stack_module_state([torch.nn.Linear(2, 2), torch.nn.Identity()])
    with pytest.raises(ValueError, match="different shapes"):
        thunderx.stack_module_state([torch.nn.Linear(2, 2), torch.nn.Linear(3, 2)])
    with pytest.raises(ValueError, match="more than one"):
        m = torch.nn.Linear(2, 2)
        p = dict(m.named_parameters())
        thunderx.functional_call(m, (p, p), (torch.ones(2),))


# ------------------------------------------------------------------------------ debug printing


def test_debug_print_under_jit_prints_on_every_call_with_that_calls_values(capsys):
    traced = []

    @thunderx.jit
    def f(x):
        traced.append(1)
        thunderx.debug.print("x={} total={t:.1f}", x, t=x.sum())
        return x * 2

    f(torch.tensor([1.0, 2.0]))
    f(torch.tensor([3.0, 4.0]))
    f(torch.tensor([5.0, 6.0]))
    assert len(traced) == 1  # traced once, printed three times
    assert capsys.readouterr().out.splitlines() == [
        "x=tensor([1., 2.]) total=3.0",
        "x=tensor([3., 4.]) total=7.0",
        "x=tensor([5., 6.]) total=11.0",
    ]


def test_debug_print_of_an_unused_value_is_not_eliminated(capsys):
    @thunderx.jit
    def f(x):
        y = torch.exp(x)  # read only by the print
        thunderx.debug.print("{}", y)
        thunderx.debug.print("{}", y)  # two prints of one value: both happen
        return x + 1

    f(torch.tensor(0.0))
    assert capsys.readouterr().out.splitlines() == ["1.0", "1.0"]
    assert "debug_callback" in f.lower(torch.tensor(0.0)).as_text()


def test_debug_print_under_grad_and_jvp_shows_primal_values(capsys):
    def f(x):
        thunderx.debug.print("{}", x)
        return (x**3).sum()

    x = torch.tensor([1.0, 2.0])
    g = thunderx.grad(f)(x)
    torch.testing.assert_close(g, 3 * x**2)
    thunderx.jvp(f, (x,), (torch.ones(2),))
    thunderx.grad(thunderx.jit(f))(x)
    f(x)  # outside any transform it prints at once
    assert capsys.readouterr().out.splitlines() == ["tensor([1., 2.])"] * 4


def test_debug_print_under_vmap_prints_each_batch_element_in_order(capsys):
    def f(x, y):
        thunderx.debug.print("{} {}", x, y)
        return x * y

    x, y = torch.arange(3.0), torch.tensor(10.0)
    thunderx.vmap(f, in_axes=(0, None))(x, y)
    thunderx.jit(thunderx.vmap(f, in_axes=(0, None)))(x, y)
    thunderx.vmap(thunderx.jit(f), in_axes=(0, None))(x, y)
    lines = ["0.0 10.0", "1.0 10.0", "2.0 10.0"]
    assert capsys.readouterr().out.splitlines() == lines * 3


def test_debug_callback_gets_pytrees_and_a_snapshot_of_the_values():
    seen = []

    @thunderx.jit
    def f(x):
        y = x * 2
        thunderx.debug.callback(lambda d, tag: seen.append((tag, d["y"])), {"y": y}, tag="y")
        return torch.sin(y)  # the generated code may reuse y's buffer here

    x = torch.tensor([0.5, 1.0])
    torch.testing.assert_close(f(x), torch.sin(x * 2))
    assert seen[0][0] == "y"
    torch.testing.assert_close(seen[0][1], x * 2)


def test_random_draws_under_jit_are_neither_merged_nor_dropped():
    f = thunderx.jit(lambda x: torch.rand(3) - torch.rand(3) + x)
    assert (f(torch.zeros(3)) != 0).all()
    # an unused draw still advances the generator, as in eager mode
    g = lambda x: (torch.rand(2), x + 1)[1]
    torch.manual_seed(0)
    g(torch.zeros(1))
    want = torch.rand(2)
    torch.manual_seed(0)
    thunderx.jit(g)(torch.zeros(1))
    assert torch.equal(torch.rand(2), want)


# ------------------------------------------------------------------ lower / compile / costs


def test_lower_compile_runs_the_program_for_the_lowered_signature():
    f = thunderx.jit(lambda x, n, *, w: torch.tanh(x @ w) * n, static_argnums=1)
    x, w = _randn(4, 3), _randn(3, 2)
    compiled = f.lower(x, 3, w=w).compile()
    x2, w2 = _randn(4, 3, seed=7), _randn(3, 2, seed=8)
    torch.testing.assert_close(compiled(x2, w=w2), torch.tanh(x2 @ w2) * 3)
    with pytest.raises(TypeError, match="leaf 0 is torch.float64 \\(5, 3\\)"):
        compiled(_randn(5, 3), w=w)
    with pytest.raises(TypeError, match="expected 1 positional"):
        compiled(x, 3, w=w)


def test_cost_analysis_counts_equations_flops_and_bytes():
    m, k, n = 4, 5, 6
    f = thunderx.jit(lambda a, b: torch.tanh(a @ b) * 2 + 1)
    a, b = torch.ones(m, k), torch.ones(k, n)
    lowered = f.lower(a, b)
    cost = lowered.cost_analysis()
    assert cost == lowered.compile().cost_analysis()
    assert cost["equations"] == len(lowered.optimized.eqns) == 4
    assert cost["primitives"] == {"add": 1, "dot_general": 1, "mul": 1, "tanh": 1}
    assert cost["flops"] == 2 * m * k * n
    # tanh, mul, add fuse into one region: the unfused program moves each intermediate twice
    assert cost["fusion_regions"] == 1 and cost["fused_equations"] == 3
    size = 4  # float32
    matmul_bytes = (m * k + k * n + m * n) * size
    assert cost["bytes_accessed"] == matmul_bytes + 3 * 2 * m * n * size
    assert cost["bytes_accessed_fused"] == matmul_bytes + 2 * m * n * size


def test_cost_analysis_counts_conv_flops():
    x, w = torch.ones(2, 3, 8, 8), torch.ones(4, 3, 3, 3)
    cost = thunderx.jit(lambda x, w: F.conv2d(x, w)).lower(x, w).cost_analysis()
    out_elems = 2 * 4 * 6 * 6
    assert cost["flops"] == 2 * out_elems * 3 * 3 * 3


# ---------------------------------------------------------------------------- python -m thunderx


def test_main_exits_nonzero_when_a_check_fails(monkeypatch, capsys):
    import thunderx.__main__ as main_mod

    def broken(device):
        def fail():
            raise AssertionError("grad: max abs difference 1 from torch")

        return [("grad vs torch.autograd", fail)]

    assert main_mod.main([]) == 0
    monkeypatch.setattr(main_mod, "_checks", broken)
    assert main_mod.main([]) == 1
    out = capsys.readouterr().out
    assert "FAIL cpu  grad vs torch.autograd: AssertionError" in out
    assert "self-check FAILED" in out
