"""Random well-typed torch programs for differential testing of every transform.

A program is a list of steps over a growing pool of values (the inputs first); each step calls
torch on earlier values and appends the result. `run_program(prog, *inputs)` is an ordinary torch
function, so eager torch, thunderx's transforms and torch.func can all run it. Values stay in
smooth, bounded ranges (tanh, sin, softplus, ...), so finite differences are meaningful.

Every primitive is reached by some step (directly, or through the derivative or batching rules
the transforms apply to it), or is listed in NOT_GENERATED with the reason; the steps include
views of intermediates that die afterwards and chains of in-place updates, where the torch
executor reuses buffers. `single_step_programs()` lists one program per step variant.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from thunderx.testing.program_composites import ACTIVATION_STEPS, NORM_STEPS
from thunderx.testing.programs_not_generated import NOT_GENERATED  # noqa: F401 (re-exported)

_BESSEL = ("i0", "i0e", "i1", "i1e", "erfcx")
UNARY = {
    **NORM_STEPS,  # batch_norm, group_norm, instance_norm, layer_norm with its affine
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
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    # x * relu(x) is differentiable at 0 (relu alone has a kink there)
    "relu_mul": lambda x: torch.relu(x) * x,
    "threshold_mul": lambda x: F.threshold(x, 0.0, 0.0) * x,
    "neg": torch.neg,
    "exp_tanh": lambda x: torch.exp(torch.tanh(x)),
    **ACTIVATION_STEPS,  # silu, mish, hardswish, logsigmoid, selu, bce, lerp
    "relu": F.relu,
    **{n: (lambda f: lambda x: f(torch.tanh(x) * 3))(getattr(torch.special, n)) for n in _BESSEL},
    "ndtri": lambda x: torch.special.ndtri(torch.sigmoid(x) * 0.98 + 0.01),
    "abs_mul": lambda x: torch.abs(x) * x,
    "acos": lambda x: torch.acos(torch.tanh(x) * 0.9),
    "acosh": lambda x: torch.acosh(x * x + 1.5),
    "asin": lambda x: torch.asin(torch.tanh(x) * 0.9),
    "asinh": torch.asinh,
    "atan": torch.atan,
    "atanh": lambda x: torch.atanh(torch.tanh(x) * 0.9),
    "cosh_tanh": lambda x: torch.cosh(torch.tanh(x)),
    "sinh_tanh": lambda x: torch.sinh(torch.tanh(x)),
    "tan_tanh": lambda x: torch.tan(torch.tanh(x)),
    "expm1_tanh": lambda x: torch.expm1(torch.tanh(x)),
    "log_sq1": lambda x: torch.log(x * x + 1),
    "log2_sq1": lambda x: torch.log2(x * x + 1),
    "log10_sq1": lambda x: torch.log10(x * x + 1),
    "rsqrt_sq1": lambda x: torch.rsqrt(x * x + 1),
    "reciprocal_sq1": lambda x: torch.reciprocal(x * x + 1),
    "erfc": torch.erfc,
    "erfinv": lambda x: torch.erfinv(torch.tanh(x) * 0.9),
    "lgamma": lambda x: torch.lgamma(x * x + 1),
    "digamma": lambda x: torch.digamma(x * x + 1),
    "polygamma": lambda x: torch.polygamma(1, x * x + 1),
    # rounding ops: piecewise constant, so x * round(x) has derivative round(x) almost everywhere
    "floor_mul": lambda x: x * torch.floor(x),
    "ceil_mul": lambda x: x * torch.ceil(x),
    "round_mul": lambda x: x * torch.round(x),
    "trunc_mul": lambda x: x * torch.trunc(x),
    "sign_mul": lambda x: x * torch.sign(x),
    "where_finite": lambda x: torch.where(torch.isfinite(x), x, 0.0),
    "mask_mul": lambda x: (x > 0).to(x.dtype) * x,
    # a detached term that cancels: the value (and derivative) stay x's
    "detach_cancel": lambda x: x + (x.detach() - x.detach()) * x,
    "arange_mul": lambda x: x * torch.arange(x.shape[-1], dtype=x.dtype) if x.dim() else x,
    "ones_add": lambda x: x + torch.ones_like(x),
}
BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": lambda x, y: x / (1 + y * y),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "atan2": lambda x, y: torch.atan2(x, y * y + 1),
    "hypot": lambda x, y: torch.hypot(x, y + 2),
    "pow": lambda x, y: (x * x + 1) ** torch.tanh(y),
    "fmod": lambda x, y: torch.fmod(x, y * y + 1),
    "remainder": lambda x, y: torch.remainder(x, -(y * y + 1)),
    "where_lt": lambda x, y: torch.where(x < y, x, y),
    "where_le": lambda x, y: torch.where(x <= y, y, x),
    "where_ge": lambda x, y: torch.where(x >= y, x * y, y),
    "where_eq": lambda x, y: torch.where(x == y, x, y * x),
    "where_ne": lambda x, y: torch.where(x != y, x, y),
    "where_and": lambda x, y: torch.where((x > 0) & (y > 0), x, y),
    "where_or": lambda x, y: torch.where((x > 0) | (y < 0), x, y),
    "where_not": lambda x, y: torch.where(~(x > y), x, y),
    # integer bit patterns of the operands (piecewise constant) as a factor
    "bits_mul": lambda x, y: (
        x * (((x * 8).int() & 5) ^ ~(((y * 8).int() | 2) << 1) >> 2).to(x.dtype)
    ),
}
REDUCE = {
    "sum": lambda x, d, k: x.sum(d, keepdim=k),
    "mean": lambda x, d, k: x.mean(d, keepdim=k),
    "amax": lambda x, d, k: x.amax(d, keepdim=k),
    "amin": lambda x, d, k: x.amin(d, keepdim=k),
    "prod": lambda x, d, k: torch.tanh(x).prod(d, keepdim=k),
    "logsumexp": lambda x, d, k: torch.logsumexp(x, d, keepdim=k),
    "max_at_argmax": lambda x, d, k: _at_index(x, x.argmax(d, keepdim=True), d, k),
    "min_at_argmin": lambda x, d, k: _at_index(x, x.argmin(d, keepdim=True), d, k),
    "mode": lambda x, d, k: torch.round(x).mode(d, keepdim=k)[0],
    # shifted away from the zero vector, where the 2-norm is not differentiable
    "vector_norm": lambda x, d, k: torch.linalg.vector_norm(x + 3.0, 2, d, keepdim=k),
}
# Shape-preserving scans along a dimension
SCAN = {
    "cumsum": lambda x, d: x.cumsum(d),
    "cumprod": lambda x, d: torch.tanh(x).cumprod(d),
    "softmax": lambda x, d: torch.softmax(x, d),
    "log_softmax": lambda x, d: torch.log_softmax(x, d),
    "layer_norm": lambda x, d: F.layer_norm(x.movedim(d, -1), (x.shape[d],)).movedim(-1, d),
    # plus the summed negative log-likelihood of class 0 along d (nll_loss's kernel)
    "nll_add": lambda x, d: (
        x
        + F.nll_loss(
            x.movedim(d, -1).reshape(-1, x.shape[d]),
            torch.zeros(x.numel() // max(x.shape[d], 1), dtype=torch.int64),
            reduction="sum",
        )
    ),
    "cummax": lambda x, d: torch.cummax(x, d).values,
    "cummin": lambda x, d: torch.cummin(x, d).values,
    "logcumsumexp": lambda x, d: torch.logcumsumexp(x, d),
    "sort": lambda x, d: torch.sort(x, d).values,
    "topk_all": lambda x, d: torch.topk(x, x.shape[d], d).values,
    # insertion points (integers, no derivative) of x into a fixed grid, as a weight
    "searchsorted": lambda x, d: (
        x * torch.searchsorted(torch.linspace(-2, 2, 5, dtype=x.dtype), x.detach()).to(x.dtype)
    ),
}


def _at_index(x, idx, d, keepdim):
    out = torch.gather(x, d, idx)
    return out if keepdim else out.squeeze(d)


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


def _tensor_start(x, start: int):
    """`start` as a 0-d tensor made from x, so that thunderx traces it (a dynamic_slice); a plain
    int under torch.func, which has no batching rule for narrow with a tensor start (the same
    value either way)."""
    if isinstance(x, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(x):
        return start
    return x.new_zeros((), dtype=torch.int64) + start


def _view(h, params):
    """A view of h by one of the layout ops (the narrow takes a tensor start: dynamic_slice)."""
    kind = params["view"]
    if kind == "narrow":
        return torch.narrow(h, 0, _tensor_start(h, params["start"]), params["length"])
    if kind == "slice":
        return h[params["start"] :]
    if kind == "transpose":
        return h.transpose(0, -1)
    if kind == "reshape":
        return h.reshape(-1)
    return h.unsqueeze(0).expand(2, *h.shape)


def _unview(e, x, params):
    """A value of x's shape from `e`, computed on `_view(x, params)`."""
    kind = params["view"]
    if kind in ("narrow", "slice"):
        return torch.cat([x[: params["start"]], e])
    if kind == "transpose":
        return e.transpose(0, -1)
    if kind == "reshape":
        return e.reshape(x.shape)
    return e[0] - e[1]


def _step(kind, name, xs, params):
    x = xs[0]
    if kind == "unary":
        return UNARY[name](x)
    if kind == "binary":
        return BINARY[name](x, xs[1])
    if kind == "reduce":
        return REDUCE[name](x, params["dim"], params["keepdim"])
    if kind == "scan":
        return SCAN[name](x, params["dim"])
    if kind == "transpose":
        return x.transpose(params["a"], params["b"])
    if kind == "reshape":
        return x.reshape(params["shape"])
    if kind == "slice":
        return x.narrow(params["dim"], params["start"], params["length"])
    if kind == "narrow_tensor":  # a traced start: dynamic_slice (dynamic_update_slice in grad)
        start = _tensor_start(x, params["start"])
        return torch.narrow(x, params["dim"], start, params["length"])
    if kind == "flip":
        return x.flip(params["dim"])
    if kind == "matmul":
        return x @ xs[1]
    if kind == "cat":
        return torch.cat([x, xs[1]], params["dim"])
    if kind == "unsqueeze_expand":
        return x.unsqueeze(params["dim"]).expand(*params["shape"])
    if kind == "unsqueeze_squeeze":
        return torch.sin(x.unsqueeze(params["dim"])).squeeze(params["dim"])
    if kind == "pad":
        return F.pad(x, (params["lo"], params["hi"]))
    if kind == "gather":
        return torch.gather(x, params["dim"], torch.tensor(params["index"]))
    if kind == "index_select":
        return torch.index_select(x, params["dim"], torch.tensor(params["index"]))
    if kind == "scatter_add":
        idx = torch.tensor(params["index"])
        src = torch.tanh(x).narrow(params["dim"], 0, idx.shape[params["dim"]])
        return torch.scatter_add(x, params["dim"], idx, src)
    if kind == "index_add":
        idx = torch.tensor(params["index"])
        src = torch.tanh(x).narrow(params["dim"], 0, len(params["index"]))
        return x.index_add(params["dim"], idx, src)
    if kind == "conv":
        w = torch.tensor(params["weight"], dtype=x.dtype)
        return F.conv1d(x.unsqueeze(0), w, padding=1).squeeze(0)
    if kind == "max_pool":
        return F.max_pool1d(x.unsqueeze(0), 2, 1).squeeze(0)
    if kind == "avg_pool":
        return F.avg_pool1d(x.unsqueeze(0), 2, 1).squeeze(0)
    if kind == "view_reuse":
        # a view of an intermediate that dies right after an elementwise op on the view:
        # writing that op into the view's buffer would change h, read again below
        h = x * 2.0
        e = torch.exp(torch.tanh(_view(h, params)))
        return h * e.mean() + h
    if kind == "dead_view":
        # elementwise ops on a view of an intermediate that dies there: the executor may write
        # into the view (its buffer is dead), never into an expand's overlapping elements
        v = _view(x * 2.0, params)
        e = v * torch.tanh(v)
        return _unview(e, x, params)
    if kind == "inplace_chain":
        y = x * 1.0
        y.mul_(0.5)
        y.add_(x)
        y.sub_(x * 0.25)
        y.tanh_()  # last: autograd saves its result for the backward pass
        return y * x
    raise ValueError(kind)


def run_program(prog: Program, *inputs):
    vals = list(inputs)
    for kind, name, args, params in prog.steps:
        vals.append(_step(kind, name, [vals[a] for a in args], params))
    return vals[-1]


def _shape_after(kind, name, shapes, params):
    s = shapes[0]
    if kind in ("unary", "scan", "flip", "scatter_add", "index_add", "view_reuse", "dead_view"):
        return s
    if kind in ("inplace_chain", "unsqueeze_squeeze"):
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
    if kind in ("slice", "narrow_tensor"):
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
    if kind == "pad":
        return s[:-1] + (s[-1] + params["lo"] + params["hi"],)
    if kind in ("gather", "index_select"):
        out = list(s)
        d = params["dim"]
        out[d] = len(params["index"]) if kind == "index_select" else _nested_len(params, d)
        return tuple(out)
    if kind == "conv":
        return (s[0], s[1] + 1)
    if kind in ("max_pool", "avg_pool"):
        return (s[0], s[1] - 1)
    raise ValueError(kind)


def _nested_len(params, d):
    idx = params["index"]
    for _ in range(d):
        idx = idx[0]
    return len(idx)


def _kinds(s) -> list:
    kinds = ["unary", "unary", "binary", "binary", "view_reuse", "dead_view", "inplace_chain"]
    if len(s) >= 1:
        kinds += ["reduce", "scan", "flip", "slice", "narrow_tensor", "cat", "pad"]
        kinds += ["gather", "index_select", "scatter_add", "index_add", "unsqueeze_squeeze"]
    if len(s) >= 2:
        kinds += ["transpose", "reshape", "matmul"]
    if len(s) == 2:
        kinds += ["conv", "max_pool", "avg_pool"] if s[1] >= 2 else ["conv"]
    if len(s) < 3:
        kinds.append("unsqueeze_expand")
    return kinds


def _index(draw, shape, n):
    """A nested list of indices in [0, n) of the given shape."""
    if not shape:
        return draw(st.integers(0, n - 1))
    return [_index(draw, shape[1:], n) for _ in range(shape[0])]


def _params(draw, kind, s, shapes):
    """(params, partner operand index or None) for a step of `kind` on a value of shape s."""
    rank = len(s)
    dim = draw(st.integers(0, rank - 1)) if rank else 0
    if kind == "reduce":
        params = {"dim": draw(st.integers(-rank, rank - 1)), "keepdim": draw(st.booleans())}
        if rank == 1:
            params["keepdim"] = True  # keep values tensors of rank >= 1
        return params
    if kind in ("scan", "flip", "unsqueeze_squeeze"):
        return {"dim": dim}
    if kind in ("slice", "narrow_tensor"):
        start = draw(st.integers(0, s[dim] - 1))
        return {"dim": dim, "start": start, "length": draw(st.integers(1, s[dim] - start))}
    if kind == "transpose":
        return {"a": draw(st.integers(0, rank - 1)), "b": draw(st.integers(0, rank - 1))}
    if kind == "reshape":
        n = math.prod(s)
        return {"shape": draw(st.sampled_from([(n,), tuple(reversed(s)), (s[0], n // s[0])]))}
    if kind == "unsqueeze_expand":
        d = draw(st.integers(0, rank))
        out = list(s)
        out.insert(d, draw(st.integers(1, 3)))
        return {"dim": d, "shape": tuple(out)}
    if kind == "pad":
        return {"lo": draw(st.integers(0, 2)), "hi": draw(st.integers(0, 2))}
    if kind in ("gather", "scatter_add"):
        ishape = list(s)
        ishape[dim] = draw(st.integers(1, s[dim]))
        # scatter_add's source is a narrow of x, so its index must fit x off the dimension too
        return {"dim": dim, "index": _index(draw, ishape, s[dim])}
    if kind in ("index_select", "index_add"):
        k = draw(st.integers(1, s[dim]))
        return {"dim": dim, "index": _index(draw, [k], s[dim])}
    if kind == "conv":
        c = s[0]
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
        return {"weight": (torch.randn(c, c, 2, generator=g, dtype=torch.float64) / c).tolist()}
    if kind in ("view_reuse", "dead_view"):
        views = ["transpose", "reshape", "expand"] + (["narrow", "slice"] if rank else [])
        view = draw(st.sampled_from(views if rank else ["reshape", "expand"]))
        params = {"view": view}
        if view in ("narrow", "slice"):
            params["start"] = draw(st.integers(0, s[0] - 1))
            params["length"] = s[0] - params["start"]
        return params
    return {}


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
        kind = draw(st.sampled_from(_kinds(s)))
        params, args, name = _params(draw, kind, s, shapes), [i], kind
        if kind == "unary":
            name = draw(st.sampled_from(sorted(UNARY)))
        elif kind == "binary":
            partners = [j for j, t in enumerate(shapes) if _broadcasts(s, t)]
            args.append(draw(st.sampled_from(partners)))
            name = draw(st.sampled_from(sorted(BINARY)))
        elif kind == "reduce":
            name = draw(st.sampled_from(sorted(REDUCE)))
        elif kind == "scan":
            name = draw(st.sampled_from(sorted(SCAN)))
        elif kind == "matmul":
            partners = [j for j, t in enumerate(shapes) if len(t) == 2 and t[0] == s[-1]]
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
        new = _shape_after(kind, name, [shapes[a] for a in args], params)
        steps.append((kind, name, args, params))
        shapes.append(new)
    return Program([base, other], steps, draw(st.integers(0, 2**31 - 1)))


def single_step_programs(shape=(3, 4)) -> list[Program]:
    """One program per step variant on inputs of `shape` (the second input: the same shape),
    with fixed parameters: what the coverage test traces to see which primitives steps reach."""
    s = tuple(shape)
    out = []

    def add(kind, name, params, args=(0,)):
        out.append(Program([s, s], [(kind, name, list(args), params)], 0))

    for name in UNARY:
        add("unary", name, {})
    for name in BINARY:
        add("binary", name, {}, (0, 1))
    for name in REDUCE:
        add("reduce", name, {"dim": 1, "keepdim": False})
    for name in SCAN:
        add("scan", name, {"dim": 1})
    first = [0] * (s[0] - 1)
    for kind, params in (
        ("transpose", {"a": 0, "b": 1}),
        ("reshape", {"shape": (math.prod(s),)}),
        ("slice", {"dim": 0, "start": 1, "length": s[0] - 1}),
        ("narrow_tensor", {"dim": 0, "start": 1, "length": s[0] - 1}),
        ("flip", {"dim": 0}),
        ("unsqueeze_expand", {"dim": 0, "shape": (2,) + s}),
        ("unsqueeze_squeeze", {"dim": 0}),
        ("pad", {"lo": 1, "hi": 2}),
        ("gather", {"dim": 0, "index": [[r % s[0]] * s[1] for r in range(s[0] - 1)]}),
        ("scatter_add", {"dim": 0, "index": [[r % s[0]] * s[1] for r in range(s[0] - 1)]}),
        ("index_select", {"dim": 0, "index": first}),
        ("index_add", {"dim": 0, "index": first}),
        ("conv", {"weight": [[[0.5, -0.25]] * s[0]] * s[0]}),
        ("inplace_chain", {}),
        ("max_pool", {}),
        ("avg_pool", {}),
    ):
        add(kind, kind, params)
    for view in ("narrow", "slice", "transpose", "reshape", "expand"):
        for kind in ("view_reuse", "dead_view"):
            add(kind, kind, {"view": view, "start": 1, "length": s[0] - 1})
    out.append(Program([s, s[::-1]], [("matmul", "matmul", [0, 1], {})], 0))
    out.append(Program([s, s], [("cat", "cat", [0, 1], {"dim": 1})], 0))
    return out


def _broadcasts(a, b) -> bool:
    try:
        torch.broadcast_shapes(a, b)
        return True
    except RuntimeError:
        return False
