"""Torch functions through the language layer: each case is (id, fn, args factory)."""

import math
import random

import torch
import torch.nn.functional as F


def r(*shape, dtype=torch.float64, lo=None, hi=None, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape) * 7 + len(shape))
    x = torch.randn(shape, generator=g, dtype=dtype)
    if lo is not None:
        x = lo + (hi - lo) * torch.rand(shape, generator=g, dtype=dtype)
    return x


def pos(*shape, **k):
    return r(*shape, lo=0.2, hi=2.0, **k)


def unit(*shape, **k):
    return r(*shape, lo=-0.9, hi=0.9, **k)


def idx(n, *shape, seed=0):
    # Python's RNG: a torch random call inside a transformed function is a random op under vmap
    # (refused with randomness='error', as torch.func does), while these are constant indices
    rng = random.Random(seed)
    return torch.tensor([rng.randrange(n) for _ in range(math.prod(shape))]).reshape(shape)


CASES = []


def case(name, fn, *args):
    CASES.append((name, fn, args))


# unary math
for name in [
    "abs",
    "neg",
    "sign",
    "exp",
    "exp2",
    "expm1",
    "sin",
    "cos",
    "tanh",
    "sinh",
    "cosh",
    "atan",
    "asinh",
    "sigmoid",
    "erf",
    "erfc",
    "floor",
    "ceil",
    "round",
    "trunc",
    "frac",
    "square",
    "sinc",
    "reciprocal",
]:
    case(name, getattr(torch, name), r(3, 4))
for name in ["log", "log1p", "log2", "log10", "sqrt", "rsqrt", "lgamma", "digamma"]:
    case(name, getattr(torch, name), pos(3, 4))
for name in ["asin", "acos", "atanh", "erfinv", "tan"]:
    case(name, getattr(torch, name), unit(3, 4))
case("acosh", torch.acosh, pos(3, 4) + 1.0)
case("logit", torch.logit, r(3, 4, lo=0.1, hi=0.9))
case("logit_eps", lambda x: torch.logit(x, 1e-3), r(3, 4, lo=0.1, hi=0.9))
case("method_exp", lambda x: x.exp().sin(), r(5))
case("int_to_float_sin", lambda x: torch.sin(x), torch.arange(6))

# binary / ternary with broadcasting and scalars
case("add_bcast", torch.add, r(3, 1, 4), r(5, 1))
case("add_alpha", lambda x, y: torch.add(x, y, alpha=2.5), r(3), r(3))
case("sub_scalar", lambda x: x - 2.0, r(4))
case("rsub_scalar", lambda x: 2.0 - x, r(4))
case("mul_int_scalar", lambda x: x * 3, r(4))
case("div", torch.div, r(3, 4), pos(4))
case("div_trunc", lambda x, y: torch.div(x, y, rounding_mode="trunc"), r(3, 4) * 5, pos(4))
case("div_floor", lambda x, y: torch.div(x, y, rounding_mode="floor"), r(3, 4) * 5, pos(4))
case("rtruediv", lambda x: 1.0 / x, pos(4))
case(
    "true_divide_int",
    lambda x, y: torch.true_divide(x, y),
    torch.arange(1, 7),
    torch.arange(1, 7) + 2,
)
case("floordiv_int", lambda x: x // 3, torch.arange(-6, 6))
case("pow", torch.pow, pos(3, 4), r(3, 4))
case("pow_scalar", lambda x: x**2, r(3, 4))
case("rpow", lambda x: 2.0**x, r(3))
case("float_power", torch.float_power, pos(3), r(3))
case("atan2", torch.atan2, r(3, 4), r(3, 4) + 3)
case("maximum", torch.maximum, r(3, 4), r(4))
case("minimum", torch.minimum, r(3, 4), r(4))
case("fmax", torch.fmax, r(3, 4), r(3, 4, seed=1))
case("fmin", torch.fmin, r(3, 4), r(3, 4, seed=1))
case("remainder", torch.remainder, r(3, 4) * 4, pos(3, 4) + 1)
case("fmod", torch.fmod, r(3, 4) * 4, pos(3, 4) + 1)
case("hypot", torch.hypot, r(3, 4), r(3, 4))
case("xlogy", torch.xlogy, r(3, 4), pos(3, 4))
case("logaddexp", torch.logaddexp, r(3, 4), r(3, 4))
case("copysign", torch.copysign, r(3, 4), r(3, 4))
case("clamp", lambda x: torch.clamp(x, -0.5, 0.5), r(3, 4))
case("clamp_tensor", lambda x, lo: torch.clamp(x, min=lo), r(3, 4), r(4))
case("clamp_min", lambda x: torch.clamp_min(x, 0.1), r(3, 4))
case("clamp_max", lambda x: torch.clamp_max(x, 0.1), r(3, 4))
case("where", lambda c, x, y: torch.where(c > 0, x, y), r(3, 4), r(3, 4), r(4))
case("where_scalar", lambda x: torch.where(x > 0, x, 0.0), r(3, 4))
case("lerp", torch.lerp, r(3), r(3), pos(3))
case("addcmul", lambda a, b, c: torch.addcmul(a, b, c, value=0.5), r(3), r(3), r(3))
case("addcdiv", lambda a, b, c: torch.addcdiv(a, b, c, value=0.5), r(3), r(3), pos(3))
case("comparisons", lambda x, y: ((x < y) & (x >= 0)) | (x == y) | ~(x != y), r(5), r(5))
case("logical", lambda x, y: torch.logical_xor(x > 0, y > 0).float() * x, r(5), r(5))
case("isnan_isinf", lambda x: (torch.isnan(x) | torch.isinf(x)).float() + x, r(5))
case("mixed_dtype_promotion", lambda x, y: x * y, r(3, dtype=torch.float32), r(3))
case("int_tensor_times_float_scalar", lambda x: x * 2.5, torch.arange(4))
case(
    "zero_dim_promotion",
    lambda x, s: x + s,
    r(3, dtype=torch.float32),
    torch.tensor(2.0, dtype=torch.float64),
)

# reductions
case("sum_all", torch.sum, r(3, 4))
case("sum_dim_keepdim", lambda x: x.sum(dim=(0, 2), keepdim=True), r(2, 3, 4))
case("mean", lambda x: x.mean(-1), r(3, 4))
case("prod", lambda x: torch.prod(x, 1), r(3, 4))
case("amax", lambda x: torch.amax(x, (0, 1)), r(3, 4))
case("amin", lambda x: torch.amin(x, 0, keepdim=True), r(3, 4))
case("max_all", torch.max, r(3, 4))
case("max_dim", lambda x: torch.max(x, 1).values * 2 + torch.max(x, 1).indices, r(3, 4))
case("min_dim", lambda x: torch.min(x, 0, keepdim=True)[0], r(3, 4))
case("max_binary", torch.max, r(3, 4), r(3, 4))
case("argmax", lambda x: torch.argmax(x, 1), r(3, 4))
case("argmin_all", torch.argmin, r(3, 4))
case("var", lambda x: torch.var(x, 1), r(3, 4))
case("var_correction0", lambda x: torch.var(x, dim=0, correction=0), r(3, 4))
case("std", lambda x: torch.std(x), r(3, 4))
case("var_mean", lambda x: torch.var_mean(x, 1), r(3, 4))
case("logsumexp", lambda x: torch.logsumexp(x, 1), r(3, 4))
case("cumsum", lambda x: torch.cumsum(x, 1), r(3, 4))
case("cumprod", lambda x: torch.cumprod(x, 0), r(3, 4))
case("norm", lambda x: torch.norm(x), r(3, 4))
case("vector_norm_ord", lambda x: torch.linalg.vector_norm(x, 3, dim=1), r(3, 4))
case("vector_norm_inf", lambda x: torch.linalg.vector_norm(x, math.inf, dim=1), r(3, 4))
case("all_any", lambda x: torch.all(x > -5, 1).float() + torch.any(x > 1).float(), r(3, 4))

# matmul family
case("matmul_2d", torch.matmul, r(3, 4), r(4, 5))
case("matmul_batched_bcast", torch.matmul, r(2, 1, 3, 4), r(5, 4, 2))
case("matmul_vec", torch.matmul, r(4), r(2, 4, 3))
case("matmul_mat_vec", torch.matmul, r(2, 3, 4), r(4))
case("matmul_op", lambda a, b: a @ b, r(3, 4), r(4))
case("mm", torch.mm, r(3, 4), r(4, 5))
case("bmm", torch.bmm, r(2, 3, 4), r(2, 4, 5))
case("mv", torch.mv, r(3, 4), r(4))
case("dot", torch.dot, r(4), r(4))
case("outer", torch.outer, r(3), r(4))
case("addmm", lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=2.0), r(3, 5), r(3, 4), r(4, 5))
case("baddbmm", torch.baddbmm, r(2, 3, 5), r(2, 3, 4), r(2, 4, 5))
case("einsum_bij", lambda a, b: torch.einsum("bij,bjk->bik", a, b), r(2, 3, 4), r(2, 4, 5))
case("einsum_trace_free", lambda a, b: torch.einsum("ij,kj->ik", a, b), r(3, 4), r(5, 4))
case("einsum_ellipsis", lambda a, b: torch.einsum("...ij,...j->...i", a, b), r(2, 3, 4), r(2, 4))
case(
    "einsum_three", lambda a, b, c: torch.einsum("ij,jk,kl->il", a, b, c), r(2, 3), r(3, 4), r(4, 5)
)
case("einsum_sum", lambda a: torch.einsum("ij->j", a), r(3, 4))
case("tensordot", lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])), r(2, 3, 4), r(3, 4, 5))
case("linear", F.linear, r(2, 3, 4), r(5, 4), r(5))

# shape ops
case("reshape", lambda x: x.reshape(4, -1), r(2, 3, 4))
case("view", lambda x: x.view(-1), r(2, 3))
case("flatten", lambda x: torch.flatten(x, 1), r(2, 3, 4))
case("unflatten", lambda x: x.unflatten(1, (2, 2)), r(3, 4))
case("squeeze_unsqueeze", lambda x: x.unsqueeze(0).squeeze(2).unsqueeze(-1), r(3, 1, 4))
case("permute", lambda x: x.permute(2, 0, 1), r(2, 3, 4))
case("transpose", lambda x: x.transpose(0, 2), r(2, 3, 4))
case("t_mT_T", lambda x, y: x.t() + y.mT + x.T, r(3, 3), r(3, 3))
case("expand", lambda x: x.expand(2, 3, -1), r(3, 1))
case("broadcast_to", lambda x: torch.broadcast_to(x, (2, 3, 4)), r(3, 1))
case("cat", lambda x, y: torch.cat([x, y], 1), r(2, 3), r(2, 5))
case("stack", lambda x, y: torch.stack([x, y], -1), r(2, 3), r(2, 3))
case("split", lambda x: torch.split(x, 2, 1)[1] * 2, r(3, 5))
case("split_sections", lambda x: torch.split(x, [1, 4], 1)[1], r(3, 5))
case("chunk", lambda x: torch.chunk(x, 3, 0)[2], r(7, 2))
case("unbind", lambda x: torch.unbind(x, 1)[1], r(3, 4))
case("narrow", lambda x: torch.narrow(x, 1, 1, 2), r(3, 4))
case("select", lambda x: torch.select(x, 0, -1), r(3, 4))
case("flip", lambda x: torch.flip(x, (0, 1)), r(3, 4))
case("roll", lambda x: torch.roll(x, (1, -2), (0, 1)), r(3, 4))
case("roll_flat", lambda x: torch.roll(x, 3), r(3, 4))
case("repeat", lambda x: x.repeat(2, 1, 3), r(3, 4))
case("tile", lambda x: torch.tile(x, (2,)), r(3, 4))
case("movedim", lambda x: torch.movedim(x, 0, -1), r(2, 3, 4))
case("diagonal", lambda x: torch.diagonal(x, 1), r(4, 5))
case("diagonal_neg", lambda x: torch.diagonal(x, -1, 1, 2), r(2, 4, 3))
case("tril_triu", lambda x: torch.tril(x) + torch.triu(x, 1), r(4, 5))
case("gather", lambda x: torch.gather(x, 1, idx(4, 3, 2)), r(3, 4))
case("index_select", lambda x: torch.index_select(x, 0, idx(3, 5)), r(3, 4))
case(
    "scatter",
    lambda x, s: torch.scatter(x, 1, torch.tensor([[0, 2], [1, 3], [3, 0]]), s),
    r(3, 4),
    r(3, 2),
)
case("scatter_add", lambda x, s: torch.scatter_add(x, 1, idx(4, 3, 2), s), r(3, 4), r(3, 2))
case("take_along_dim", lambda x: torch.take_along_dim(x, idx(4, 3, 2), 1), r(3, 4))
case("pad", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), r(3, 4))
case("pad_reflect", lambda x: F.pad(x, (2, 1), mode="reflect"), r(3, 4))
case("index_add", lambda x, s: x.index_add(0, torch.tensor([0, 2, 0]), s), r(3, 4), r(3, 4))

# indexing
case("getitem_int_slice", lambda x: x[1, 1:3], r(3, 4))
case("getitem_step", lambda x: x[::2, 1::2], r(5, 6))
case("getitem_none_ellipsis", lambda x: x[None, ..., 0], r(3, 4, 5))
case("getitem_negative", lambda x: x[-1, -2], r(3, 4))
case("getitem_tensor", lambda x: x[torch.tensor([2, 0, 2])], r(3, 4))
case("getitem_tensor_2d", lambda x: x[:, torch.tensor([[0, 1], [3, 2]])], r(3, 4))
case("getitem_two_tensors", lambda x: x[torch.tensor([0, 2]), torch.tensor([1, 3])], r(3, 4))
case("getitem_separated", lambda x: x[torch.tensor([0, 1]), :, torch.tensor([2, 0])], r(3, 4, 5))
case("getitem_mixed_int", lambda x: x[0, :, torch.tensor([1, 2])], r(3, 4, 5))
case("getitem_mask", lambda x: x[torch.tensor([True, False, True])], r(3, 4))
case("getitem_list", lambda x: x[[0, 0, 1]], r(3, 4))

# nn.functional
case("relu", F.relu, r(3, 4))
case("gelu", F.gelu, r(3, 4))
case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), r(3, 4))
case("silu", F.silu, r(3, 4))
case("elu", F.elu, r(3, 4))
case("leaky_relu", lambda x: F.leaky_relu(x, 0.2), r(3, 4))
case("softplus", lambda x: F.softplus(x, beta=2.0), r(3, 4))
case("hardtanh", F.hardtanh, r(3, 4))
case("mish", F.mish, r(3, 4))
case("logsigmoid", F.logsigmoid, r(3, 4))
case("selu", F.selu, r(3, 4))
case("hardswish", F.hardswish, r(3, 4))
case("softmax", lambda x: F.softmax(x, -1), r(3, 4))
case("log_softmax", lambda x: torch.log_softmax(x, 0), r(3, 4))
case("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b), r(3, 4), r(4), r(4))
case("rms_norm", lambda x, w: F.rms_norm(x, (4,), w), r(3, 4), r(4))
case("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), r(2, 4, 3), r(4), r(4))
case("normalize", lambda x: F.normalize(x, dim=-1), r(3, 4))
case("cosine_similarity", lambda x, y: F.cosine_similarity(x, y), r(3, 4), r(3, 4))
case("embedding", lambda w: F.embedding(idx(5, 2, 3), w), r(5, 4))
case("sdpa", F.scaled_dot_product_attention, r(2, 3, 4), r(2, 5, 4), r(2, 5, 6))
case(
    "sdpa_causal",
    lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    r(2, 4, 4),
    r(2, 4, 4),
    r(2, 4, 3),
)
case("mse_loss", F.mse_loss, r(3, 4), r(3, 4))
case("l1_loss", lambda x, y: F.l1_loss(x, y, reduction="sum"), r(3, 4), r(3, 4))
case("smooth_l1_loss", F.smooth_l1_loss, r(3, 4), r(3, 4))
case("huber_loss", lambda x, y: F.huber_loss(x, y, delta=0.5), r(3, 4), r(3, 4))
case("cross_entropy", lambda x: F.cross_entropy(x, idx(4, 3)), r(3, 4))
case("cross_entropy_smooth", lambda x: F.cross_entropy(x, idx(4, 3), label_smoothing=0.1), r(3, 4))
case("cross_entropy_probs", lambda x, p: F.cross_entropy(x, p.softmax(-1)), r(3, 4), r(3, 4))
case("cross_entropy_2d", lambda x: F.cross_entropy(x, idx(4, 2, 5)), r(2, 4, 5))
case("nll_loss", lambda x: F.nll_loss(x, torch.tensor([0, -100, 3])), r(3, 4))
case("binary_cross_entropy", F.binary_cross_entropy, r(3, 4, lo=0.1, hi=0.9), r(3, 4, lo=0, hi=1))
case(
    "bce_with_logits",
    lambda x, y: F.binary_cross_entropy_with_logits(x, y, pos_weight=x.new_full((4,), 2.0)),
    r(3, 4),
    r(3, 4, lo=0, hi=1),
)
case(
    "kl_div",
    lambda x, y: F.kl_div(x, y, reduction="batchmean"),
    r(3, 4).log_softmax(-1),
    r(3, 4).softmax(-1),
)
case(
    "zeros_like_ones_like",
    lambda x: torch.zeros_like(x) + torch.ones_like(x) * x + x.new_zeros(x.shape),
    r(3),
)
case("to_dtype", lambda x: x.to(torch.float32).double() * 2, r(3))
case("conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), r(2, 3, 9), r(4, 3, 3), r(4))
case("conv2d", lambda x, w: F.conv2d(x, w, padding=1, dilation=2), r(2, 3, 7, 6), r(4, 3, 3, 2))
case("conv2d_groups", lambda x, w: F.conv2d(x, w, groups=2, stride=2), r(1, 4, 7, 7), r(6, 2, 3, 3))
case("conv2d_unbatched", lambda x, w: F.conv2d(x, w, padding="same"), r(3, 6, 6), r(2, 3, 3, 3))
case("max_pool2d", lambda x: F.max_pool2d(x, 2), r(2, 3, 6, 6))
case("max_pool2d_pad_ceil", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), r(2, 3, 7, 6))
case("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1), r(2, 3, 7, 6))
case(
    "avg_pool2d_no_pad_count",
    lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    r(2, 3, 7, 6),
)
case("max_pool1d", lambda x: F.max_pool1d(x, 3, 2), r(2, 3, 9))
case("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (2, 3)), r(2, 3, 4, 6))
