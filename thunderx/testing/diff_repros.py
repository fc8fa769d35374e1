"""Reproducers of the differential test's known disagreements (diff_known.py): one per key of
`KNOWN_FAILURES` and `DELIBERATE`, checked by the CI test to still show its finding."""

from __future__ import annotations

_FORWARD_MODE_CHECKS = ("jvp", "linearize", "jacfwd", "vmap(jvp)")
_REVERSE_MODE_CHECKS = ("grad", "autograd", "vjp", "jit(grad)", "jit(vmap(grad))")

# (op, check, category) -> (edge, seed, check): make_case(OPS[op], edge, Random(seed)) through
# that check (with Ctx seed `seed`) shows the finding (found by `find_reproducer`); for a
# "<with OP>" entry (edge, seed, check, chain of ops): `reproduce_program` shows it, or
# (edge, seed, check, None, length) for a program the long run drew (its `replay` line).
KNOWN_REPROS: dict[tuple[str, str, str], tuple] = {
    # remainder > pow at exponent 0 > div by 0 > logit: logit(inf)'s nan cotangent reaches pow
    ("<with pow>", "jit(vmap(grad))", "unresolved"): ("zero", 5005418, "jit(vmap(grad))", None, 4),
    # norm of a zero row > sqrt > 0 / 0 > rpow: the nan cotangent meets the 2-norm's zero vector
    ("<with norm>", "*", "kink"): ("zero", 1659363, "jacrev", None, 4),
    # nextafter(0, -y) = -4.9e-324 > index_reduce_prod (an untouched row) > selu
    ("<with index_reduce_prod>", "jacrev", "kink"): ("zero", 1612025, "jacrev", None, 3),
    # rms_norm over one element > repeat > sinc at +-1 (rounding noise) > normalize
    **{
        ("<with normalize>", check, "kink"): ("one", 1617437, check, None, 4)
        for check in _REVERSE_MODE_CHECKS
    },
    ("atan2", "*", "kink"): ("zero", 5, "jvp"),
    # atan2 at (0, 0) where the differences see no kink (seed 3000000)
    ("atan2", "*", "unresolved"): ("tie", 3014726, "jvp"),
    # div > instance_norm of a constant channel (-30 / 30 four times) > linear (seed 3000000)
    ("<with instance_norm>", "hessian", "kink"): ("big", 3016092, "hessian", None, 3),
    ("fmax", "*", "kink"): ("tie", 0, "jvp"),
    ("clamp_tensor", "*", "kink"): ("zero", 5, "jvp"),
    ("maximum", "*", "unresolved"): ("empty", 0, "grad", ("huber_loss", "maximum")),
    # (edge, seed, check, None, length): the random program a long run drew at that seed
    ("clamp_tensor", "*", "unresolved"): ("scalar", 3159, "jvp", None, 3),
    ("minimum", "*", "unresolved"): ("empty", 999, "grad", None, 3),
    ("max_all", "*", "unresolved"): ("zero", 3, "grad", ("div_raw", "max_all")),
    # pow > i1e > var > var of the 0-d variance: torch's batched rule gives 0 where grad gives nan
    ("<with var>", "*", "unresolved"): ("tie", 1451635, "jit(vmap(grad))", None, 4),
    ("relu6", "*", "kink"): ("zero", 26271, "jvp", None, 2),
    ("hardswish", "*", "unresolved"): ("empty", 50699, "grad", None, 3),
    ("hardtanh", "*", "kink"): ("zero", 65009, "jacrev", None, 4),
    ("hardtanh", "*", "unresolved"): ("zero", 65009, "jit(vmap(grad))", None, 4),
    # div_raw > hardtanh: torch.func's batched jvp gives 0 at a nan entry, its unbatched one nan
    ("<with hardtanh>", "*", "kink"): ("zero", 133678, "vmap(jvp)", None, 2),
    ("<with amax>", "*", "unresolved"): ("tie", 54314, "grad", None, 4),
    ("<with logcumsumexp>", "*", "unresolved"): ("one", 22793, "grad", None, 3),
    # logcumsumexp > norm > log1p > div by a zero entry: jacrev's rows of the finite outputs
    ("<with logcumsumexp>", "jacrev", "thunderx-wrong"): ("zero", 2408832, "jacrev", None, 4),
    # logcumsumexp of zeros > clamp(0, 0) (a tie) > div > sqrt: the tie passes the gradient
    ("<with logcumsumexp>", "hessian", "thunderx-wrong"): ("zero", 2513101, "hessian", None, 4),
    ("pow", "hessian", "kink"): ("zero", 2926, "hessian"),
    ("batch_norm", "*", "kink"): ("big", 1201, "hessian"),
    # mean > sign > leaky_relu > var of one element: var's nan derivative meets sign's zero
    ("<with sign>", "*", "unresolved"): ("one", 5004480, "jvp", None, 4),
    ("<with atan2>", "*", "kink"): ("zero", 1921, "jvp", None, 4),
    ("<with floor>", "*", "kink"): ("zero", 15122, "jacrev", None, 4),
    ("<with ceil>", "*", "kink"): ("zero", 32488, "jvp", None, 3),
    ("stack", "vmap(jvp)", "unresolved"): ("empty", 7327, "vmap(jvp)", None, 4),
    ("<with logcumsumexp>", "*", "kink"): ("zero", 27667, "grad", None, 4),
    ("<with index_reduce_amax>", "*", "unresolved"): ("tie", 19705, "grad", None, 4),
    # index_reduce_amax > hypot: hypot's nan derivative at 0 meets an unselected entry
    ("<with index_reduce_amax>", "*", "kink"): ("zero", 181679, "grad", None, 2),
    # erfinv > div_raw > erfinv > max_all: x / 0's nan tangent at an entry max does not select
    ("<with max_all>", "*", "kink"): ("zero", 385528, "jvp", None, 4),
    # hypot > sign > fmod: hypot's nan derivative at 0 meets sign's zero (torch's batched rule)
    ("<with sign>", "*", "kink"): ("zero", 393835, "jit(vmap(grad))", None, 3),
    # l1_loss > rsqrt > std of one value > relu6: relu6 at the nan, torch's vectorized kernel
    ("<with relu6>", "*", "unresolved"): ("zero", 380722, "jacfwd", None, 4),
    # div_raw > cumprod > selu > sinh: columns with infinite entries (jvp: ±inf against nan)
    ("cumprod", "*", "unresolved"): ("tie", 391966, "jvp", None, 4),
    # rpow > logcumsumexp of entries up to 2**30 > softsign > i0: torch's forward mode
    ("logcumsumexp", "hessian", "unresolved"): ("big", 372751, "hessian", None, 4),
    # take_along_dim (empty) > huber_loss (a mean of nothing: nan) > hardsigmoid >
    # logcumsumexp of one nan entry: its tangent is the incoming one, torch's exp(nan) t = nan
    ("logcumsumexp", "jacfwd", "unresolved"): ("tie", 1300806, "jacfwd", None, 4),
    # tanhshrink > cumprod of [x, 0, 0] > div_raw by 0: torch.autograd's 0 at the last entry
    ("<with cumprod>", "autograd", "unresolved"): ("zero", 303515, "autograd", None, 3),
    # pow > float_pow_half > logcumsumexp of three equal entries of 4e88
    **{
        ("logcumsumexp", check, "kink"): ("big", 413540, check, None, 3)
        for check in _REVERSE_MODE_CHECKS
    },
    # silu > div_raw > glu > fmax: x / 0's nan tangent in the branch fmax does not select
    ("<with fmax>", "*", "kink"): ("zero", 414848, "jacfwd", None, 4),
    # rsqrt > matmul > log_softmax of a 0-d value > std of it: std's nan cotangent
    **{
        ("<with log_softmax>", check, "unresolved"): ("one", 415886, check, None, 4)
        for check in ("jacrev", "jit(vmap(grad))")
    },
    # pow > exp > linear: exp overflows to inf, the weight/input block of the Hessian
    ("linear", "hessian", "unresolved"): ("big", 1801467, "hessian", None, 3),
    # sinc > remainder > exp: exp overflows to inf, the divisor's second derivative
    ("<with exp>", "hessian", "kink"): ("big", 1860659, "hessian", None, 3),
    # log_softmax > batch_norm (a constant channel) > rms_norm > cos: batched tangents
    ("<with batch_norm>", "vmap(jvp)", "kink"): ("zero", 1856750, "vmap(jvp)", None, 4),
    # max_dim > log_softmax of a 0-d value > hypot at 0: its nan cotangent, batched
    **{
        ("<with log_softmax>", check, "thunderx-wrong"): ("zero", 1851344, check, None, 4)
        for check in ("jacrev", "jit(vmap(grad))")
    },
    # sdpa > maximum at +-30: a tie each example's computation makes, batched
    **{
        ("<with sdpa>", check, "kink"): ("big", 1900972, check, None, 2)
        for check in ("jit(vmap(grad))", "vmap(jvp)")
    },
    # atanh > hypot at (0, 0) (a nan tangent) > pow at exponent 0, forward mode
    **{
        ("<with hypot>", check, "thunderx-wrong"): ("zero", 1953873, check, None, 3)
        for check in _FORWARD_MODE_CHECKS
    },
    # group_norm of rows of 30s > linear: the Hessian at a constant row
    ("<with group_norm>", "hessian", "kink"): ("big", 1951053, "hessian", None, 2),
    # lgamma of ties > group_norm of a constant group (weight and bias) > abs at 0, batched
    **{
        ("<with group_norm>", check, "kink"): ("tie", 2011403, check, None, 3)
        for check in ("jit(vmap(grad))", "vmap(jvp)")
    },
    # div_raw by 0 > trunc: the inf derivative meets trunc's zero
    ("<with trunc>", "*", "kink"): ("tie", 426959, "jacrev", None, 2),
    # batch_norm > l1_loss > expm1 > silu: equal cotangents of 7e16 on a channel
    ("<with batch_norm>", "jit(vmap(grad))", "kink"): ("big", 1061934, "jit(vmap(grad))", None, 4),
    # norm of a zero row > std of one value > addcdiv: std's nan cotangent at the zero vector
    ("<with norm>", "*", "unresolved"): ("zero", 345303, "grad", None, 3),
    # acosh > gelu > std of three equal values: exactly 0 here, torch 1.4e-16 with gradient 0.05
    ("std", "*", "kink"): ("tie", 188540, "grad", None, 3),
    # cummax > softmax > std > where on 0-d inputs: where discards std's 0 / 0
    ("<with std>", "jacrev", "thunderx-wrong"): ("scalar", 192791, "jacrev", None, 4),
    ("<with std>", "jit(vmap(grad))", "thunderx-wrong"): (
        "scalar",
        192791,
        "jit(vmap(grad))",
        None,
        4,
    ),
    ("log_softmax", "jacrev", "unresolved"): ("scalar", 272, "jacrev", None, 4),
    ("log_softmax", "jit(vmap(grad))", "unresolved"): ("scalar", 272, "jit(vmap(grad))", None, 4),
    ("log_softmax", "hessian", "unresolved"): ("scalar", 93678, "hessian", None, 4),
    # nansum > mish > log_softmax of a 0-d value > hypot: hypot's nan cotangent at 0
    **{
        ("<with log_softmax>", check, cat): ("zero", 263032, check, None, 4)
        for check, cat in (
            ("jacrev", "kink"),
            ("jit(vmap(grad))", "kink"),
            ("hessian", "unresolved"),
        )
    },
    # exp > logsumexp (values near 9e13, 1 apart) > layer_norm with weight and bias
    ("layer_norm", "jacfwd", "unresolved"): ("big", 1630628, "jacfwd", None, 3),
    # batch_norm > nansum > where at +-30: a sum that cancels to 1e-15, read in the batched layout
    ("<with nansum>", "vmap", "forward"): ("big", 2216092, "vmap", None, 3),
    # amax of a column (-0.96, 0) > hypot at (0, 0): hypot's nan derivative meets the zero one
    # of the entry amax does not select
    ("<with amax>", "*", "kink"): ("zero", 1536132, "grad", None, 2),
    # amin > div_raw at ties: the unselected entries' derivative under x / 0's inf and nan
    ("<with amin>", "*", "unresolved"): ("tie", 266605, "jit(vmap(grad))", None, 2),
    # div_raw by 0 > relu6 under jit(vmap(grad)): relu6's derivative at the nan 0 / 0 times 1 / 0
    ("relu6", "*", "unresolved"): ("tie", 420524, "jit(vmap(grad))", None, 2),
    # erfinv > amin of five zeros and 0.6 > hypot at 0 > l1_loss: hypot's nan cotangent shared
    # among the ties, 0 at the unselected entry
    ("<with amin>", "*", "kink"): ("zero", 490900, "grad", None, 4),
    # div_raw by 0 > matmul: matmul's second derivative in its right operand at an inf entry
    ("matmul", "hessian", "unresolved"): ("tie", 494821, "hessian", None, 2),
    # permute > linear > rpow overflowing to inf > relu
    ("<with relu>", "hessian", "kink"): ("big", 422960, "hessian", None, 4),
    # var > div_raw by 0 > l1_loss
    ("<with l1_loss>", "hessian", "kink"): ("tie", 378286, "hessian", None, 3),
    # batch_norm > sqrt > gru (an output of -5e-17 from torch's kernel, 0 from the cells) > floor
    **{
        ("<with gru>", check, "forward"): ("tie", 703155, check, None, 4)
        for check in ("vmap", "vmap_axes")
    },
    # kl_div > softmax of the 0-d loss > 1 / 0 > x ** 0.5 of inf: a nan cotangent into softmax
    **{
        ("<with softmax>", check, "unresolved"): ("zero", 1372709, check, None, 4)
        for check in ("jacrev", "hessian", "jit(vmap(grad))")
    },
    # max_dim > nansum > softmax of the 0-d sum > std of one value: std's nan cotangent
    ("<with softmax>", "hessian", "kink"): ("zero", 1380962, "hessian", None, 4),
    # div_raw by 0 > sort > kl_div to a 0-d nan > softmax of it
    **{
        ("softmax", check, "unresolved"): ("zero", 697569, check, None, 4)
        for check in ("jacrev", "jit(vmap(grad))")
    },
    # tril > div_raw by 0 > selu in its linear piece at inf
    ("<with selu>", "hessian", "kink"): ("tie", 704055, "hessian", None, 3),
    # elu's linear piece > getitem > x / 0 > cosh: elu's second derivative (0) meets inf
    ("<with elu>", "hessian", "kink"): ("zero", 1418823, "hessian", None, 4),
    # amax > var of one row (nan) > mv > sinh: mv's second derivative in its vector
    ("mv", "hessian", "unresolved"): ("one", 705333, "hessian", None, 4),
    # selu > div_raw by 0 > layer_norm of rows with nan > elu: elu's derivative at nan
    ("elu", "*", "unresolved"): ("zero", 706344, "grad", None, 4),
    # linear > rpow overflowing to inf > cumprod, in forward mode
    **{
        ("<with cumprod>", check, "kink"): ("big", 733489, check, None, 3)
        for check in ("jvp", "linearize", "vmap(jvp)")
    },
    # sinc of 30 (-1.1e-16) > i1e: its one-sided second derivative there
    ("i1e", "hessian", "kink"): ("big", 660254, "hessian", None, 2),
    # sinc(+-30) = -1.1e-16 > i1e > lerp > log: torch autograd over each side's gradient
    ("i1e", "autograd(grad)", "kink"): ("big", 7110818, "autograd(grad)", None, 4),
    # sinc(-30) = -1.1e-16 > asin > abs > i1: i1's second derivative there (torch's cancels)
    ("<with i1>", "hessian", "kink"): ("big", 4014994, "hessian", None, 4),
    # x / 0 > minimum selecting the other operand > i0e: the Hessian's forward over reverse
    ("<with minimum>", "hessian", "kink"): ("tie", 4213962, "hessian", None, 3),
    # var of one value (nan) > softmax of the 0-d nan > hardtanh > floor
    ("softmax", "hessian", "unresolved"): ("one", 4011283, "hessian", None, 4),
    # relu6 > instance_norm (torch's batched kernel rounds otherwise) > log > cummax of near ties
    **{
        ("<with instance_norm>", check, "kink"): ("tie", 4013344, check, None, 4)
        for check in ("jit(vmap(grad))", "vmap(jvp)")
    },
    # mish > std over a dim > pad, batched: torch's vectorized mish rounds equal inputs an ulp
    # apart, so a constant column becomes [a, a, a + 1 ulp]
    **{
        ("<with std>", check, "kink"): ("tie", 865126, check, None, 3)
        for check in ("jit(vmap(grad))", "vmap(jvp)")
    },
    # div_raw by 0 (-inf logits) > bce_with_logits > maximum
    **{
        ("bce_with_logits", check, category): ("tie", 870997, check, None, 3)
        for check, category in (
            ("grad", "unresolved"),
            ("vjp", "unresolved"),
            ("jacrev", "unresolved"),
            ("jit(grad)", "unresolved"),
            ("jit(vmap(grad))", "unresolved"),
            ("hessian", "kink"),
        )
    },
    # norm1 > div_raw by 0: the mixed (x, y) Hessian block of |x|_1 / y at y = 0
    ("<with norm1>", "hessian", "kink"): ("zero", 907364, "hessian", None, 2),
    # var over no elements (nan) > logsigmoid > bmm: the (y, y) block of bmm(nan, y)
    ("bmm", "hessian", "unresolved"): ("empty", 3501026, "hessian", None, 3),
    # erfcx > atan > div by a zero entry > mul: the (b, b) entry, inf against torch's nan (the
    # key of every quotient at y = 0 before a later op: softsign > div_raw > xlogy at seed 1010297)
    ("<with div_raw>", "hessian", "unresolved"): ("zero", 3112114, "hessian", None, 4),
    # lstm > stack > cosine_similarity of a vector of norm 2e-10 (below eps), forward mode
    **{
        ("cosine_similarity", check, "kink"): ("big", 950538, check, None, 3)
        for check in _FORWARD_MODE_CHECKS
    },
    # nextafter > div_raw by 0 > maximum > narrow: the unselected operand's nan tangent
    **{
        ("<with maximum>", check, "kink"): ("tie", 930531, check, None, 4)
        for check in ("jvp", "linearize", "jacfwd")
    },
    # elu > sinh of big inputs > lstm with batched weights: gate terms of 1.6e14 cancelling
    **{
        ("lstm", check, "forward"): ("big", 945063, check, None, 4)
        for check in ("vmap", "vmap_axes")
    },
    # softsign > div_raw by 0 > round > nansum: x / 0's nan and inf derivatives meet round's 0
    ("<with round>", "*", "kink"): ("zero", 627169, "jacrev", None, 4),
    # prod of a row with two zeros > sum > hypot at 0 > huber_loss: hypot's nan cotangent
    ("<with prod>", "autograd", "thunderx-wrong"): ("zero", 539270, "autograd", None, 4),
    # hardsigmoid of -30 (three zeros) > prod > i1e > std over one element: a nan cotangent
    ("<with prod>", "autograd", "unresolved"): ("big", 1017779, "autograd", None, 4),
    # div_raw by 0 > xlogy > min_dim at a tie: the (y, y) entry of xlogy(x / y, z) at y = 0
    ("<with xlogy>", "hessian", "kink"): ("tie", 2003108, "hessian", None, 3),
    # pow > var > sdpa at +-30: cancellation among scores of 1e162
    ("sdpa", "hessian", "kink"): ("big", 2002919, "hessian", None, 3),
    # rms_norm over one element > erfcx > square > prod: a Hessian of rounding noise
    ("<with rms_norm>", "hessian", "kink"): ("one", 3210914, "hessian", None, 4),
    # max_dim > sum > cumprod > cosh at +-30: inf * 0 in the Hessian past an overflow
    ("<with cumprod>", "hessian", "kink"): ("big", 3317862, "hessian", None, 4),
    # atan > normalize of a zero pair (x / eps) > softmax: torch's 6.1e7 in one row only
    ("<with normalize>", "hessian", "kink"): ("zero", 1056468, "hessian", None, 3),
    # index_reduce_prod > div_raw by 0 > maximum: maximum(nan, 0.75) under jacrev
    ("maximum", "jacrev", "kink"): ("tie", 550376, "jacrev", None, 3),
    # group_norm > div_raw by 0 > minimum with a nan operand: the cotangent split as at a tie
    # (reverse), the tangents averaged (forward); torch: all to each, the second's tangent
    **{
        ("minimum", check, "kink"): ("zero", 1190154, check, None, 3)
        for check in ("jacrev", "jvp", "linearize", "jacfwd")
    },
    # sinc > gelu > cosine_similarity of vectors of norm 8e-17 (below eps) > cummin
    ("cosine_similarity", "jacfwd", "unresolved"): ("big", 1188426, "jacfwd", None, 4),
    # mish of -30s (-2.8e-12) > cosine_similarity of a vector of norm 4e-12 > softsign
    **{
        ("cosine_similarity", check, "unresolved"): ("big", 1857308, check, None, 3)
        for check in ("jvp", "linearize", "vmap(jvp)")
    },
    # max over a dim > div_raw by 0 > take_along_dim with an empty index > tanhshrink
    ("<with take_along_dim>", "*", "kink"): ("zero", 1170465, "hessian", None, 4),
    # x - s over no elements > mse_loss: jacfwd in the scalar s is 0, torch's nan (also
    # seeds 3200762 index_select, 3301302 narrow, 3309639 norm1 over an empty dim > std)
    ("<with no elements>", "*", "unresolved"): ("empty", 3400876, "jacfwd", None, 2),
    # logcumsumexp > div_raw (0/0 at its first entry) > i0 > hardtanh (passes the nan on)
    **{
        ("<with logcumsumexp>", check, "thunderx-wrong"): ("zero", 3313647, check, None, 4)
        for check in _REVERSE_MODE_CHECKS
    },
    # lerp > div_raw by 0 > minimum(inf, y) > normalize: the inf operand's nan tangent
    ("minimum", "vmap(jvp)", "kink"): ("zero", 551189, "vmap(jvp)", None, 4),
    **{
        ("<with minimum>", check, "kink"): ("zero", 551189, check, None, 4)
        for check in ("jvp", "linearize", "jacfwd")
    },
    # x / 0 (nan at 0 / 0) > minimum at a tie: the unselected operand's nan tangent, batched
    ("<with minimum>", "vmap(jvp)", "kink"): ("tie", 1725267, "vmap(jvp)", None, 2),
    # hypot at (0, 0) (nan tangents) > interpolate > gelu_tanh > maximum not selecting them
    ("<with maximum>", "vmap(jvp)", "kink"): ("tie", 2159849, "vmap(jvp)", None, 4),
    # pad > tanhshrink > batch_norm (an output exactly 0) > leaky_relu at its kink
    ("<with batch_norm>", "hessian", "kink"): ("tie", 535586, "hessian", None, 4),
    # cumprod past a zero > hypot at (0, 0) > glu: hypot's nan cotangent
    ("<with cumprod>", "autograd", "kink"): ("zero", 573030, "autograd", None, 3),
    # a zero vector (the clamp) in a program
    ("cosine_similarity", "hessian", "kink"): ("zero", 344811, "hessian", None, 3),
    # digamma > std of a constant row (0) > cosine_similarity with that zero vector
    ("cosine_similarity", "autograd(grad)", "kink"): ("zero", 7103498, "autograd(grad)", None, 3),
    # i0(0) = 1 > huber_loss at |d| == delta
    ("huber_loss", "autograd(grad)", "kink"): ("tie", 7103060, "autograd(grad)", None, 2),
    # reciprocal > relu6 > var over an empty dim (nan) > huber_loss at that nan difference
    ("huber_loss", "autograd(grad)", "unresolved"): ("empty", 7308064, "autograd(grad)", None, 4),
    # copysign > index_add > cosine_similarity with a zero vector > cumsum
    ("<with cosine_similarity>", "autograd(grad)", "kink"): (
        "tie",
        7108448,
        "autograd(grad)",
        None,
        4,
    ),
    # logcumsumexp of rows holding exact zeros > pow_half > erfcx > amax at a tie
    ("<with logcumsumexp>", "autograd(grad)", "thunderx-wrong"): (
        "zero",
        7263045,
        "autograd(grad)",
        None,
        4,
    ),
    # div_raw by zero > the 2-norm of a zero vector beside infinite entries
    ("norm", "autograd(grad)", "unresolved"): ("tie", 7296561, "autograd(grad)", None, 2),
    # setitem_dynamic > sinc at exact zeros > l1_loss > frac
    ("sinc", "autograd(grad)", "unresolved"): ("zero", 7239480, "autograd(grad)", None, 4),
    # log2 > reshape > index_reduce_prod > div_raw by zero: infinite first derivatives meeting
    # index_reduce's zero coefficients
    ("<with index_reduce_prod>", "autograd(grad)", "unresolved"): (
        "zero",
        7111061,
        "autograd(grad)",
        None,
        4,
    ),
    # prod > cummax at tied zeros (a kink) > cosine_similarity along one element: thunderx's
    # exact 0 against torch's 1.6e-8 of rounding in a second derivative that is 0
    ("<with cosine_similarity>", "hessian", "kink"): ("zero", 3702586, "hessian", None, 3),
    # cosh to 5e12 > gru: gate pre-activations of 1.5e14 cancelling to O(1)
    **{
        ("gru", check, "forward"): ("big", 535592, check, None, 3)
        for check in ("vmap", "vmap_axes")
    },
    # div_raw by 0 > huber_loss in its linear piece
    ("<with huber_loss>", "hessian", "kink"): ("tie", 509137, "hessian", None, 2),
    # div_raw by 0 > lgamma (inf) > smooth_l1_loss's linear piece > cosh
    ("<with smooth_l1_loss>", "hessian", "kink"): ("tie", 3408046, "hessian", None, 4),
    ("<with layer_norm>", "*", "kink"): ("tie", 92727, "hessian", None, 4),
    **{
        ("logcumsumexp", check, "kink"): ("big", 22250, check, None, 4)
        for check in _FORWARD_MODE_CHECKS
    },
    ("group_norm", "*", "kink"): ("big", 1863, "hessian"),
    # rows of -30s, normalized without weight and bias
    ("group_norm_plain", "*", "kink"): ("big", 1800539, "hessian"),
    # sigmoid(+-30): x (1 - x) = 9.3e-14 below torch's clamp 1e-12
    ("binary_cross_entropy", "hessian", "unresolved"): ("big", 0, "hessian"),
    **{("maximum", check, "kink"): ("tie", 6749, check, None, 4) for check in _FORWARD_MODE_CHECKS},
    ("smooth_l1_loss", "*", "unresolved"): (
        "scalar",
        0,
        "jacrev",
        ("mse_loss", "std", "smooth_l1_loss"),
    ),
    ("var", "*", "unresolved"): ("scalar", 0, "hessian"),
    ("layer_norm", "*", "kink"): ("big", 0, "hessian"),
    ("instance_norm", "*", "kink"): ("zero", 19, "hessian"),
    ("<with fmin>", "*", "kink"): ("zero", 0, "jvp", ("polygamma", "logit", "rms_norm", "fmin")),
    ("<with logsumexp>", "*", "unresolved"): (
        "empty",
        1,
        "jacfwd",
        ("erfinv", "softplus", "div", "logsumexp"),
    ),
    ("<with max_all>", "*", "unresolved"): ("one", 0, "grad", ("max_all", "var")),
    **{
        (f"<with {op}>", "*", "unresolved"): ("empty", 0, "grad", ("l1_loss", "mul", op))
        for op in ("ceil", "floor", "round", "trunc")
    },
}
