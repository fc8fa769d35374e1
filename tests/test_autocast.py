"""torch.autocast("cpu") under thunderx's transforms: where a torch function meets traced values,
torch's CPU cast policy puts explicit casts into the trace (lang/autocast.py), the program runs
with autocast off, and the results match torch.func run under the same autocast: the same dtypes,
and values equal or within bfloat16's rounding. A jitted function keys its cache on the autocast
state. Where thunderx cannot match torch's dtypes, the call is refused naming the user's line, and
no state is left behind."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx
from thunderx.core import EvalTrace, current_trace
from thunderx.errors import UnsupportedOperationError

G = torch.Generator().manual_seed(0)
A = torch.randn(4, 6, generator=G)
B = torch.randn(6, 3, generator=G)
BF16 = {"rtol": 1.6e-2, "atol": 1e-2}


def autocast(dtype=torch.bfloat16):
    return torch.autocast("cpu", dtype=dtype)


def _mixed(a, b):
    with autocast():
        c = a @ b  # bfloat16 under autocast
        d = torch.relu(c)
    return c, d.float() * 2


def _clean():
    assert not torch.is_autocast_enabled("cpu")
    assert type(current_trace()) is EvalTrace


def _same(ours, theirs, **tol):
    ours, theirs = tx.tree.flatten(ours)[0], tx.tree.flatten(theirs)[0]
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert o.dtype == t.dtype, (o.dtype, t.dtype)
        torch.testing.assert_close(o, t, **(tol or {"rtol": 0, "atol": 0}))


def _loss(a, b):
    return torch.tanh(a @ b).float().square().sum()


# (thunderx transform, torch.func transform, arguments): the function runs under autocast
TRANSFORMS = {
    "jit": (tx.jit, lambda f: f, (A, B)),
    "grad": (tx.grad, tf.grad, (A, B)),
    "jit_grad": (lambda f: tx.jit(tx.grad(f)), tf.grad, (A, B)),
    "jacrev": (lambda f: tx.jacrev(f, argnums=(0, 1)), lambda f: tf.jacrev(f, (0, 1)), (A, B)),
    "jacfwd": (lambda f: tx.jacfwd(f, argnums=(0, 1)), lambda f: tf.jacfwd(f, (0, 1)), (A, B)),
    "hessian": (tx.hessian, tf.hessian, (A, B)),
    "vmap_grad": (
        lambda f: tx.vmap(tx.grad(f), in_axes=(0, None)),
        lambda f: tf.vmap(tf.grad(f), in_dims=(0, None)),
        (A[:, None], B),
    ),
    "vjp": (
        lambda f: lambda a, b: tx.vjp(f, a, b)[1](torch.tensor(1.5)),
        lambda f: lambda a, b: tf.vjp(f, a, b)[1](torch.tensor(1.5)),
        (A, B),
    ),
    "jvp": (
        lambda f: lambda a, b: tx.jvp(f, (a, b), (torch.ones_like(a), B)),
        lambda f: lambda a, b: tf.jvp(f, (a, b), (torch.ones_like(a), B)),
        (A, B),
    ),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transforms_under_autocast_match_torch_func(name):
    ours, theirs, args = TRANSFORMS[name]
    with autocast():
        got, want = ours(_loss)(*args), theirs(_loss)(*args)
    # the matrix product ran in bfloat16 on both sides: equal, or within its rounding where the
    # derivative's own products are ordered differently
    _same(got, want, **BF16)
    _clean()


def test_the_trace_holds_the_casts():
    y = torch.tensor([0, 2, 1, 0])

    def f(a, b):
        return F.cross_entropy(torch.relu(a @ b), y)

    with autocast():
        text = str(tx.make_jaxpr(f)(A, B))
        _same(tx.jit(f)(A, B), f(A, B))
        _same(tx.grad(f)(A, B), tf.grad(f)(A, B))
    # the product in bfloat16 (lower_precision_fp), cross_entropy's softmax in float32 (fp32)
    assert "bf16[4,3] = dot_general" in text
    assert "f32[4,3] = log_softmax" in text
    assert text.count("convert_element_type[new_dtype=bf16]") == 2
    _clean()


def test_jit_keys_its_cache_on_the_autocast_state():
    f = tx.jit(lambda a, b: torch.tanh(a @ b))
    plain = f(A, B)
    _same(plain, torch.tanh(A @ B))
    with autocast():
        _same(f(A, B), torch.tanh(A @ B))  # bfloat16, as eager torch
        assert f(A, B).dtype == torch.bfloat16
    with autocast(torch.float16):
        _same(f(A, B), torch.tanh(A @ B))
        assert f(A, B).dtype == torch.float16
    _clean()
    for _ in range(3):  # the fast path holds only the float32 program
        _same(f(A, B), plain)


def test_autocast_disabled_inside_is_fine():
    def f(a, b):
        with torch.autocast("cpu", enabled=False):
            return a @ b

    def loss(a):
        return torch.tanh(f(a, B) @ B.T).sum()

    with autocast():
        _same(tx.jit(f)(A, B), f(A, B))
        assert f(A, B).dtype == torch.float32
        got = tx.grad(loss)(A)
        a = A.clone().requires_grad_()
        out = loss(a)  # torch autograd: the forward under autocast...
    (want,) = torch.autograd.grad(out, a)  # ...the backward outside it, as torch advises
    # each derivative op in its forward op's dtype: the float32 product's in float32. (torch.func,
    # which runs the backward inside the autocast block, computes it in bfloat16 there)
    _same(got, want)
    _same(tx.jit(f)(A, B), A @ B)


def test_eager_vmap_under_autocast_matches_torch_func():
    xs = torch.randn(5, 4, 6, generator=torch.Generator().manual_seed(2))
    ours, theirs = (
        tx.vmap(_mixed, in_axes=(0, None))(xs, B),
        tf.vmap(_mixed, in_dims=(0, None))(xs, B),
    )
    _same(ours, theirs)
    assert ours[0].dtype == torch.bfloat16


def _t(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# (case, function, arguments): every policy (lower precision, float32, promote), functions that
# reach a listed operator inside (einsum, tensordot...) and functions autocast leaves alone
POLICY_CASES = [
    ("mm", torch.mm, (_t(4, 5), _t(5, 3, seed=1))),
    ("matmul", torch.matmul, (_t(2, 4, 5), _t(5, 3, seed=1))),
    ("linear", F.linear, (_t(4, 5), _t(3, 5, seed=1), _t(3, seed=2))),
    ("bmm", torch.bmm, (_t(2, 4, 5), _t(2, 5, 3, seed=1))),
    ("baddbmm", torch.baddbmm, (_t(2, 4, 3), _t(2, 4, 5, seed=1), _t(2, 5, 3, seed=2))),
    ("addmm", torch.addmm, (_t(3), _t(4, 5, seed=1), _t(5, 3, seed=2))),
    ("conv1d", F.conv1d, (_t(2, 3, 9), _t(4, 3, 3, seed=1))),
    ("conv2d", F.conv2d, (_t(2, 3, 6, 6), _t(4, 3, 3, 3, seed=1), _t(4, seed=2))),
    ("conv_transpose2d", F.conv_transpose2d, (_t(2, 3, 5, 5), _t(3, 4, 3, 3, seed=1))),
    ("prelu", F.prelu, (_t(2, 3, 4), _t(3, seed=1))),
    (
        "sdpa",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        (_t(2, 3, 5, 4), _t(2, 3, 5, 4, seed=1), _t(2, 3, 5, 4, seed=2)),
    ),
    ("vecdot", torch.linalg.vecdot, (_t(4, 5), _t(4, 5, seed=1))),
    ("mse_loss_bf16", F.mse_loss, (_t(4, 5, dtype=torch.bfloat16), _t(4, 5, seed=1))),
    (
        "cross_entropy_bf16",
        lambda x: F.cross_entropy(x, torch.tensor([1, 0, 4, 2])),
        (_t(4, 5, dtype=torch.bfloat16),),
    ),
    ("l1_loss", F.l1_loss, (_t(4, 5, dtype=torch.bfloat16), _t(4, 5, seed=1))),
    ("prod", lambda x: torch.prod(x, 1), (_t(4, 5, dtype=torch.bfloat16),)),
    ("cdist", torch.cdist, (_t(4, 3), _t(5, 3, seed=1))),
    (
        "cdist_bf16",
        torch.cdist,
        (_t(4, 3, dtype=torch.bfloat16), _t(5, 3, seed=1, dtype=torch.bfloat16)),
    ),
    ("solve", torch.linalg.solve, (_t(3, 3) + 3 * torch.eye(3), _t(3, 2, seed=1))),
    (
        "bce_logits",
        F.binary_cross_entropy_with_logits,
        (_t(4, 5, dtype=torch.bfloat16), torch.rand(4, 5, generator=G)),
    ),
    ("cat", lambda a, b: torch.cat([a, b]), (_t(2, 3), _t(2, 3, seed=1, dtype=torch.bfloat16))),
    ("stack", lambda a, b: torch.stack([a, b]), (_t(2, 3, dtype=torch.bfloat16), _t(2, 3))),
    ("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b), (_t(4, 5), _t(5, 3, seed=1))),
    ("tensordot", lambda a, b: torch.tensordot(a, b, 1), (_t(4, 5), _t(5, 3, seed=1))),
    ("inner", torch.inner, (_t(4, 5), _t(3, 5, seed=1))),
    ("matrix_power", lambda a: torch.linalg.matrix_power(a, 3), (_t(3, 3) / 2,)),
    ("multi_dot", lambda a, b: torch.linalg.multi_dot([a, b, a.T]), (_t(4, 5), _t(5, 5, seed=1))),
    (
        "mha",
        lambda q, w, b, ow, ob: F.multi_head_attention_forward(
            q, q, q, 6, 2, w, b, None, None, False, 0.0, ow, ob, need_weights=False
        )[0],
        (_t(5, 2, 6), _t(18, 6, seed=1) / 3, _t(18, seed=2), _t(6, 6, seed=3) / 3, _t(6, seed=4)),
    ),
    ("softmax_of_product", lambda a, b: torch.softmax(a @ b, -1), (_t(4, 5), _t(5, 3, seed=1))),
    (
        "layer_norm_bf16",
        lambda x, w: F.layer_norm(x, (5,), w),
        (_t(4, 5, dtype=torch.bfloat16), _t(5, seed=1)),
    ),
    ("gelu_exp_sum", lambda x: F.gelu(torch.exp(x)).sum(-1), (_t(4, 5),)),
    ("mixed_add", lambda a, b, c: a @ b + c, (_t(4, 5), _t(5, 3, seed=1), _t(3, seed=2))),
]


def _scalar(fn):
    def loss(*args):
        return fn(*args).float().sum()

    return loss


@pytest.mark.parametrize("case", POLICY_CASES, ids=[c[0] for c in POLICY_CASES])
def test_cast_policy_matches_eager_torch(case):
    _, fn, args = case
    float_args = tuple(i for i, a in enumerate(args) if a.dtype.is_floating_point)
    with autocast():
        want = fn(*args)
        _same(tx.jit(fn)(*args), want, **BF16)
        _same(tx.vmap(fn, in_axes=None, axis_size=2)(*args), torch.stack([want, want]), **BF16)
        got_g = tx.grad(_scalar(fn), argnums=float_args)(*args)
        want_g = tf.grad(_scalar(fn), argnums=float_args)(*args)
    # the gradients are as torch.func's: each in its argument's dtype, within bfloat16's rounding
    _same(got_g, want_g, rtol=5e-2, atol=5e-2)
    _clean()


def test_a_transformer_layer_under_autocast_matches_torch_func():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    params = {k: v.detach() for k, v in layer.named_parameters()}
    x = _t(2, 5, 16, seed=3)

    def loss(call):
        return lambda p, x: call(layer, p, (x,)).float().square().mean()

    with autocast():
        want = tf.grad(loss(tf.functional_call))(params, x)
        got = tx.jit(tx.grad(loss(tx.functional_call)))(params, x)
        eager = tx.grad(loss(tx.functional_call))(params, x)
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype == torch.float32
        scale = want[k].abs().max().item() + 1e-3
        torch.testing.assert_close(got[k], want[k], rtol=0.1, atol=0.05 * scale)
        torch.testing.assert_close(eager[k], got[k], rtol=0.1, atol=0.05 * scale)
    _clean()


def test_per_example_gradients_of_a_cnn_under_autocast_match_torch_func():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(1, 4, 3)
    fc = torch.nn.Linear(4 * 3 * 3, 5)
    params = {
        "cw": conv.weight.detach(),
        "cb": conv.bias.detach(),
        "fw": fc.weight.detach(),
        "fb": fc.bias.detach(),
    }
    x, y = _t(6, 1, 1, 8, 8, seed=4), torch.randint(0, 5, (6, 1), generator=G)

    def loss(p, x, y):
        h = F.max_pool2d(F.relu(F.conv2d(x, p["cw"], p["cb"])), 2)
        return F.cross_entropy(F.linear(h.flatten(1), p["fw"], p["fb"]), y)

    with autocast():
        want = tf.vmap(tf.grad(loss), in_dims=(None, 0, 0))(params, x, y)
        got = tx.jit(tx.vmap(tx.grad(loss), in_axes=(None, 0, 0)))(params, x, y)
    for k in want:
        assert got[k].dtype == want[k].dtype == torch.float32
        scale = want[k].abs().max().item() + 1e-3
        torch.testing.assert_close(got[k], want[k], rtol=0.1, atol=0.05 * scale)
    _clean()


def test_functions_torch_implements_with_a_listed_operator_get_its_dtypes():
    with autocast():
        assert torch.cov(A).dtype == torch.bfloat16  # torch runs its product in bfloat16
        _same(tx.jit(torch.cov)(A), torch.cov(A), **BF16)
        assert tx.grad(lambda a: torch.cov(a).float().sum())(A).dtype == torch.float32
    _clean()
    _same(tx.jit(torch.cov)(A), torch.cov(A))  # outside autocast: float32 as usual


@pytest.mark.parametrize("found", ["float64", "unknown"])
def test_a_call_whose_dtypes_cannot_be_matched_is_refused_at_the_users_line(found, monkeypatch):
    from thunderx.lang import autocast as policy

    found_dtypes = torch.float64 if found == "float64" else policy._UNKNOWN
    monkeypatch.setattr(policy, "_torch_dtypes", lambda *a: found_dtypes)
    with autocast():
        with pytest.raises(UnsupportedOperationError, match=r"sin at .*test_autocast.py"):
            tx.jit(lambda a: torch.sin(a) * 2)(A)
    _clean()


def test_finding_torchs_dtypes_draws_no_random_numbers():
    def f(x):  # the in-place draws are torch calls whose dtypes are found by running them
        return (x @ B).uniform_() + (x @ B).normal_().abs()

    g = tx.jit(f)
    with autocast():
        torch.manual_seed(0)
        first = g(A)  # traced: torch's dtypes found by running its functions once
        state = torch.get_rng_state()
        torch.manual_seed(0)
        again = g(A)  # the cached program alone
        assert torch.equal(state, torch.get_rng_state())
    _same(first, again)
    _clean()


F32_CASES = [c for c in POLICY_CASES if all(a.dtype != torch.bfloat16 for a in c[2])]


@pytest.mark.parametrize("case", F32_CASES, ids=[c[0] for c in F32_CASES])
def test_derivatives_of_a_region_with_autocast_off_stay_in_float32(case):
    # the casts come from the torch calls the user's function makes, never from the rules that
    # differentiate or batch it: in a `torch.autocast(enabled=False)` region nothing is bfloat16
    _, fn, args = case

    def f32(*a):
        with torch.autocast("cpu", enabled=False):
            return fn(*a).sum()

    nums = tuple(i for i, a in enumerate(args) if a.dtype.is_floating_point)
    ones = tuple(torch.ones_like(a) for a in args)
    with autocast():
        for transform in (
            tx.grad(f32, argnums=nums),
            tx.hessian(f32, argnums=nums[0]),
            lambda *a: tx.jvp(f32, a, ones),
            tx.vmap(tx.grad(f32, argnums=nums), in_axes=None, axis_size=2),
        ):
            text = str(tx.make_jaxpr(transform)(*args))
            assert "bf16" not in text, text
    _clean()


def test_a_function_without_decomposition_is_refused_under_cpu_autocast():
    f = tx.jit(lambda a: torch.histc(a, bins=4) * 2)
    want = torch.histc(A, bins=4) * 2
    with autocast():
        with pytest.raises(UnsupportedOperationError, match="histc: it has no decomposition"):
            f(A)
    _clean()
    _same(f(A), want)  # staged as torch's own function, outside autocast


@pytest.fixture
def cuda_autocast_flag():
    # the flag torch.autocast("cuda") sets (the context manager itself needs a GPU)
    torch.set_autocast_enabled("cuda", True)
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", False)


@pytest.mark.parametrize("name", ["jit", "grad", "jit_grad", "vjp"])
def test_other_devices_autocast_is_refused_at_the_users_line(name, cuda_autocast_flag):
    ours, _, args = TRANSFORMS[name]
    with pytest.raises(UnsupportedOperationError, match=r"autocast\('cuda'.*test_autocast.py"):
        ours(_loss)(*args)
    assert type(current_trace()) is EvalTrace


def test_indexing_by_a_traced_integer_under_autocast():
    # torch's dtypes are found with 0 standing for the index (a fake run needs a value there)
    def f(x, i, n):
        return torch.narrow(x[i] @ B, 0, n, 1) * 2

    i, n = torch.tensor(2), torch.tensor(1)
    with autocast():
        _same(tx.jit(f)(A, i, n), f(A, i, n))
        _same(
            tx.grad(lambda x: f(x, i, n).float().sum())(A),
            tf.grad(lambda x: f(x, i, n).float().sum())(A),
            **BF16,
        )
    _clean()


@pytest.mark.parametrize("executor", ["torch", "nvfuser", "inductor"])
def test_every_executor_runs_the_casts_of_a_program_traced_under_autocast(executor):
    if executor == "inductor":
        from thunderx.executors.inductor_exec import inductor_unavailable_reason

        if inductor_unavailable_reason() is not None:
            pytest.skip(inductor_unavailable_reason())
    g = torch.Generator().manual_seed(3)
    w1, w2 = torch.randn(16, 32, generator=g), torch.randn(32, 4, generator=g)
    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)

    def loss(p, x):
        return F.cross_entropy(torch.relu(x @ p[0]) @ p[1], y)

    with autocast():
        want = tf.grad(loss)((w1, w2), x)
        got = tx.jit(tx.grad(loss), executor=executor)((w1, w2), x)
    _same(got, want)  # the nvFuser program through its reference interpreter on CPU
    _clean()


def test_repeated_jit_calls_under_autocast_keep_every_guarantee():
    f = tx.jit(lambda p, x: {"y": torch.tanh(x @ p["w"]) * 2, "s": (x @ p["w"]).float().sum()})
    p = {"w": B}
    with autocast():
        want = f.__wrapped__(p, A)
        for _ in range(3):  # the first call traces, the others find the program again
            _same(f(p, A), want)
        with autocast(torch.float16):
            _same(f(p, A), f.__wrapped__(p, A))
        # torch autograd through a call: the program variant without in-place reuse
        a = A.clone().requires_grad_()
        f(p, a)["s"].backward()
        a2 = A.clone().requires_grad_()
        f.__wrapped__(p, a2)["s"].backward()
        _same(a.grad, a2.grad)
        f.clear_cache()
        _same(f(p, A), want)
    _clean()

    # a program that writes a captured tensor back is called through the general path
    count = torch.zeros(())

    def step(x):
        count.add_(1)
        return x @ B

    g = tx.jit(step)
    with autocast():
        for _ in range(3):
            _same(g(A), A @ B)
    _clean()
    assert count.item() == 3
