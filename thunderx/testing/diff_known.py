"""The differential test's known failures: each open disagreement with its owner (the helper
whose part of issue #19 covers it, or "lead"), the reason, and a reproducer. The CI test fails on
a finding outside this table and on an entry whose reproducer no longer fails (fix it, drop it).

Keys are (op, check, category); check "*" covers every check. "<with OP>" entries cover a bug
that shows only in compositions containing OP (every step passes alone).
"""

from __future__ import annotations

# (op, check, category) -> (owner, reason); check "*" stands for every check. Owners: the helper
# whose part of issue #19 covers the finding ("semantics": torch's conventions at kinks and ties,
# derivatives built from select/sign terms, traced integer indexing), or "lead" where no part does.
_TIE = "torch sends a tie's whole derivative to one operand/index; thunderx splits it"
_SECOND = "second derivative from select(x > 0)/sign(x) terms that vanish at 0 (issue item 3)"
_OVERFLOW = (
    "gradient at large x (~1e12): the unselected exp branch overflows, 0 * inf = nan "
    "(torch's backward selects first)"
)
_VIEW = (
    "dynamic_slice returns a view; jit's in-place buffer reuse writes through it, into the "
    "caller's input (the issue's first example)"
)
KNOWN_FAILURES: dict[tuple[str, str, str], tuple[str, str]] = {
    ("atan2", "*", "kink"): ("semantics", "atan2(0, 0): thunderx nan, torch 0"),
    ("atan2", "*", "unresolved"): ("semantics", "atan2(0, 0) second derivative: nan vs torch 0"),
    ("clamp_tensor", "*", "kink"): ("semantics", "clamp(x, min=y) with x == y: " + _TIE),
    ("fmax", "*", "kink"): ("semantics", "fmax(x, x): " + _TIE),
    ("fmin", "*", "kink"): ("semantics", "fmin(x, x): " + _TIE),
    ("max_dim", "*", "kink"): ("semantics", "max(dim) with ties: " + _TIE),
    ("min_dim", "*", "kink"): ("semantics", "min(dim) with ties: " + _TIE),
    ("max_pool2d", "*", "kink"): ("semantics", "max_pool2d with ties in a window: " + _TIE),
    ("relu6", "*", "kink"): ("semantics", "relu6 at 0 and 6: thunderx 1, torch 0"),
    ("celu", "*", "kink"): ("semantics", "second derivative of celu at 0: thunderx 1, torch 0"),
    ("elu", "*", "kink"): ("semantics", "second derivative of elu at 0: thunderx 1, torch 0"),
    ("selu", "*", "kink"): ("semantics", "second derivative of selu at 0: thunderx 1, torch 0"),
    ("layer_norm", "*", "kink"): ("semantics", "layer_norm of a constant row (variance 0)"),
    ("norm", "*", "kink"): ("semantics", "vector_norm at the zero vector: nan, torch 0"),
    ("norm", "*", "unresolved"): ("semantics", "vector_norm's Hessian at 0: nan, torch 0"),
    ("std", "*", "kink"): ("semantics", "std of a constant: nan, torch 0"),
    ("std", "*", "unresolved"): ("semantics", "std's Hessian at a constant: nan, torch 0"),
    ("normalize", "*", "unresolved"): (
        "semantics",
        "F.normalize of a zero vector: nan, torch finite (its eps clamp)",
    ),
    ("cosine_similarity", "*", "unresolved"): (
        "semantics",
        "cosine_similarity with a zero vector: nan, torch finite (eps clamp)",
    ),
    ("softplus", "*", "thunderx-wrong"): ("semantics", "softplus: " + _SECOND),
    ("logsigmoid", "*", "thunderx-wrong"): ("semantics", "logsigmoid: " + _SECOND),
    ("logaddexp", "*", "thunderx-wrong"): ("semantics", "logaddexp(x, x): " + _SECOND),
    ("huber_loss", "*", "thunderx-wrong"): ("semantics", "huber_loss at 0: " + _SECOND),
    ("smooth_l1_loss", "*", "thunderx-wrong"): ("semantics", "smooth_l1_loss at 0: " + _SECOND),
    ("bce_with_logits", "*", "thunderx-wrong"): ("semantics", "bce_with_logits at 0: " + _SECOND),
    ("prod", "*", "thunderx-wrong"): ("semantics", "Hessian of prod with zero entries is 0"),
    ("xlogy", "*", "thunderx-wrong"): (
        "semantics",
        "d/dx xlogy(x, y) at x == 0 is log(y), thunderx 0 (issue example)",
    ),
    ("gather", "*", "error"): ("semantics", "x[i] with a traced integer tensor i under jit"),
    ("getitem_dynamic", "*", "error"): ("semantics", "x[i] with a traced 0-d integer i"),
    ("setitem_dynamic", "*", "error"): ("semantics", "y[i] = v with a traced 0-d integer i"),
    ("norm", "*", "thunderx-wrong"): (
        "semantics",
        "jvp of vector_norm of an empty vector: nan, torch 0 (the zero-vector case)",
    ),
    ("<with narrow_dynamic>", "*", "forward"): ("declare", _VIEW),
    ("cosine_similarity", "*", "kink"): (
        "semantics",
        "cosine_similarity's Hessian with a zero vector: nan, torch 0",
    ),
    ("normalize", "*", "kink"): (
        "semantics",
        "F.normalize's Hessian at a zero vector: nan, torch 0",
    ),
    ("elu", "*", "thunderx-wrong"): ("semantics", _OVERFLOW),
    ("selu", "*", "thunderx-wrong"): ("semantics", _OVERFLOW),
    ("<with norm>", "*", "thunderx-wrong"): (
        "semantics",
        "vector_norm over an empty dim: its tangent 0 / 0 = nan reaches later steps",
    ),
    ("logsumexp", "*", "error"): (
        "lead",
        "logsumexp over an empty dim: internal IndexError from "
        "amax (issue: the primal runs without DCE)",
    ),
    ("smooth_l1_loss", "*", "unresolved"): (
        "lead",
        "smooth_l1_loss at a nan input: derivative nan, torch 0",
    ),
    ("maximum", "*", "unresolved"): (
        "semantics",
        "maximum with a nan operand: torch gives the "
        "whole gradient to one side, thunderx splits it",
    ),
    ("<with div_raw>", "*", "unresolved"): (
        "lead",
        "x / 0 inside a composition: gradient nan, torch inf",
    ),
    ("<with log10>", "*", "forward"): (
        "lead",
        "log10 is log(x) * (1 / ln 10): one ulp off torch.log10 (log10(0.1) = "
        "-0.9999999999999998), which a later ceil/floor turns into a different value",
    ),
    ("relu", "*", "forward"): (
        "semantics",
        "relu(nan) is 0, torch nan: select(x > 0, x, 0) drops the nan",
    ),
    ("relu", "*", "unresolved"): ("semantics", "relu's tangent at nan: 0, torch nan"),
    ("hardsigmoid", "*", "unresolved"): ("semantics", "hardsigmoid's tangent at nan: nan, torch 0"),
    ("huber_loss", "*", "kink"): ("semantics", "huber_loss's Hessian where |d| == delta"),
    ("<with max_dim>", "*", "thunderx-wrong"): (
        "semantics",
        "max(dim)'s jvp multiplies unselected entries' tangents by 0: a nan tangent there "
        "gives nan, torch selects (the issue's min(1/x) example)",
    ),
    **{
        (f"<with {op}>", "*", "unresolved"): (
            "lead",
            f"{op}'s derivative is a symbolic zero, so 0 * nan upstream stays 0 (as in JAX); "
            "torch multiplies explicit zeros and gets nan. Decide and document",
        )
        for op in ("ceil", "floor", "round", "trunc")
    },
    ("conv1d", "*", "error"): ("lead", "conv1d with 0 input channels: internal shape error"),
    ("<with conv1d>", "*", "error"): ("lead", "conv1d with 0 input channels: internal shape error"),
    ("div_raw", "*", "unresolved"): ("lead", "x / 0 under jvp: thunderx nan, torch inf"),
    ("var", "*", "thunderx-wrong"): ("lead", "jvp of var over no elements: nan, torch 0"),
    ("var", "*", "unresolved"): ("lead", "Hessian of var of one element (dof 0): nan, torch 0"),
    ("conv2d", "*", "error"): ("lead", "conv2d with 0 input channels: internal shape error"),
    ("sdpa", "*", "error"): (
        "lead",
        "scaled_dot_product_attention with head dim 0: ZeroDivisionError",
    ),
}
# (op, check, category) -> (edge, seed, check): make_case(OPS[op], edge, Random(seed)) through
# that check (with Ctx seed `seed`) shows the failure (found by `find_reproducer`); for a
# "<with OP>" entry (edge, seed, check, chain of ops): `reproduce_program` shows it.
KNOWN_REPROS: dict[tuple[str, str, str], tuple] = {
    ("relu", "*", "forward"): ("one", 2, "vmap", ("std", "relu")),
    ("relu", "*", "unresolved"): ("one", 2, "jvp", ("std", "relu")),
    ("hardsigmoid", "*", "unresolved"): ("empty", 2, "jvp", ("mean", "asinh", "hardsigmoid")),
    ("huber_loss", "*", "kink"): ("zero", 0, "hessian", ("log2", "selu", "hardtanh", "huber_loss")),
    ("<with max_dim>", "*", "thunderx-wrong"): ("zero", 0, "jvp", ("hypot", "max_dim")),
    **{
        (f"<with {op}>", "*", "unresolved"): ("empty", 0, "grad", ("l1_loss", "mul", op))
        for op in ("ceil", "floor", "round", "trunc")
    },
    ("conv1d", "*", "error"): ("empty", 0, "grad"),
    ("<with conv1d>", "*", "error"): ("empty", 1, "jit", ("conv1d", "erfc", "softmax")),
    ("maximum", "*", "unresolved"): ("empty", 0, "grad", ("huber_loss", "maximum")),
    ("<with div_raw>", "*", "unresolved"): ("tie", 0, "grad", ("logsigmoid", "div", "div_raw")),
    ("<with log10>", "*", "forward"): ("scalar", 0, "vmap", ("relu", "tan", "log10", "ceil")),
    ("cosine_similarity", "*", "kink"): ("tie", 0, "hessian"),
    ("normalize", "*", "kink"): ("tie", 2, "hessian"),
    ("elu", "*", "thunderx-wrong"): ("big", 0, "grad", ("cosh", "elu")),
    ("selu", "*", "thunderx-wrong"): ("big", 0, "grad", ("cosh", "selu")),
    ("<with norm>", "*", "thunderx-wrong"): ("empty", 4, "jacfwd", ("norm", "min_dim", "fmin")),
    ("logsumexp", "*", "error"): ("empty", 0, "jit"),
    ("smooth_l1_loss", "*", "unresolved"): (
        "scalar",
        0,
        "jacrev",
        ("mse_loss", "std", "smooth_l1_loss"),
    ),
    ("norm", "*", "thunderx-wrong"): ("empty", 0, "jvp"),
    ("<with narrow_dynamic>", "*", "forward"): ("normal", 0, "jit", ("narrow_dynamic", "exp")),
    ("atan2", "*", "kink"): ("zero", 5, "grad"),
    ("atan2", "*", "unresolved"): ("zero", 5, "hessian"),
    ("bce_with_logits", "*", "thunderx-wrong"): ("tie", 0, "hessian"),
    ("celu", "*", "kink"): ("zero", 0, "hessian"),
    ("clamp_tensor", "*", "kink"): ("zero", 5, "jvp"),
    ("conv2d", "*", "error"): ("empty", 2, "grad"),
    ("cosine_similarity", "*", "unresolved"): ("zero", 1, "grad"),
    ("div_raw", "*", "unresolved"): ("tie", 1, "hessian"),
    ("elu", "*", "kink"): ("zero", 0, "hessian"),
    ("fmax", "*", "kink"): ("tie", 0, "grad"),
    ("fmin", "*", "kink"): ("tie", 0, "grad"),
    ("gather", "*", "error"): ("one", 0, "jit"),
    ("getitem_dynamic", "*", "error"): ("tie", 0, "jit"),
    ("huber_loss", "*", "thunderx-wrong"): ("zero", 0, "hessian"),
    ("layer_norm", "*", "kink"): ("big", 0, "hessian"),
    ("logaddexp", "*", "thunderx-wrong"): ("zero", 5, "hessian"),
    ("logsigmoid", "*", "thunderx-wrong"): ("zero", 0, "hessian"),
    ("max_dim", "*", "kink"): ("zero", 1, "grad"),
    ("max_pool2d", "*", "kink"): ("zero", 0, "grad"),
    ("min_dim", "*", "kink"): ("tie", 0, "jit(vmap(grad))"),
    ("norm", "*", "kink"): ("zero", 5, "grad"),
    ("norm", "*", "unresolved"): ("zero", 5, "hessian"),
    ("normalize", "*", "unresolved"): ("tie", 2, "jit(vmap(grad))"),
    ("prod", "*", "thunderx-wrong"): ("zero", 0, "hessian"),
    ("relu6", "*", "kink"): ("zero", 0, "grad"),
    ("sdpa", "*", "error"): ("empty", 0, "grad"),
    ("selu", "*", "kink"): ("tie", 0, "hessian"),
    ("setitem_dynamic", "*", "error"): ("zero", 0, "jit"),
    ("smooth_l1_loss", "*", "thunderx-wrong"): ("zero", 0, "hessian"),
    ("softplus", "*", "thunderx-wrong"): ("zero", 0, "hessian"),
    ("std", "*", "kink"): ("big", 0, "grad"),
    ("std", "*", "unresolved"): ("big", 0, "hessian"),
    ("var", "*", "thunderx-wrong"): ("empty", 0, "jvp"),
    ("var", "*", "unresolved"): ("scalar", 0, "hessian"),
    ("xlogy", "*", "thunderx-wrong"): ("zero", 0, "grad"),
}
