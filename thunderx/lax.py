"""`thunderx.lax`: JAX's lax-level API for torch programs (control flow as traced primitives).

>>> import thunderx.lax as lax
>>> lax.fori_loop(0, 3, lambda i, x: x * 2, torch.tensor(1.))
tensor(8.)
"""

from thunderx.control_flow import (  # noqa: F401  (re-exported API)
    checkpoint,
    checkpoint_policies,
    cond,
    fori_loop,
    map,
    remat,
    scan,
    switch,
    while_loop,
)

__all__ = [
    "checkpoint",
    "checkpoint_policies",
    "cond",
    "fori_loop",
    "map",
    "remat",
    "scan",
    "switch",
    "while_loop",
]
