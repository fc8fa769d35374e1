"""thunderx: JAX's composable function transforms for PyTorch code.

>>> import torch, thunderx
>>> f = lambda x: torch.sin(x).sum()
>>> thunderx.grad(f)(torch.zeros(3))
tensor([1., 1., 1.])
"""

from __future__ import annotations

from thunderx import (  # noqa: F401
    errors,
    lax,  # noqa: F401
    tree,
)
from thunderx import lang as _lang  # noqa: F401  (installs the language layer)
from thunderx import primitives as _primitives  # noqa: F401  (registers the primitive set)
from thunderx.api import functional_call, make_jaxpr
from thunderx.control_flow import checkpoint, checkpoint_policies, remat
from thunderx.control_flow import install_torch_control_flow as _install_cf
from thunderx.explain import explain
from thunderx.ir import ClosedJaxpr, Jaxpr, eval_jaxpr
from thunderx.primitives.higher_order import stop_gradient
from thunderx.transforms.ad import (
    grad,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    linearize,
    value_and_grad,
    vjp,
)
from thunderx.transforms.custom import custom_jvp, custom_vjp
from thunderx.transforms.jit import jit
from thunderx.transforms.vmap import vmap

_install_cf()

__version__ = "0.1.0"

__all__ = [
    "ClosedJaxpr",
    "Jaxpr",
    "checkpoint",
    "checkpoint_policies",
    "lax",
    "remat",
    "custom_jvp",
    "custom_vjp",
    "errors",
    "explain",
    "eval_jaxpr",
    "functional_call",
    "grad",
    "hessian",
    "jacfwd",
    "jacrev",
    "jit",
    "jvp",
    "linearize",
    "make_jaxpr",
    "stop_gradient",
    "tree",
    "value_and_grad",
    "vjp",
    "vmap",
]
