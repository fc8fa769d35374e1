"""Optimizer passes, one section each: the pattern is gone from the optimized jaxpr, and the
program gives eager torch's numbers (bit for bit where the rewrite is exact, NaN and inf
included)."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx
from thunderx.passes import closure_convert, cse, dce, optimize, simplify
from thunderx.rewrites import absorb_transposes, fold_constants

SPECIALS = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 1.5, -3.0, 1e38])


def _jaxpr(f, *args):
    return closure_convert(tx.make_jaxpr(f)(*args).jaxpr)


def _names(jaxpr):
    return [e.prim.name for e in jaxpr.eqns]


def _exact(got, want):
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def _mse_grad_args():
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(4, 2, generator=g),
        torch.randn(8, 4, generator=g),
        torch.randn(8, 2, generator=g),
    )


def _mse(w, x, y):
    return F.mse_loss(torch.tanh(x @ w), y)


# ------------------------------------------------------------------------- constant folding


def test_input_free_subgraphs_become_literals():
    args = _mse_grad_args()
    before = _jaxpr(tx.grad(_mse), *args)
    assert {"full", "div", "broadcast_in_dim"} <= set(_names(before)), before
    after = optimize(before)
    assert not {"full", "div", "broadcast_in_dim"} & set(_names(after)), after
    assert "0.0625" in str(after)  # 1 / 16 folded once, at trace time
    torch.testing.assert_close(tx.jit(tx.grad(_mse))(*args), tf.grad(_mse)(*args))


def test_folding_is_exact_for_nan_and_inf_constants():
    def f(x):
        c = torch.zeros(()) / torch.zeros(())  # NaN, input-free
        d = torch.ones(()) / torch.zeros(())  # inf
        return x * c.expand(x.shape) + x * d.expand(x.shape) + x * 0

    before = _jaxpr(f, SPECIALS)
    after = fold_constants(simplify(before))
    assert "div" not in _names(dce(after)), after
    _exact(tx.jit(f)(SPECIALS), f(SPECIALS))


def test_folding_keeps_the_dtype_of_the_constant():
    def f(x):
        third = torch.ones((), dtype=torch.float32) / 3  # rounded to float32, then used on f32
        return x * third.expand(x.shape)

    x = torch.randn(5)
    assert "div" not in _names(optimize(_jaxpr(f, x)))
    _exact(tx.jit(f)(x), f(x))


def test_random_draws_are_never_folded_or_merged():
    f = tx.jit(lambda x: torch.randn(()) - torch.randn(()) + x)
    a, b = f(torch.zeros(())), f(torch.zeros(()))
    assert a != 0 and b != 0 and a != b, (a, b)
    assert (
        _names(
            optimize(_jaxpr(lambda x: torch.randn(3) - torch.randn(3) + x, torch.zeros(3)))
        ).count("random_normal")
        == 2
    )


def test_large_constants_are_not_materialized():
    f = lambda x: x + torch.exp(torch.ones_like(x))  # noqa: E731
    after = optimize(_jaxpr(f, torch.zeros(1000)))
    assert "exp" in _names(after)  # 1000 elements: computed per call, not stored in the program
    _exact(tx.jit(f)(torch.zeros(1000)), f(torch.zeros(1000)))


# ------------------------------------------------------------- commutative CSE and a + a -> 2a


def test_commutative_operands_are_merged_and_doubling_is_a_multiply():
    f = lambda h, k: h * k + k * h  # noqa: E731
    h, k = SPECIALS, SPECIALS.flip(0)
    before = _jaxpr(f, h, k)
    assert _names(before).count("mul") == 2 and "add" in _names(before)
    after = optimize(before)
    assert _names(after) == ["mul", "mul"] and "2.0" in str(after), after
    _exact(tx.jit(f)(h, k), f(h, k))


def test_non_commutative_operands_are_not_merged():
    f = lambda h, k: (h - k) * (k - h) + h / k - k / h  # noqa: E731
    h, k = SPECIALS, SPECIALS.flip(0)
    after = cse(_jaxpr(f, h, k))
    assert _names(after).count("sub") == 3 and _names(after).count("div") == 2, after
    _exact(tx.jit(f)(h, k), f(h, k))


def test_adding_zero_vanishes_only_where_it_keeps_the_sign_of_zero():
    # -0.0 + 0.0 is +0.0 (eager torch too): x + 0.0 and x - (-0.0) stay; x - 0.0, x + (-0.0),
    # x * 1 and x / 1 give x's own bits and vanish, as do integer sums with 0
    kept = [lambda x: x + 0.0, lambda x: 0.0 + x, lambda x: x - (-0.0), lambda x: x + 0]
    gone = [lambda x: x - 0.0, lambda x: x + (-0.0), lambda x: -0.0 + x, lambda x: x * 1.0]
    for f in kept + gone:
        got, want = tx.jit(f)(SPECIALS), f(SPECIALS)
        _exact(got, want)
        assert torch.equal(torch.signbit(got), torch.signbit(want))
        ops = _names(optimize(_jaxpr(f, SPECIALS)))
        # gone: the arithmetic vanishes; what remains copies the input, so that the caller gets
        # a fresh tensor, as from torch
        assert (len(ops) == 1 and ops != ["copy"]) if f in kept else ops == ["copy"], ops
    n = torch.tensor([0, -3])
    assert _names(optimize(_jaxpr(lambda v: v + 0, n))) == ["copy"]  # the add vanishes


def test_doubling_integers_and_leaving_booleans():
    x = torch.tensor([3, -7, 2**62], dtype=torch.int64)
    assert "add" not in _names(optimize(_jaxpr(lambda v: v + v, x)))
    _exact(tx.jit(lambda v: v + v)(x), x + x)
    b = torch.tensor([True, False])
    _exact(tx.jit(lambda v: v | v)(b), b | b)


def test_a_transpose_undone_vanishes():
    # the two transposes compose to the identity: no reshape to the same shape is left either
    def f(x):
        y = x.sin().transpose(0, 1)
        return y.transpose(0, 1).cos() + y.permute(1, 0).exp()

    x = SPECIALS.reshape(2, 4)
    before = _jaxpr(f, x)
    assert _names(before).count("transpose") == 3, before
    after = optimize(before)
    assert "transpose" not in _names(after) and "reshape" not in _names(after), after
    _exact(tx.jit(f)(x), f(x))


# ------------------------------------------------------------------ transposes in dot_general


def test_transpose_of_a_product_swaps_the_operands():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, 3, generator=g), torch.randn(5, 4, generator=g)
    f = lambda a, b: (a.T @ b).T  # noqa: E731
    before = _jaxpr(f, a, b)
    assert "transpose" in _names(before)
    after = optimize(before)
    assert _names(after) == ["dot_general"], after
    torch.testing.assert_close(tx.jit(f)(a, b), f(a, b))


def test_batched_transpose_is_absorbed_and_a_free_reorder_is_not():
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(2, 3, 4, generator=g), torch.randn(2, 4, 5, generator=g)
    swap = lambda x, y: (x @ y).transpose(1, 2)  # noqa: E731
    assert "transpose" not in _names(absorb_transposes(_jaxpr(swap, x, y)))
    torch.testing.assert_close(tx.jit(swap)(x, y), swap(x, y))
    w = torch.randn(4, 5, generator=g)
    reorder = lambda x, w: (x @ w).permute(1, 0, 2)  # noqa: E731  (mixes two of x's free dims)
    assert "transpose" in _names(optimize(_jaxpr(reorder, x, w)))
    torch.testing.assert_close(tx.jit(reorder)(x, w), reorder(x, w))


def test_gradient_of_a_matmul_has_no_transpose():
    args = _mse_grad_args()
    before = _jaxpr(tx.grad(_mse), *args)
    assert "transpose" in _names(before)
    assert "transpose" not in _names(optimize(before))
    torch.testing.assert_close(tx.jit(tx.grad(_mse))(*args), tf.grad(_mse)(*args))


def test_operand_transposes_fold_into_dimension_numbers():
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(3, 5, generator=g), torch.randn(4, 3, generator=g)
    f = lambda a, b: a.T @ b.T  # noqa: E731
    after = optimize(_jaxpr(f, a, b))
    assert _names(after) == ["dot_general"], after
    torch.testing.assert_close(tx.jit(f)(a, b), f(a, b))
    c = torch.randn(3, 4, 5, generator=g)
    h = lambda c, w: torch.tensordot(c.permute(2, 0, 1), w, dims=([2], [0]))  # noqa: E731
    w = torch.randn(4, 6, generator=g)
    torch.testing.assert_close(tx.jit(h)(c, w), h(c, w))


def test_a_folded_fill_keeps_its_dtype_rounding():
    x = torch.randn(64, dtype=torch.float64).to(torch.float16)
    f = lambda v: v * torch.full_like(v, 0.1)  # noqa: E731  (0.1 rounds in float16)
    assert "full" not in _names(optimize(_jaxpr(f, x)))
    _exact(tx.jit(f)(x), f(x))


# ------------------------------------------------------------------ relu in generated code


def test_relu_is_torch_relu_and_an_explicit_where_is_not():
    x = torch.tensor([float("nan"), -1.0, 2.0, -0.0, 0.0, float("inf"), float("-inf")])
    relu = lambda v: torch.relu(v * 2)  # noqa: E731
    where = lambda v: torch.where(v > 0, v, 0.0)  # noqa: E731
    assert ".relu_()" in tx.jit(relu).lower(x).program.source  # one kernel, in place
    for f in (relu, where):
        _exact(tx.jit(f)(x), f(x))
        _exact(tx.jit(f, executor="nvfuser")(x), f(x))
    assert torch.equal(torch.signbit(tx.jit(relu)(x)), torch.signbit(relu(x)))  # -0.0 kept
    torch.testing.assert_close(
        tx.grad(lambda v: torch.relu(v).sum())(x),
        tf.grad(lambda v: torch.relu(v).sum())(x),
        rtol=0,
        atol=0,
    )


def test_relu_with_its_mask_reused_by_the_gradient_is_still_torch_relu():
    x = torch.tensor([float("nan"), -1.0, 2.0, -0.0, 0.0, float("inf"), float("-inf")])
    w = torch.linspace(-1, 1, 7)

    def loss(w, x):
        return (torch.relu(x * w) * x).sum()

    step = tx.jit(tx.value_and_grad(loss))
    src = step.lower(w, x).program.source
    assert "relu" in src and "torch.where" not in src, f"relu and its mask expected:\n{src}"
    value, g = step(w, x)
    ref_value, ref_g = tf.grad_and_value(loss)(w, x)[::-1]
    _exact(value, ref_value)
    _exact(g, ref_g)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_a_choice_with_zero_is_the_same_bits_as_torch_where(dtype):
    # torch.where is slow on CPU; the generated code masks the tensor's bits instead
    special = [float("nan"), -0.0, 0.0, float("inf"), float("-inf"), 1e-40, -3.5]
    x = torch.cat([torch.tensor(special), torch.randn(57)]).to(dtype).reshape(8, 8)
    c = torch.randn(8, 8) > 0
    cases = {
        "zero if c": lambda c, x: torch.where(c, 0.0, x * 1),
        "x if c": lambda c, x: torch.where(c, x * 1, 0.0),
        "negative zero kept": lambda c, x: torch.where(c, -0.0, x * 1),
        "transposed x": lambda c, x: torch.where(c, 0.0, x.T * 1),
    }
    for what, f in cases.items():
        jitted = tx.jit(f)
        out, ref = jitted(c, x), f(c, x)
        assert out.dtype == ref.dtype, what
        bits = [t.contiguous().view(torch.uint8) for t in (out, ref)]
        assert torch.equal(*bits), f"{what}: bits differ"
        src = jitted.lower(c, x).program.source
        assert ("torch.where" in src) == (what == "negative zero kept"), f"{what}:\n{src}"
