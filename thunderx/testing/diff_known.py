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
    ("atan2", "*", "kink"): (
        "semantics",
        "atan2(0, 0) in forward mode: thunderx 0, torch's forward AD nan (reverse mode agrees)",
    ),
    ("fmax", "*", "kink"): (
        "semantics",
        "fmax(x, y) with x == y in forward mode (jvp, jacfwd): thunderx takes x's tangent, "
        "torch's forward AD takes y's (reverse mode agrees with torch)",
    ),
    ("cosine_similarity", "*", "kink"): (
        "semantics",
        "cosine_similarity's Hessian at a zero vector (eps clamp): thunderx twice torch's value",
    ),
    ("clamp_tensor", "*", "kink"): ("semantics", "clamp(x, min=y) with x == y: " + _TIE),
    ("layer_norm", "*", "kink"): ("semantics", "layer_norm of a constant row (variance 0)"),
    ("logaddexp", "*", "thunderx-wrong"): ("semantics", "logaddexp(x, x): " + _SECOND),
    ("huber_loss", "*", "thunderx-wrong"): ("semantics", "huber_loss at 0: " + _SECOND),
    ("smooth_l1_loss", "*", "thunderx-wrong"): ("semantics", "smooth_l1_loss at 0: " + _SECOND),
    ("elu", "*", "thunderx-wrong"): ("semantics", _OVERFLOW),
    ("selu", "*", "thunderx-wrong"): ("semantics", _OVERFLOW),
    ("smooth_l1_loss", "*", "unresolved"): (
        "lead",
        "smooth_l1_loss at a nan input: derivative nan, torch 0",
    ),
    ("maximum", "*", "unresolved"): (
        "semantics",
        "maximum with a nan operand: torch gives the "
        "whole gradient to one side, thunderx splits it",
    ),
    ("<with log10>", "*", "forward"): (
        "lead",
        "log10 is log(x) * (1 / ln 10): one ulp off torch.log10 (log10(0.1) = "
        "-0.9999999999999998), which a later ceil/floor turns into a different value",
    ),
    ("hardsigmoid", "*", "unresolved"): ("semantics", "hardsigmoid's tangent at nan: nan, torch 0"),
    ("huber_loss", "*", "kink"): ("semantics", "huber_loss's Hessian where |d| == delta"),
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
    ("atan2", "*", "kink"): ("zero", 5, "jvp"),
    ("fmax", "*", "kink"): ("tie", 0, "jvp"),
    ("cosine_similarity", "*", "kink"): ("zero", 4, "hessian"),
    ("hardsigmoid", "*", "unresolved"): ("empty", 2, "jvp", ("mean", "asinh", "hardsigmoid")),
    ("huber_loss", "*", "kink"): ("zero", 0, "hessian", ("log2", "selu", "hardtanh", "huber_loss")),
    **{
        (f"<with {op}>", "*", "unresolved"): ("empty", 0, "grad", ("l1_loss", "mul", op))
        for op in ("ceil", "floor", "round", "trunc")
    },
    ("conv1d", "*", "error"): ("empty", 0, "grad"),
    ("<with conv1d>", "*", "error"): ("empty", 1, "jit", ("conv1d", "erfc", "logsumexp")),
    ("maximum", "*", "unresolved"): ("empty", 0, "grad", ("huber_loss", "maximum")),
    ("<with log10>", "*", "forward"): ("scalar", 0, "vmap", ("relu", "tan", "log10", "ceil")),
    ("elu", "*", "thunderx-wrong"): ("big", 0, "grad", ("cosh", "elu")),
    ("selu", "*", "thunderx-wrong"): ("big", 0, "grad", ("cosh", "selu")),
    ("smooth_l1_loss", "*", "unresolved"): (
        "scalar",
        0,
        "jacrev",
        ("mse_loss", "std", "smooth_l1_loss"),
    ),
    ("clamp_tensor", "*", "kink"): ("zero", 5, "jvp"),
    ("conv2d", "*", "error"): ("empty", 2, "grad"),
    ("div_raw", "*", "unresolved"): ("tie", 1, "hessian"),
    ("huber_loss", "*", "thunderx-wrong"): ("zero", 0, "hessian"),
    ("layer_norm", "*", "kink"): ("big", 0, "hessian"),
    ("logaddexp", "*", "thunderx-wrong"): ("zero", 5, "hessian"),
    ("sdpa", "*", "error"): ("empty", 0, "grad"),
    ("smooth_l1_loss", "*", "thunderx-wrong"): ("zero", 0, "hessian"),
    ("var", "*", "thunderx-wrong"): ("empty", 0, "jvp"),
    ("var", "*", "unresolved"): ("scalar", 0, "hessian"),
}
