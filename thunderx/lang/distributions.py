"""torch.distributions on traced values. The distributions are plain Python over torch functions,
so they trace as they are; two things need the language layer's help:

- argument and support validation (`torch._is_all_true`): lang/assertions.py runs it on known
  values and skips it where values are unknown while tracing;
- `broadcast_all`, which turns Python numbers among the parameters into tensors of the dtype and
  device of the first *torch.Tensor* among them. A tracer is tensor-like but not a torch.Tensor
  (torch.func's wrappers are), so `Normal(loc_tracer, 2.0)` would make `2.0` (and every value
  converted to `scale.dtype` later) a float32 tensor beside a float64 `loc`: a silent loss of
  precision. The version installed here takes the dtype and device from the first tensor-like
  value, tracers included, which is what torch does under torch.func; for torch tensors and numbers
  it is torch's own function."""

from __future__ import annotations

import numbers
import sys

import torch
import torch.distributions.utils as _utils

from thunderx.core import Tracer, get_aval

_torch_broadcast_all = _utils.broadcast_all


def broadcast_all(*values):
    """torch.distributions.utils.broadcast_all, with tracers counted as tensors.

    >>> import thunderx as tx
    >>> tx.jit(lambda m: torch.distributions.Normal(m, 2.0).scale.dtype == m.dtype)(
    ...     torch.zeros(3, dtype=torch.float64))
    True
    """
    first = next((v for v in values if isinstance(v, (Tracer, torch.Tensor))), None)
    kinds = [isinstance(v, (Tracer, torch.Tensor)) or isinstance(v, numbers.Number) for v in values]
    if not isinstance(first, Tracer) or not all(kinds):
        return _torch_broadcast_all(*values)  # torch's function, and its error for bad input
    a = get_aval(first)
    tensors = [
        torch.tensor(v, dtype=a.dtype, device=a.device) if isinstance(v, numbers.Number) else v
        for v in values
    ]
    return torch.broadcast_tensors(*tensors)


def _install() -> None:
    """Point every torch.distributions module that imported broadcast_all at the version above."""
    for name, module in list(sys.modules.items()):
        if (
            name.startswith("torch.distributions")
            and getattr(module, "broadcast_all", None) is _torch_broadcast_all
        ):
            module.broadcast_all = broadcast_all


_install()
