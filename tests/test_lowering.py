"""Lowering choices of the torch executor and the rewrites behind them: each test shows the
pattern before (the plain jaxpr) and after (the optimized jaxpr or the generated code) and checks
the jitted program against eager torch, bit for bit where the choice is exact."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx
from thunderx.executors import cpu_outer
from thunderx.passes import closure_convert, optimize

SPECIALS = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 1.5, -3.0, 1e-40])


def _exact(got, want):
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def _code(f, *args):
    return tx.jit(f).lower(*args).as_text().split("# execution program")[1]


def _outer(a, b):
    return torch.einsum("bi,bj->bij", a, b)


@pytest.fixture
def mul_outer(monkeypatch):
    """The broadcast multiply chosen for batched outer products (on CPU the choice is measured
    per machine and shape: tests/test_cpu_outer.py)."""
    monkeypatch.setattr(cpu_outer, "mode", "mul")


def test_size_one_contraction_is_a_broadcast_multiply(mul_outer):
    a, b = torch.randn(16, 64), torch.randn(16, 48)
    before = tx.make_jaxpr(_outer)(a, b).jaxpr
    assert any(e.prim.name == "dot_general" for e in before.eqns), "the einsum is a contraction"
    code = _code(_outer, a, b)
    assert "bmm" not in code and "einsum" not in code and " * " in code, code
    # one product per output element: the same bits as torch's own einsum
    _exact(tx.jit(_outer)(a, b), torch.einsum("bi,bj->bij", a, b))
    a[0, :8], b[1, :8] = SPECIALS, SPECIALS
    _exact(tx.jit(_outer)(a, b), torch.einsum("bi,bj->bij", a, b))


def test_unbatched_outer_product_stays_one_gemm():
    def outer(a, b):
        return torch.einsum("i,j->ij", a, b)

    a, b = torch.randn(64), torch.randn(48)
    assert " * " not in _code(outer, a, b)
    _exact(tx.jit(outer)(a, b), torch.outer(a, b))


@pytest.mark.parametrize("last", [1, 3, 10])
def test_size_one_contraction_with_a_short_last_dim_is_a_multiply_too(last, mul_outer):
    # the per-example gradient of a 10-class output layer: [b,i,1] x [b,1,10]
    a, b = torch.randn(16, 64), torch.randn(16, last)
    code = _code(_outer, a, b)
    assert "bmm" not in code and " * " in code, code
    _exact(tx.jit(_outer)(a, b), torch.einsum("bi,bj->bij", a, b))
    a[0, :8], b[1, : min(8, last)] = SPECIALS, SPECIALS[:last]
    _exact(tx.jit(_outer)(a, b), torch.einsum("bi,bj->bij", a, b))


def test_rows_times_a_transposed_matrix_is_one_matmul():
    # x @ w.T with x of rank 3, as the input cotangent of a linear layer under vmap computes it
    def f(x, w):
        return torch.tensordot(x, w, dims=([2], [1]))

    x, w = torch.randn(8, 5, 24), torch.randn(40, 24)
    code = _code(f, x, w)
    assert "tensordot" not in code and "torch.matmul(" in code, code
    x[0, 0, :8] = SPECIALS
    _exact(tx.jit(f)(x, w), torch.tensordot(x, w, dims=([2], [1])))


def _pe_loss(w, x, y):
    return F.cross_entropy(torch.relu(x @ w[0]) @ w[1], y)


def test_per_example_weight_gradients_have_no_k1_gemm(mul_outer):
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(32, 64, generator=g), torch.randn(64, 40, generator=g))
    x, y = torch.randn(8, 1, 32, generator=g), torch.randint(0, 40, (8, 1), generator=g)
    f = tx.vmap(tx.grad(_pe_loss), in_axes=(None, 0, 0))
    code = tx.jit(f).lower(w, x, y).as_text().split("# execution program")[1]
    assert "bmm" not in code, code
    want = tf.vmap(tf.grad(_pe_loss), in_dims=(None, 0, 0))(w, x, y)
    for got, ref in zip(tx.jit(f)(w, x, y), want):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


def _inv(y):
    return torch.ones_like(y) / y


def test_one_over_y_is_a_reciprocal_not_a_full_and_a_divide():
    y = torch.cat([SPECIALS, torch.randn(24) * 100])
    before = closure_convert(tx.make_jaxpr(_inv)(y).jaxpr)
    assert [e.prim.name for e in before.eqns if e.prim.name in ("full", "div")] == ["full", "div"]
    after = optimize(before)
    names = [e.prim.name for e in after.eqns]
    assert "full" not in names and "div" not in names and "reciprocal" in names, names
    assert "torch.full" not in _code(_inv, y)
    _exact(tx.jit(_inv)(y), 1.0 / y)


def test_two_over_y_stays_a_divide():
    # 2/y is one rounding; reciprocal(y) * 2 would be two: not rewritten
    def f(y):
        return torch.full_like(y, 2.0) / y

    y = torch.cat([SPECIALS, torch.randn(24) * 100])
    names = [e.prim.name for e in optimize(closure_convert(tx.make_jaxpr(f)(y).jaxpr)).eqns]
    assert "div" in names, names
    _exact(tx.jit(f)(y), torch.full(y.shape, 2.0) / y)


def test_mean_gradient_has_no_full_divide():
    # the cross-entropy backward divides by the count of valid targets: inside torch's
    # nll_loss_backward kernel (its total_weight), never as a tensor of ones divided each call
    logits, t = torch.randn(8, 5), torch.randint(0, 5, (8,))
    code = _code(tx.grad(lambda z: F.cross_entropy(z, t)), logits)
    assert ".div" not in code and " / " not in code, code
    torch.testing.assert_close(
        tx.jit(tx.grad(lambda z: F.cross_entropy(z, t)))(logits),
        tf.grad(lambda z: F.cross_entropy(z, t))(logits),
    )


def _split_loss(w, a):
    q, k, v = w.chunk(3, -1)
    return (q * a[0] + k.sin() * a[1] + v * a[2]).sum()


def test_split_backward_is_one_concatenate_not_pads_and_adds():
    w = torch.randn(4, 12)
    a = torch.randn(3, 4, 4)
    a[0, 0, :3] = torch.tensor([-0.0, float("nan"), float("inf")])
    g = tx.grad(_split_loss)
    before = closure_convert(tx.make_jaxpr(g)(w, a).jaxpr)
    assert [e.prim.name for e in before.eqns].count("pad") == 3
    names = [e.prim.name for e in optimize(before).eqns]
    assert "concatenate" in names and "pad" not in names and "add" not in names, names
    # torch's split backward is a cat too: the same bits, -0.0 included
    _exact(tx.jit(g)(w, a), tf.grad(_split_loss)(w, a))


def test_slices_with_a_gap_stay_pads():
    def f(w, a):
        return (w[:, :4] * a[0] + w[:, 8:] * a[1]).sum()

    w, a = torch.randn(4, 12), torch.randn(2, 4, 4)
    g = tx.grad(f)
    names = [e.prim.name for e in optimize(closure_convert(tx.make_jaxpr(g)(w, a).jaxpr)).eqns]
    assert "concatenate" not in names, names
    _exact(tx.jit(g)(w, a), tf.grad(f)(w, a))


def test_overlapping_slices_stay_pads_and_adds():
    def f(w):
        return (w[:, :8].sin() + w[:, 4:].cos()).sum()

    w = torch.randn(4, 12)
    names = [
        e.prim.name for e in optimize(closure_convert(tx.make_jaxpr(tx.grad(f))(w).jaxpr)).eqns
    ]
    assert "concatenate" not in names, names
    torch.testing.assert_close(tx.jit(tx.grad(f))(w), tf.grad(f)(w))


def _convolve(x, w):
    # JAX's vectorization tutorial: a Python loop of window dot products
    return torch.stack([torch.dot(x[i - 1 : i + 2], w) for i in range(1, len(x) - 1)])


def _count(f, *args, name="dot_general"):
    jaxpr = closure_convert(tx.make_jaxpr(f)(*args).jaxpr)
    return [e.prim.name for e in jaxpr.eqns].count(name), [
        e.prim.name for e in optimize(jaxpr).eqns
    ].count(name)


def test_window_dot_products_become_one_batched_contraction():
    x, w = torch.randn(4, 20), torch.randn(4, 3)
    f = tx.vmap(_convolve)
    assert _count(f, x, w) == (18, 1)
    want = torch.stack([_convolve(xi, wi) for xi, wi in zip(x, w)])
    torch.testing.assert_close(tx.jit(f)(x, w), want)
    x[1, 5] = float("nan")
    torch.testing.assert_close(
        tx.jit(f)(x, w), torch.stack([_convolve(a, b) for a, b in zip(x, w)]), equal_nan=True
    )


def test_window_reductions_are_batched_too():
    def window_max(x):
        return torch.stack([x[:, i : i + 4].amax(-1) for i in range(0, 16, 4)], -1)

    x = torch.randn(3, 16)
    before, after = _count(window_max, x, name="reduce_max")
    assert (before, after) == (4, 1)
    torch.testing.assert_close(tx.jit(window_max)(x), window_max(x), rtol=0, atol=0)


def test_sliding_windows_are_stacked_from_one_strided_slice_per_window_element():
    # 18 windows of 3: three strided slices (element j of every window) instead of 18 slices
    x, w = torch.randn(4, 20), torch.randn(4, 3)
    f = tx.vmap(_convolve)
    assert _count(f, x, w, name="slice") == (18, 3)
    torch.testing.assert_close(tx.jit(f)(x, w), tf.vmap(_convolve)(x, w))

    def strided(x):  # windows of 4 every 2 columns, rows sliced the same in every window
        return torch.stack(
            [x[1:3, 2 * i : 2 * i + 4].sum() * x[1:3, 2 * i : 2 * i + 4].amax() for i in range(10)]
        )

    xs = torch.randn(3, 5, 30, dtype=torch.float64)
    torch.testing.assert_close(tx.jit(tx.vmap(strided))(xs), tf.vmap(strided)(xs))
    loss = lambda x: strided(x).pow(2).sum()  # noqa: E731
    torch.testing.assert_close(tx.jit(tx.grad(loss))(xs[0]), tf.grad(loss)(xs[0]))


def test_horizontal_batching_skips_a_stack_larger_than_the_memory_budget():
    def big_windows(x, w):
        return torch.stack([x[i : i + 60] @ w for i in range(5)])  # 5 x 60 > 4 x 64 elements

    x, w = torch.randn(64), torch.randn(60)
    assert _count(big_windows, x, w) == (5, 5)
    torch.testing.assert_close(tx.jit(big_windows)(x, w), big_windows(x, w))


def test_ops_with_different_second_operands_stay_separate():
    def f(x, ws):
        return torch.stack([torch.dot(x[i : i + 3], ws[i]) for i in range(4)])

    x, ws = torch.randn(8), torch.randn(4, 3)
    assert _count(f, x, ws) == (4, 4)
    torch.testing.assert_close(tx.jit(f)(x, ws), f(x, ws))


def test_a_matmul_with_a_broadcast_bias_lowers_to_linear():
    # torch's addmm adds the bias in the matmul's epilogue: one kernel instead of two
    x, w, b = torch.randn(4, 5, 6), torch.randn(3, 6), torch.randn(3)
    f = tx.jit(lambda x, w, b: torch.nn.functional.linear(x.sin(), w, b))
    src = f.lower(x, w, b).as_text()
    assert "torch.nn.functional.linear(" in src and "tensordot" not in src, src
    torch.testing.assert_close(f(x, w, b), torch.nn.functional.linear(x.sin(), w, b))


def test_a_linear_of_permuted_rows_runs_on_the_unpermuted_rows():
    # nn.MultiheadAttention's (seq, batch) transpose before its in-projection: one GEMM over
    # the untransposed rows, then the permutation (torch would copy and batch the GEMM)
    x, w, b = torch.randn(4, 5, 6), torch.randn(3, 6), torch.randn(3)

    def f(x, w, b):
        return torch.nn.functional.linear(x.sin().transpose(0, 1), w, b) * 2

    j = tx.jit(f)
    src = j.lower(x, w, b).as_text().split("# execution program")[1]
    assert ".permute(1, 0, 2)" in src and src.count("permute") == 1, src
    assert src.index("linear(") < src.index(".permute("), src
    torch.testing.assert_close(j(x, w, b), f(x, w, b))
    jf = tx.jit(tx.grad(lambda w, x, b: f(x, w, b).square().sum()))
    want = torch.func.grad(lambda w, x, b: f(x, w, b).square().sum())(w, x, b)
    torch.testing.assert_close(jf(w, x, b), want)


def test_linear_operands_are_not_overwritten_before_the_fused_call_reads_them():
    # h's last textual reader is `h * 2`, between the matmul and the bias add: it must not
    # run in place on h, which the fused linear reads afterwards
    def f(x, w, b):
        h = x.sin()
        y = h @ w.T
        z = h * 2
        return y + b, z

    x, w, b = torch.randn(4, 6), torch.randn(3, 6), torch.randn(3)
    got = tx.jit(f)(x, w, b)
    src = tx.jit(f).lower(x, w, b).as_text()
    assert "torch.addmm(" in src, src
    for a, e in zip(got, f(x, w, b)):
        torch.testing.assert_close(a, e)


def test_an_sgd_step_runs_in_the_gemm_epilogue():
    # w - lr * (x^T @ g): torch.addmm(w, x.T, g, alpha=-lr), one kernel and no gradient buffer
    def step(w, x, g):
        return w - 0.01 * (x.T @ g), x.sin()

    w, x, g = torch.randn(5, 3), torch.randn(8, 5), torch.randn(8, 3)
    f = tx.jit(step)
    src = f.lower(w, x, g).as_text()
    assert "torch.addmm(" in src and "alpha=-0.01" in src, src
    for a, e in zip(f(w, x, g), step(w, x, g)):
        torch.testing.assert_close(a, e)


def test_an_inductor_graph_leaves_small_gemm_epilogues_to_inductor():
    # below oneDNN's size the product is a plain matmul and the bias add (or SGD update) its own
    # equation, which inductor fuses into its next kernel; torch.addmm's bias costs a strided copy
    # and a beta=1 GEMM (tests/test_cpu_gemm.py: the large products keep oneDNN's epilogue)
    from thunderx.executors.inductor_exec import inductor_unavailable_reason

    if inductor_unavailable_reason() is not None:
        pytest.skip(inductor_unavailable_reason())
    x, w, b = torch.randn(4, 5, 6), torch.randn(3, 6), torch.randn(3)
    f = tx.jit(lambda x, w, b: torch.relu(F.linear(x.permute(1, 0, 2), w, b)), executor="inductor")
    src = f.lower(x, w, b).as_text()
    graph = src.split("# execution program")[1]
    assert "one inductor graph" in graph and "torch.matmul(" in graph, src
    assert "linear(" not in graph and "addmm" not in graph and "tensordot" not in graph, src
    want = torch.relu(F.linear(x.permute(1, 0, 2), w, b))
    torch.testing.assert_close(f(x, w, b), want)

    def step(w, x, g):
        return w - 0.01 * (x.T @ g), x.sin()

    w, x, g = torch.randn(5, 3), torch.randn(8, 5), torch.randn(8, 3)
    f = tx.jit(step, executor="inductor")
    graph = f.lower(w, x, g).as_text().split("# execution program")[1]
    assert "addmm" not in graph and "alpha=" not in graph, graph
    for a, e in zip(f(w, x, g), step(w, x, g)):
        torch.testing.assert_close(a, e)


def test_small_constants_are_made_once_and_never_written():
    # a `full` that is only read becomes one tensor of the program (no torch call per call);
    # in-place reuse never picks it, so every call sees the same value
    def f(x):
        c = torch.ones_like(x)
        return c.exp() + x, (c * 2 - x).sin()

    x = torch.randn(3)
    j = tx.jit(f)
    src = j.lower(x).as_text()
    assert "# full((3,), 1)" in src and "torch.full" not in src, src
    for _ in range(3):
        for a, e in zip(j(x), f(x)):
            torch.testing.assert_close(a, e, rtol=0, atol=0)
    # the gradient's seed too
    g = tx.jit(tx.grad(lambda x: x.sin().sum()))
    assert "torch.full" not in g.lower(x).as_text()
    for _ in range(2):
        torch.testing.assert_close(g(x), x.cos())


def test_constants_the_caller_receives_are_fresh_tensors():
    # an output that is (or views) a constant must not be the program's own tensor: the
    # caller may write into it
    for f in (
        lambda x: (x.sin(), torch.ones_like(x)),
        lambda x: (x.sin(), torch.ones_like(x)[None]),
    ):
        j = tx.jit(f)
        x = torch.randn(3)
        first = j(x)[1]
        first.add_(5.0)
        second = j(x)[1]
        torch.testing.assert_close(second, f(x)[1], rtol=0, atol=0)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", ["2d", "1d", "all_ignored", "empty"])
def test_nll_loss_backward_kernel_call_matches_torch(reduction, case):
    # the generated call reads the input's shape from an expanded scalar and the total weight
    # from the forward kernel: the same numbers as torch's autograd, ignored targets included
    x = {"2d": torch.randn(6, 5), "1d": torch.randn(5), "all_ignored": torch.randn(3, 4)}.get(
        case, torch.randn(0, 4)
    )
    t = {
        "2d": torch.tensor([0, 4, -100, 1, 4, -100]),
        "1d": torch.tensor(3),
        "all_ignored": torch.full((3,), -100),
    }.get(case, torch.zeros(0, dtype=torch.int64))
    ct = torch.randn(F.nll_loss(x, t, reduction=reduction).shape)

    def f(z):
        return (F.nll_loss(z.log_softmax(-1), t, reduction=reduction) * ct).sum()

    got = tx.jit(tx.grad(f))(x)
    torch.testing.assert_close(got, tf.grad(f)(x), rtol=0, atol=0, equal_nan=True)
    text = tx.jit(tx.grad(f)).lower(x).as_text()
    # a tangent with no entries is the symbolic zero: the gradient of an empty input is an
    # empty tensor, with no backward kernel to run
    assert ("nll_loss_backward" in text) == (case != "empty")


def test_layer_norm_backward_reads_the_forward_statistics():
    # the backward kernel takes mean and rstd from the forward's kernel call instead of a second
    # forward; the numbers are torch autograd's, for two norms of different inputs and a jvp
    w = torch.randn(6, 6)

    def f(x):
        h = F.layer_norm(x, (6,)) @ w
        return F.layer_norm(h.tanh(), (3, 6), eps=1e-3).square().sum()

    x = torch.randn(4, 3, 6)
    j = tx.jit(tx.grad(f))
    src = j.lower(x).as_text().split("# execution program")[1]
    assert src.count("torch.native_layer_norm(") == 2, src
    assert src.count("native_layer_norm_backward.default(") == 2, src
    torch.testing.assert_close(j(x), tf.grad(f)(x), rtol=1e-6, atol=1e-6)
    t = torch.randn_like(x)
    got = tx.jit(lambda x, t: tx.jvp(f, (x,), (t,)))(x, t)
    for a, b in zip(got, tf.jvp(f, (x,), (t,))):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def _ln_args(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(4, 3, 6, generator=g),
        torch.randn(6, generator=g),
        torch.randn(6, generator=g),
    )


def test_layer_norm_affine_runs_in_torchs_kernels_with_torchs_numbers():
    # F.layer_norm(x, s, w, b) and its three cotangents: one native_layer_norm with the weight
    # and bias, one native_layer_norm_backward for all three; the bits of torch.func's gradient
    def f(x, w, b):
        return F.layer_norm(x, (6,), w, b).square().sum()

    x, w, b = _ln_args()
    j = tx.jit(tx.grad(f, argnums=(0, 1, 2)))
    src = j.lower(x, w, b).as_text().split("# execution program")[1]
    assert src.count("torch.native_layer_norm(a, (6,), b, c,") == 1, src
    assert "[True, True, True]" in src and " * " not in src, src
    for got, want in zip(j(x, w, b), tf.grad(f, argnums=(0, 1, 2))(x, w, b)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    fwd = tx.jit(lambda x, w, b: F.layer_norm(x, (6,), w, b))
    torch.testing.assert_close(fwd(x, w, b), F.layer_norm(x, (6,), w, b), rtol=0, atol=0)


@pytest.mark.parametrize("argnums", [0, (0, 1), (0, 2), 1])
def test_layer_norm_affine_with_some_cotangents(argnums):
    def f(x, w, b):
        return (F.layer_norm(x, (3, 6), w, b) * x).sum()

    x, w, b = _ln_args(1)
    w, b = w.repeat(3, 1), b.repeat(3, 1)
    got = tx.jit(tx.grad(f, argnums=argnums))(x, w, b)
    want = tf.grad(f, argnums=argnums)(x, w, b)
    for a, e in zip(tx.tree.flatten(got)[0], tx.tree.flatten(want)[0]):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-6)


def test_layer_norm_groups_read_elsewhere_keep_the_primitives():
    # the normalized value read outside the affine group, a batched weight, forward mode: no
    # rewrite, and the numbers of torch
    def f(x, w, b):
        y = F.layer_norm(x, (6,))
        return (y * w + b + y.sin()).sum()

    x, w, b = _ln_args(2)
    j = tx.jit(tx.grad(f, argnums=(0, 1, 2)))
    src = j.lower(x, w, b).as_text().split("# execution program")[1]
    assert "None, None, 1e-05" in src and "[True, True, True]" not in src, src
    for a, e in zip(j(x, w, b), tf.grad(f, argnums=(0, 1, 2))(x, w, b)):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-6)

    def g(x, w, b):
        return F.layer_norm(x, (6,), w, b).square().sum()

    ws = torch.randn(4, 6)
    got = tx.jit(tx.vmap(tx.grad(g, argnums=(0, 1)), in_axes=(0, 0, None)))(x, ws, b)
    want = tf.vmap(tf.grad(g, argnums=(0, 1)), in_dims=(0, 0, None))(x, ws, b)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
    t = tuple(torch.randn_like(v) for v in (x, w, b))
    got = tx.jit(lambda *a: tx.jvp(g, a[:3], a[3:]))(x, w, b, *t)
    for a, e in zip(got, tf.jvp(g, (x, w, b), t)):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_layer_norm_weight_written_nowhere_before_the_fused_backward():
    # the weight is an intermediate also read by a later equation: the fused backward still
    # reads its value (no in-place reuse of it before)
    def f(x, w0, b):
        w = w0.exp()
        out = F.layer_norm(x, (6,), w, b)
        return out.square().sum() + (w * 3).sum()

    x, w, b = _ln_args(3)
    got = tx.jit(tx.grad(f, argnums=(0, 1, 2)))(x, w, b)
    for a, e in zip(got, tf.grad(f, argnums=(0, 1, 2))(x, w, b)):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-6)


def test_an_embedding_gradient_adds_into_a_fresh_table():
    # index_add(full(0), idx, src) runs as full(...).index_add_(...): no copy of the zeros, the
    # bits of torch's embedding backward, and an index out of range still raises
    w, i = torch.randn(50, 8), torch.randint(0, 50, (6, 5))

    def f(w, i):
        return F.embedding(i, w).square().sum()

    j = tx.jit(tx.grad(f))
    src = j.lower(w, i).as_text().split("# execution program")[1]
    assert ".index_add_(0," in src and src.count("torch.full(") == 1, src
    torch.testing.assert_close(j(w, i), tf.grad(f)(w, i), rtol=0, atol=0)
    lin = tx.jit(tx.grad(lambda w, i: F.embedding(i, w).sum()))  # the lookup itself is unused
    torch.testing.assert_close(lin(w, i), tf.grad(lambda w: F.embedding(i, w).sum())(w))
    with pytest.raises(RuntimeError, match="out of bounds"):
        lin(w, torch.tensor([3, 50]))


def test_a_constant_made_in_inference_mode_serves_autograd_later():
    # the program compiled inside inference_mode keeps a normal tensor as its constant, so a
    # later call that torch autograd records can save it
    f = tx.jit(lambda x: torch.atan2(x, torch.ones_like(x)).sum())
    x = torch.randn(3)
    with torch.inference_mode():
        f(x)
    y = x.clone().requires_grad_()
    f(y).backward()
    torch.testing.assert_close(y.grad, 1 / (1 + x * x))


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_layer_gradients_are_torchs(norm_first):
    # attention, layer norms (affine part included), linear layers and relu all run as torch's
    # forward and backward kernels: the gradients are torch.func's to float32 rounding (bit for
    # bit on some CPUs; on others the gemm kernel picked for an operand's layout differs, as
    # torch's own forward differs between grad and no-grad mode there)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        16, 2, 32, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    p = {k: v.detach() for k, v in layer.named_parameters()}
    x = torch.randn(3, 5, 16)

    def loss(p, x, call):
        return call(layer, p, (x,)).square().mean()

    got = tx.jit(tx.grad(lambda p, x: loss(p, x, tx.functional_call)))(p, x)
    want = tf.grad(lambda p, x: loss(p, x, tf.functional_call))(p, x)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-6, atol=1e-7)


def test_large_intermediates_are_released_after_their_last_reader(monkeypatch):
    # `del` hands a dead buffer back to the allocator while later kernels run (eager code frees
    # it the same way); a buffer read last by a view of it goes with the view, and small ones
    # and buffers a result was written into in place stay bound
    import re

    def f(x, w):
        h = torch.tanh(x @ w)  # 64 KiB
        s = torch.sigmoid(h).sum(0)
        return (h.t() * 2).sum(1) + s.sum() + (x[:2] * 3).sum()

    from thunderx.executors import release

    monkeypatch.setattr(release, "RELEASE_BYTES", 1 << 16)  # the suite releases all
    x, w = torch.randn(128, 64), torch.randn(64, 128)
    src = tx.jit(f).lower(x, w).as_text().split("# execution program")[1]
    lines = [ln.strip() for ln in src.splitlines() if " = " in ln or ln.strip().startswith("del ")]
    released = {}
    for k, ln in enumerate(lines):
        if ln.startswith("del "):
            released.update(dict.fromkeys(ln[4:].split(", "), k))
    assert len(released) >= 3, src
    for name, k in released.items():
        readers = [
            j
            for j, ln in enumerate(lines)
            if " = " in ln and name in re.findall(r"\b\w+\b", ln.split(" = ", 1)[1])
        ]
        assert readers and max(readers) < k, (name, src)
        assert not any(j > k for j in readers), (name, src)
    tanh = next(ln for ln in lines if ".tanh_()" in ln)  # tanh written into the matmul's result
    assert tanh.split(".tanh_()")[0].split(" = ")[1] not in released, src
    small = next(ln for ln in lines if "* 3.0" in ln).split(" = ")[0]  # f32[2,64]
    assert small not in released, src
    torch.testing.assert_close(tx.jit(f)(x, w), f(x, w))
