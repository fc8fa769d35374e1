"""The primitive set, one module per family; every rule of a primitive sits beside it."""

from thunderx.primitives import (  # noqa: F401  (importing registers the primitives)
    binary,
    collectives,
    conv,
    creation,
    custom,
    debug,
    higher_order,
    indexing,
    linalg,
    reductions,
    shape,
    slicing,
    unary,
)
