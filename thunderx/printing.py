"""JAX-style text printing of jaxprs."""

from __future__ import annotations

import torch

from thunderx.avals import short_dtype
from thunderx.ir import ClosedJaxpr, Jaxpr, Literal


def _names():
    letters = "abcdefghijklmnopqrstuvwxyz"
    n = 0
    while True:
        s, k = "", n
        while True:
            s = letters[k % 26] + s
            k = k // 26 - 1
            if k < 0:
                break
        yield s
        n += 1


class Namer:
    def __init__(self):
        self.names: dict[int, str] = {}
        self.gen = _names()

    def __call__(self, v) -> str:
        if isinstance(v, Literal):
            return self.literal(v.val)
        key = id(v)
        name = self.names.get(key)
        if name is None:
            name = next(self.gen)
            while not self.usable(name):
                name = next(self.gen)
            self.names[key] = name
        return name

    def literal(self, val) -> str:
        return repr(val)

    def usable(self, name: str) -> bool:
        return True

    def typed(self, v) -> str:
        return f"{self(v)}:{v.aval.str_short()}"


def format_param(value, indent: int, namer: Namer) -> str:
    if isinstance(value, ClosedJaxpr):
        value = value.jaxpr
    if isinstance(value, Jaxpr):
        return pp_jaxpr(value, indent=indent + 4, namer=Namer())
    if isinstance(value, tuple) and value and all(isinstance(v, Jaxpr) for v in value):
        # the branches of a cond: each nested jaxpr on its own lines
        pad = " " * (indent + 4)
        inner = ("\n" + pad).join(pp_jaxpr(v, indent=indent + 4, namer=Namer()) for v in value)
        return f"(\n{pad}{inner}\n{pad})"
    if isinstance(value, torch.dtype):
        return short_dtype(value)
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, torch._ops.OpOverload):
        return str(value)  # with its namespace: aten.sin.default, mylib.op.default
    if callable(value):
        return getattr(value, "__name__", type(value).__name__)
    return repr(value)


def format_params(params: dict, indent: int, namer: Namer) -> str:
    shown = {k: v for k, v in params.items() if not k.startswith("_")}
    if not shown:
        return ""
    inner = " ".join(f"{k}={format_param(v, indent, namer)}" for k, v in shown.items())
    return f"[{inner}]"


def pp_eqn(eqn, namer: Namer, indent: int) -> str:
    lhs = " ".join(namer.typed(v) for v in eqn.outputs)
    rhs = " ".join(namer(x) for x in eqn.inputs)
    params = format_params(eqn.params, indent, namer)
    rhs = f"{eqn.prim.name}{params} {rhs}".rstrip()
    return f"{lhs} = {rhs}" if lhs else rhs


def pp_jaxpr(jaxpr, indent: int = 0, namer: Namer | None = None) -> str:
    namer = namer or Namer()
    pad = " " * indent
    consts = " ".join(namer.typed(v) for v in jaxpr.constvars)
    ins = " ".join(namer.typed(v) for v in jaxpr.invars)
    lines = [f"{{ lambda {consts}{' ' if consts else ''}; {ins}. let"]
    for eqn in jaxpr.eqns:
        lines.append(pad + "    " + pp_eqn(eqn, namer, indent))
    outs = ", ".join(namer(v) for v in jaxpr.outvars)
    comma = "," if len(jaxpr.outvars) == 1 else ""
    lines.append(pad + f"  in ({outs}{comma}) }}")
    return "\n".join(lines)


def _jaxpr_str(self) -> str:
    return pp_jaxpr(self)


def pp_closed_jaxpr(closed: ClosedJaxpr) -> str:
    """The jaxpr, then a line naming the captured tensors (or arguments) its trailing outputs
    are written back into after each run (`writes back: a <- e` copies e into a)."""
    if not closed.writes:
        return pp_jaxpr(closed.jaxpr)
    namer = Namer()
    text = pp_jaxpr(closed.jaxpr, namer=namer)
    jaxpr, n = closed.jaxpr, len(closed.writes)
    operands = jaxpr.constvars + jaxpr.invars
    pairs = [
        f"{namer(operands[i])} <- {namer(v)}"
        for (i, _), v in zip(closed.writes, jaxpr.outvars[len(jaxpr.outvars) - n :])
    ]
    return text + "\n  writes back: " + ", ".join(pairs)


Jaxpr.__str__ = Jaxpr.__repr__ = _jaxpr_str
ClosedJaxpr.__str__ = ClosedJaxpr.__repr__ = pp_closed_jaxpr
