"""scaled_dot_product_attention through torch's CPU flash kernels (primitives/
composite_attention.py and thunderx/lang/attention.py): values and gradients against torch
eager and torch.autograd, vmap against a Python loop, second derivatives against the
decomposition and float64 finite differences, and nn.MultiheadAttention reaching the kernel."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import thunderx as tx
from thunderx.primitives import composite_attention as KA
from thunderx.testing.checks import check_grads

F64 = torch.float64


def _qkv(lead, lq, lk, e, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*lead, n, e, generator=g, dtype=dtype) for n in (lq, lk, lk)]


MASKS = {
    "none": lambda lead, lq, lk: None,
    "bool": lambda lead, lq, lk: (
        torch.rand(lq, lk, generator=torch.Generator().manual_seed(1)) > 0.3
    ),
    "float_full": lambda lead, lq, lk: torch.randn(*lead, lq, lk),
    "float_broadcast": lambda lead, lq, lk: torch.randn(*[1] * (len(lead) - 1), lead[-1], 1, lk),
}
LEADS = [(2, 3), (3,), (2, 2, 3)]


# torch's math path refuses a mask together with is_causal
CASES = [(m, False) for m in sorted(MASKS)] + [("none", True)]


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("mask_kind, is_causal", CASES)
def test_values_and_gradients_match_torch(lead, mask_kind, is_causal):
    q, k, v = _qkv(lead, 5, 5 if is_causal else 7, 8)
    mask = MASKS[mask_kind](lead, 5, shape_k := k.shape[-2])
    if mask is not None and mask.dtype == torch.bool:
        mask[:, 0] = True  # no fully masked row (test_a_fully_masked_row_... covers those)
    del shape_k

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, scale=0.4)

    qs = [t.clone().requires_grad_() for t in (q, k, v)]
    want = f(*qs)
    ct = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, qs, ct)
    # 4-D inputs run torch's flash kernel in eager too; other ranks its math path
    tol = {} if len(lead) == 2 else dict(rtol=1e-5, atol=2e-6)
    torch.testing.assert_close(tx.jit(f)(q, k, v), want.detach(), **tol)
    out, f_vjp = tx.vjp(f, q, k, v)
    torch.testing.assert_close(out, want.detach(), **tol)
    for got, exp in zip(f_vjp(ct), want_grads):
        torch.testing.assert_close(got, exp, **tol)
    src = tx.jit(tx.grad(lambda q, k, v: f(q, k, v).sum(), argnums=(0, 1, 2))).lower(q, k, v)
    text = src.as_text()
    # the kernels torch itself runs for this rank
    flash = len(lead) == 2
    assert ("_scaled_dot_product_flash_attention_for_cpu.default(" in text) == flash, text
    assert ("_scaled_dot_product_flash_attention_for_cpu_backward.default(" in text) == flash, text


def test_the_math_path_is_used_where_flash_does_not_apply():
    # a value head size unlike the query's: torch's math path, written with primitives
    q, k, _ = _qkv((2, 3), 4, 6, 5)
    v = torch.randn(2, 3, 6, 3)
    f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    text = tx.jit(f).lower(q, k, v).as_text()
    assert "flash" not in text and "softmax" in text, text
    torch.testing.assert_close(tx.jit(f)(q, k, v), f(q, k, v))


@pytest.mark.parametrize("use_mask", [False, True, "dead_row"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_the_kernels_equal_the_decomposition_and_its_second_derivatives(use_mask, is_causal):
    q, k, v = _qkv((2, 2), 3, 4, 3, F64)
    mask = [torch.randn(1, 2, 3, 4, dtype=F64)] if use_mask else []
    if use_mask == "dead_row":  # every key of one query masked out: output 0, not NaN
        mask[0][0, 1, 2] = float("-inf")
    params = dict(is_causal=is_causal, scale=0.6)

    def kernel(q, k, v):
        return KA.sdpa(q, k, v, *mask, **params)[0].sin().sum()

    def decomposed(q, k, v):
        return KA._decomposition(q, k, v, *mask, **params)[0].sin().sum()

    torch.testing.assert_close(kernel(q, k, v), decomposed(q, k, v))
    for a, b in zip(KA.sdpa(q, k, v, *mask, **params), KA._decomposition(q, k, v, *mask, **params)):
        torch.testing.assert_close(a, b)  # the output and its logsumexp
    g_k = tx.grad(kernel, argnums=(0, 1, 2))
    g_d = tx.grad(decomposed, argnums=(0, 1, 2))
    for a, b in zip(g_k(q, k, v), g_d(q, k, v)):
        torch.testing.assert_close(a, b)
    # forward over reverse (the backward kernel's own derivative) and reverse over reverse
    ts = [torch.randn_like(t) for t in (q, k, v)]
    _, h_k = tx.jvp(g_k, (q, k, v), tuple(ts))
    _, h_d = tx.jvp(g_d, (q, k, v), tuple(ts))
    for a, b in zip(h_k, h_d):
        torch.testing.assert_close(a, b)
    hess = tx.hessian(lambda q: kernel(q, k, v))(q)
    # torch's flash kernel has no double backward: its math kernel is the reference
    math = torch.ops.aten._scaled_dot_product_attention_math
    bias = torch.zeros(3, 4, dtype=F64)
    if is_causal:  # torch's math kernel takes no mask with is_causal: one additive mask
        bias = bias.masked_fill(~torch.ones(3, 4, dtype=torch.bool).tril(), float("-inf"))
    bias = bias + mask[0] if mask else bias
    want = torch.autograd.functional.hessian(
        lambda q: math(q, k, v, bias, 0.0, False, scale=0.6)[0].sin().sum(),
        q,
    )
    torch.testing.assert_close(hess, want)
    check_grads(lambda q, k, v: KA.sdpa(q, k, v, *mask, **params)[0], (q, k, v))


def _dead_row_mask(kind, lq, lk, dtype):
    keep = torch.rand(lq, lk, generator=torch.Generator().manual_seed(2)) > 0.3
    keep[:, 0], keep[1] = True, False  # query 1 sees no key
    if kind == "bool":
        return keep
    return torch.zeros(lq, lk, dtype=dtype).masked_fill(~keep, float("-inf"))


# each of thunderx's attention paths: the flash kernels (4-D), torch's math path in primitives
# (3-D, half precision, a value head size unlike the query's), and the decomposition
# the nvFuser executor runs (here through its reference interpreter)
DEAD_ROW_PATHS = {
    "flash": ((2, 3), 5, 6, 4, 4, torch.float32, None),
    "math_3d": ((3,), 5, 6, 4, 4, torch.float64, None),
    "math_half": ((2, 3), 5, 6, 4, 4, torch.float16, None),
    "math_value_head": ((2, 3), 5, 6, 4, 3, torch.float32, None),
    "decomposition": ((2, 3), 5, 6, 4, 4, torch.float32, "nvfuser"),
}


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("path", sorted(DEAD_ROW_PATHS))
def test_a_fully_masked_row_gives_zeros_and_zero_gradients_like_torch(path, kind):
    lead, lq, lk, e, ev, dtype, executor = DEAD_ROW_PATHS[path]
    q, k, _ = _qkv(lead, lq, lk, e, dtype)
    v = torch.randn(*lead, lk, ev, generator=torch.Generator().manual_seed(3), dtype=dtype)
    mask = _dead_row_mask(kind, lq, lk, dtype)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, mask)

    def loss(q, k, v):
        return f(q, k, v).float().sin().sum()

    want = f(q, k, v)
    assert torch.all(want[..., 1, :] == 0)  # torch's answer, every path of it
    got = tx.jit(f, **({"executor": executor} if executor else {}))(q, k, v)
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == torch.float16 else {}
    torch.testing.assert_close(got, want, **tol)
    grads = tx.jit(tx.grad(loss, argnums=(0, 1, 2)), **({"executor": executor} if executor else {}))
    qs = [t.clone().requires_grad_() for t in (q, k, v)]
    for a, b in zip(grads(q, k, v), torch.autograd.grad(loss(*qs), qs)):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("lead", LEADS + [()])
def test_a_query_row_of_minus_inf_scores_gives_zeros_without_a_mask(lead):
    # scores all -inf with no mask (a -inf query against positive keys): torch's math path
    # (its _safe_softmax) and flash kernel both give 0 and zero gradients there, not NaN
    q, k, v = _qkv(lead, 3, 4, 2)
    k = k.abs() + 0.1
    q[..., 1, :] = -float("inf")
    f = F.scaled_dot_product_attention
    want = f(q, k, v)
    assert torch.all(want[..., 1, :] == 0)
    torch.testing.assert_close(tx.jit(f)(q, k, v), want)
    qb, kb, vb = (torch.stack([t, t]) for t in (q, k, v))
    torch.testing.assert_close(tx.vmap(f)(qb, kb, vb)[1], want)
    if lead == (3,):  # the math path, compiled by inductor
        torch.testing.assert_close(tx.jit(f, executor="inductor")(q, k, v), want)

    def loss(q, k, v):
        return f(q, k, v).square().sum()

    qs = [t.clone().requires_grad_() for t in (q, k, v)]
    want_grads = torch.autograd.grad(loss(*qs), qs)
    for a, b in zip(tx.jit(tx.grad(loss, argnums=(0, 1, 2)))(q, k, v), want_grads):
        torch.testing.assert_close(a, b, equal_nan=True)
    for a, b in zip(tx.grad(loss, argnums=(0, 1, 2))(q, k, v), want_grads):
        torch.testing.assert_close(a, b, equal_nan=True)


@pytest.mark.parametrize("lead", LEADS + [()])
@pytest.mark.parametrize("where", ["query", "key"])
def test_a_nan_operand_gives_torch_s_answer_at_every_rank(lead, where):
    # torch's flash kernel (4-D) gives 0 on a query row whose scores are all NaN, its math path
    # (every other rank) NaN; a NaN key makes one score NaN on every row, NaN in both. thunderx
    # calls the kernel torch calls, under jit, vmap (over a leading dim) and grad.
    q, k, v = _qkv(lead, 4, 5, 3)
    (q if where == "query" else k)[..., 1, 2] = float("nan")
    f = F.scaled_dot_product_attention
    want = f(q, k, v)
    torch.testing.assert_close(tx.jit(f)(q, k, v), want, equal_nan=True)
    qb, kb, vb = (torch.stack([t, t]) for t in (q, k, v))
    torch.testing.assert_close(tx.jit(tx.vmap(f))(qb, kb, vb)[1], want, equal_nan=True)
    with warnings.catch_warnings():  # torch.func has no batching rule for the flash kernel
        warnings.simplefilter("ignore", UserWarning)
        loop = torch.func.vmap(f)(qb, kb, vb)
    torch.testing.assert_close(tx.vmap(f)(qb, kb, vb), loop, equal_nan=True)

    def loss(q, k, v):
        return f(q, k, v).square().sum()

    qs = [t.clone().requires_grad_() for t in (q, k, v)]
    want_grads = torch.autograd.grad(loss(*qs), qs)
    for a, b in zip(tx.jit(tx.grad(loss, argnums=(0, 1, 2)))(q, k, v), want_grads):
        torch.testing.assert_close(a, b, equal_nan=True, rtol=1e-5, atol=2e-6)


def test_a_differentiable_float_mask_gets_its_gradient():
    q, k, v = _qkv((2, 3), 4, 5, 8)
    mask = torch.randn(2, 1, 4, 5)

    def f(mask, q):
        return F.scaled_dot_product_attention(q, k, v, mask).square().sum()

    got = tx.grad(f, argnums=(0, 1))(mask, q)
    m, qq = mask.clone().requires_grad_(), q.clone().requires_grad_()
    want = torch.autograd.grad(f(m, qq), (m, qq))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("in_dims", [(0, None, None, None), (1, 0, None, 0), (3, 3, 3, 2)])
def test_vmap_of_grad_matches_a_loop(in_dims):
    q, k, v = _qkv((2, 3), 4, 5, 6, F64)
    mask = torch.randn(1, 3, 4, 5, dtype=F64)
    args = [q, k, v, mask]
    batched = [
        a if d is None else torch.stack([a * (1 + 0.1 * i) for i in range(3)], d)
        for a, d in zip(args, in_dims)
    ]

    def loss(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, m, is_causal=True).square().sum()

    f = tx.grad(loss, argnums=(0, 1, 2))
    got = tx.vmap(f, in_dims)(*batched)
    for i in range(3):
        one = [a if d is None else a.select(d, i) for a, d in zip(batched, in_dims)]
        qs = [t.clone().requires_grad_() for t in one[:3]]
        exp = torch.autograd.grad(loss(*qs, one[3]), qs)
        for a, b in zip(got, exp):
            torch.testing.assert_close(a[i], b)


def test_dropout_runs_the_decomposition_under_vmap_randomness():
    q, k, v = _qkv((2, 3), 4, 5, 6)
    f = lambda q: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)  # noqa: E731
    with pytest.raises(Exception, match="randomness"):
        tx.vmap(f)(torch.stack([q, q]))
    outs = tx.vmap(f, randomness="different")(torch.stack([q, q]))
    assert outs.shape == (2, *q.shape) and not torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("is_causal", [False, True])
def test_transformer_encoder_layer_reaches_the_flash_kernels(is_causal):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    params = {n: p.detach() for n, p in layer.named_parameters()}
    x = torch.randn(3, 5, 16)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(5) if is_causal else None
    kw = dict(src_mask=mask, is_causal=is_causal)

    def loss(p, x, call):
        return call(layer, p, (x,), kw).square().mean()

    f = tx.jit(tx.grad(lambda p, x: loss(p, x, tx.functional_call)))
    text = f.lower(params, x).as_text()
    assert "_scaled_dot_product_flash_attention_for_cpu_backward" in text, text
    got = f(params, x)
    want = torch.func.grad(lambda p, x: loss(p, x, torch.func.functional_call))(params, x)
    for n in params:
        torch.testing.assert_close(got[n], want[n], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("bias_kv, zero_attn", [(True, False), (False, True), (True, True)])
def test_multihead_attention_with_key_bias_and_zero_attention_matches_torch(
    need_weights, bias_kv, zero_attn
):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, add_bias_kv=bias_kv, add_zero_attn=zero_attn)
    params = {n: p.detach() for n, p in mha.named_parameters()}
    q, kv = torch.randn(4, 3, 8), torch.randn(5, 3, 8)
    kpm = torch.zeros(3, 5, dtype=torch.bool)
    kpm[1, 3:] = True
    mask = torch.randn(4, 5)
    kw = dict(key_padding_mask=kpm, attn_mask=mask, need_weights=need_weights)

    def loss(p, q, kv, call):
        out, w = call(mha, p, (q, kv, kv), kw)
        return out.square().sum() + (w.sum() if need_weights else 0.0)

    got = tx.grad(lambda p, q, kv: loss(p, q, kv, tx.functional_call), argnums=(0, 1))(
        params, q, kv
    )
    want = torch.func.grad(
        lambda p, q, kv: loss(p, q, kv, torch.func.functional_call), argnums=(0, 1)
    )(params, q, kv)
    for n in params:
        torch.testing.assert_close(got[0][n], want[0][n], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-5)


MHA_CASES = {
    # name: (module kwargs, query shape, key/value shape or None for self-attention, call kw)
    "self_batch_first": (dict(batch_first=True), (3, 5, 8), None, {}),
    "self_seq_first": (dict(), (5, 3, 8), None, {}),
    "self_unbatched": (dict(), (5, 8), None, {}),
    "cross_padding_mask": (dict(batch_first=True), (3, 4, 8), (3, 6, 8), {"kpm": True}),
    "cross_kdim_vdim": (dict(kdim=6, vdim=6), (4, 3, 8), (7, 3, 6), {}),
    "self_float_mask": (dict(batch_first=True), (3, 5, 8), None, {"mask": "float"}),
    "self_bool_mask": (dict(), (5, 3, 8), None, {"mask": "bool"}),
    "self_causal": (dict(batch_first=True), (3, 5, 8), None, {"mask": "causal"}),
}


@pytest.mark.parametrize("case", sorted(MHA_CASES))
def test_multihead_attention_without_weights_matches_torch(case):
    """The path nn.TransformerEncoderLayer takes (need_weights=False), which thunderx computes
    batch-major whatever the module's layout: values and gradients against torch eager and
    torch.func, for self- and cross-attention, separate key/value sizes, masks, unbatched."""
    mod_kw, q_shape, kv_shape, call = MHA_CASES[case]
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, **mod_kw)
    params = {n: p.detach() for n, p in mha.named_parameters()}
    q = torch.randn(*q_shape)
    kv = q if kv_shape is None else torch.randn(*kv_shape)
    bf = mod_kw.get("batch_first", False)
    lq = q_shape[1] if bf else q_shape[0]
    lk = lq if kv_shape is None else (kv_shape[1] if bf else kv_shape[0])
    kw = {"need_weights": False}
    if call.get("kpm"):
        kpm = torch.zeros(q_shape[0], lk, dtype=torch.bool)
        kpm[1, lk // 2 :] = True
        kw["key_padding_mask"] = kpm
    if call.get("mask") == "float":
        kw["attn_mask"] = torch.randn(lq, lk)
    elif call.get("mask") == "bool":
        kw["attn_mask"] = torch.rand(lq, lk, generator=torch.Generator().manual_seed(2)) > 0.7
    elif call.get("mask") == "causal":
        kw["attn_mask"] = torch.nn.Transformer.generate_square_subsequent_mask(lq)
        kw["is_causal"] = True

    def run(p, q, kv, call_fn):
        args = (q, q, q) if kv_shape is None else (q, kv, kv)
        return call_fn(mha, p, args, kw)[0]

    want = run(params, q, kv, torch.func.functional_call)
    got = tx.jit(lambda p, q, kv: run(p, q, kv, tx.functional_call))(params, q, kv)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

    def loss(call_fn):
        return lambda p, q, kv: run(p, q, kv, call_fn).sin().sum()

    argnums = (0, 1) if kv_shape is None else (0, 1, 2)
    want_g = torch.func.grad(loss(torch.func.functional_call), argnums)(params, q, kv)
    got_g = tx.jit(tx.grad(loss(tx.functional_call), argnums))(params, q, kv)
    for n in params:
        torch.testing.assert_close(got_g[0][n], want_g[0][n], rtol=1e-4, atol=1e-5)
    for a, b in zip(got_g[1:], want_g[1:]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_batch_first_attention_layer_runs_without_sequence_major_copies():
    # nn.MultiheadAttention(batch_first=True) turns (N, L, E) into (L, N, E) and back; thunderx
    # computes the attention batch-major, so the two transposes cancel: no permutation of the
    # batch and sequence axes is left, in the forward or the backward, and the heads merge back
    # into rows as a view of the kernel's output
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    params = {n: p.detach() for n, p in layer.named_parameters()}
    x = torch.randn(3, 5, 16)

    def loss(p, x, call):
        return call(layer, p, (x,)).square().mean()

    f = tx.jit(tx.grad(lambda p, x: loss(p, x, tx.functional_call)))
    src = f.lower(params, x).as_text().split("# execution program")[1]
    assert "permute(1, 0, 2" not in src and "permute(2, 0, 1, 3" not in src, src
    want = torch.func.grad(lambda p, x: loss(p, x, torch.func.functional_call))(params, x)
    got = f(params, x)
    for n in params:
        torch.testing.assert_close(got[n], want[n], rtol=1e-4, atol=1e-5)
