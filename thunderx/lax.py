"""`thunderx.lax`: JAX's lax-level API for torch programs: control flow as traced primitives, and
collectives over named axes (implemented in `thunderx.collectives`).

>>> import thunderx.lax as lax
>>> lax.fori_loop(0, 3, lambda i, x: x * 2, torch.tensor(1.))
tensor(8.)
"""

from thunderx.assoc_scan import associative_scan  # noqa: F401  (re-exported API)
from thunderx.checkpointing import checkpoint, checkpoint_policies, remat  # noqa: F401
from thunderx.collectives import (  # noqa: F401  (re-exported API)
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
from thunderx.control_flow import (  # noqa: F401  (re-exported API)
    cond,
    fori_loop,
    map,
    scan,
    switch,
    while_loop,
)
from thunderx.implicit import custom_linear_solve, custom_root  # noqa: F401  (re-exported API)

__all__ = [
    "all_gather",
    "all_to_all",
    "associative_scan",
    "axis_index",
    "axis_size",
    "checkpoint",
    "checkpoint_policies",
    "cond",
    "custom_linear_solve",
    "custom_root",
    "fori_loop",
    "map",
    "pmax",
    "pmean",
    "pmin",
    "ppermute",
    "psum",
    "psum_scatter",
    "remat",
    "scan",
    "switch",
    "while_loop",
]
