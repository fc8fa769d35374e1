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

from thunderx.testing import diff_shapes as sh

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
    scale: float = 1.0  # the largest finite magnitude of the case's intermediate values

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


# --------------------------------------------------------------------------- the table


def _narrow_fn(x, *, dim, start, length):
    return torch.narrow(x, dim, start, length)


def _sdpa(q, k, v, *, heads: bool):
    """attention over 2-D operands (torch's math path) or over them as one (batch, head) of 4-D
    ones (torch's flash kernels, which it calls for 4-D operands only)."""
    if not heads:
        return F.scaled_dot_product_attention(q, k, v)
    return F.scaled_dot_product_attention(q[None, None], k[None, None], v[None, None])[0, 0]


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
    # continuous (value == threshold); torch's derivative at the kink is 0, as threshold_backward's
    "threshold": lambda x: F.threshold(x, 0.5, 0.5),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "acosh": lambda x: torch.acosh(1 + _pos(x)),
    "logit": lambda x: torch.logit(torch.sigmoid(x)),
    **{
        n: (lambda f: lambda x: f(_unit(x)))(getattr(torch, n))
        for n in "asin acos atanh erfinv".split()
    },
    **{
        n: (lambda f: lambda x: f(torch.tanh(x) * 3))(getattr(torch.special, n))
        for n in "i0 i0e i1 i1e erfcx".split()
    },
    "ndtri": lambda x: torch.special.ndtri(torch.sigmoid(x) * 0.98 + 0.01),
    "pow_scalar": lambda x: x**3,
    "rpow": lambda x: 2.0**x,
    "float_pow_half": lambda x: _pos(x) ** 0.5,
    "clone": lambda x: x.clone().mul_(2.0),
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
    "nextafter": torch.nextafter,
    "where": lambda x, y: torch.where(x > 0, x, y),
    "clamp_tensor": lambda x, y: torch.clamp(x, min=y),
    "lerp": lambda x, y: torch.lerp(x, y, 0.3),
    "addcmul": lambda x, y: torch.addcmul(x, y, y, value=0.5),
    "addcdiv": lambda x, y: torch.addcdiv(x, y, y * y + 1),
    "add_alpha": lambda x, y: torch.add(x, y, alpha=0.3),
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
        add(n, f, sh.same(1))
    for n, f in _B.items():
        add(n, f, sh.bcast)
    for n, f in _R.items():
        nonempty = False  # torch itself rejects empty amax/amin: those cases are skipped
        all_dims = n not in ("logsumexp",)
        fn = (
            lambda f: (
                lambda x, *, dim, keepdim: f(x, dim, keepdim=keepdim) if dim is not None else f(x)
            )
        )(f)
        add(n, fn, sh.reduce(allow_none=all_dims, nonempty=nonempty))
    add("max_dim", lambda x, *, dim: torch.max(x, dim).values, sh.along_dim(nonempty=True))
    add("min_dim", lambda x, *, dim: torch.min(x, dim).values, sh.along_dim(nonempty=True))
    add("max_all", lambda x: torch.max(x), sh.lastdim(nonempty=False, min_rank=0))
    add("clamp", lambda x, **p: torch.clamp(x, **p), sh.clamp)
    for n in ("cumsum", "cumprod", "softmax", "log_softmax"):
        add(n, (lambda f: lambda x, *, dim: f(x, dim))(getattr(torch, n)), sh.along_dim())
    add("cummax", lambda x, *, dim: torch.cummax(x, dim).values, sh.along_dim())
    add("cummin", lambda x, *, dim: torch.cummin(x, dim).values, sh.along_dim())
    add("logcumsumexp", lambda x, *, dim: torch.logcumsumexp(x, dim), sh.along_dim())
    add("sort", lambda x, *, dim: torch.sort(x, dim).values, sh.along_dim())
    add("topk", lambda x: torch.topk(x, 1, -1).values, sh.lastdim())
    add("flip", lambda x, *, dim: torch.flip(x, (dim,)), sh.along_dim(min_rank=1))
    add("roll", lambda x, *, dim: torch.roll(x, 1, dim), sh.along_dim(min_rank=1))
    add("transpose", lambda x: x.transpose(0, -1), sh.rank(1))
    add("permute", lambda x, *, perm: x.permute(perm), sh.perm)
    add("reshape", lambda x, *, shape: x.reshape(shape), sh.reshape)
    add("narrow", _narrow_fn, sh.narrow)
    add("narrow_dynamic", lambda x, i, *, length: torch.narrow(x, 0, i, length), sh.dyn_narrow)
    add("setitem_dynamic", _dyn_update_fn, sh.dyn_update)
    add("getitem_dynamic", lambda x, i: x[i], sh.dyn_narrow_index)
    add("cat", lambda x, y, *, dim: torch.cat([x, y], dim), sh.cat)
    add("stack", lambda x: torch.stack([x, x * 2], -1), sh.same(1))
    add("expand", lambda x, *, shape: x.expand(shape), sh.expand)
    add(
        "unsqueeze_squeeze",
        lambda x: x.unsqueeze(0).squeeze(0) * x.unsqueeze(-1).sum(-1),
        sh.same(1),
    )
    add("pad", lambda x, *, pad: F.pad(x, pad), sh.pad)
    add("tril", torch.tril, sh.rank(2))
    add("triu", lambda x: torch.triu(x, 1), sh.rank(2))
    add("diagonal", lambda x: torch.diagonal(x, 0, -2, -1), sh.rank(2))
    add("repeat", lambda x: x.repeat(2, *([1] * x.ndim)), sh.same(1))
    add("gather", lambda x, i: x[i], sh.index("getitem"))
    add("index_select", lambda x, i: torch.index_select(x, 0, i), sh.index("getitem"))
    add("index_add", lambda x, v, i: x.index_add(0, i, v), sh.index("index_add"))
    for red in ("amax", "prod"):  # the scatter_reduce primitive (sum and mean are scatter_adds)
        add(
            f"index_reduce_{red}",
            lambda x, v, i, red=red: x.index_reduce(0, i, v, red, include_self=red == "amax"),
            sh.index("index_add"),
        )
    add("take_along_dim", lambda x, i: torch.take_along_dim(x, i, 0), sh.index("take_along"))
    add("matmul", torch.matmul, sh.matmul)
    add("mm", torch.mm, sh.mm)
    add("bmm", torch.bmm, sh.bmm)
    add("mv", torch.mv, sh.mv)
    add("dot", torch.dot, sh.vec)
    add("outer", torch.outer, sh.outer)
    add("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b), sh.mm)
    add("linear", F.linear, sh.linear)
    add("conv1d", F.conv1d, sh.conv1d)
    add("conv2d", F.conv2d, sh.conv2d)
    add("max_pool2d", lambda x: F.max_pool2d(x, 2), sh.pool)
    add("avg_pool2d", lambda x: F.avg_pool2d(x, 2), sh.pool)
    add("unfold", lambda x: F.unfold(x[None], 2, padding=1), sh.pool)
    add(
        "interpolate",
        lambda x: F.interpolate(x[None], scale_factor=1.5, mode="bicubic")[0],
        sh.pool,
    )
    add("layer_norm", lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b), sh.layer_norm)
    add("layer_norm_plain", lambda x: F.layer_norm(x, x.shape[-1:]), sh.lastdim())
    add(
        "batch_norm",
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        sh.channels,
    )
    add("group_norm", lambda x, w, b: F.group_norm(x, 1, w, b), sh.channels)
    add("instance_norm", lambda x, w, b: F.instance_norm(x, weight=w, bias=b), sh.channels)
    # without weight and bias: the plain kernels (composite_channel_norm.py)
    add(
        "batch_norm_plain",
        lambda x: F.batch_norm(x, None, None, training=True),
        sh.plain_channels,
    )
    add("group_norm_plain", lambda x: F.group_norm(x, 1), sh.plain_channels)
    # evaluation mode: running statistics made from the weight and bias, not differentiated
    # (torch does not differentiate its kernel with respect to them)
    add(
        "batch_norm_eval",
        lambda x, w, b: F.batch_norm(
            x, (w * 0.3).detach(), (b * b + 0.5).detach(), w, b, training=False
        ),
        sh.channels,
    )
    add("rms_norm", lambda x: F.rms_norm(x, x.shape[-1:]), sh.lastdim())
    add("normalize", lambda x: F.normalize(x, dim=-1), sh.lastdim())
    add(
        "cosine_similarity",
        lambda x, y: F.cosine_similarity(x, y, dim=-1),
        lambda rng, b: ([b, b], None, {}) if b and b[-1] else None,
    )
    add("glu", lambda x: F.glu(torch.cat([x, x * 0.5], -1)), sh.lastdim(nonempty=False))
    add("mse_loss", F.mse_loss, sh.target)
    add("l1_loss", F.l1_loss, sh.target)
    add("smooth_l1_loss", F.smooth_l1_loss, sh.target)
    add("huber_loss", F.huber_loss, sh.target)
    add("bce_with_logits", F.binary_cross_entropy_with_logits, lambda rng, b: ([b, b], None, {}))
    # probabilities through a sigmoid: the edges' +-30 and +-inf saturate it to 0 and 1 exactly
    add(
        "binary_cross_entropy",
        lambda x, y: F.binary_cross_entropy(torch.sigmoid(x), torch.sigmoid(y), reduction="none"),
        lambda rng, b: ([b, b], None, {}),
    )
    add(
        "kl_div",
        lambda x, y: F.kl_div(F.log_softmax(x, -1), F.softmax(y, -1), reduction="batchmean"),
        sh.layer_target,
    )
    add("cross_entropy", lambda x, t: F.cross_entropy(x, t), sh.cross_entropy)
    add("sdpa", _sdpa, sh.sdpa)
    flags = (True, 1, 0.0, False, False, False)  # biases, 1 layer, no dropout, one direction
    add(
        "lstm",
        lambda x, h, c, *w: torch.lstm(x, (h, c), list(w), *flags)[0],
        sh.recurrent(4, 2),
    )
    add("gru", lambda x, h, *w: torch.gru(x, h, list(w), *flags)[0], sh.recurrent(3, 1))
    return ops


OPS: dict[str, Op] = _table()
# Ops added after the random programs' reproducers (diff_known.KNOWN_REPROS) were recorded: each
# is checked alone at every edge, but drawing it into random programs would change every
# recorded program (a program's ops are drawn from the sorted names by index). Their
# compositions are covered by thunderx/testing/programs.py.
SINGLE_ONLY = frozenset(
    {
        "binary_cross_entropy",
        "add_alpha",
        "clone",
        "layer_norm_plain",
        "batch_norm_plain",
        "group_norm_plain",
        "batch_norm_eval",
    }
)
PROGRAM_OPS = sorted(n for n in OPS if n not in SINGLE_ONLY)

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
