"""Rule conformance generated from the registry: every primitive, every rule it should have,
checked on hypothesis-drawn operands. A new primitive is tested by adding a sample generator."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import thunderx
from thunderx import core
from thunderx.avals import is_float
from thunderx.core import get_aval
from thunderx.testing import check_grads, check_jit, check_transpose, check_vmap
from thunderx.testing.checks import _inner

from .samples import COMPLEX_PRIMS, EXCLUDED, SAMPLES, Draw

ALL = sorted(core.primitives)
TESTED = [n for n in ALL if n not in EXCLUDED]


def test_every_primitive_has_samples_or_a_reason():
    missing = [n for n in ALL if n not in SAMPLES and n not in EXCLUDED]
    assert not missing, f"primitives without sample generators: {missing}"


def test_every_primitive_has_its_rules():
    problems = []
    for name, prim in core.primitives.items():
        if prim not in core.abstract_eval_rules:
            problems.append(f"{name}: abstract_eval")
        if prim not in core.impl_rules:
            problems.append(f"{name}: impl")
        if prim not in core.batch_rules and name not in (
            "iota",
            "full",
            "random_uniform",
            "random_normal",
            "torch_call",
            "axis_index",  # no operands: only the vmap binding its axis name batches it
        ):
            problems.append(f"{name}: batch")
        if prim in core.linear_primitives and prim not in core.transpose_rules:
            problems.append(f"{name}: transpose (it is linear)")
    # jvp: every primitive with floating outputs needs a rule or a listed reason
    for name in TESTED:
        prim = core.primitives[name]
        if prim in core.jvp_rules or prim in core.not_differentiable:
            continue
        sample = _first_sample(name)
        outs = _avals_out(prim, sample)
        if any(is_float(a.dtype) for a in outs):
            problems.append(f"{name}: jvp (has floating outputs)")
    assert not problems, "missing rules:\n" + "\n".join(problems)


def _first_sample(name):
    @given(st.data())
    def grab(data):
        grab.result = SAMPLES[name](Draw(data))

    grab()
    return grab.result


def _avals_out(prim, sample):
    out = core.abstract_eval(prim, [get_aval(a) for a in sample.args], sample.params)
    return out if prim.multiple_results else [out]


def _bound(prim, sample, positions):
    """A function of the tensors at `positions`; the other operands stay fixed."""

    def f(*xs):
        args = list(sample.args)
        for p, x in zip(positions, xs):
            args[p] = sample.prepare[p](x) if p in sample.prepare else x
        out = prim.bind(*args, **sample.params)
        return tuple(out) if prim.multiple_results else out

    return f


def _float_positions(sample):
    return [
        i
        for i, a in enumerate(sample.args)
        if isinstance(a, torch.Tensor) and a.dtype.is_floating_point
    ]


def _tensor_positions(sample):
    return [i for i, a in enumerate(sample.args) if isinstance(a, torch.Tensor)]


@pytest.mark.parametrize("name", TESTED)
@given(data=st.data())
def test_abstract_eval_matches_impl(name, data):
    prim = core.primitives[name]
    sample = SAMPLES[name](Draw(data))
    avals = _avals_out(prim, sample)
    out = prim.bind(*sample.args, **sample.params)
    outs = out if prim.multiple_results else [out]
    for a, o in zip(avals, outs):
        assert tuple(o.shape) == a.shape, f"{name}: impl shape {tuple(o.shape)}, abstract {a.shape}"
        assert o.dtype == a.dtype, f"{name}: impl dtype {o.dtype}, abstract {a.dtype}"


DIFFERENTIABLE = [
    n for n in TESTED if core.primitives[n] in core.jvp_rules and n not in COMPLEX_PRIMS
]


def _differentiable(name, data):
    """A sample of a differentiable primitive as a function of its floating operands."""
    prim = core.primitives[name]
    sample = SAMPLES[name](Draw(data))
    pos = _float_positions(sample)
    assert pos and any(is_float(a.dtype) for a in _avals_out(prim, sample)), (
        f"{name}: its sample has nothing to differentiate"
    )
    return prim, sample, pos, _bound(prim, sample, pos)


# stop_gradient's tangent is zero by definition, not the identity's derivative
FD_CHECKED = [n for n in DIFFERENTIABLE if n not in ("stop_gradient", "no_grad")]


@pytest.mark.parametrize("name", FD_CHECKED)
@given(data=st.data())
def test_jvp_matches_finite_differences(name, data):
    prim, sample, pos, f = _differentiable(name, data)
    check_grads(
        f,
        [sample.args[p] for p in pos],
        order=1,
        modes=("fwd",),
        eps=sample.eps,
        rtol=sample.rtol,
        atol=max(sample.atol, 1e-5),
    )


# no_grad's forward-mode derivative is the identity and its reverse-mode one zero (torch's no_grad
# blocks), so the two are not each other's transpose by design: tests/test_semantics.py
@pytest.mark.parametrize("name", [n for n in DIFFERENTIABLE if n != "no_grad"])
@given(data=st.data())
def test_vjp_is_the_transpose_of_jvp(name, data):
    prim, sample, pos, f = _differentiable(name, data)
    primals = [sample.args[p] for p in pos]
    gen = torch.Generator().manual_seed(0)
    ts = [torch.randn(p.shape, dtype=p.dtype, generator=gen) for p in primals]
    out, t_out = thunderx.jvp(f, tuple(primals), tuple(ts))
    _, f_vjp = thunderx.vjp(f, *primals)
    ct = thunderx.tree.map(
        lambda o: (
            torch.randn(o.shape, dtype=o.dtype, generator=gen)
            if o.dtype.is_floating_point
            else torch.zeros_like(o)
        ),
        out,
    )
    lhs = _inner(ct, t_out)
    rhs = _inner(f_vjp(ct), ts)
    assert torch.allclose(lhs, rhs, rtol=1e-6, atol=1e-8), (
        f"{name}: <ct, J t>={lhs} <J^T ct, t>={rhs}"
    )


LINEAR = [
    n for n in TESTED if core.primitives[n] in core.linear_primitives and n not in COMPLEX_PRIMS
]
# For bilinear primitives only the first operand is taken as the linear one.
_BILINEAR = {"mul", "div", "dot_general", "conv", "conv_kernel_grad", "conv_input_grad"}
# The backward kernels of composites are linear in their gradient operand (the first) only.
_LINEAR_IN_GRAD = {
    n
    for n in TESTED
    if n.endswith(("_backward", "_jvp")) and core.primitives[n] in core.linear_primitives
}
# Linear in the second operand only (the first is a coefficient matrix).
_LINEAR_IN_SECOND = {"triangular_solve", "expm_frechet"}
# Linear in every operand after the first two (x and the weight: layer_norm's tangent with its
# affine in the tangents, its transpose in the cotangent).
_LINEAR_AFTER_TWO = {
    "layer_norm_affine_tangent",
    "layer_norm_affine_cotangent",
    "channel_norm_affine_tangent",
    "channel_norm_affine_cotangent",
}
# Linear in its first three operands (the tangents of q, k and v).
_LINEAR_IN_FIRST_THREE = {"sdpa_jvp"}
# Linear in a leading group whose size depends on the layer: rnn_jvp in the tangents (the first
# half of its operands), rnn_backward in the cotangents of (output, h[, c]); lerp in its start
# and end together (for a fixed weight).
_LINEAR_GROUP = {
    "rnn_jvp": lambda s: len(s.args) // 2,
    "rnn_backward": lambda s: 3 if s.params["mode"] == "lstm" else 2,
    "lerp": lambda s: 2,
}


@pytest.mark.parametrize("name", LINEAR)
@given(data=st.data())
def test_transpose_dot_product_identity(name, data):
    prim = core.primitives[name]
    sample = SAMPLES[name](Draw(data))
    pos = _float_positions(sample)
    if name in ("add", "sub", "mul", "div") and not isinstance(sample.args[0], torch.Tensor):
        return  # a Python scalar operand makes it affine, or the linear operand is not a tensor
    if name in ("add", "sub") and len(pos) < 2:
        return
    if name in _LINEAR_IN_FIRST_THREE:
        pos = pos[:3]
    elif name in _LINEAR_GROUP:
        pos = pos[: _LINEAR_GROUP[name](sample)]
    elif name in _BILINEAR or name in _LINEAR_IN_GRAD:
        pos = pos[:1]
    if name == "select":
        pos = [1, 2]
    if name in _LINEAR_IN_SECOND:
        pos = [1]
    if name in _LINEAR_AFTER_TWO:
        pos = [p for p in pos if p >= 2]
    if name == "pad":
        sample.args[1] = 0.0  # with a nonzero padding value pad is affine, not linear
    check_transpose(_bound(prim, sample, pos), [sample.args[p] for p in pos])


def _stacked(a, size, axis=0):
    """`size` copies of an operand along a new axis; floating copies differ so a batching rule
    that mixes batch elements is caught."""
    copies = [a * (1 + 0.1 * b) if a.dtype.is_floating_point else a for b in range(size)]
    return torch.stack(copies, axis if axis >= 0 else a.dim() + 1 + axis)


# primitives with array operands to batch (iota and full take none)
BATCHED = [
    n for n in TESTED if core.primitives[n] in core.batch_rules and n not in ("iota", "full")
]


@pytest.mark.parametrize("name", BATCHED)
@given(data=st.data())
def test_vmap_matches_loop(name, data):
    prim = core.primitives[name]
    d = Draw(data)
    sample = SAMPLES[name](d)
    pos = _tensor_positions(sample)
    axes = [d.choice([0, -1, None]) for _ in pos]
    if all(a is None for a in axes):
        axes[d.int(0, len(axes) - 1)] = 0
    batched = [
        sample.args[p] if ax is None else _stacked(sample.args[p], 3, ax)
        for p, ax in zip(pos, axes)
    ]
    check_vmap(_bound(prim, sample, pos), batched, in_axes=tuple(axes))


@pytest.mark.parametrize("name", TESTED)
@given(data=st.data())
def test_jit_matches_eager(name, data):
    prim = core.primitives[name]
    sample = SAMPLES[name](Draw(data))
    pos = _tensor_positions(sample)
    check_jit(_bound(prim, sample, pos), [sample.args[p] for p in pos])


@pytest.mark.parametrize("name", BATCHED)
@given(data=st.data())
def test_nested_vmap_matches_loop(name, data):
    prim = core.primitives[name]
    sample = SAMPLES[name](Draw(data))
    pos = _tensor_positions(sample)
    f = _bound(prim, sample, pos)
    # scaled once (a second scaling could leave a primitive's domain), then repeated: [2, 2, ...]
    batched = [torch.stack([_stacked(sample.args[p], 2)] * 2, 1) for p in pos]
    got = thunderx.vmap(thunderx.vmap(f))(*batched)
    rows = [[f(*[b[i, j] for b in batched]) for j in range(2)] for i in range(2)]
    want = thunderx.tree.map(
        lambda *xs: torch.stack([torch.as_tensor(x) for x in xs]).reshape(2, 2, *xs[0].shape),
        *[r for row in rows for r in row],
    )
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_stop_gradient_has_zero_tangent():
    x = torch.randn(3, dtype=torch.float64)
    _, t = thunderx.jvp(
        lambda v: thunderx.stop_gradient(v) * v, (x,), (torch.ones(3, dtype=torch.float64),)
    )
    torch.testing.assert_close(t, x)


@given(data=st.data())
def test_conv_transpose_in_the_kernel(data):
    sample = SAMPLES["conv"](Draw(data))
    prim = core.primitives["conv"]
    check_transpose(_bound(prim, sample, [1]), [sample.args[1]])


@given(data=st.data())
def test_pad_with_a_batched_padding_value(data):
    sample = SAMPLES["pad"](Draw(data))
    x = sample.args[0]
    values = torch.randn(3, dtype=x.dtype)
    f = _bound(core.primitives["pad"], sample, [0, 1])
    check_vmap(f, [x, values], in_axes=(None, 0))
    check_vmap(f, [_stacked(x, 3), values], in_axes=(0, 0))
