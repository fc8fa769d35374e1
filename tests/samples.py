"""A sample generator for every registered primitive: hypothesis draws -> (args, params).

A primitive without a sample here fails `test_every_primitive_has_samples`, unless it is listed
in EXCLUDED with a reason."""

from __future__ import annotations

import dataclasses
import itertools

import torch
from hypothesis import strategies as st

from thunderx.primitives import unary
from thunderx.testing.strategies import values

F64 = torch.float64


@dataclasses.dataclass
class Sample:
    args: list
    params: dict
    rtol: float = 1e-5
    atol: float = 1e-6
    eps: float = 1e-6
    # position -> function applied to that operand inside every checked function (symmetric
    # operands of cholesky/eigh, whose tangents torch symmetrizes)
    prepare: dict = dataclasses.field(default_factory=dict)


# Checked by other tests (API, custom rules, jit) rather than from random operands.
EXCLUDED = {
    "jit_call": "a call primitive: tested through jit composition tests",
    "custom_jvp_call": "tested through custom_jvp tests",
    "custom_vjp_call": "tested through custom_vjp tests",
    "custom_lin": "only exists inside reverse mode of custom_vjp; tested there",
    "custom_vmap_call": "user-defined batching rules: tests/test_custom_vmap.py",
    "pure_callback": "runs a Python callback with no derivative: tests/test_pure_callback.py",
    "linear_solve": "its solve's operands must solve its matvec's system (random operands would "
    "not): the rule checks run on consistent systems in tests/test_implicit.py",
    "torch_call": "the opaque fallback: tested by the fallback tests",
    "random_uniform": "random: tested by the randomness tests",
    "random_normal": "random: tested by the randomness tests",
    **{
        name: "a collective over a named axis (bound only inside vmap(axis_name=) or shard_map): "
        "tested in tests/test_distributed.py, under vmap and on several processes"
        for name in (
            "psum",
            "pmax",
            "pmin",
            "all_gather",
            "psum_scatter",
            "ppermute",
            "all_to_all",
            "axis_index",
        )
    },
    "shard_slice": "shard_map's boundary (needs a DeviceMesh): tested in tests/test_distributed.py",
    "shard_gather": "shard_map's boundary (needs a DeviceMesh): tested in tests/test_distributed.py",
    "debug_callback": "no outputs, an effect: tested by tests/test_api_pieces.py",
}


class Draw:
    """Thin helper over hypothesis' `data` for shapes and tensors."""

    def __init__(self, data):
        self.data = data
        self.gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))

    def int(self, lo, hi):
        return self.data.draw(st.integers(lo, hi))

    def bool(self):
        return self.data.draw(st.booleans())

    def choice(self, xs):
        return self.data.draw(st.sampled_from(list(xs)))

    def shape(self, min_rank=0, max_rank=3, max_side=4, min_side=1):
        r = self.int(min_rank, max_rank)
        return tuple(self.int(min_side, max_side) for _ in range(r))

    def tensor(self, shape, dtype=F64, domain="real"):
        return values(shape, dtype, domain, self.gen)

    def index(self, shape, n):
        return torch.randint(0, n, shape, generator=self.gen, dtype=torch.int64)

    def subset(self, n, nonempty=True):
        if n == 0:
            return ()
        mask = self.int(1 if nonempty else 0, 2**n - 1)
        return tuple(i for i in range(n) if mask >> i & 1)


SAMPLES = {}


def sample(*names):
    def deco(fn):
        for n in names:
            SAMPLES[n] = fn
        return fn

    return deco


def _unary(name):
    prim = next(p for p in unary.prim_domains if p.name == name)
    domain = unary.prim_domains[prim]

    def fn(d: Draw):
        return Sample([d.tensor(d.shape(), F64, domain)], {})

    return fn


for _p in unary.prim_domains:
    if _p.name != "polygamma":
        SAMPLES[_p.name] = _unary(_p.name)


@sample("polygamma")
def _(d):
    return Sample([d.tensor(d.shape(), F64, "positive")], {"n": d.int(0, 2)})


@sample("logical_not")
def _(d):
    return Sample([d.tensor(d.shape(), torch.bool)], {})


@sample("isfinite")
def _(d):
    x = d.tensor(d.shape(min_rank=1), F64)
    x[..., 0] = float("inf")
    return Sample([x], {})


_BINARY_DOMAINS = {
    "add": ("real", "real"),
    "sub": ("real", "real"),
    "mul": ("real", "real"),
    "div": ("real", "nonzero"),
    "pow": ("positive", "real"),
    "max": ("real", "real"),
    "min": ("real", "real"),
    "atan2": ("nonzero", "nonzero"),
    "rem": ("small", "gt1"),
    "remainder": ("small", "gt1"),
    "hypot": ("real", "real"),
    "nextafter": ("real", "real"),
}


def _binary(name):
    dx, dy = _BINARY_DOMAINS[name]

    def fn(d: Draw):
        shape = d.shape()
        x, y = d.tensor(shape, F64, dx), d.tensor(shape, F64, dy)
        k = d.int(0, 3)
        if k == 1 and name not in ("pow", "hypot"):  # torch.hypot takes tensors only
            y = float(d.tensor((), F64, dy))  # a Python scalar operand
        elif k == 2 and name not in ("rem", "remainder", "atan2", "hypot"):
            x = float(d.tensor((), F64, dx))
        return Sample([x, y], {})

    return fn


for _n in _BINARY_DOMAINS:
    SAMPLES[_n] = _binary(_n)


# Complex-valued primitives: the generic derivative checks here work in real arithmetic; their
# derivatives are checked against torch.func in tests/test_complex.py (jit and vmap run here).
COMPLEX_PRIMS = {"real", "imag", "conj", "complex", "fft", "eig"}  # eig: test_misc_ops.py


def _complex(d, shape):
    return torch.complex(d.tensor(shape, F64), d.tensor(shape, F64))


@sample("real", "imag", "conj")
def _(d):
    return Sample([_complex(d, d.shape())], {})


@sample("fft")
def _(d):
    shape = d.shape(min_rank=1)
    k = d.choice([1, min(2, len(shape))])
    fft_type = d.choice(["fft", "ifft", "rfft", "irfft"])
    lengths = tuple(shape[len(shape) - k :])
    if fft_type == "rfft":
        return Sample([d.tensor(shape, F64)], {"fft_type": fft_type, "fft_lengths": lengths})
    if fft_type == "irfft":
        n = lengths[-1]
        shape = shape[:-1] + (n // 2 + 1,)
    return Sample([_complex(d, shape)], {"fft_type": fft_type, "fft_lengths": lengths})


@sample("complex")
def _(d):
    shape = d.shape()
    return Sample([d.tensor(shape, F64), d.tensor(shape, F64)], {})


@sample("eq", "ne", "lt", "le", "gt", "ge")
def _(d):
    shape = d.shape()
    dt = d.choice([F64, torch.int64])
    x, y = d.tensor(shape, dt), d.tensor(shape, dt)
    if d.bool():
        y = x.clone()
    return Sample([x, y], {})


@sample("logical_and", "logical_or")
def _(d):
    shape = d.shape()
    return Sample([d.tensor(shape, torch.bool), d.tensor(shape, torch.bool)], {})


def _ints(d, shape, dt):
    if dt is torch.bool:
        return torch.randint(0, 2, shape, generator=d.gen).bool()
    lo = 0 if dt is torch.uint8 else -100
    return torch.randint(lo, 100, shape, generator=d.gen, dtype=dt)


@sample("bitwise_and", "bitwise_or", "bitwise_xor")
def _(d):
    shape, dt = d.shape(), d.choice([torch.int64, torch.int32, torch.uint8, torch.bool])
    return Sample([_ints(d, shape, dt), _ints(d, shape, dt)], {})


@sample("shift_left", "shift_right")
def _(d):
    shape, dt = d.shape(), d.choice([torch.int64, torch.int32, torch.uint8])
    amount = torch.randint(0, 8, shape, generator=d.gen, dtype=dt)
    return Sample([_ints(d, shape, dt), amount], {})


@sample("bitwise_not")
def _(d):
    dt = d.choice([torch.int64, torch.int8, torch.uint8])
    return Sample([_ints(d, d.shape(), dt)], {})


@sample("select")
def _(d):
    shape = d.shape()
    return Sample([d.tensor(shape, torch.bool), d.tensor(shape), d.tensor(shape)], {})


@sample("convert_element_type")
def _(d):
    return Sample(
        [d.tensor(d.shape())],
        {"new_dtype": d.choice([F64, torch.float32])},
        rtol=1e-3,
        atol=1e-4,
        eps=1e-3,
    )


@sample("device_put")
def _(d):
    # the move that runs here (CPU to CPU) is the identity; CUDA moves: tests/test_cuda.py
    return Sample([d.tensor(d.shape())], {"device": torch.device("cpu")})


@sample("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
def _(d):
    shape = d.shape(min_rank=1)
    return Sample([d.tensor(shape, F64, "nonzero")], {"axes": d.subset(len(shape))})


@sample("argmax", "argmin")
def _(d):
    shape = d.shape(min_rank=1)
    return Sample([d.tensor(shape)], {"axis": d.int(0, len(shape) - 1), "index_dtype": torch.int64})


@sample("mode_index")
def _(d):
    shape = d.shape(min_rank=1)
    # rounded values, so that some repeat and the mode is not just the smallest element
    return Sample([torch.round(d.tensor(shape) * 2)], {"axis": d.int(0, len(shape) - 1)})


@sample("cumsum")
def _(d):
    shape = d.shape(min_rank=1)
    return Sample([d.tensor(shape)], {"axis": d.int(0, len(shape) - 1), "reverse": d.bool()})


@sample("cumprod")
def _(d):
    shape = d.shape(min_rank=1)
    x = d.tensor(shape, F64, "nonzero")
    if d.bool():
        x.view(-1)[0] = 0.0  # the jvp must be exact at zeros
    return Sample([x], {"axis": d.int(0, len(shape) - 1)})


@sample("broadcast_in_dim")
def _(d):
    shape = list(d.shape(max_rank=2))
    for i in range(len(shape)):
        if d.bool():
            shape[i] = 1
    out = []
    dims = []
    for s in shape:
        while d.bool() and len(out) < 4:
            out.append(d.int(1, 3))
        dims.append(len(out))
        out.append(s if s != 1 else d.int(1, 3))
    if d.bool():
        out.append(2)
    return Sample(
        [d.tensor(tuple(shape))], {"shape": tuple(out), "broadcast_dimensions": tuple(dims)}
    )


@sample("reshape")
def _(d):
    shape = d.shape(min_rank=1)
    n = 1
    for s in shape:
        n *= s
    new = d.choice([(n,), tuple(reversed(shape)), (1,) + shape, shape + (1,)])
    return Sample([d.tensor(shape)], {"new_sizes": tuple(new)})


@sample("transpose")
def _(d):
    shape = d.shape(min_rank=1)
    perm = d.choice(list(itertools.permutations(range(len(shape)))))
    return Sample([d.tensor(shape)], {"permutation": tuple(perm)})


@sample("squeeze")
def _(d):
    shape = list(d.shape(max_rank=2))
    pos = d.int(0, len(shape))
    shape.insert(pos, 1)
    return Sample([d.tensor(tuple(shape))], {"dimensions": (pos,)})


@sample("expand_dims")
def _(d):
    shape = d.shape(max_rank=2)
    return Sample([d.tensor(shape)], {"dimensions": (d.int(0, len(shape)),)})


@sample("slice")
def _(d):
    shape = d.shape(min_rank=1)
    starts, limits, strides = [], [], []
    for n in shape:
        s = d.int(0, n - 1)
        e = d.int(s, n)
        starts.append(s)
        limits.append(e)
        strides.append(d.int(1, 2))
    return Sample(
        [d.tensor(shape)],
        {"start_indices": tuple(starts), "limit_indices": tuple(limits), "strides": tuple(strides)},
    )


@sample("pad")
def _(d):
    shape = d.shape(min_rank=1, min_side=2)
    config = tuple((d.int(-1, 2), d.int(-1, 2), d.int(0, 1)) for _ in shape)
    return Sample([d.tensor(shape), float(d.tensor((), F64))], {"padding_config": config})


@sample("concatenate")
def _(d):
    shape = d.shape(min_rank=1)
    axis = d.int(0, len(shape) - 1)
    xs = []
    for _ in range(d.int(2, 3)):
        s = list(shape)
        s[axis] = d.int(1, 3)
        xs.append(d.tensor(tuple(s)))
    return Sample(xs, {"dimension": axis})


@sample("rev")
def _(d):
    shape = d.shape(min_rank=1)
    return Sample([d.tensor(shape)], {"dimensions": d.subset(len(shape))})


@sample("gather")
def _(d):
    shape = d.shape(min_rank=1)
    axis = d.int(0, len(shape) - 1)
    ishape = list(shape)
    ishape[axis] = d.int(1, 4)
    return Sample([d.tensor(shape), d.index(tuple(ishape), shape[axis])], {"axis": axis})


@sample("scatter_add")
def _(d):
    shape = d.shape(min_rank=1)
    axis = d.int(0, len(shape) - 1)
    ishape = list(shape)
    ishape[axis] = d.int(1, 4)
    idx = d.index(tuple(ishape), shape[axis])
    return Sample([d.tensor(shape), idx, d.tensor(tuple(ishape))], {"axis": axis})


@sample("scatter_reduce")
def _(d):
    shape = d.shape(min_rank=1)
    axis = d.int(0, len(shape) - 1)
    ishape = list(shape)
    ishape[axis] = d.int(1, 4)
    idx = d.index(tuple(ishape), shape[axis])
    params = {"axis": axis, "reduce": d.choice(["amax", "amin", "prod"])}
    params["include_self"] = d.choice([True, False])
    return Sample([d.tensor(shape), idx, d.tensor(tuple(ishape))], params)


@sample("take")
def _(d):
    shape = d.shape(min_rank=1)
    axis = d.int(0, len(shape) - 1)
    return Sample([d.tensor(shape), d.index(d.shape(max_rank=2), shape[axis])], {"axis": axis})


@sample("index_add")
def _(d):
    shape = d.shape(min_rank=1)
    axis = d.int(0, len(shape) - 1)
    idx = d.index(d.shape(max_rank=2), shape[axis])
    src_shape = shape[:axis] + tuple(idx.shape) + shape[axis + 1 :]
    return Sample([d.tensor(shape), idx, d.tensor(src_shape)], {"axis": axis})


@sample("dynamic_slice")
def _(d):
    shape = d.shape(min_rank=1)
    sizes = tuple(d.int(1, n) for n in shape)
    starts = [torch.tensor(d.int(-1, n), dtype=torch.int64) for n in shape]
    return Sample([d.tensor(shape)] + starts, {"sizes": sizes})


@sample("dynamic_update_slice")
def _(d):
    shape = d.shape(min_rank=1)
    sizes = tuple(d.int(1, n) for n in shape)
    starts = [torch.tensor(d.int(-1, n), dtype=torch.int64) for n in shape]
    return Sample([d.tensor(shape), d.tensor(sizes)] + starts, {})


@sample("dot_general")
def _(d):
    nb, nc, nfx, nfy = d.int(0, 1), d.int(0, 2), d.int(0, 2), d.int(0, 2)
    b = [d.int(1, 3) for _ in range(nb)]
    c = [d.int(1, 3) for _ in range(nc)]
    fx = [d.int(1, 3) for _ in range(nfx)]
    fy = [d.int(1, 3) for _ in range(nfy)]
    x_roles = (
        [("b", i) for i in range(nb)]
        + [("c", i) for i in range(nc)]
        + [("f", i) for i in range(nfx)]
    )
    y_roles = (
        [("b", i) for i in range(nb)]
        + [("c", i) for i in range(nc)]
        + [("f", i) for i in range(nfy)]
    )
    x_roles = list(d.choice(list(itertools.permutations(x_roles))) if x_roles else [])
    y_roles = list(d.choice(list(itertools.permutations(y_roles))) if y_roles else [])
    size = {"b": b, "c": c}
    xs = tuple(size[r][i] if r != "f" else fx[i] for r, i in x_roles)
    ys = tuple(size[r][i] if r != "f" else fy[i] for r, i in y_roles)
    lc = tuple(x_roles.index(("c", i)) for i in range(nc))
    rc = tuple(y_roles.index(("c", i)) for i in range(nc))
    lb = tuple(x_roles.index(("b", i)) for i in range(nb))
    rb = tuple(y_roles.index(("b", i)) for i in range(nb))
    return Sample([d.tensor(xs), d.tensor(ys)], {"dimension_numbers": ((lc, rc), (lb, rb))})


@sample("iota")
def _(d):
    shape = d.shape(min_rank=1)
    return Sample(
        [],
        {
            "dtype": d.choice([torch.int64, F64]),
            "shape": shape,
            "dimension": d.int(0, len(shape) - 1),
            "device": torch.device("cpu"),
        },
    )


@sample("full")
def _(d):
    return Sample(
        [], {"shape": d.shape(), "fill_value": 1.5, "dtype": F64, "device": torch.device("cpu")}
    )


@sample("stop_gradient")
def _(d):
    return Sample([d.tensor(d.shape())], {})


@sample("name")
def _(d):
    return Sample([d.tensor(d.shape())], {"name": d.choice(["e", "layer1"])})


@sample("no_grad")
def _(d):
    return Sample([d.tensor(d.shape())], {})


@sample("conv")
def _(d):
    nsp = d.int(1, 2)
    groups = d.choice([1, 2])
    c, o = 2 * groups, 2 * groups
    n = d.int(1, 2)
    window = tuple(d.int(1, 3) for _ in range(nsp))
    spatial = tuple(d.int(w + 1, w + 4) for w in window)
    params = {
        "window_strides": tuple(d.int(1, 2) for _ in range(nsp)),
        "padding": tuple((d.int(0, 1), d.int(0, 1)) for _ in range(nsp)),
        "lhs_dilation": tuple(d.choice([1, 1, 2]) for _ in range(nsp)),
        "rhs_dilation": tuple(d.choice([1, 1, 2]) for _ in range(nsp)),
        "groups": groups,
    }
    spatial = tuple(
        max(s, (w - 1) * r + 1) for s, w, r in zip(spatial, window, params["rhs_dilation"])
    )
    x = d.tensor((n, c) + spatial)
    w = d.tensor((o, c // groups) + window)
    return Sample([x, w], params)


def _pool_sample(d):
    nsp = d.int(1, 2)
    kernel = tuple(d.int(1, 3) for _ in range(nsp))
    dilation = tuple(d.choice([1, 1, 2]) for _ in range(nsp))
    params = {
        "kernel": kernel,
        "stride": tuple(d.int(1, 2) for _ in range(nsp)),
        "padding": tuple(d.int(0, k // 2) for k in kernel),
        "dilation": dilation,
        "ceil_mode": d.bool(),
    }
    spatial = tuple(d.int((k - 1) * r + 1, (k - 1) * r + 4) for k, r in zip(kernel, dilation))
    lead = d.shape(1, 2, max_side=3)
    return Sample([d.tensor(lead + spatial)], params)


@sample("max_pool")
def _(d):
    return _pool_sample(d)


@sample("max_pool_argmax")
def _(d):
    return _pool_sample(d)


@sample("conv_kernel_grad")
def _(d):
    from thunderx.primitives.conv import _out_shape

    nsp = d.int(1, 2)
    groups = d.choice([1, 2])
    c, o, n = 2 * groups, 2 * groups, d.int(1, 2)
    window = tuple(d.int(1, 3) for _ in range(nsp))
    strides = tuple(d.int(1, 2) for _ in range(nsp))
    padding = tuple((p, p) for p in (d.int(0, 1) for _ in range(nsp)))
    dilation = tuple(d.choice([1, 1, 2]) for _ in range(nsp))
    spatial = tuple(max(d.int(w + 1, w + 4), (w - 1) * r + 1) for w, r in zip(window, dilation))
    kernel = (o, c // groups) + window
    out = _out_shape((n, c) + spatial, kernel, strides, padding, (1,) * nsp, dilation)
    params = {
        "kernel_shape": kernel,
        "window_strides": strides,
        "padding": padding,
        "rhs_dilation": dilation,
        "groups": groups,
    }
    return Sample([d.tensor(out), d.tensor((n, c) + spatial)], params)


def _avg_pool_sample(d):
    nsp = d.int(1, 3)
    kernel = tuple(d.int(1, 3) for _ in range(nsp))
    divisor = d.choice([None, None, 3])
    params = {
        "kernel": kernel,
        "stride": tuple(d.int(1, 2) for _ in range(nsp)),
        "padding": tuple(d.int(0, k // 2) for k in kernel),
        "ceil_mode": d.bool(),
        "count_include_pad": d.bool(),
        "divisor_override": divisor,
    }
    spatial = tuple(d.int(k, k + 3) for k in kernel)
    return d.shape(1, 2, max_side=3) + spatial, params


@sample("avg_pool")
def _(d):
    shape, params = _avg_pool_sample(d)
    return Sample([d.tensor(shape)], params)


@sample("avg_pool_backward")
def _(d):
    from thunderx.primitives.avg_pool import _out_shape

    shape, params = _avg_pool_sample(d)
    out = _out_shape(
        shape, params["kernel"], params["stride"], params["padding"], params["ceil_mode"]
    )
    return Sample([d.tensor(out)], {"input_shape": shape, **params})


@sample("conv_input_grad")
def _(d):
    from thunderx.primitives.conv import _out_shape

    nsp = d.int(1, 2)
    groups = d.choice([1, 2])
    c, o, n = 2 * groups, 2 * groups, d.int(1, 2)
    window = tuple(d.int(1, 3) for _ in range(nsp))
    strides = tuple(d.int(1, 2) for _ in range(nsp))
    padding = tuple((p, p) for p in (d.int(0, 1) for _ in range(nsp)))
    dilation = tuple(d.choice([1, 1, 2]) for _ in range(nsp))
    spatial = tuple(max(d.int(w + 1, w + 4), (w - 1) * r + 1) for w, r in zip(window, dilation))
    kernel = (o, c // groups) + window
    out = _out_shape((n, c) + spatial, kernel, strides, padding, (1,) * nsp, dilation)
    params = {
        "input_shape": (n, c) + spatial,
        "window_strides": strides,
        "padding": padding,
        "rhs_dilation": dilation,
        "groups": groups,
    }
    return Sample([d.tensor(out), d.tensor(kernel)], params)


def _control_flow(name):
    from .samples_control_flow import SAMPLERS

    return lambda d: SAMPLERS[name](d, Sample)


for _name in ("cond", "scan", "while", "checkpoint"):
    SAMPLES[_name] = _control_flow(_name)


# Samples of the linear algebra, sorting and composite primitives register themselves into SAMPLES.
from . import samples_composite, samples_linalg  # noqa: E402, F401


def _pool_derivative_sample(d, scatter):
    from thunderx.primitives.pooling import max_pool_argmax_p

    sample = _pool_sample(d)
    (x,) = sample.args
    idx = max_pool_argmax_p.bind(x, **sample.params)
    first = d.tensor(tuple(idx.shape)) if scatter else d.tensor(tuple(x.shape))
    return Sample([first, x, idx], sample.params)


@sample("max_pool_gather")
def _(d):
    return _pool_derivative_sample(d, False)


@sample("max_pool_scatter")
def _(d):
    return _pool_derivative_sample(d, True)
