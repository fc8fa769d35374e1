"""torch autograd over gradients thunderx computed (MAML's outer loop: `torch.autograd.grad` of
a loss of `thunderx.grad`'s results), against the same composition on torch.func.

A composite whose torch kernel has no derivative in torch (native_group_norm_backward,
silu_backward, mish_backward, the fused attention backward), or whose derivative in torch treats
an output as a constant (fused attention's logsumexp), runs that kernel inside a Function whose
derivative is thunderx's wherever torch autograd records it (Properties.kernel_differentiable,
primitives/kernel_autograd.py): eagerly, and in the program jit runs under torch autograd."""

import math

import pytest
import torch
import torch.func as tf
import torch.nn as nn
import torch.nn.functional as F

import thunderx as tx
from thunderx import core

from .test_properties import CHECKED, _samples

D = torch.float64


def _math_attention(q, k, v):
    """Attention written out (softmax(q k^T / sqrt(E)) v): torch autograd differentiates it to
    any order, unlike torch's fused kernel."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ v


class Attention(nn.Module):
    def __init__(self, d, fused: bool):
        super().__init__()
        self.proj, self.fused = nn.Linear(d, 3 * d), fused

    def forward(self, x):
        q, k, v = self.proj(x)[None, None].chunk(3, -1)
        if self.fused:
            return F.scaled_dot_product_attention(q, k, v)
        return _math_attention(q, k, v)


def _module(name):
    torch.manual_seed(0)
    if name == "group_norm":
        return nn.Sequential(nn.Linear(6, 8), nn.Unflatten(-1, (4, 2)), nn.GroupNorm(2, 4)), None
    if name == "group_norm_plain":
        unflat = nn.Unflatten(-1, (3, 2))
        return nn.Sequential(nn.Linear(6, 6), unflat, nn.GroupNorm(3, 3, affine=False)), None
    if name in ("silu", "mish"):
        act = nn.SiLU() if name == "silu" else nn.Mish()
        return nn.Sequential(nn.Linear(6, 5), act, nn.Linear(5, 3), act), None
    assert name == "attention"
    return Attention(6, fused=True), Attention(6, fused=False)


def _inputs(mode):
    """Five examples for the vmapped modes, one otherwise."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 3, 6, generator=g, dtype=D)
    return x if "vmap" in mode else x[0]


def _outer_gradient(mod, lib, mode, x):
    """d/dparams of sum(inner gradient ** 2), the inner gradient taken by `lib` in `mode`, the
    outer one by torch autograd."""
    params = {k: v.detach().clone().requires_grad_() for k, v in mod.named_parameters()}
    call = tx.functional_call if lib is tx else tf.functional_call

    def loss(p, x):
        return (call(mod, p, (x,)) ** 3).sum()

    if mode == "grad":
        g = lib.grad(loss)(params, x)
    elif mode == "jit(grad)":
        g = tx.jit(tx.grad(loss))(params, x)
    elif mode == "vmap(grad)":
        g = lib.vmap(lib.grad(loss), (None, 0))(params, x)
    else:
        assert mode == "jit(vmap(grad))"
        g = tx.jit(tx.vmap(tx.grad(loss), (None, 0)))(params, x)
    inner = sum((v**2).sum() for v in g.values())
    return torch.autograd.grad(inner, list(params.values()))


MODES = ["grad", "jit(grad)", "vmap(grad)", "jit(vmap(grad))"]
UNJITTED = {"jit(grad)": "grad", "jit(vmap(grad))": "vmap(grad)"}  # torch.func's peer


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["group_norm", "group_norm_plain", "silu", "mish", "attention"])
def test_torch_autograd_differentiates_thunderx_gradients(name, mode):
    mod, oracle_mod = _module(name)
    mod = mod.to(D)
    x = _inputs(mode)
    ours = _outer_gradient(mod, tx, mode, x)
    if oracle_mod is not None:  # torch.func refuses the fused kernel: its math, same weights
        oracle_mod = oracle_mod.to(D)
        oracle_mod.load_state_dict(mod.state_dict())
        mod = oracle_mod
    theirs = _outer_gradient(mod, tf, UNJITTED.get(mode, mode), x)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


# no derivative in thunderx either: they cut the graph on purpose, or have no jvp rule
_CONSTANT_BY_DESIGN = {"no_grad", "stop_gradient", "batch_norm_stats"}


def _torch_autograd_gaps(name, runs=10):
    """Over samples of primitive `name`: whether torch autograd failed to differentiate its
    kernel (the implementation without thunderx's fallback), and the positions of non-empty
    floating outputs it left without a graph while a floating operand required grad."""
    prim = core.primitives[name]
    kernel = core.impl_rules[prim]
    kernel = getattr(kernel, "kernel", kernel)
    fails, constant = False, set()
    for s in _samples(name, runs):
        args = [
            a.detach().clone().requires_grad_()
            if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())
            else a
            for a in s.args
        ]
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        if not leaves:
            continue
        try:
            out = kernel(*args, **s.params)
        except Exception:  # noqa: BLE001 - operands this kernel refuses: not this test's point
            continue
        outs = list(out) if prim.multiple_results else [out]
        floating = [
            (i, o)
            for i, o in enumerate(outs)
            if isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex())
        ]
        constant |= {i for i, o in floating if not o.requires_grad and o.numel()}
        graph = [o for _, o in floating if o.requires_grad]
        if graph:
            try:
                torch.autograd.grad(sum(o.abs().sum() for o in graph), leaves, allow_unused=True)
            except RuntimeError as e:
                assert "not implemented" in str(e), e
                fails = True
    return fails, constant


@pytest.mark.parametrize(
    "name",
    [n for n in CHECKED if not core.primitives[n].props.effects and n not in _CONSTANT_BY_DESIGN],
)
def test_torch_autograd_properties_are_declared_as_torch_behaves(name):
    props = core.primitives[name].props
    bridged = not props.kernel_differentiable or bool(props.kernel_constant_outputs)
    impl = core.impl_rules[core.primitives[name]]
    assert bridged == hasattr(impl, "kernel"), f"{name}: its declaration and its implementation"
    fails, constant = _torch_autograd_gaps(name)
    assert fails == (not props.kernel_differentiable), (
        f"{name}: torch autograd {'cannot' if fails else 'can'} differentiate its kernel; "
        f"declare kernel_differentiable={not fails}"
    )
    assert constant == set(props.kernel_constant_outputs), (
        f"{name}: torch autograd treats outputs {sorted(constant)} as constants; declare "
        f"kernel_constant_outputs={tuple(sorted(constant))}"
    )


@pytest.mark.parametrize("include_self", [False, True])
def test_torch_autograd_over_the_gradient_of_a_product_reduction_with_zeros(include_self):
    """index_reduce / scatter_reduce with "prod" over groups holding one zero, two zeros, none,
    and (include_self=False) a zero x[p] that takes no part: thunderx's derivative formula, run
    eagerly under torch autograd, divided a masked branch by that zero (nan where torch gives
    0) and gave the one-zero group's other elements a constant 0 coefficient (0 where torch's
    derivative in the zero is the others' product: differential seed 7004160)."""
    x = torch.tensor([[0.0, 0.0, 0.0], [0.0, 2.0, 2.1], [1.1, 0.0, 0.5]], dtype=D)
    src = torch.tensor([[1.6, 0.0, 0.9], [0.0, -0.9, 0.0], [-0.9, 0.2, 0.0]], dtype=D)
    idx = torch.tensor([1, 2, 2])
    w = torch.linspace(-1.0, 1.0, 9, dtype=D).reshape(3, 3)

    def f(x, src):
        return (x.index_reduce(0, idx, src, "prod", include_self=include_self) * w).sum()

    def outer(grad):
        xs = [x.clone().requires_grad_(), src.clone().requires_grad_()]
        gs = grad(f, argnums=(0, 1))(*xs)
        inner = sum((g * torch.linspace(0.5, 1.5, 9, dtype=D).reshape(3, 3)).sum() for g in gs)
        return torch.autograd.grad(inner, xs)

    for a, b in zip(outer(tx.grad), outer(tf.grad)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("name", ["group_norm", "silu", "attention"])
def test_torch_func_transforms_over_thunderx_gradients(name, jit):
    """torch.func.grad (and vmap of it) over thunderx's gradient: functorch's own autograd
    differentiates the same Functions."""
    mod, oracle_mod = _module(name)
    mod = mod.to(D)
    if oracle_mod is not None:
        oracle_mod = oracle_mod.to(D)
        oracle_mod.load_state_dict(mod.state_dict())
    params = {k: v.detach() for k, v in mod.named_parameters()}
    xs = _inputs("vmap")[:2]

    def outer(lib, m):
        call = tx.functional_call if lib is tx else tf.functional_call
        inner = lib.grad(lambda p, x: (call(m, p, (x,)) ** 3).sum())
        inner = tx.jit(inner) if jit and lib is tx else inner
        g = tf.grad(lambda p, x: sum((v**2).sum() for v in inner(p, x).values()))
        return tf.vmap(g, (None, 0))(params, xs)

    ours, theirs = outer(tx, mod), outer(tf, oracle_mod or mod)
    for k in ours:
        torch.testing.assert_close(ours[k], theirs[k], rtol=1e-9, atol=1e-9)


def test_declared_kernels_fail_under_torch_autograd_and_their_primitives_do_not():
    """The declaration is needed (torch cannot differentiate the kernel itself) and works: the
    primitive's implementation gives the kernel's values bit for bit and differentiates, to the
    second order, as finite differences say (gradcheck, gradgradcheck)."""
    from thunderx.primitives import composite_activation as act

    x = torch.randn(7, dtype=D, requires_grad=True)
    g = torch.randn(7, dtype=D, requires_grad=True)
    prim = act.silu_backward_p
    assert not prim.props.kernel_differentiable
    impl = core.impl_rules[prim]
    with pytest.raises(RuntimeError, match="not implemented"):
        torch.autograd.grad(impl.kernel(g, x).sum(), (g, x))
    assert torch.equal(impl(g, x), impl.kernel(g, x))
    assert torch.autograd.gradcheck(lambda g, x: impl(g, x), (g, x))
    assert torch.autograd.gradgradcheck(lambda g, x: impl(g, x), (g, x))
    # outside torch autograd the kernel runs (no graph recorded)
    with torch.no_grad():
        assert not impl(g, x).requires_grad


def test_a_kernel_declared_not_differentiable_needs_a_derivative_rule():
    with pytest.raises(TypeError, match="needs a jvp rule"):
        core.declare(
            "_probe_without_decomposition",
            abstract_eval=lambda a: a,
            impl=lambda a: a,
            kernel_differentiable=False,
        )
    assert "_probe_without_decomposition" not in core.primitives
