"""Property-based testing tools for derivatives and transforms.

>>> from thunderx.testing import check_grads
>>> check_grads(lambda x: torch.sin(x) * x, (torch.randn(3, dtype=torch.float64),), order=2)

Hypothesis strategies live in `thunderx.testing.strategies`; settings profiles `ci` (bounded)
and `thorough` are registered on import and chosen by THUNDERX_HYPOTHESIS_PROFILE (default: `ci`
when the CI variable is set, else `dev`).
"""

from thunderx.testing.checks import (  # noqa: F401
    check_grads,
    check_jit,
    check_transpose,
    check_vmap,
    numerical_jvp,
)
from thunderx.testing.profiles import load_profile  # noqa: F401
