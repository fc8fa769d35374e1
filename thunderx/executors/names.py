"""Names in generated torch source: each value's identifier (never a keyword, a namespace
entry or an underscore name), literals that read back as the same value, and the call of a
primitive's implementation with its params where it has no codegen rule of its own."""

from __future__ import annotations

import keyword
import math

import torch

from thunderx.core import impl_rules, missing_rule
from thunderx.printing import Namer

_RESERVED = {"torch", "math", "inf", "nan", "device"}


class _Namer(Namer):
    """Identifiers of generated Python: never a keyword, a namespace entry or an underscore
    name (the namespace's own helpers start with one)."""

    def literal(self, val) -> str:
        return literal(val)

    def usable(self, name: str) -> bool:
        return not (keyword.iskeyword(name) or name in _RESERVED or name.startswith("_"))


def literal(val) -> str:
    if isinstance(val, float):
        if math.isnan(val):
            return "nan"
        if math.isinf(val):
            return "inf" if val > 0 else "-inf"
    if isinstance(val, complex):  # repr gives "(nan+infj)" for non-finite parts
        return f"complex({literal(val.real)}, {literal(val.imag)})"
    return repr(val)


def default_codegen(prim, args, params, namespace) -> str:
    fn_name = f"_impl_{prim.name}"
    if fn_name not in namespace:
        if prim not in impl_rules:
            raise missing_rule(prim, "torch codegen")
        namespace[fn_name] = impl_rules[prim]
    parts = list(args) + [f"{k}={param_src(v, namespace)}" for k, v in params.items()]
    return f"{fn_name}({', '.join(parts)})"


def param_src(v, namespace) -> str:
    if isinstance(v, (int, float, bool, str, type(None))):
        return literal(v)
    if isinstance(v, (tuple, list)):
        inner = ", ".join(param_src(x, namespace) for x in v)
        if isinstance(v, tuple):
            return f"({inner},)" if v else "()"
        return f"[{inner}]"
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, torch.device):
        return f"device({str(v)!r})"
    name = f"_param_{len(namespace)}"
    namespace[name] = v
    return name


def new_namer() -> _Namer:
    """Names for generated source: valid identifiers, never a keyword or a namespace entry."""
    return _Namer()
