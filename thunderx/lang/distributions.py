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
  it is torch's own function;
- `_standard_normal` (the noise of Normal/MultivariateNormal/StudentT rsample) draws with
  `torch.empty(shape).normal_()`, an in-place draw into a tensor created outside the traced values,
  which jit and vmap cannot write a staged or batched draw into. Under those transforms the
  version installed here takes torch's own torch.jit workaround, `torch.normal(zeros, ones)`, an
  out-of-place draw that follows jit's fresh draws and vmap's randomness rules."""

from __future__ import annotations

import numbers
import sys

import torch
import torch.distributions.utils as _utils

from thunderx.core import Tracer, get_aval

_torch_broadcast_all = _utils.broadcast_all
_torch_standard_normal = _utils._standard_normal


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


def standard_normal(shape, dtype, device):
    """torch.distributions.utils._standard_normal, out of place under jit and vmap."""
    from thunderx.lang.random_inplace import _transformed

    if not _transformed():
        return _torch_standard_normal(shape, dtype, device)
    return torch.normal(
        torch.zeros(shape, dtype=dtype, device=device),
        torch.ones(shape, dtype=dtype, device=device),
    )


def _install() -> None:
    """Point every torch.distributions module that imported broadcast_all or _standard_normal
    at the versions above."""
    replaced = {"broadcast_all": (_torch_broadcast_all, broadcast_all)}
    replaced["_standard_normal"] = (_torch_standard_normal, standard_normal)
    for name, module in list(sys.modules.items()):
        if not name.startswith("torch.distributions"):
            continue
        for attr, (theirs, ours) in replaced.items():
            if getattr(module, attr, None) is theirs:
                setattr(module, attr, ours)


_install()
