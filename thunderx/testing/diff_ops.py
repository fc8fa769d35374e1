"""The op table of the differential test: every differentiable torch function the language layer
decomposes, each with a rule that turns a drawn base shape into input shapes and parameters.

An `Op` builds a `Case`: a plain torch function of float tensors (differentiated) followed by
integer tensors (indices: traced under `jit`, constants elsewhere), and the inputs themselves.
Inputs are filled by an *edge* kind: ordinary values, exact zeros, ties, ±30, and the shape edges
0-d, size-1 and size-0. Domain maps (`_pos`, `_unit`) keep partial functions (log, asin, ...)
inside their domain by composition, so the op still sees every value kind through the map.

>>> case = make_case(OPS["softplus"], "zero", random.Random(0))
>>> case.fn(*case.args).shape == case.args[0].shape
True
"""

from __future__ import annotations

import dataclasses
import random
from typing import Callable

import torch
import torch.nn.functional as F

F64 = torch.float64
VALUE_EDGES = ("normal", "zero", "tie", "big")
SHAPE_EDGES = ("scalar", "one", "empty")
EDGES = VALUE_EDGES + SHAPE_EDGES


@dataclasses.dataclass
class Case:
    op: str
    edge: str
    fn: Callable  # fn(*float_args, *int_args) -> tensor
    args: list  # the first `ndiff` are float64 tensors, the rest integer tensors
    ndiff: int
    params: dict

    def __repr__(self) -> str:
        shapes = ", ".join(
            f"{tuple(a.shape)}{'' if a.is_floating_point() else ' int'}" for a in self.args
        )
        return f"Case({self.op}, edge={self.edge}, inputs=[{shapes}], params={self.params})"


@dataclasses.dataclass(frozen=True)
class Op:
    """`shapes(rng, base) -> (float shapes, int args builder or None, params) | None` (None: the
    op does not apply to this base shape); `fn(*args, **params)` is the torch call."""

    name: str
    fn: Callable
    shapes: Callable
    smooth_only: bool = False  # needs values away from its poles (applies a domain map itself)


def _pos(x):
    # x * x + 0.1, not softplus: the map's own derivatives must be beyond doubt, or a finding
    # would blame the op for its domain map.
    return x * x + 0.1


def _unit(x):
    return 0.9 * torch.tanh(x)


# ------------------------------------------------------------------------- shape rules


def _same(n):
    def rule(rng, base):
        return [base] * n, None, {}

    return rule


def _bcast(rng, base):
    """y: a suffix of x's shape (broadcasts), sometimes 0-d, sometimes x's shape."""
    k = rng.randint(0, len(base))
    other = base[k:] if rng.random() < 0.7 else ()
    pair = [base, other] if rng.random() < 0.5 else [other, base]
    return pair, None, {}


def _dim(rng, base, allow_none=False):
    if not base:
        return rng.choice([0, -1] + ([None] if allow_none else []))
    if allow_none and rng.random() < 0.2:
        return None
    return rng.randint(-len(base), len(base) - 1)


def _reduce(keep=True, allow_none=True, nonempty=False):
    def rule(rng, base):
        d = _dim(rng, base, allow_none)
        if nonempty and (0 in base if d is None else (base and base[d] == 0)):
            return None
        params = {"dim": d}
        if keep:
            params["keepdim"] = rng.random() < 0.5
        return [base], None, params

    return rule


def _along_dim(nonempty=False, min_rank=0):
    def rule(rng, base):
        if len(base) < min_rank:
            return None
        d = _dim(rng, base)
        if nonempty and base and base[d] == 0:
            return None
        return [base], None, {"dim": d}

    return rule


def _matmul(rng, base):
    if not base:
        return None
    k = base[-1]
    m = rng.randint(1, 3)
    if len(base) == 1:
        other = (k,) if rng.random() < 0.5 else (k, m)
    else:
        other = (k, m) if rng.random() < 0.5 else base[:-2] + (k, m)
    return [base, other], None, {}


def _mm(rng, base):
    if len(base) != 2:
        return None
    return [base, (base[1], rng.randint(1, 3))], None, {}


def _bmm(rng, base):
    if len(base) != 3:
        return None
    return [base, (base[0], base[2], rng.randint(1, 3))], None, {}


def _mv(rng, base):
    return ([base, base[1:]], None, {}) if len(base) == 2 else None


def _vec(rng, base):
    return ([base, base], None, {}) if len(base) == 1 else None


def _outer(rng, base):
    return ([base, (rng.randint(0, 3),)], None, {}) if len(base) == 1 else None


def _linear(rng, base):
    if not base:
        return None
    return [base, (rng.randint(1, 3), base[-1]), (1,)], None, {}


def _rank(n, extra: Callable | None = None):
    def rule(rng, base):
        if len(base) < n:
            return None
        return [base], None, extra(rng, base) if extra else {}

    return rule


def _perm(rng, base):
    p = list(range(len(base)))
    rng.shuffle(p)
    return [base], None, {"perm": tuple(p)}


def _narrow(rng, base):
    if not base:
        return None
    d = rng.randrange(len(base))
    if base[d] == 0:
        return [base], None, {"dim": d, "start": 0, "length": 0}
    start = rng.randrange(base[d])
    return [base], None, {"dim": d, "start": start, "length": rng.randint(0, base[d] - start)}


def _dyn_narrow(rng, base):
    """narrow with a 0-d integer tensor start: a dynamic_slice under jit."""
    if not base or base[0] == 0:
        return None
    length = rng.randint(1, base[0])
    start = rng.randint(0, base[0] - length)
    return [base], lambda: [torch.tensor(start)], {"length": length}


def _dyn_update(rng, base):
    """y = x.clone(); y[i] = v * 2 with a 0-d integer tensor i: a dynamic_update_slice."""
    if not base or base[0] == 0:
        return None
    i = rng.randrange(base[0])
    return [base, base[1:]], lambda: [torch.tensor(i)], {}


def _index(kind):
    def rule(rng, base):
        if not base or base[0] == 0:
            return None
        n = rng.randint(0, 4)
        idx = [rng.randrange(base[0]) for _ in range(n)]
        if n >= 2 and rng.random() < 0.5:
            idx[1] = idx[0]  # repeated index: accumulation in the transpose
        t = torch.tensor(idx, dtype=torch.long)
        if kind == "take_along":
            shape = (n,) + tuple(base[1:])
            vals = [rng.randrange(base[0]) for _ in range(max(1, _numel(shape)))]
            t = torch.tensor(vals[: _numel(shape)], dtype=torch.long).reshape(shape)
            return [base], lambda: [t], {}
        if kind == "index_add":
            return [base, (n,) + base[1:]], lambda: [t], {}
        return [base], lambda: [t], {}

    return rule


def _cat(rng, base):
    if not base:
        return None
    d = rng.randrange(len(base))
    other = list(base)
    other[d] = rng.randint(0, 2)
    return [base, tuple(other)], None, {"dim": d}


def _pad(rng, base):
    if not base:
        return None
    return [base], None, {"pad": (rng.randint(0, 2), rng.randint(0, 1))}


def _expand(rng, base):
    if len(base) > 2:
        return None
    return [base], None, {"shape": (rng.randint(0, 3),) + tuple(base)}


def _reshape(rng, base):
    n = 1
    for s in base:
        n *= s
    return [base], None, {"shape": rng.choice([(n,), (-1, 1), tuple(reversed(base))])}


def _conv1d(rng, base):
    if len(base) != 3 or base[2] < 2:
        return None
    c = base[1]
    return [base, (2, c, 2)], None, {}


def _conv2d(rng, base):
    if len(base) != 3 or base[1] < 2 or base[2] < 2:
        return None
    return [(1,) + base, (2, base[0], 2, 2)], None, {}


def _pool(rng, base):
    if len(base) != 3 or base[1] < 2 or base[2] < 2:
        return None
    return [base], None, {}


def _lastdim(nonempty=True, min_rank=1):
    def rule(rng, base):
        if len(base) < min_rank or (nonempty and base and base[-1] == 0):
            return None
        return [base], None, {}

    return rule


def _layer_norm(rng, base):
    if not base or base[-1] == 0:
        return None
    return [base, base[-1:], base[-1:]], None, {}


def _target(rng, base):
    return [base, base], None, {}


def _cross_entropy(rng, base):
    if len(base) != 2 or base[1] == 0:
        return None
    t = torch.tensor([rng.randrange(base[1]) for _ in range(base[0])], dtype=torch.long)
    return [base], lambda: [t], {}


def _sdpa(rng, base):
    if len(base) != 2 or base[0] == 0:
        return None
    return [base, base, base], None, {}


def _clamp(rng, base):
    lo = rng.choice([-1.0, 0.0, 0.5])
    return [base], None, {"min": lo, "max": lo + rng.choice([0.0, 1.0, 2.0])}


# --------------------------------------------------------------------------- the table


def _narrow_fn(x, *, dim, start, length):
    return torch.narrow(x, dim, start, length)


def _dyn_update_fn(x, v, i):
    y = x * 1
    y[i] = v * 2
    return y


_U = {  # unary elementwise on any shape
    **{
        n: getattr(torch, n)
        for n in (
            "abs neg sin cos tanh sigmoid exp expm1 erf erfc sinh cosh atan asinh floor ceil round "
            "trunc sign frac square sinc"
        ).split()
    },
    "tan": lambda x: torch.tan(_unit(x)),
    **{
        n: getattr(F, n)
        for n in (
            "relu relu6 hardtanh hardsigmoid hardswish leaky_relu elu selu celu gelu silu mish "
            "softplus logsigmoid softsign tanhshrink"
        ).split()
    },
    **{
        n: (lambda f: lambda x: f(_pos(x)))(getattr(torch, n))
        for n in ("log log1p log2 log10 sqrt rsqrt reciprocal lgamma digamma").split()
    },
    "polygamma": lambda x: torch.polygamma(1, _pos(x)),
    "acosh": lambda x: torch.acosh(1 + _pos(x)),
    "logit": lambda x: torch.logit(torch.sigmoid(x)),
    **{
        n: (lambda f: lambda x: f(_unit(x)))(getattr(torch, n))
        for n in "asin acos atanh erfinv".split()
    },
    "pow_scalar": lambda x: x**3,
    "rpow": lambda x: 2.0**x,
    "float_pow_half": lambda x: _pos(x) ** 0.5,
}
_B = {  # binary, broadcasting
    **{
        n: getattr(torch, n)
        for n in ("add sub mul atan2 maximum minimum fmax fmin hypot logaddexp copysign").split()
    },
    "div": lambda x, y: x / (y * y + 0.5),
    "div_raw": torch.div,
    "pow": lambda x, y: _pos(x) ** y,
    "xlogy": lambda x, y: torch.xlogy(x, _pos(y)),
    "remainder": lambda x, y: torch.remainder(x, _pos(y)),
    "fmod": lambda x, y: torch.fmod(x, _pos(y)),
    "where": lambda x, y: torch.where(x > 0, x, y),
    "clamp_tensor": lambda x, y: torch.clamp(x, min=y),
    "lerp": lambda x, y: torch.lerp(x, y, 0.3),
    "addcmul": lambda x, y: torch.addcmul(x, y, y, value=0.5),
    "addcdiv": lambda x, y: torch.addcdiv(x, y, y * y + 1),
}
_R = {  # reductions over dim (None: all), keepdim
    "sum": torch.sum,
    "mean": torch.mean,
    "nansum": torch.nansum,
    "prod": torch.prod,
    "amax": torch.amax,
    "amin": torch.amin,
    "logsumexp": torch.logsumexp,
    "var": lambda x, dim=None, keepdim=False: torch.var(x, dim, keepdim=keepdim),
    "std": lambda x, dim=None, keepdim=False: torch.std(x, dim, keepdim=keepdim),
    "norm": lambda x, dim=None, keepdim=False: torch.linalg.vector_norm(x, 2, dim, keepdim=keepdim),
    "norm1": lambda x, dim=None, keepdim=False: torch.linalg.vector_norm(
        x, 1, dim, keepdim=keepdim
    ),
}


def _table() -> dict[str, Op]:
    ops: dict[str, Op] = {}

    def add(name, fn, shapes):
        ops[name] = Op(name, fn, shapes)

    for n, f in _U.items():
        add(n, f, _same(1))
    for n, f in _B.items():
        add(n, f, _bcast)
    for n, f in _R.items():
        nonempty = False  # torch itself rejects empty amax/amin: those cases are skipped
        all_dims = n not in ("logsumexp",)
        fn = (
            lambda f: (
                lambda x, *, dim, keepdim: f(x, dim, keepdim=keepdim) if dim is not None else f(x)
            )
        )(f)
        add(n, fn, _reduce(allow_none=all_dims, nonempty=nonempty))
    add("max_dim", lambda x, *, dim: torch.max(x, dim).values, _along_dim(nonempty=True))
    add("min_dim", lambda x, *, dim: torch.min(x, dim).values, _along_dim(nonempty=True))
    add("max_all", lambda x: torch.max(x), _lastdim(nonempty=False, min_rank=0))
    add("clamp", lambda x, **p: torch.clamp(x, **p), _clamp)
    for n in ("cumsum", "cumprod", "softmax", "log_softmax"):
        add(n, (lambda f: lambda x, *, dim: f(x, dim))(getattr(torch, n)), _along_dim())
    add("flip", lambda x, *, dim: torch.flip(x, (dim,)), _along_dim(min_rank=1))
    add("roll", lambda x, *, dim: torch.roll(x, 1, dim), _along_dim(min_rank=1))
    add("transpose", lambda x: x.transpose(0, -1), _rank(1))
    add("permute", lambda x, *, perm: x.permute(perm), _perm)
    add("reshape", lambda x, *, shape: x.reshape(shape), _reshape)
    add("narrow", _narrow_fn, _narrow)
    add("narrow_dynamic", lambda x, i, *, length: torch.narrow(x, 0, i, length), _dyn_narrow)
    add("setitem_dynamic", _dyn_update_fn, _dyn_update)
    add("getitem_dynamic", lambda x, i: x[i], _dyn_narrow_index)
    add("cat", lambda x, y, *, dim: torch.cat([x, y], dim), _cat)
    add("stack", lambda x: torch.stack([x, x * 2], -1), _same(1))
    add("expand", lambda x, *, shape: x.expand(shape), _expand)
    add(
        "unsqueeze_squeeze", lambda x: x.unsqueeze(0).squeeze(0) * x.unsqueeze(-1).sum(-1), _same(1)
    )
    add("pad", lambda x, *, pad: F.pad(x, pad), _pad)
    add("tril", torch.tril, _rank(2))
    add("triu", lambda x: torch.triu(x, 1), _rank(2))
    add("diagonal", lambda x: torch.diagonal(x, 0, -2, -1), _rank(2))
    add("repeat", lambda x: x.repeat(2, *([1] * x.ndim)), _same(1))
    add("gather", lambda x, i: x[i], _index("getitem"))
    add("index_select", lambda x, i: torch.index_select(x, 0, i), _index("getitem"))
    add("index_add", lambda x, v, i: x.index_add(0, i, v), _index("index_add"))
    add("take_along_dim", lambda x, i: torch.take_along_dim(x, i, 0), _index("take_along"))
    add("matmul", torch.matmul, _matmul)
    add("mm", torch.mm, _mm)
    add("bmm", torch.bmm, _bmm)
    add("mv", torch.mv, _mv)
    add("dot", torch.dot, _vec)
    add("outer", torch.outer, _outer)
    add("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b), _mm)
    add("linear", F.linear, _linear)
    add("conv1d", F.conv1d, _conv1d)
    add("conv2d", F.conv2d, _conv2d)
    add("max_pool2d", lambda x: F.max_pool2d(x, 2), _pool)
    add("avg_pool2d", lambda x: F.avg_pool2d(x, 2), _pool)
    add("layer_norm", lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b), _layer_norm)
    add("rms_norm", lambda x: F.rms_norm(x, x.shape[-1:]), _lastdim())
    add("normalize", lambda x: F.normalize(x, dim=-1), _lastdim())
    add(
        "cosine_similarity",
        lambda x, y: F.cosine_similarity(x, y, dim=-1),
        lambda rng, b: ([b, b], None, {}) if b and b[-1] else None,
    )
    add("glu", lambda x: F.glu(torch.cat([x, x * 0.5], -1)), _lastdim(nonempty=False))
    add("mse_loss", F.mse_loss, _target)
    add("l1_loss", F.l1_loss, _target)
    add("smooth_l1_loss", F.smooth_l1_loss, _target)
    add("huber_loss", F.huber_loss, _target)
    add("bce_with_logits", F.binary_cross_entropy_with_logits, lambda rng, b: ([b, b], None, {}))
    add(
        "kl_div",
        lambda x, y: F.kl_div(F.log_softmax(x, -1), F.softmax(y, -1), reduction="batchmean"),
        _layer_target,
    )
    add("cross_entropy", lambda x, t: F.cross_entropy(x, t), _cross_entropy)
    add("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), _sdpa)
    return ops


def _dyn_narrow_index(rng, base):
    if not base or base[0] == 0:
        return None
    return [base], lambda: [torch.tensor(rng.randrange(base[0]))], {}


def _layer_target(rng, base):
    return ([base, base], None, {}) if len(base) == 2 and base[-1] else None


OPS: dict[str, Op] = _table()

# --------------------------------------------------------------------------- the inputs


def draw_shape(rng: random.Random, edge: str) -> tuple:
    if edge == "scalar":
        return ()
    rank = rng.randint(1, 3)
    shape = [rng.randint(2, 3) for _ in range(rank)]
    if edge == "one":
        shape[rng.randrange(rank)] = 1
    elif edge == "empty":
        shape[rng.randrange(rank)] = 0
    return tuple(shape)


def fill(shape, edge: str, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(shape, dtype=F64, generator=g)
    if edge == "zero":
        x = torch.where(torch.rand(shape, generator=g, dtype=F64) < 0.5, 0.0, x)
    elif edge == "tie":
        x = torch.randint(-1, 2, shape, generator=g).to(F64) * 0.75
    elif edge == "big":
        big = torch.randint(0, 3, shape, generator=g)
        x = torch.where(big == 0, 30.0, torch.where(big == 1, -30.0, x))
    return x


def make_case(op: Op, edge: str, rng: random.Random, tries: int = 8) -> Case | None:
    """A case of `op` at `edge`, or None if no drawn shape fits the op."""
    for _ in range(tries):
        base = draw_shape(rng, edge)
        drawn = op.shapes(rng, base)
        if drawn is None:
            continue
        shapes, ints, params = drawn
        g = torch.Generator().manual_seed(rng.randrange(2**31))
        args = [fill(s, edge, g) for s in shapes]
        if ints is not None:
            args += ints()
        fn = _bind(op.fn, params)
        return Case(op.name, edge, fn, args, len(shapes), params)
    return None


def _bind(fn, params):
    if not params:
        return fn
    return lambda *xs: fn(*xs, **params)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
