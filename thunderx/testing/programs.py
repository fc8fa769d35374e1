"""Random well-typed torch programs for differential testing of every transform.

A program is a list of steps over a growing pool of values (the inputs first); each step calls
torch on earlier values and appends the result. `run_program(prog, *inputs)` is an ordinary torch
function, so eager torch, thunderx's transforms and torch.func can all run it. Values stay in
smooth, bounded ranges (tanh, sin, softplus, ...), so finite differences are meaningful.

>>> @given(random_programs())
... def test(prog): check_grads(lambda *xs: run_program(prog, *xs).sum(), prog.example_inputs())
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

UNARY = {
    "sin": torch.sin,
    "cos": torch.cos,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "softplus": F.softplus,
    "square": lambda x: x * x,
    "log1p_sq": lambda x: torch.log1p(x * x),
    "sqrt_sq1": lambda x: torch.sqrt(x * x + 1),
    "erf": torch.erf,
    "gelu": F.gelu,
    "neg": torch.neg,
    "exp_tanh": lambda x: torch.exp(torch.tanh(x)),
    "silu": F.silu,
}
BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": lambda x, y: x / (1 + y * y),
    "maximum": torch.maximum,
    "atan2": lambda x, y: torch.atan2(x, y * y + 1),
    "hypot": lambda x, y: torch.hypot(x, y + 2),
}
REDUCE = {
    "sum": lambda x, d, k: x.sum(d, keepdim=k),
    "mean": lambda x, d, k: x.mean(d, keepdim=k),
    "amax": lambda x, d, k: x.amax(d, keepdim=k),
    "logsumexp": lambda x, d, k: torch.logsumexp(x, d, keepdim=k),
}


@dataclasses.dataclass
class Program:
    in_shapes: list
    steps: list  # (kind, name, arg indices, params)
    seed: int

    def example_inputs(self, dtype=torch.float64, batch: int | None = None):
        g = torch.Generator().manual_seed(self.seed)
        lead = (batch,) if batch else ()
        return [torch.randn(lead + s, generator=g, dtype=dtype) for s in self.in_shapes]

    def __repr__(self) -> str:
        lines = [f"Program(inputs={self.in_shapes}, seed={self.seed})"]
        for i, (_kind, name, args, params) in enumerate(self.steps):
            lines.append(
                f"  v{len(self.in_shapes) + i} = {name}({', '.join(f'v{a}' for a in args)}"
                f"{', ' if params else ''}{', '.join(f'{k}={v}' for k, v in params.items())})"
            )
        return "\n".join(lines)


def run_program(prog: Program, *inputs):
    vals = list(inputs)
    for kind, name, args, params in prog.steps:
        xs = [vals[a] for a in args]
        if kind == "unary":
            out = UNARY[name](xs[0])
        elif kind == "binary":
            out = BINARY[name](xs[0], xs[1])
        elif kind == "reduce":
            out = REDUCE[name](xs[0], params["dim"], params["keepdim"])
        elif kind == "softmax":
            out = torch.softmax(xs[0], params["dim"])
        elif kind == "transpose":
            out = xs[0].transpose(params["a"], params["b"])
        elif kind == "reshape":
            out = xs[0].reshape(params["shape"])
        elif kind == "slice":
            out = xs[0].narrow(params["dim"], params["start"], params["length"])
        elif kind == "flip":
            out = xs[0].flip(params["dim"])
        elif kind == "matmul":
            out = xs[0] @ xs[1]
        elif kind == "cat":
            out = torch.cat([xs[0], xs[1]], params["dim"])
        elif kind == "unsqueeze_expand":
            out = xs[0].unsqueeze(params["dim"]).expand(*params["shape"])
        else:
            raise ValueError(kind)
        vals.append(out)
    return vals[-1]


def _shape_after(kind, name, shapes, params):
    s = shapes[0]
    if kind in ("unary", "softmax", "flip"):
        return s
    if kind == "binary":
        return tuple(torch.broadcast_shapes(shapes[0], shapes[1]))
    if kind == "reduce":
        d = params["dim"] % len(s)
        return s[:d] + ((1,) if params["keepdim"] else ()) + s[d + 1 :]
    if kind == "transpose":
        out = list(s)
        out[params["a"]], out[params["b"]] = out[params["b"]], out[params["a"]]
        return tuple(out)
    if kind == "reshape":
        return tuple(params["shape"])
    if kind == "slice":
        out = list(s)
        out[params["dim"]] = params["length"]
        return tuple(out)
    if kind == "matmul":
        return s[:-1] + shapes[1][-1:]
    if kind == "cat":
        out = list(s)
        out[params["dim"]] += shapes[1][params["dim"]]
        return tuple(out)
    if kind == "unsqueeze_expand":
        return tuple(params["shape"])
    raise ValueError(kind)


@st.composite
def random_programs(draw, max_steps: int = 8, max_rank: int = 3, max_side: int = 4):
    """A random well-typed program of 1..max_steps steps over two inputs."""
    rank = draw(st.integers(1, max_rank))
    base = tuple(draw(st.integers(2, max_side)) for _ in range(rank))
    other = base[draw(st.integers(0, rank - 1)) :]  # a suffix: broadcasts against base
    shapes = [base, other]
    steps = []
    for _ in range(draw(st.integers(1, max_steps))):
        i = draw(st.integers(0, len(shapes) - 1))
        s = shapes[i]
        kinds = ["unary", "unary", "binary", "binary"]
        if len(s) >= 1:
            kinds += ["reduce", "softmax", "flip", "slice", "cat"]
        if len(s) >= 2:
            kinds += ["transpose", "reshape", "matmul"]
        if len(s) < 3:
            kinds.append("unsqueeze_expand")
        kind = draw(st.sampled_from(kinds))
        params, args = {}, [i]
        name = kind
        if kind == "unary":
            name = draw(st.sampled_from(sorted(UNARY)))
        elif kind == "binary":
            partners = [j for j, t in enumerate(shapes) if _broadcasts(s, t)]
            args.append(draw(st.sampled_from(partners)))
            name = draw(st.sampled_from(sorted(BINARY)))
        elif kind == "reduce":
            name = draw(st.sampled_from(sorted(REDUCE)))
            params = {"dim": draw(st.integers(-len(s), len(s) - 1)), "keepdim": draw(st.booleans())}
            if len(s) == 1 and not params["keepdim"]:
                params["keepdim"] = True  # keep values tensors of rank >= 1
        elif kind in ("softmax", "flip"):
            params = {"dim": draw(st.integers(0, len(s) - 1))}
        elif kind == "slice":
            d = draw(st.integers(0, len(s) - 1))
            start = draw(st.integers(0, s[d] - 1))
            params = {"dim": d, "start": start, "length": draw(st.integers(1, s[d] - start))}
        elif kind == "transpose":
            params = {"a": draw(st.integers(0, len(s) - 1)), "b": draw(st.integers(0, len(s) - 1))}
        elif kind == "reshape":
            n = 1
            for v in s:
                n *= v
            params = {"shape": draw(st.sampled_from([(n,), tuple(reversed(s)), (s[0], n // s[0])]))}
        elif kind == "matmul":
            k = s[-1]
            partners = [j for j, t in enumerate(shapes) if len(t) == 2 and t[0] == k]
            if not partners:
                shapes.append(s)
                steps.append(("unary", "tanh", [i], {}))
                continue
            args.append(draw(st.sampled_from(partners)))
        elif kind == "cat":
            d = draw(st.integers(0, len(s) - 1))
            partners = [
                j
                for j, t in enumerate(shapes)
                if len(t) == len(s) and all(a == b for q, (a, b) in enumerate(zip(s, t)) if q != d)
            ]
            args.append(draw(st.sampled_from(partners)))
            params = {"dim": d}
        elif kind == "unsqueeze_expand":
            d = draw(st.integers(0, len(s)))
            out = list(s)
            out.insert(d, draw(st.integers(1, 3)))
            params = {"dim": d, "shape": tuple(out)}
        new = _shape_after(kind, name, [shapes[a] for a in args], params)
        steps.append((kind, name, args, params))
        shapes.append(new)
    return Program([base, other], steps, draw(st.integers(0, 2**31 - 1)))


def _broadcasts(a, b) -> bool:
    try:
        torch.broadcast_shapes(a, b)
        return True
    except RuntimeError:
        return False
