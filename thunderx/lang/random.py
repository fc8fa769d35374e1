"""Random torch ops under transforms. Under vmap they follow `randomness`: 'error' (default),
'different' (independent draws per batch element) or 'same' (one draw shared by the batch).
While staging (jit, make_jaxpr) they become random primitives, so each call draws anew."""

from __future__ import annotations

import math
import weakref

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from thunderx.core import current_trace, get_aval, set_trace
from thunderx.errors import RandomnessError, user_frame
from thunderx.lang import random_exact as exact
from thunderx.lang import unbound
from thunderx.lang._base import method_table, torch_table
from thunderx.lang.random_runtime import (  # noqa: F401 (forbid_random, runtime_draw re-exported)
    _modes,
    _staging_trace,
    check_forbidden,
    forbid_random,
    runtime_draw,
)
from thunderx.primitives import creation as C

_DEFAULT_DEVICE = torch.device("cpu")


def _size(args, kwargs):
    size = kwargs.pop("size", None)
    if size is None:
        size = (
            args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
        )
    return tuple(int(s) for s in size)


def _batch_traces():
    """The vmap traces enclosing the current context, innermost first."""
    from thunderx.transforms.vmap import BatchTrace

    t = current_trace()
    while t is not None:
        if isinstance(t, BatchTrace) and t.alive:
            yield t
        t = t.parent


def draw(kind: str, shape, dtype, device, name: str, generator=None):
    """A random draw of `shape` per batch element, honouring every enclosing vmap. With an
    explicit `generator`, the numbers come from it, as in eager torch."""
    from thunderx.transforms.vmap import BatchTracer

    check_forbidden()
    if generator is None:
        prim = C.random_uniform if kind == "uniform" else C.random_normal
    else:
        prim = lambda shape, dtype, device: _generator_draw(  # noqa: E731
            kind, shape, dtype, device, generator
        )
    batches = list(_batch_traces())
    different = []
    for bt in batches:
        if bt.randomness == "error":
            raise _randomness_error(name)
        if bt.randomness == "different":
            different.append(bt)
    if not different:
        return prim(shape, dtype, device)
    # Draw a block with one axis per 'different' vmap (outermost first), then wrap it.
    outer_first = list(reversed(different))
    with set_trace(outer_first[0].parent):
        val = prim(tuple(bt.axis_size for bt in outer_first) + tuple(shape), dtype, device)
    # Peel the axes one trace at a time: each vmap level sees its own leading axis.
    for bt in outer_first:
        val = BatchTracer(bt, val, 0)
    return val


def _randomness_error(name: str) -> RandomnessError:
    return RandomnessError(
        f"vmap: {name} called random operation while in randomness error mode, at "
        f"{user_frame()}; random ops need vmap(..., randomness='different') or "
        "randomness='same'"
    )


def _rand(kind, name):
    def impl(
        *args,
        dtype=None,
        device=None,
        layout=None,
        requires_grad=False,
        generator=None,
        pin_memory=False,
        out=None,
        **kwargs,
    ):
        shape = _size(args, kwargs)
        dt, dev = dtype or torch.get_default_dtype(), torch.device(device or "cpu")
        out = exact.factory(
            name,
            lambda prefix: _TORCH_FACTORY[kind](
                prefix + shape, dtype=dt, device=dev, generator=generator
            ),
        )
        if out is not exact.NOT_EXACT:
            return out
        return draw(
            kind,
            shape,
            dtype or torch.get_default_dtype(),
            torch.device(device or "cpu"),
            name,
            generator,
        )

    return impl


_TORCH_FACTORY = {"uniform": torch.rand, "normal": torch.randn}


def _rand_like(kind, name):
    torch_fn = torch.rand_like if kind == "uniform" else torch.randn_like

    def impl(x, *, dtype=None, device=None, layout=None, requires_grad=False, memory_format=None):
        kw = {k: v for k, v in dict(dtype=dtype, device=device).items() if v is not None}
        out = exact.call(name, torch_fn, (x,), kw, like=True)
        if out is not exact.NOT_EXACT:
            return out
        a = get_aval(x)
        return draw(kind, a.shape, dtype or a.dtype, a.device, name)

    return impl


def _bernoulli(input, p=None, *, generator=None, out=None):
    """torch.bernoulli(probs) or torch.bernoulli(input, p): a draw of input's shape with a
    float probability p."""
    args = (input,) if p is None else (input, float(p))
    res = exact.call("torch.bernoulli", torch.bernoulli, args, {"generator": generator})
    if res is not exact.NOT_EXACT:
        return res
    exact.same_batched_check("torch.bernoulli", [input])
    if p is not None:
        a = get_aval(input)
        u = draw("uniform", a.shape, torch.float64, a.device, "torch.bernoulli", generator)
        return (u < float(p)).to(a.dtype)
    a = get_aval(input)
    p = input
    u = draw("uniform", a.shape, a.dtype, a.device, "bernoulli", generator)
    return (u < p).to(a.dtype)


def _randint(*args, generator=None, dtype=None, device=None, layout=None, **kwargs):
    """randint(high, size) or randint(low, high, size): floor of a float64 uniform draw."""
    kwargs.pop("requires_grad", None)
    kwargs.pop("pin_memory", None)
    if "size" in kwargs:
        args = args + (kwargs.pop("size"),)
    if "high" in kwargs:
        args = (kwargs.pop("low", 0), kwargs.pop("high")) + args
    low, high, size = (0, *args) if len(args) == 2 else args
    dt = dtype or torch.int64
    dev_ = torch.device(device or "cpu")
    out = exact.factory(
        "torch.randint",
        lambda prefix: torch.randint(
            low, high, prefix + tuple(size), dtype=dt, device=dev_, generator=generator
        ),
    )
    if out is not exact.NOT_EXACT:
        return out
    if not _vmap_mode("torch.randint"):
        # torch's own kernel: the numbers eager code gets from the same generator state
        dev = torch.device(device or "cpu")
        return runtime_draw(torch.randint, (low, high, tuple(size)), dt, dev, generator)
    u = draw(
        "uniform",
        tuple(size),
        torch.float64,
        torch.device(device or "cpu"),
        "torch.randint",
        generator,
    )
    return (torch.floor(u * (high - low)) + low).clamp(max=high - 1).to(dt)


def _ranks(keys, n: int, name: str):
    """For each entry of the last axis, the number of entries with a larger key (ties broken by
    position): a uniformly random permutation when the keys are i.i.d. continuous."""
    if n * n > 2**24:
        raise ValueError(f"{name} of {n} elements under a transform is limited to 4096 elements")
    k_i, k_j = keys.unsqueeze(-1), keys.unsqueeze(-2)
    pos = torch.arange(n, device=keys.device)
    earlier = (pos.unsqueeze(-1) > pos.unsqueeze(-2)).expand(k_i.shape[:-1] + (n,))
    before = (k_j > k_i) | ((k_j == k_i) & earlier)
    return before.to(torch.int64).sum(-1)


def _randperm(n, *, generator=None, dtype=None, device=None, layout=None, **kwargs):
    dev = torch.device(device or "cpu")
    out = exact.factory(
        "torch.randperm",
        lambda prefix: exact.randperm_batched(
            n, prefix, dtype=dtype or torch.int64, device=dev, generator=generator
        ),
    )
    if out is not exact.NOT_EXACT:
        return out
    if not _vmap_mode("torch.randperm"):
        # one draw shared by any vmap: torch's own kernel, run on each call
        return runtime_draw(torch.randperm, (n,), dtype or torch.int64, dev, generator)
    keys = draw("uniform", (n,), torch.float64, dev, "torch.randperm", generator)
    return _ranks(keys, n, "torch.randperm").to(dtype or torch.int64)


def _normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None, **kw):
    from thunderx.core import Tracer

    tensors = [v for v in (mean, std) if isinstance(v, (Tracer, torch.Tensor))]
    out = exact.normal(mean, std, size, tensors, generator, dtype, device)
    if out is not exact.NOT_EXACT:
        return out
    exact.same_batched_check("torch.normal", tensors)
    if not tensors and size is not None and not _vmap_mode("torch.normal"):
        dev = torch.device(device or "cpu")
        args = (float(mean), float(std), tuple(size))
        return runtime_draw(torch.normal, args, dtype or torch.get_default_dtype(), dev, generator)
    if size is not None or not tensors:
        shape = tuple(size) if size is not None else ()
        dt = dtype or torch.get_default_dtype()
        dev = torch.device(device or "cpu")
    else:
        shape = torch.broadcast_shapes(*[tuple(get_aval(v).shape) for v in tensors])
        dt, dev = get_aval(tensors[0]).dtype, get_aval(tensors[0]).device
    z = draw("normal", shape, dt, dev, "torch.normal", generator)
    # torch defines torch.normal's derivative in mean and std as zero (derivatives.yaml: it is
    # not the reparameterized sample; torch.distributions' rsample computes mean + eps * std)
    mean, std = (
        torch.detach(v) if isinstance(v, (Tracer, torch.Tensor)) else v for v in (mean, std)
    )
    return z * std + mean


def _multinomial(probs, num_samples, replacement=False, *, generator=None, out=None):
    chain = exact.eager_chain()
    if chain is not None:
        exact.check_error_mode(chain, "torch.multinomial")
        kernel = exact.multinomial_kernel(num_samples, replacement, generator)
        return exact.run("torch.multinomial", kernel, [probs], chain)
    exact.same_batched_check("torch.multinomial", [probs])
    a = get_aval(probs)
    k = a.shape[-1]
    lead = a.shape[:-1]
    if not replacement and num_samples > k:
        raise ValueError(
            f"multinomial: cannot draw {num_samples} samples without replacement from {k} "
            "categories"
        )
    if replacement:
        # inverse CDF: the number of cumulative weights at or below each uniform draw
        cdf = torch.cumsum(probs, -1)
        total = cdf[..., -1:]
        u = (
            draw(
                "uniform", lead + (num_samples,), a.dtype, a.device, "torch.multinomial", generator
            )
            * total
        )
        idx = (cdf.unsqueeze(-2) <= u.unsqueeze(-1)).to(torch.int64).sum(-1)
        return idx.clamp(max=k - 1)
    # Gumbel top-k: the categories with the largest log-weight + Gumbel noise, in order
    u = draw("uniform", lead + (k,), torch.float64, a.device, "torch.multinomial", generator)
    gumbel = -torch.log(-torch.log(u.clamp(min=1e-300)))
    keys = torch.where(probs > 0, torch.log(probs.to(torch.float64)) + gumbel, -math.inf)
    rank = _ranks(keys, k, "torch.multinomial")
    order = torch.arange(num_samples, device=a.device)
    hit = rank.unsqueeze(-2) == order.unsqueeze(-1)  # [..., sample, category]
    return torch.argmax(hit.to(torch.int64), -1)


def _refuse(name):
    def impl(*args, **kwargs):
        raise NotImplementedError(
            f"{name} is not supported under a thunderx transform (at {user_frame()}): its "
            "draw would be fixed at trace time; use torch.rand / torch.randn and transform them"
        )

    return impl


def _kernel_only(fn, name):
    """A random op without a decomposition (rejection samplers: poisson, binomial, gamma,
    dirichlet): torch's kernel under eager vmap; refused where its draw would be staged."""

    def impl(*args, **kwargs):
        out = exact.call(name, fn, args, kwargs)
        if out is not exact.NOT_EXACT:
            return out
        _vmap_mode(name)  # randomness='error' raises torch.func's error first
        return _refuse(name)()

    return impl


def _rrelu(x, lower, upper, training):
    """Eval mode: leaky_relu with the mean slope. Training: torch's kernel under eager vmap (a
    slope drawn per element), refused where the draw would be staged."""
    if not training:
        return F.leaky_relu(x, (lower + upper) / 2)
    out = exact.call("F.rrelu", torch.rrelu, (x, lower, upper, True), {})
    if out is not exact.NOT_EXACT:
        return out
    _vmap_mode("F.rrelu")
    return _refuse("F.rrelu(training=True)")()


RANDOM_FUNCTIONS = {
    torch.rand: _rand("uniform", "torch.rand"),
    torch.randn: _rand("normal", "torch.randn"),
    torch.rand_like: _rand_like("uniform", "torch.rand_like"),
    torch.randn_like: _rand_like("normal", "torch.randn_like"),
    torch.bernoulli: _bernoulli,
    torch.randint: _randint,
    torch.randperm: _randperm,
    torch.normal: _normal,
    torch.multinomial: _multinomial,
    torch.poisson: _kernel_only(torch.poisson, "torch.poisson"),
    torch.binomial: _kernel_only(torch.binomial, "torch.binomial"),
    torch._standard_gamma: _kernel_only(torch._standard_gamma, "torch._standard_gamma"),
    torch._sample_dirichlet: _kernel_only(torch._sample_dirichlet, "torch._sample_dirichlet"),
    F.rrelu: lambda x, lower=1 / 8, upper=1 / 3, training=False, inplace=False: _rrelu(
        x, lower, upper, training
    ),
}


def _no_out_under_vmap(impl, fn):
    name = torch.overrides.resolve_name(fn) or getattr(fn, "__name__", "a random op")

    def checked(*args, **kwargs):
        if kwargs.get("out") is not None and next(_batch_traces(), None) is not None:
            raise RandomnessError(
                f"vmap: We do not support calling out variants of random operations inside of "
                f"vmap (at {user_frame()}); call the out-of-place form and copy its result"
            )
        if not _modes.forbidden:
            return impl(*args, **kwargs)
        # under forbid_random: the error comes where a draw would be made (check_forbidden),
        # so a call that draws nothing (dropout in eval mode or with p=0) passes, as in torch
        _modes.calling.append(name)
        try:
            return impl(*args, **kwargs)
        finally:
            _modes.calling.pop()

    return checked


def register_random(fn, impl, method: str | None = None) -> None:
    """Route `fn` to `impl` under every transform: through RandomnessMode (calls without a
    traced argument, under vmap and staging) and through the language table (calls with one,
    under grad and jvp too, which run no mode); `method` also names it as a Tensor method."""
    impl = _no_out_under_vmap(impl, fn)
    RANDOM_FUNCTIONS[fn] = impl
    torch_table.setdefault(fn, impl)
    if method is not None:
        method_table[method] = impl


for _fn, _impl in list(RANDOM_FUNCTIONS.items()):
    register_random(_fn, _impl)


class RandomnessMode(TorchFunctionMode):
    """Routes torch's random functions to `draw` while a transform is tracing. A mode with no
    trace marks a staging trace (jit, make_jaxpr, reverse mode): the generators its draws
    advanced are put back when it ends, because the staged program draws again when it runs."""

    def __init__(self, trace):
        super().__init__()
        self.trace = trace
        self.generators: dict = {}  # id -> (weakref, state before this trace's first draw)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        handler = RANDOM_FUNCTIONS.get(unbound.original_of.get(func, func))
        if handler is not None:
            return handler(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        _modes.stack.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        _modes.stack.pop()
        for ref, state in self.generators.values():
            gen = ref()
            if gen is not None:
                gen.set_state(state)
        return super().__exit__(*exc)

    def remember(self, gen) -> None:
        if id(gen) not in self.generators:
            self.generators[id(gen)] = (weakref.ref(gen), gen.get_state())


def _generator_draw(kind, shape, dtype, device, generator):
    fn = torch.rand if kind == "uniform" else torch.randn
    return runtime_draw(fn, (tuple(shape),), dtype, device, generator)


def _vmap_mode(name: str) -> bool:
    """Checks the enclosing vmaps' `randomness`; True when one of them wants different draws."""
    check_forbidden()
    different = False
    for bt in _batch_traces():
        if bt.randomness == "error":
            raise _randomness_error(name)
        different = different or bt.randomness == "different"
    return different


def _register_effects():
    # A draw must run once per occurrence: never merged with an equal one, never folded.
    from thunderx.lang.fallback import torch_call_p
    from thunderx.passes import effectful_primitives

    effectful_primitives.update({C.random_uniform_p, C.random_normal_p, torch_call_p})


_register_effects()
