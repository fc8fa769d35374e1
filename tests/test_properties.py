"""Generated tests that make each primitive's declared properties true (as torch's OpInfo
aliasing checks read `native_functions.yaml`): run the implementation and the generated torch
code on samples and compare storage sharing, in-place forms, random-state effects and
elementwise behaviour with what the primitive declares. Then the executor's buffer reuse, now
driven by the declarations, against eager torch on programs that reuse buffers."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import thunderx as tx
from thunderx import core
from thunderx.core import ALL_OPERANDS
from thunderx.executors.sources import exec_source
from thunderx.executors.torch_codegen import base_namespace, generate_source
from thunderx.passes import closure_convert
from thunderx.testing.programs import (
    NOT_GENERATED,
    random_programs,
    run_program,
    single_step_programs,
)

from .samples import EXCLUDED, SAMPLES, Draw, Sample

ALL = sorted(core.primitives)
RUNS = 20  # samples per primitive for the aliasing and overlap observations


def _random_sample(d: Draw) -> Sample:
    return Sample(
        [], {"shape": d.shape(min_rank=1), "dtype": torch.float64, "device": torch.device("cpu")}
    )


def _debug_sample(d: Draw) -> Sample:
    return Sample([d.tensor(d.shape())], {"callback": lambda *xs: None})


# Random draws and callbacks are left out of the rule samples (their values are random, their
# effects are the point); their properties are still checked here.
PROPERTY_SAMPLES = dict(SAMPLES, random_uniform=_random_sample, random_normal=_random_sample)
PROPERTY_SAMPLES["debug_callback"] = _debug_sample
CHECKED = [n for n in ALL if n in PROPERTY_SAMPLES]


# Unsampled primitives whose declared aliases are narrower than ALL_OPERANDS, and why.
UNSAMPLED_WITH_ALIASES = {
    "custom_lin": "has no implementation (only its transpose runs)",
    "shard_slice": "needs a process group (tests/test_distributed.py); the operand itself when "
    "unsharded, so aliases=(0,)",
    "shard_gather": "needs a process group (tests/test_distributed.py); the operand itself when "
    "unsharded, so aliases=(0,)",
}


def undeclared(registry) -> list:
    return sorted(n for n, p in registry.items() if not p.props.declared)


def test_every_primitive_declares_its_properties():
    missing = undeclared(core.primitives)
    assert not missing, (
        f"primitives made with new_primitive but never declared: {missing}; create them with "
        "core.declare(name, ..., aliases=, inplace=, effects=, elementwise=)"
    )


def test_a_primitive_without_declared_properties_is_caught():
    prim = core.new_primitive("_undeclared_probe")
    try:
        assert undeclared(core.primitives) == ["_undeclared_probe"]
        # until declared, executors and passes treat it conservatively
        assert prim.props.alias_positions(2) == (0, 1) and prim.props.effects
    finally:
        del core.primitives["_undeclared_probe"]


def test_every_primitive_is_checked_here_or_has_a_reason():
    unchecked = [n for n in ALL if n not in PROPERTY_SAMPLES and n not in EXCLUDED]
    assert not unchecked, f"primitives without samples for the property tests: {unchecked}"
    for name in EXCLUDED:
        if name in core.primitives and name not in PROPERTY_SAMPLES:
            # a call or opaque primitive: whatever it runs may alias its operands
            assert (
                core.primitives[name].props.aliases == ALL_OPERANDS
                or name in UNSAMPLED_WITH_ALIASES
            ), f"{name} is not sampled, so it must declare the conservative aliases=ALL_OPERANDS"


def _samples(name, n=RUNS):
    out = []

    @settings(max_examples=n, derandomize=True, database=None)
    @given(st.data())
    def draw(data):
        out.append(PROPERTY_SAMPLES[name](Draw(data)))

    draw()
    return out


def _outputs(prim, out):
    return list(out) if prim.multiple_results else [out]


def _shares(a, b) -> bool:
    """Whether two tensors share storage (empty ones own no memory)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    if a.numel() == 0 or b.numel() == 0:
        return False
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _elements_overlap(t) -> bool:
    """Whether two elements of t lie at the same address (any strides, not only zero ones)."""
    offset = torch.tensor(t.storage_offset())
    for n, step in zip(t.shape, t.stride()):
        offset = offset.unsqueeze(-1) + torch.arange(n) * step
    return offset.unique().numel() < t.numel()


def _generated(prim, sample):
    """The primitive alone as a program of the torch executor, without buffer reuse (and
    without the decompositions of the variant torch autograd runs through); returns (program,
    tensor operands)."""
    pos = [i for i, a in enumerate(sample.args) if isinstance(a, torch.Tensor)]

    def f(*xs):
        args = list(sample.args)
        for p, x in zip(pos, xs):
            args[p] = x
        return prim.bind(*args, **sample.params)

    tensors = [sample.args[p] for p in pos]
    closed = tx.make_jaxpr(f)(*tensors)
    src, ns = generate_source(
        closure_convert(closed.jaxpr), "jitted", False, namespace=base_namespace()
    )
    fn = exec_source(src, ns, "jitted")
    return (lambda *xs: fn(*closed.consts, *xs)), tensors, pos


def _observe(name):
    """For each sample: which operand positions each output shares storage with (impl and
    generated code), and whether a fresh output overlaps itself."""
    prim = core.primitives[name]
    seen_alias, seen_overlap, problems = set(), False, []
    declared = prim.props.alias_positions(99)
    for sample in _samples(name):
        outs = _outputs(prim, core.impl_rules[prim](*sample.args, **sample.params))
        fn, tensors, pos = _generated(prim, sample)
        gen_outs = list(fn(*tensors))
        for where, results, operands in (
            ("impl", outs, list(enumerate(sample.args))),
            ("generated code", gen_outs, list(zip(pos, tensors))),
        ):
            for k, o in enumerate(results):
                shared = {i for i, a in operands if _shares(o, a)}
                seen_alias |= shared
                undeclared = shared - set(declared)
                if undeclared:
                    problems.append(
                        f"{where}: output {k} shares storage with operand(s) {sorted(undeclared)} "
                        f"but {name} declares aliases={prim.props.aliases!r} (params "
                        f"{sample.params})"
                    )
                if shared and not prim.props.overlapping:
                    # executors write into such a view of a dead buffer (torch_codegen)
                    for i in shared:
                        a = dict(operands)[i]
                        if not _elements_overlap(a) and _elements_overlap(o):
                            problems.append(
                                f"{where}: output {k} is a view of operand {i} whose elements "
                                f"overlap; {name} must declare overlapping=True"
                            )
                if not shared and isinstance(o, torch.Tensor) and _elements_overlap(o):
                    seen_overlap = True
                    if not prim.props.overlapping:
                        problems.append(
                            f"{where}: output {k} is fresh but its elements overlap (an expand); "
                            f"{name} must declare overlapping=True"
                        )
    return seen_alias, seen_overlap, problems


@pytest.mark.parametrize("name", CHECKED)
def test_declared_aliases_match_the_implementation(name):
    prim = core.primitives[name]
    seen_alias, seen_overlap, problems = _observe(name)
    assert not problems, "\n".join(problems[:5])
    # the reverse: a declared view that never is one costs buffer reuse for nothing
    if prim.props.aliases != ALL_OPERANDS:
        never = set(prim.props.aliases) - seen_alias
        assert not never, (
            f"{name} declares aliases={prim.props.aliases} but operand(s) {sorted(never)} never "
            f"shared storage with an output in {RUNS} samples"
        )
    if prim.props.overlapping and not prim.props.aliases:
        assert seen_overlap, f"{name} declares overlapping=True but no output ever overlapped"


INPLACE = [n for n in CHECKED if core.primitives[n].props.inplace]


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_form_exists_and_computes_the_same(name):
    prim = core.primitives[name]
    method = prim.props.inplace
    assert hasattr(torch.Tensor, method), f"{name}: torch.Tensor has no method {method}"
    checked = 0
    for sample in _samples(name, 10):
        x = sample.args[0]
        if not isinstance(x, torch.Tensor):
            continue  # the in-place form writes into operand 0, which must be a tensor
        want = core.impl_rules[prim](*sample.args, **sample.params)
        if want.dtype != x.dtype or want.shape != x.shape:
            continue  # the executor only writes into a buffer of the output's shape and dtype
        buf = x.clone()
        got = getattr(buf, method)(*sample.args[1:], **sample.params)
        assert got is buf, f"{name}: {method} should return the tensor it wrote into"
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
        checked += 1
    assert checked, f"{name}: no sample let the in-place form run"


INPLACE_OUT = [n for n in CHECKED if core.primitives[n].props.inplace_out]


@pytest.mark.parametrize("name", INPLACE_OUT)
def test_out_overload_writes_into_any_operand_and_computes_the_same(name):
    # the executor calls the out= overload with a dead operand (any of them) as the out buffer
    from thunderx.executors.inplace import inplace_out_source

    prim = core.primitives[name]
    assert prim.props.elementwise, f"{name}: an out= overload over an operand needs elementwise"
    checked = 0
    for sample in _samples(name, 10):
        want = core.impl_rules[prim](*sample.args, **sample.params)
        for k, x in enumerate(sample.args):
            if not isinstance(x, torch.Tensor) or x.dtype != want.dtype or x.shape != want.shape:
                continue
            args = [a.clone() if isinstance(a, torch.Tensor) else a for a in sample.args]
            names = [f"a{j}" for j in range(len(args))]
            src = inplace_out_source(prim.props.inplace_out, names, sample.params, names[k])
            got = eval(src, {"torch": torch, **dict(zip(names, args))})
            assert got.data_ptr() == args[k].data_ptr(), f"{name}: {src} wrote elsewhere"
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
            checked += 1
    assert checked, f"{name}: no sample let the out= overload run"


@pytest.mark.parametrize(
    "kw, why",
    [
        (dict(inplace_out="threshold_backward.grad_input"), "needs elementwise=True"),
        (dict(inplace_out="threshold_backward.no_such", elementwise=True), "no aten out="),
        (dict(inplace_out="threshold_backward", elementwise=True), "no aten out="),
    ],
)
def test_a_wrong_out_overload_is_refused_at_declaration(kw, why):
    with pytest.raises(ValueError, match=why):
        core.declare("_out_probe", abstract_eval=lambda x: x, impl=lambda x: x, **kw)
    assert "_out_probe" not in core.primitives  # refused before the name was registered


COMMUTATIVE = [n for n in CHECKED if core.primitives[n].props.commutative]


@pytest.mark.parametrize("name", COMMUTATIVE)
def test_commutative_ops_may_write_into_either_operand(name):
    # the executor writes `y.<inplace>(x)` for a dead y: that must equal impl(x, y)
    prim = core.primitives[name]
    impl, method = core.impl_rules[prim], prim.props.inplace
    for sample in _samples(name, 10):
        x, y = sample.args
        want = impl(x, y)
        torch.testing.assert_close(impl(y, x), want, rtol=0, atol=0)
        if isinstance(y, torch.Tensor) and y.shape == want.shape and y.dtype == want.dtype:
            torch.testing.assert_close(getattr(y.clone(), method)(x), want, rtol=0, atol=0)


def test_integer_division_is_never_written_in_place():
    # Tensor.div_ divides exactly (and refuses integer tensors) where the primitive truncates
    div = core.primitives["div"]
    assert div.props.inplace_floating_only

    def f(x, y):
        return div.bind(x + 1, y)  # x + 1 dies at the division: a candidate for reuse

    x, y = torch.tensor([6, -8]), torch.tensor([2, 2])
    jitted = tx.jit(f)
    assert torch.equal(jitted(x, y), torch.tensor([3, -3]))
    assert "div_" not in jitted.lower(x, y).as_text()
    # while a floating division does reuse the dead buffer
    assert "div_" in jitted.lower(x.double(), y.double()).as_text()


@pytest.mark.parametrize("name", CHECKED)
def test_effects_match_the_random_state(name):
    prim = core.primitives[name]
    reads_rng = "rng" in prim.props.effects
    for sample in _samples(name, 4):
        state = torch.get_rng_state()
        core.impl_rules[prim](*sample.args, **sample.params)
        changed = not torch.equal(state, torch.get_rng_state())
        if reads_rng:
            assert changed, f"{name} declares effects=('rng') but left torch's random state alone"
            return
        assert not changed, f"{name} changed torch's random state without declaring effects"


ELEMENTWISE = [n for n in CHECKED if core.primitives[n].props.elementwise]


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_commutes_with_indexing(name):
    prim = core.primitives[name]
    impl = core.impl_rules[prim]
    for sample in _samples(name, 8):
        tensors = [a for a in sample.args if isinstance(a, torch.Tensor)]
        shape = tensors[0].shape
        assert all(t.shape == shape for t in tensors), f"{name}: operands differ in shape"
        out = impl(*sample.args, **sample.params)
        assert out.shape == shape, f"{name}: output {tuple(out.shape)}, operands {tuple(shape)}"
        if not shape or 0 in shape:
            continue
        # f(x)[::-1, ...] == f(x[::-1, ...]): each element depends on its own index only (up to
        # an ulp: vectorized and scalar loops may round differently)
        flip = [a.flip(0) if isinstance(a, torch.Tensor) else a for a in sample.args]
        torch.testing.assert_close(
            impl(*flip, **sample.params), out.flip(0), rtol=1e-12, atol=1e-300, equal_nan=True
        )


# ---------------------------------------------------------- buffer reuse against eager torch


def test_narrow_with_a_tensor_index_under_jit_gives_eagers_answer():
    # issue 19's first example: exp_ was written into a view (dynamic_slice) of h
    def f(x, i):
        h = x * 2
        w = torch.narrow(h, 0, i, 3)
        return w.exp().sum() + h.sum()

    x = torch.tensor([0.1, -0.4, 0.3, 0.2, 0.5, -0.2])
    want = f(x, 2)
    torch.testing.assert_close(tx.jit(f)(x, torch.tensor(2)), want)
    torch.testing.assert_close(tx.jit(f)(x, torch.tensor(2)), want)  # the cached program too


def test_two_random_draws_are_not_merged_under_jit():
    def f(x):
        return torch.randn(4) - torch.randn(4) + x

    out = tx.jit(f)(torch.zeros(4))
    assert out.abs().min() > 0, "the two draws were merged into one (their difference is 0)"
    torch.manual_seed(3)
    want = f(torch.zeros(4))
    torch.manual_seed(3)
    torch.testing.assert_close(tx.jit(f)(torch.zeros(4)), want)


def test_an_unused_random_draw_still_advances_the_generator_under_jit():
    def f(x):
        torch.rand(3)  # unused, but eager torch advances the generator
        return x + torch.rand(3)

    torch.manual_seed(0)
    want = f(torch.zeros(3))
    torch.manual_seed(0)
    torch.testing.assert_close(tx.jit(f)(torch.zeros(3)), want)


def test_views_of_several_operands_are_never_overwritten():
    # an opaque torch function (here: one without a decomposition) may return a view of any
    # operand; an elementwise op after it must not write into that operand's buffer
    def f(x, y):
        h = x * 2.0
        g = y * 2.0
        v = torch.ops.aten.alias(g)  # opaque: staged as torch_call, a view of g
        return v.exp() + h, g.sum()

    x, y = torch.randn(3), torch.randn(3)
    want = f(x, y)
    got = tx.jit(f)(x, y)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_the_primitive_table_in_the_docs_is_up_to_date():
    from thunderx.stats import TABLE_PATH, primitive_table

    assert TABLE_PATH.read_text() == primitive_table(), (
        "docs/primitives.md is stale: regenerate it with `python -m thunderx.stats --write`"
    )


# ------------------------------------------------------------- the random-program generator


def _primitives_in(jaxpr, seen: set) -> set:
    for e in jaxpr.eqns:
        seen.add(e.prim.name)
        for v in e.params.values():
            sub = getattr(v, "jaxpr", v)
            if hasattr(sub, "eqns"):
                _primitives_in(sub, seen)
    return seen


def test_every_primitive_appears_in_the_random_programs():
    # a step reaches a primitive directly, or through the derivative or batching rules the
    # transforms apply to it (scatter_add is gather's transpose)
    seen: set = set()
    for prog in single_step_programs():
        xs = prog.example_inputs()
        f = lambda *v, prog=prog: run_program(prog, *v)  # noqa: E731
        _primitives_in(tx.make_jaxpr(f)(*xs).jaxpr, seen)
        grad = tx.grad(lambda *v, f=f: (f(*v) ** 2).sum(), argnums=(0, 1))
        _primitives_in(tx.make_jaxpr(grad)(*xs).jaxpr, seen)
        _primitives_in(tx.make_jaxpr(tx.vmap(f))(*prog.example_inputs(batch=2)).jaxpr, seen)
    missing = sorted(set(core.primitives) - seen - set(NOT_GENERATED))
    assert not missing, f"no random-program step reaches {missing}: add a step or a reason"
    stale = sorted(set(NOT_GENERATED) & seen)
    assert not stale, f"NOT_GENERATED lists primitives the steps do reach: {stale}"
    unknown = sorted(set(NOT_GENERATED) - set(core.primitives))
    assert not unknown, f"NOT_GENERATED names no registered primitive: {unknown}"


REUSE_KINDS = ("view_reuse", "dead_view", "inplace_chain", "narrow_tensor")


@pytest.mark.parametrize(
    "prog",
    [p for p in single_step_programs() if p.steps[0][0] in REUSE_KINDS],
    ids=lambda p: f"{p.steps[0][0]}-{p.steps[0][3].get('view', '')}",
)
def test_jit_matches_eager_where_buffers_are_reused(prog):
    xs = prog.example_inputs()
    f = lambda *v: run_program(prog, *v)  # noqa: E731
    want = f(*xs)
    jitted = tx.jit(f)
    for _ in range(2):  # the first call and the cached program
        torch.testing.assert_close(jitted(*xs), want, rtol=1e-12, atol=1e-12)
    assert torch.equal(xs[0], prog.example_inputs()[0]), "jit wrote into its input"


def test_buffer_reuse_is_exercised():
    # the programs above must make the executor write in place, or they would test nothing
    progs = [p for p in single_step_programs() if p.steps[0][0] in REUSE_KINDS]
    texts = [tx.jit(lambda *v, p=p: run_program(p, *v)).lower(*p.example_inputs()) for p in progs]
    reused = [t for t in texts if "_(" in t.as_text().split("execution program")[-1]]
    assert len(reused) >= len(progs) // 2, "the generated code reuses almost no buffers"


@given(random_programs())
def test_jit_matches_eager_on_random_programs(prog):
    xs = prog.example_inputs()
    f = lambda *v: run_program(prog, *v)  # noqa: E731
    want = f(*xs)
    torch.testing.assert_close(tx.jit(f)(*xs), want, rtol=1e-12, atol=1e-12)
    xs32 = prog.example_inputs(torch.float32)
    torch.testing.assert_close(tx.jit(f)(*xs32), f(*xs32), rtol=1e-5, atol=1e-5)


def test_declare_refuses_malformed_properties():
    def ident(x):
        return x

    with pytest.raises(TypeError, match="effects and aliases are tuples"):
        core.declare("_probe", impl=ident, abstract_eval=ident, effects="rng")
    with pytest.raises(ValueError, match="no in-place method 'nope_'"):
        core.declare("_probe", impl=ident, abstract_eval=ident, inplace="nope_")
    assert "_probe" not in core.primitives
