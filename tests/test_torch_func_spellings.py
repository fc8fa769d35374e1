"""torch.func's spellings and torch's calling conventions under thunderx's transforms, each
checked against torch.func or eager torch: unbound Tensor methods, torch.autograd.grad inside a
transform, jvp(strict=), out_dims for one output, and the exception classes torch.func raises."""

import os
import pickle
import subprocess
import sys
import types

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx import core

F64 = torch.float64
T = torch.Tensor


def close(a, b, tol=1e-10):
    for x, y in zip(tx.tree.leaves(a), tx.tree.leaves(b), strict=True):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol)


def x34():
    return torch.linspace(-1.5, 2.0, 12, dtype=F64).reshape(3, 4)


# ---------------------------------------------------------------- unbound Tensor methods

UNBOUND = {
    "view_repeat": lambda x: T.view(T.repeat(x, 2, 1), -1),
    "add_": lambda x: T.add_(x * 1.0, T.sin(x)),
    "abs_": lambda x: T.abs_(x - 0.5) * x,
    "fill_": lambda x: T.fill_(x * 1.0, 2.0) * x,
    "new_zeros": lambda x: T.new_zeros(x, (2, 3)).sum() + x,
    "getitem": lambda x: T.__getitem__(x, (slice(None), 0)) * 2.0,
    "radd_rmul": lambda x: T.__rmul__(T.__radd__(x, 1.0), 3.0),
    "reshape_sum": lambda x: T.sum(T.reshape(x, (-1,)), 0),
}


@pytest.mark.parametrize("name", sorted(UNBOUND))
def test_unbound_tensor_methods_match_torch_func(name):
    fn = UNBOUND[name]
    x = x34()
    close(tx.jit(fn)(x), fn(x))
    close(tx.vmap(fn)(torch.stack([x, 2 * x])), tf.vmap(fn)(torch.stack([x, 2 * x])))
    scalar = lambda x: fn(x).sum()  # noqa: E731
    close(tx.grad(scalar)(x), tf.grad(scalar)(x))


def test_unbound_methods_fetched_before_the_transform():
    # what PyTorch's functorch tests do: `vmap(Tensor.copy_)`, `op = Tensor.acos_; vmap(op)`
    copy_, acos_, view = T.copy_, T.acos_, T.view
    xs = torch.stack([x34(), 0.5 * x34()]) / 3.0
    fn = lambda a, b: view(acos_(copy_(a.clone(), b)), -1)  # noqa: E731
    close(tx.vmap(fn)(xs, 0.5 * xs), tf.vmap(fn)(xs, 0.5 * xs))
    close(tx.jit(fn)(xs, 0.5 * xs), fn(xs, 0.5 * xs))


def test_bound_methods_and_other_objects_get_torchs_own_methods():
    x = x34()
    bound = x.add_
    assert bound.__self__ is x and type(bound) is type(torch._C.TensorBase.add_.__get__(x))
    assert isinstance(torch._C.TensorBase.add_, types.MethodDescriptorType)
    with pytest.raises(TypeError, match="descriptor"):
        T.add_(object(), 1)  # torch's own check, outside any transform
    assert pickle.loads(pickle.dumps(T.add_)) is torch._C.TensorBase.add_


def test_tensor_subclasses_keep_torchs_behaviour():
    class Sub(torch.Tensor):
        pass

    s = x34().as_subclass(Sub)
    for out in (s + 1, 1 + s, s[0], s.add(1), T.add(s, 1), T.__radd__(s, 2.0)):
        assert type(out) is Sub
    close(T.__radd__(s, 2.0).as_subclass(torch.Tensor), x34() + 2.0)


def test_bound_method_calls_compile_without_graph_breaks():
    import torch._dynamo

    fn = lambda a: a.add(1.0).sin().view(-1).sum(0)  # noqa: E731
    torch._dynamo.reset()
    assert torch._dynamo.explain(fn)(x34()).graph_break_count == 0
    torch._dynamo.reset()


def test_unbound_methods_scoped_to_transforms_on_request():
    code = (
        "import torch, thunderx as tx\n"
        "T = torch.Tensor\n"
        "assert T.add_ is torch._C.TensorBase.add_\n"
        "out = tx.vmap(lambda a: T.add_(a * 1.0, 1.0))(torch.zeros(2, 3))\n"
        "assert bool((out == 1).all())\n"
        "assert T.add_ is torch._C.TensorBase.add_\n"
    )
    env = dict(os.environ, THUNDERX_UNBOUND_METHODS="transforms")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr.decode()[-2000:]


def test_unbound_methods_work_after_an_exception():
    def bad(x):
        T.view(x, 5, 7)  # wrong size: torch-like error while tracing

    with pytest.raises(Exception):  # noqa: B017 - any error; what matters is the state after
        tx.vmap(bad)(torch.ones(2, 3, 4))
    assert core.is_top_level()
    close(T.view(torch.arange(6.0), 2, 3), torch.arange(6.0).view(2, 3))
    close(tx.vmap(lambda x: T.view(x, 3, 2))(torch.ones(2, 6)), torch.ones(2, 3, 2))


def test_eager_times_tracer_inside_a_transform():
    # torch's C operator looks up torch.Tensor.mul by name while the shadows are in place
    c = torch.arange(3.0, dtype=F64)
    fn = lambda x: (c * x).sum()  # noqa: E731
    close(tx.grad(fn)(torch.ones(3, dtype=F64)), c)


# ------------------------------------------------------------- values the op_db run found wrong


def test_logaddexp_of_equal_infinities_is_torchs():
    a = torch.tensor([-float("inf"), float("inf"), 1.0, -2.0], dtype=F64)
    b = torch.tensor([-float("inf"), float("inf"), 1.0, 3.0], dtype=F64, requires_grad=True)
    want = torch.logaddexp(a, b)
    close(tx.jit(torch.logaddexp)(a, b.detach()), want.detach())
    finite = b.detach()[2:].requires_grad_()
    (g,) = torch.autograd.grad(torch.logaddexp(a[2:], finite).sum(), finite)
    close(tx.grad(lambda b: torch.logaddexp(a[2:], b).sum())(finite.detach()), g)


def test_prelu_of_a_scalar_keeps_its_shape():
    x, w = torch.tensor(-2.0, dtype=F64), torch.tensor([0.25], dtype=F64)
    out = tx.jit(torch.nn.functional.prelu)(x, w)
    assert out.shape == () and out.item() == -0.5
    close(
        tx.grad(torch.nn.functional.prelu, argnums=1)(x, w),
        tf.grad(torch.nn.functional.prelu, argnums=1)(x, w),
    )


# ------------------------------------------------------------------- jvp(strict=), out_dims


def test_jvp_strict_matches_torch_func():
    x, t = x34(), torch.ones(3, 4, dtype=F64)
    close(tx.jvp(torch.sin, (x,), (t,), strict=True), tf.jvp(torch.sin, (x,), (t,), strict=True))
    independent = lambda x: torch.ones(2, dtype=F64)  # noqa: E731
    with pytest.raises(RuntimeError, match="independent"):
        tf.jvp(independent, (x,), (t,), strict=True)
    with pytest.raises(RuntimeError, match="independent"):
        tx.jvp(independent, (x,), (t,), strict=True)
    close(tx.jvp(independent, (x,), (t,)), tf.jvp(independent, (x,), (t,)))


def test_out_dims_one_element_tuple_for_a_single_output():
    x = x34()
    got = tx.vmap(torch.sin, in_dims=0, out_dims=(1,))(x)
    close(got, tf.vmap(torch.sin, in_dims=0, out_dims=(1,))(x))
    assert got.shape == (4, 3)


# ------------------------------------------------- exception classes torch.func raises too

MISUSES = {
    "item": (lambda v: v.sum().item(), {}),
    "control_flow": (lambda v: v if v.sum() > 0 else -v, {}),
    "random_error_mode": (lambda v: torch.normal(v, 1.0), {"randomness": "error"}),
    "bernoulli_error_mode": (lambda v: v.clone().bernoulli_(0.5), {"randomness": "error"}),
}


@pytest.mark.parametrize("name", sorted(MISUSES))
def test_vmap_misuse_raises_runtime_error_as_torch_func(name):
    fn, kw = MISUSES[name]
    with pytest.raises(RuntimeError):
        tf.vmap(fn, **kw)(x34())
    with pytest.raises(RuntimeError):
        tx.vmap(fn, **kw)(x34())


# ------------------------------------------------------------------ random ops under vmap

N = 4000  # rows: the bounds below are about 5 standard errors wide

INPLACE_DRAWS = {
    # name: (fn of a traced row, mean, variance) of torch's distribution
    "bernoulli_": (lambda v: (v * 0).bernoulli_(0.3), 0.3, 0.21),
    "bernoulli_tensor_p": (lambda v: (v * 0).bernoulli_(v * 0 + 0.8), 0.8, 0.16),
    "uniform_": (lambda v: (v * 1).uniform_(-1.0, 3.0), 1.0, 16 / 12),
    "normal_": (lambda v: (v * 1).normal_(2.0, 0.5), 2.0, 0.25),
    "exponential_": (lambda v: (v * 1).exponential_(2.0), 0.5, 0.25),
    "random_": (lambda v: (v * 1).random_(0, 10), 4.5, 8.25),
    "randint_like": (lambda v: torch.randint_like(v, 2, 6), 3.5, 1.25),
}


@pytest.mark.parametrize("name", sorted(INPLACE_DRAWS))
def test_random_ops_under_vmap_follow_torchs_distribution(name):
    fn, mean, var = INPLACE_DRAWS[name]
    x = torch.zeros(N, 3, dtype=F64)
    for wrap in (lambda f: f, tx.jit):
        rows = wrap(tx.vmap(fn, randomness="different"))(x)
        assert rows.shape == (N, 3) and rows.dtype == F64
        assert any(not torch.equal(rows[0], rows[i]) for i in range(1, 8)), "rows should differ"
        err = 5 * (var / rows.numel()) ** 0.5
        assert abs(rows.mean().item() - mean) < err, (rows.mean(), mean)
        assert abs(rows.var().item() - var) < 10 * err * max(1.0, var**0.5), (rows.var(), var)
        if name == "bernoulli_tensor_p":  # p is batched: torch.func refuses 'same'
            with pytest.raises(RuntimeError, match="same randomness with a batched tensor"):
                tf.vmap(fn, randomness="same")(x[:6])
            with pytest.raises(RuntimeError, match="same randomness with a batched tensor"):
                wrap(tx.vmap(fn, randomness="same"))(x[:6])
            continue
        same = wrap(tx.vmap(fn, randomness="same"))(x[:6])
        assert all(torch.equal(same[0], same[i]) for i in range(1, 6)), "rows should be equal"
    eager = torch.stack([fn(torch.zeros(3, dtype=F64)) for _ in range(N)])  # torch's own draws
    assert abs(eager.mean().item() - mean) < 5 * (var / eager.numel()) ** 0.5


def test_random_ints_stay_in_range():
    rows = tx.vmap(lambda v: (v * 1).random_(3, 7), randomness="different")(torch.zeros(500, 4))
    assert set(rows.unique().tolist()) == {3.0, 4.0, 5.0, 6.0}


def test_inplace_draw_into_a_concrete_tensor_under_vmap_is_an_error():
    # one draw could not hold the batch's different draws: torch.func's error, not shared rows
    fn = lambda v: torch.empty(3).bernoulli_(0.5) * v  # noqa: E731
    for vmap in (tf.vmap, tx.vmap, lambda f, **kw: tx.jit(tx.vmap(f, **kw))):
        with pytest.raises(RuntimeError, match="different inplace randomness on an unbatched"):
            vmap(fn, randomness="different")(x34()[:, :3])


def test_dropout_training_under_vmap_randomness():
    x = torch.ones(N, 8, dtype=F64)
    fn = lambda v: torch.nn.functional.dropout(v, 0.25, training=True)  # noqa: E731
    rows = tx.vmap(fn, randomness="different")(x)
    assert set(rows.unique().tolist()) <= {0.0, 1 / 0.75}
    kept = (rows != 0).double().mean().item()
    assert abs(kept - 0.75) < 5 * (0.1875 / rows.numel()) ** 0.5
    same = tx.vmap(fn, randomness="same")(x[:5])
    assert all(torch.equal(same[0], same[i]) for i in range(5))


# ------------------------------------------------------------------------- layout queries


def test_stride_and_is_contiguous_as_torch_func_for_contiguous_rows():
    x = torch.zeros(2, 3, 4, dtype=F64)
    fn = lambda v: v + v.stride()[0] + 10 * v.stride(1) + 100 * v.is_contiguous()  # noqa: E731
    close(tx.vmap(fn)(x), tf.vmap(fn)(x))
    close(tx.jit(fn)(x[0]), fn(x[0]))
    cl = lambda v: v + v.is_contiguous(memory_format=torch.channels_last)  # noqa: E731
    close(tx.jit(cl)(x[None]), cl(x[None]))


DROPOUTS = {
    "dropout": lambda x: torch.nn.functional.dropout(x, 0.3, training=True),
    "dropout2d": lambda x: torch.nn.functional.dropout2d(x, 0.3, training=True),
    "alpha_dropout": lambda x: torch.nn.functional.alpha_dropout(x, 0.3, training=True),
    "feature_alpha_dropout": lambda x: torch.nn.functional.feature_alpha_dropout(x, 0.3, True),
}


@pytest.mark.parametrize("name", sorted(DROPOUTS))
def test_dropout_in_training_under_grad_jvp_jit_is_eager_torchs(name):
    """Outside vmap(randomness="different") the mask is torch's own bernoulli_ noise: with the
    same seed, values and gradients are eager torch's (torch.autograd as the oracle)."""
    fn = DROPOUTS[name]
    x = torch.linspace(-2, 2, 2 * 3 * 16, dtype=F64).reshape(2, 3, 4, 4)
    torch.manual_seed(7)
    xr = x.clone().requires_grad_()
    want = fn(xr)
    (want_g,) = torch.autograd.grad((want * x).sum(), xr)
    loss = lambda x: (fn(x) * x.detach()).sum()  # noqa: E731
    for transform in (tx.grad, lambda f: tx.jit(tx.grad(f))):
        torch.manual_seed(7)
        close(transform(loss)(x), want_g)
    torch.manual_seed(7)
    close(tx.jit(fn)(x), want.detach())
    torch.manual_seed(7)
    out, tangent = tx.jvp(fn, (x,), (x,))
    close(out, want.detach())
    torch.manual_seed(7)
    close(tangent, tf.jvp(fn, (x,), (x,))[1])


def test_index_put_repeated_positions_take_one_value_not_a_sum():
    x = torch.zeros(5, dtype=F64)
    i, v = torch.tensor([1, 3, 1]), torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    got = tx.jit(lambda x, v: torch.index_put(x, (i,), v))(x, v)
    assert got[1].item() in (1.0, 3.0) and got[3].item() == 2.0 and got.sum().item() < 6.0
    acc = lambda x, v: torch.index_put(x, (i,), v, accumulate=True)  # noqa: E731
    close(tx.jit(acc)(x, v), acc(x, v))
    close(
        tx.vmap(acc, in_dims=(None, 0))(x, torch.stack([v, 2 * v])),
        tf.vmap(acc, in_dims=(None, 0))(x, torch.stack([v, 2 * v])),
    )


@pytest.mark.parametrize("size", [(0, 0), (0, 3), (2, 0, 4)])
def test_matrix_norms_of_empty_matrices_are_torchs(size):
    e = torch.zeros(*size, dtype=F64)
    for order in ("fro", "nuc", 1, 2, float("inf")):
        want = torch.linalg.matrix_norm(e, order)
        got = tx.jit(lambda e: torch.linalg.matrix_norm(e, order))(e)  # noqa: B023
        assert got.shape == want.shape and torch.equal(got, want), (order, got, want)


# torch's in-place twins: `x.name_(...)` writes `x.name(...)` into x
INPLACE_UNARY = [
    "acos_",
    "asin_",
    "atan_",
    "cosh_",
    "sinh_",
    "tan_",
    "frac_",
    "lgamma_",
    "digamma_",
    "log10_",
    "log2_",
    "sign_",
    "exp2_",
    "erfc_",
    "sinc_",
    "deg2rad_",
]


@pytest.mark.parametrize("name", INPLACE_UNARY)
def test_inplace_twins_bound_and_unbound(name):
    xs = torch.stack([x34(), 0.7 * x34()]).abs() / 4.0 + 0.1  # inside every domain
    unbound = getattr(T, name)
    for fn in (lambda a: unbound(a * 1.0) * a, lambda a: getattr(a * 1.0, name)() * a):
        close(tx.vmap(fn)(xs), tf.vmap(fn)(xs))
        close(tx.grad(lambda a: fn(a).sum())(xs), tf.grad(lambda a: fn(a).sum())(xs))


def test_inplace_twins_are_torchs_inplace_forms():
    # each name in the list is the in-place overload set of its out-of-place op in aten
    from thunderx.lang.inplace import _INPLACE

    def arg_names(op):
        return {o: [a.name for a in getattr(op, o)._schema.arguments] for o in op.overloads()}

    for name in _INPLACE:
        base, twin = (
            arg_names(getattr(torch.ops.aten, name)),
            arg_names(getattr(torch.ops.aten, name + "_")),
        )
        assert any(twin.get(o) == args for o, args in base.items() if "out" not in o), name


def test_inplace_result_that_cannot_be_cast_raises_like_torch():
    fn = lambda a: (a * 1).sin_()  # noqa: E731 - sin of an integer tensor is a float
    xs = torch.arange(6).reshape(2, 3)
    with pytest.raises(RuntimeError, match="can't be cast") as torch_err:
        tf.vmap(fn)(xs)
    with pytest.raises(
        RuntimeError, match="result type Float can't be cast to the desired output type Long"
    ):
        tx.vmap(fn)(xs)
    assert torch_err.type is RuntimeError
