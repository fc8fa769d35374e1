"""thunderx: JAX's composable function transforms for PyTorch code.

>>> import torch, thunderx
>>> f = lambda x: torch.sin(x).sum()
>>> thunderx.grad(f)(torch.zeros(3))
tensor([1., 1., 1.])
"""

from __future__ import annotations

from thunderx import debug, errors, func, lax, tree  # noqa: F401
from thunderx import html as _html  # noqa: F401  (attaches _repr_html_ to the IR and programs)
from thunderx import lang as _lang  # noqa: F401  (installs the language layer)
from thunderx import primitives as _primitives  # noqa: F401  (registers the primitive set)
from thunderx import printing as _printing  # noqa: F401  (attaches the IR's text form)
from thunderx.api import functional_call, make_jaxpr, stack_module_state
from thunderx.checkpointing import checkpoint, checkpoint_policies, remat
from thunderx.config import disable_jit
from thunderx.control_flow import install_torch_control_flow as _install_cf
from thunderx.explain import explain
from thunderx.host_callback import pure_callback
from thunderx.ir import ClosedJaxpr, Jaxpr, eval_jaxpr
from thunderx.primitives.higher_order import checkpoint_name, stop_gradient
from thunderx.shapes import ShapeDtypeStruct, eval_shape
from thunderx.shard_map import P, shard_map
from thunderx.transforms.ad import grad, jvp, linearize, value_and_grad, vjp
from thunderx.transforms.closure import closure_convert
from thunderx.transforms.custom import custom_jvp, custom_vjp
from thunderx.transforms.custom_batching import custom_vmap
from thunderx.transforms.jacobians import hessian, jacfwd, jacrev
from thunderx.transforms.jit import jit
from thunderx.transforms.linear_transpose import linear_transpose
from thunderx.transforms.opaque import opaque_to_dynamo as _opaque
from thunderx.transforms.vmap import vmap

_install_cf()

# torch.compile calls the transforms (and the functions they return) as black boxes: traced by
# TorchDynamo, thunderx's own machinery gave wrong values (transforms/opaque.py)
grad, value_and_grad, jvp, vjp, linearize = map(
    _opaque, (grad, value_and_grad, jvp, vjp, linearize)
)
jacfwd, jacrev, hessian, vmap = map(_opaque, (jacfwd, jacrev, hessian, vmap))
for _name in ("grad_and_value", "grad", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian"):
    setattr(func, _name, _opaque(getattr(func, _name)))
func.vmap = _opaque(func.vmap)

# torch.func's transforms inside thunderx's run as thunderx.func's (thunderx/torch_func.py)
from thunderx import torch_func as _torch_func  # noqa: E402

_torch_func.install()

__version__ = "0.1.0"

__all__ = [
    "ClosedJaxpr",
    "Jaxpr",
    "P",
    "ShapeDtypeStruct",
    "checkpoint",
    "checkpoint_name",
    "checkpoint_policies",
    "lax",
    "remat",
    "closure_convert",
    "custom_jvp",
    "custom_vjp",
    "custom_vmap",
    "debug",
    "disable_jit",
    "errors",
    "eval_jaxpr",
    "eval_shape",
    "explain",
    "func",
    "functional_call",
    "grad",
    "hessian",
    "jacfwd",
    "jacrev",
    "jit",
    "jvp",
    "lax",
    "linear_transpose",
    "linearize",
    "make_jaxpr",
    "pure_callback",
    "shard_map",
    "stack_module_state",
    "stop_gradient",
    "tree",
    "value_and_grad",
    "vjp",
    "vmap",
]
