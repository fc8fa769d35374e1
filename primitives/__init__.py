"""The primitive set, one module per family; every rule of a primitive sits beside it."""

from thunderx.primitives import (  # noqa: F401  (importing registers the primitives)
    binary,
    cond,
    conv,
    creation,
    custom,
    debug,
    higher_order,
    indexing,
    linalg,
    linalg_decomp,
    matrix_functions,
    pooling,
    reductions,
    remat,
    scan,
    shape,
    slicing,
    sort,
    unary,
    while_loop,
)
