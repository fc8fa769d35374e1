"""jit's generated cache-hit calls on pytrees (transforms/jit_guard.py): every way an argument
can differ from the traced signature misses the generated call and gets the right answer from
the general path; a matching call hits it and equals eager torch."""

from collections import OrderedDict

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx.tree import leaves as tree_leaves


def f(p, x):
    h = torch.tanh(x @ p["w"] + p["b"])
    return {"h": h, "s": (h * p["scale"][0]).sum() + p["scale"][1].sum()}


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(3, 4, generator=g),
        "b": torch.randn(4, generator=g),
        "scale": [torch.randn(4, generator=g), torch.randn(2, generator=g)],
    }


def _same(got, want):
    # float32's tolerance, not bits: the program adds the bias in the GEMM's epilogue (addmm),
    # which rounds as eager's product then add on Intel's MKL path but not on AMD EPYC's (last
    # bits); a call that ran another signature's program would be off by far more
    assert type(got) is type(want) and list(got) == list(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k])


def _jitted():
    j = tx.jit(f)
    p, x = _params(), torch.randn(2, 3)
    j(p, x)  # traced
    j(p, x)  # the general fast path registers the generated call
    return j, p, x


def test_a_matching_call_hits_the_generated_call_and_equals_eager():
    j, p, x = _jitted()
    impl = j.jit_function
    assert len(impl._guards[0]) == 1
    before = impl._fast_hits[0]
    for seed in range(3):  # new tensors of the same signature
        p2, x2 = _params(seed + 1), torch.randn(2, 3)
        _same(j(p2, x2), f(p2, x2))
    assert impl._fast_hits[0] == before + 3
    assert impl.misses == 1


DIFFERENT = {
    "leaf shape": lambda p, x: ({**p, "b": torch.randn(1)}, x),
    "leaf dtype": lambda p, x: ({**p, "w": p["w"].double()}, x.double()),
    "another key sorting first": lambda p, x: (
        {"B": p["b"], "w": p["w"], "scale": p["scale"]},
        x,
    ),
    "missing key replaced": lambda p, x: (
        {"w": p["w"], "bias": p["b"], "scale": p["scale"]},
        x,
    ),
    "list as tuple": lambda p, x: ({**p, "scale": tuple(p["scale"])}, x),
    "longer list": lambda p, x: ({**p, "scale": [*p["scale"], torch.ones(1)]}, x),
    "scalar leaf": lambda p, x: ({**p, "b": 0.5}, x),
    "None leaf": lambda p, x: ({**p, "scale": [p["scale"][0], None]}, x),
    "ordered dict": lambda p, x: (OrderedDict(p), x),
    "extra argument": lambda p, x: (p, x, None),
    "batch size": lambda p, x: (p, torch.randn(5, 3)),
}


def _g(p, x, extra=None):
    h = torch.tanh(x @ p["w"] + p.get("b", p.get("bias", p.get("B"))))
    second = p["scale"][1] if p["scale"][1] is not None else torch.zeros(())
    return {"h": h, "s": (h * p["scale"][0]).sum() + second.sum()}


@pytest.mark.parametrize("how", sorted(DIFFERENT))
def test_any_difference_from_the_traced_signature_misses_it(how):
    j = tx.jit(_g)
    p, x = _params(), torch.randn(2, 3)
    j(p, x)
    j(p, x)
    assert len(j.jit_function._guards[0]) == 1
    args = DIFFERENT[how](p, x)
    misses = j.jit_function.misses
    _same(j(*args), _g(*args))
    assert j.jit_function.misses == misses + 1, "another signature must be traced again"
    _same(j(p, x), _g(p, x))  # and the first signature still runs its own program


def test_leaves_that_torch_autograd_records_run_the_variant_without_in_place_reuse():
    j, p, x = _jitted()
    w = p["w"].clone().requires_grad_()
    (got,) = torch.autograd.grad(j({**p, "w": w}, x)["s"], w)
    w2 = p["w"].clone().requires_grad_()
    (want,) = torch.autograd.grad(f({**p, "w": w2}, x)["s"], w2)
    torch.testing.assert_close(got, want)
    with torch.no_grad():  # no recording: the in-place variant, the same values
        _same(j({**p, "w": w}, x), f({**p, "w": w.detach()}, x))


def test_parameters_of_a_module_as_leaves():
    model = torch.nn.Linear(3, 4)
    j = tx.jit(lambda p, x: tx.functional_call(model, p, (x,)).sum())
    x = torch.randn(2, 3)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(j(params, x), model(x).sum())
    assert len(j.jit_function._guards[0]) == 1


def test_under_another_transform_the_generated_call_steps_aside():
    j, p, x = _jitted()
    xs = torch.randn(4, 2, 3)
    got = tx.vmap(lambda x: j(p, x)["s"])(xs)
    want = tf.vmap(lambda x: f(p, x)["s"])(xs)
    torch.testing.assert_close(got, want)
    gw = tx.grad(lambda w: j({**p, "w": w}, x)["s"])(p["w"])
    torch.testing.assert_close(gw, tf.grad(lambda w: f({**p, "w": w}, x)["s"])(p["w"]))


def test_a_bounded_number_and_clear_cache_drops_them():
    j = tx.jit(lambda p: sum(v.sum() for v in p.values()))
    for n in range(1, 8):
        p = {f"k{i}": torch.ones(i + 1) for i in range(n)}
        for _ in range(2):
            torch.testing.assert_close(j(p), torch.tensor(float(sum(range(1, n + 1)))))
    assert len(j.jit_function._guards[0]) == 4
    j.clear_cache()
    assert j.jit_function._guards[0] == ()
    p = {"k0": torch.ones(3)}
    torch.testing.assert_close(j(p), torch.tensor(3.0))


def test_structures_it_cannot_walk_get_no_generated_call():
    # keys that do not sort: the general path, still right
    j = tx.jit(lambda p: p[1] * 2 + p["a"])
    p = {1: torch.ones(2), "a": torch.ones(2)}
    for _ in range(3):
        torch.testing.assert_close(j(p), torch.full((2,), 3.0))
    assert j.jit_function._guards[0] == ()


def test_outputs_are_rebuilt_as_the_function_returns_them():
    from collections import namedtuple

    Pair = namedtuple("Pair", "a b")

    def h(p, x):
        y = x @ p["w"]
        return [(y, None), {"z": y.sum(), "a": (y * 2,), "e": []}, Pair(y + 1, ())]

    j = tx.jit(h)
    p, x = _params(), torch.randn(2, 3)
    for _ in range(3):
        got, want = j(p, x), h(p, x)
        assert repr(type(got[2])) == repr(Pair) and list(got[1]) == ["z", "a", "e"]
        assert got[0][1] is None and got[1]["e"] == [] and got[2].b == ()
        flat_got, flat_want = tree_leaves(got), tree_leaves(want)
        assert len(flat_got) == len(flat_want) == 4
        for a, b in zip(flat_got, flat_want):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert len(j.jit_function._guards[0]) == 1


def test_plain_tensor_arguments_get_one_too_and_each_signature_keeps_its_program():
    j = tx.jit(lambda x, y: torch.sin(x) * 2 + y)
    shapes = [(3,), (2, 3), (3,)]  # a second signature, then the first again
    for shape in shapes:
        for _ in range(2):
            x, y = torch.randn(shape), torch.randn(shape)
            torch.testing.assert_close(j(x, y), torch.sin(x) * 2 + y, rtol=0, atol=0)
    assert len(j.jit_function._guards[0]) == 2 and j.jit_function.misses == 2
    x = torch.randn(3, requires_grad=True)  # recorded by torch autograd through the call
    (gx,) = torch.autograd.grad(j(x, torch.ones(3)).sum(), x)
    torch.testing.assert_close(gx, 2 * torch.cos(x.detach()))
    y = torch.randn(3, dtype=torch.float64)  # another dtype: traced again
    torch.testing.assert_close(j(y, y), torch.sin(y) * 2 + y)
    assert j.jit_function.misses == 3


def test_no_more_generated_calls_than_the_cache_holds():
    j = tx.jit(lambda x: x * 2, cache_size=1)
    for n in (2, 3, 2):
        for _ in range(2):
            torch.testing.assert_close(j(torch.ones(n)), torch.full((n,), 2.0))
    assert len(j.jit_function._guards[0]) == 1


def test_torch_default_dtype_is_part_of_the_signature():
    # tensors the function creates without a dtype follow torch.set_default_dtype, as in eager
    def f(a):
        return a.sum() + torch.zeros(3) + torch.tensor(1.5) + torch.arange(3) * 0.5

    x = torch.ones(2)
    jf = tx.jit(f)
    for _ in range(3):  # traced, then the fast path
        torch.testing.assert_close(jf(x), f(x), rtol=0, atol=0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for _ in range(3):
            got, want = jf(x), f(x)
            assert got.dtype == want.dtype == torch.float64
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    finally:
        torch.set_default_dtype(previous)
    for _ in range(2):
        assert jf(x).dtype == torch.float32
    assert jf.cache_info()["misses"] == 2  # one program per default dtype, both kept
