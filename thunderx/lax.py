"""`thunderx.lax`: JAX's lax-level functions. Collectives over named axes live in
`thunderx.collectives` and are re-exported here."""

from thunderx.collectives import (  # noqa: F401
    all_gather,
    all_to_all,
    axis_index,
    axis_size,
    pmax,
    pmean,
    pmin,
    ppermute,
    psum,
    psum_scatter,
)
