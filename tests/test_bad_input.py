"""Malformed arguments to every public entry point: each is refused with a clear error (the
expected class, a message naming the argument and the user's line in this file), never an internal
error and never a silent result; afterwards the trace context is the EvalTrace and a valid call of
the same entry point gives torch's answer."""

from __future__ import annotations

import re

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx.core import EvalTrace, current_trace
from thunderx.errors import (
    ArgumentTypeError,
    ArgumentValueError,
    ThunderxError,
    UnsupportedOperationError,
)
from thunderx.testing import check_grads, check_jit, check_transpose, check_vmap, load_profile

X = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
X2 = torch.arange(6.0, dtype=torch.float64).reshape(2, 3) / 5
LINE = r"test_bad_input\.py:\d+"


def f(x):
    return torch.sin(x) * x


def scalar(x):
    return (torch.sin(x) * x).sum()


def two(x, y):
    return (x * y).sum()


MODEL = torch.nn.Linear(3, 2).double()
PARAMS = {k: v.detach() for k, v in MODEL.named_parameters()}


def _out_t():
    return torch.empty(3, dtype=torch.float64)


# ------------------------------------------------------------------ valid calls, with oracles


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _valid_grad():
    _close(tx.grad(scalar)(X), tf.grad(scalar)(X))


def _valid_value_and_grad():
    v, g = tx.value_and_grad(scalar)(X)
    _close(v, scalar(X))
    _close(g, tf.grad(scalar)(X))


def _valid_vjp():
    out, fn = tx.vjp(f, X)
    _close(fn(torch.ones(3, dtype=torch.float64))[0], tf.vjp(f, X)[1](torch.ones_like(X))[0])


def _valid_jvp():
    _close(tx.jvp(f, (X,), (torch.ones_like(X),))[1], tf.jvp(f, (X,), (torch.ones_like(X),))[1])


def _valid_linearize():
    _, f_jvp = tx.linearize(f, X)
    _close(f_jvp(torch.ones_like(X)), tf.jvp(f, (X,), (torch.ones_like(X),))[1])


def _valid_jacfwd():
    _close(tx.jacfwd(f)(X), tf.jacfwd(f)(X))


def _valid_jacrev():
    _close(tx.jacrev(f)(X), tf.jacrev(f)(X))


def _valid_hessian():
    _close(tx.hessian(scalar)(X), tf.hessian(scalar)(X))


def _valid_vmap():
    _close(tx.vmap(f)(X2), torch.stack([f(r) for r in X2]))


def _valid_jit():
    _close(tx.jit(f)(X), f(X))


def _valid_make_jaxpr():
    closed = tx.make_jaxpr(f)(X)
    _close(tx.eval_jaxpr(closed.jaxpr, closed.consts, X)[0], f(X))


def _valid_stop_gradient():
    _close(tx.grad(lambda x: (x * tx.stop_gradient(x)).sum())(X), X)


def _valid_functional_call():
    w = torch.ones(2, 3, dtype=torch.float64)
    got = tx.grad(lambda p: tx.functional_call(MODEL, p, (X,)).sum())({"weight": w})
    want = tf.grad(lambda p: tf.functional_call(MODEL, p, (X,)).sum())({"weight": w})
    _close(got["weight"], want["weight"])


def _valid_custom():
    @tx.custom_jvp
    def g(x):
        return torch.sin(x)

    g.defjvp(lambda p, t: (torch.sin(p[0]), torch.cos(p[0]) * t[0]))
    _close(tx.grad(lambda x: g(x).sum())(X), torch.cos(X))


def _valid_testing():
    check_grads(f, (X,), order=2)
    check_jit(f, (X,))
    check_vmap(f, (X2,))
    check_transpose(lambda t: t * 3, (X,))


def _valid_eval_jaxpr():
    closed = tx.make_jaxpr(f)(X)
    _close(tx.eval_jaxpr(closed.jaxpr, closed.consts, X2[0])[0], f(X2[0]))


VALID = {
    "eval_jaxpr": _valid_eval_jaxpr,
    "grad": _valid_grad,
    "value_and_grad": _valid_value_and_grad,
    "vjp": _valid_vjp,
    "jvp": _valid_jvp,
    "linearize": _valid_linearize,
    "jacfwd": _valid_jacfwd,
    "jacrev": _valid_jacrev,
    "hessian": _valid_hessian,
    "vmap": _valid_vmap,
    "jit": _valid_jit,
    "make_jaxpr": _valid_make_jaxpr,
    "stop_gradient": _valid_stop_gradient,
    "functional_call": _valid_functional_call,
    "custom": _valid_custom,
    "testing": _valid_testing,
}

# ------------------------------------------------------------------------------ the cases
# (entry point, id, bad call, error class, pattern naming the argument)
TE, VE = ArgumentTypeError, ArgumentValueError

CASES = [
    # grad / value_and_grad
    ("grad", "not callable", lambda: tx.grad(3), TE, r"grad: fun must be callable"),
    ("grad", "argnums str", lambda: tx.grad(scalar, argnums="0"), TE, r"argnums.*str"),
    ("grad", "argnums float", lambda: tx.grad(scalar, argnums=0.0), TE, r"argnums.*float"),
    ("grad", "argnums bool", lambda: tx.grad(scalar, argnums=True), TE, r"argnums.*bool"),
    ("grad", "argnums empty", lambda: tx.grad(scalar, argnums=()), VE, r"argnums.*empty"),
    ("grad", "argnums entry", lambda: tx.grad(two, argnums=(0, None)), TE, r"argnums entries"),
    ("grad", "argnums range", lambda: tx.grad(scalar, argnums=3)(X), VE, r"argnums 3.*range"),
    ("grad", "argnums negative", lambda: tx.grad(scalar, argnums=-2)(X), VE, r"argnums -2"),
    ("grad", "argnums dup", lambda: tx.grad(two, argnums=(0, -2))(X, X), VE, r"duplicates"),
    ("grad", "has_aux str", lambda: tx.grad(scalar, has_aux="yes"), TE, r"has_aux"),
    ("grad", "aux not pair", lambda: tx.grad(scalar, has_aux=True)(X), TE, r"has_aux.*pair"),
    ("grad", "arg str", lambda: tx.grad(scalar)("text"), TypeError, r"grad: arguments.*str"),
    ("grad", "arg int", lambda: tx.grad(scalar)(torch.arange(3)), TypeError, r"floating"),
    ("grad", "output non-scalar", lambda: tx.grad(f)(X), TypeError, r"scalar.*jacrev"),
    ("grad", "output str", lambda: tx.grad(lambda x: "s")(X), TE, r"outputs must be.*str"),
    ("value_and_grad", "not callable", lambda: tx.value_and_grad(None), TE, r"fun must be"),
    ("value_and_grad", "argnums", lambda: tx.value_and_grad(two, argnums=[0, "a"]), TE, "argn"),
    ("value_and_grad", "range", lambda: tx.value_and_grad(scalar, 1)(X), VE, r"argnums 1"),
    ("value_and_grad", "has_aux int", lambda: tx.value_and_grad(scalar, has_aux=1), TE, "has_aux"),
    # vjp
    ("vjp", "not callable", lambda: tx.vjp(3, X), TE, r"vjp: fun must be callable"),
    ("vjp", "primal str", lambda: tx.vjp(f, "a"), TypeError, r"vjp: arguments.*str"),
    ("vjp", "ct shape", lambda: tx.vjp(f, X)[1](torch.ones(2)), VE, r"cotangent 0.*shape \(2,\)"),
    ("vjp", "ct dtype", lambda: tx.vjp(f, X)[1](X.float()), TE, r"cotangent 0.*dtype.*float32"),
    ("vjp", "ct tree", lambda: tx.vjp(f, X)[1]((X, X)), VE, r"cotangent's tree"),
    ("vjp", "ct str", lambda: tx.vjp(f, X)[1]("s"), TE, r"cotangent 0 must be a tensor"),
    ("vjp", "aux not pair", lambda: tx.vjp(f, X, has_aux=True), TE, r"has_aux.*pair"),
    ("vjp", "has_aux str", lambda: tx.vjp(f, X, has_aux="no"), TE, r"has_aux"),
    # jvp
    ("jvp", "primals not tuple", lambda: tx.jvp(f, X, X), TE, r"primals and tangents"),
    ("jvp", "tangent shape", lambda: tx.jvp(f, (X,), (torch.ones(2),)), VE, r"tangent 0.*\(2,\)"),
    ("jvp", "tangent dtype", lambda: tx.jvp(f, (X,), (X.float(),)), TE, r"tangent 0.*float32"),
    ("jvp", "tangent int", lambda: tx.jvp(f, (X,), (X.long(),)), TE, r"tangent 0.*int64"),
    ("jvp", "tangent tree", lambda: tx.jvp(f, (X,), (X, X)), VE, r"tangents tree"),
    ("jvp", "tangent str", lambda: tx.jvp(f, (X,), ("s",)), TypeError, r"jvp: arguments.*str"),
    ("jvp", "not callable", lambda: tx.jvp(3, (X,), (X,)), TE, r"jvp: fun must be callable"),
    ("jvp", "aux not pair", lambda: tx.jvp(f, (X,), (X,), has_aux=True), TE, r"pair"),
    # linearize
    ("linearize", "not callable", lambda: tx.linearize(3, X), TE, r"fun must be callable"),
    ("linearize", "tangent shape", lambda: tx.linearize(f, X)[1](X[:2]), VE, r"tangent 0.*\(2,\)"),
    ("linearize", "tangent dtype", lambda: tx.linearize(f, X)[1](X.float()), TE, r"float32"),
    ("linearize", "tangent tree", lambda: tx.linearize(f, X)[1](X, X), VE, r"tangents' tree"),
    ("linearize", "primal obj", lambda: tx.linearize(f, object()), TypeError, r"object"),
    # jacobians
    ("jacfwd", "argnums float", lambda: tx.jacfwd(f, argnums=0.0), TE, r"jacfwd: argnums.*float"),
    ("jacfwd", "argnums range", lambda: tx.jacfwd(f, argnums=(0, 1))(X), VE, r"argnums 1"),
    ("jacfwd", "not callable", lambda: tx.jacfwd("f"), TE, r"jacfwd: fun must be callable"),
    ("jacfwd", "int input", lambda: tx.jacfwd(f)(torch.arange(3)), TypeError, r"floating"),
    ("jacrev", "argnums str", lambda: tx.jacrev(f, argnums="x"), TE, r"jacrev: argnums.*str"),
    ("jacrev", "aux not pair", lambda: tx.jacrev(f, has_aux=True)(X), TE, r"jacrev.*pair"),
    ("jacrev", "has_aux", lambda: tx.jacrev(f, has_aux=None), TE, r"jacrev: has_aux"),
    (
        "hessian",
        "argnums range",
        lambda: tx.hessian(scalar, argnums=5)(X),
        VE,
        r"hessian: argnums 5",
    ),
    ("hessian", "not callable", lambda: tx.hessian(3), TE, r"hessian: fun must be callable"),
    ("hessian", "has_aux int", lambda: tx.hessian(scalar, has_aux=2), TE, r"hessian: has_aux"),
    # vmap
    ("vmap", "not callable", lambda: tx.vmap(3), TE, r"vmap: fun must be callable"),
    ("vmap", "in_axes str", lambda: tx.vmap(f, in_axes="a"), TE, r"in_axes.*str"),
    ("vmap", "in_axes float", lambda: tx.vmap(f, in_axes=0.0), TE, r"in_axes.*float"),
    ("vmap", "in_axes bool", lambda: tx.vmap(f, in_axes=(True,)), TE, r"in_axes.*bool"),
    ("vmap", "in_axes count", lambda: tx.vmap(f, in_axes=(0, 0))(X2), ValueError, r"in_axes"),
    ("vmap", "in_axes range", lambda: tx.vmap(f, in_axes=2)(X2), ValueError, r"in_axes=2"),
    ("vmap", "in_axes negative", lambda: tx.vmap(f, in_axes=-3)(X2), ValueError, r"in_axes=-3"),
    ("vmap", "in_axes tree", lambda: tx.vmap(f, in_axes=({"a": 0},))(X2), ValueError, "in_axes"),
    ("vmap", "0-d input", lambda: tx.vmap(f)(torch.tensor(1.0)), ValueError, r"in_axes=0"),
    ("vmap", "out_axes str", lambda: tx.vmap(f, out_axes="a"), TE, r"out_axes.*str"),
    ("vmap", "out_axes range", lambda: tx.vmap(f, out_axes=5)(X), VE, r"out_axes=5.*range"),
    ("vmap", "out_axes negative", lambda: tx.vmap(f, out_axes=-3)(X2), VE, r"out_axes=-3"),
    ("vmap", "out_axes tree", lambda: tx.vmap(f, out_axes=(0, 0))(X2), ValueError, r"out_axes"),
    ("vmap", "sizes differ", lambda: tx.vmap(two)(X, X2), ValueError, r"inconsistent batch"),
    ("vmap", "nothing batched", lambda: tx.vmap(f, in_axes=None)(X), ValueError, r"axis_size"),
    ("vmap", "axis_size neg", lambda: tx.vmap(f, axis_size=-1), VE, r"axis_size.*-1"),
    ("vmap", "axis_size float", lambda: tx.vmap(f, axis_size=2.0), TE, r"axis_size.*float"),
    ("vmap", "axis_size differs", lambda: tx.vmap(f, axis_size=5)(X2), ValueError, r"axis_size"),
    ("vmap", "leaf str", lambda: tx.vmap(f)("s"), ValueError, r"in_axes=0.*non-tensor.*str"),
    ("vmap", "randomness", lambda: tx.vmap(f, randomness="sometimes"), VE, r"randomness"),
    ("vmap", "output str", lambda: tx.vmap(lambda x: (x, "s"))(X2), TE, r"vmap.*outputs.*str"),
    (
        "vmap",
        "out= under vmap",
        lambda: tx.vmap(lambda a: torch.abs(a, out=_out_t()))(X2),
        UnsupportedOperationError,
        r"abs\(\.\.\., out=\.\.\.\)",
    ),
    # jit
    ("jit", "not callable", lambda: tx.jit(3), TE, r"jit: fun must be callable"),
    ("jit", "cache_size -1", lambda: tx.jit(f, cache_size=-1), VE, r"cache_size.*-1"),
    ("jit", "cache_size 0", lambda: tx.jit(f, cache_size=0), VE, r"cache_size.*0"),
    ("jit", "cache_size str", lambda: tx.jit(f, cache_size="3"), TE, r"cache_size.*str"),
    ("jit", "static_argnums 5", lambda: tx.jit(f, static_argnums=5), VE, r"static_argnums 5"),
    ("jit", "static_argnums str", lambda: tx.jit(f, static_argnums="0"), TE, r"static_argnums"),
    ("jit", "static_argnames", lambda: tx.jit(f, static_argnames="y"), VE, r"static_argnames.*y"),
    ("jit", "static_argnames int", lambda: tx.jit(f, static_argnames=3), TE, r"static_argnames"),
    ("jit", "executor", lambda: tx.jit(f, executor="cuda"), VE, r"executor.*cuda"),
    ("jit", "arg str", lambda: tx.jit(f)("text"), TypeError, r"jit.*str.*static"),
    ("jit", "unhashable", lambda: tx.jit(two, static_argnums=1)(X, [1]), TypeError, r"hashable"),
    ("jit", "output str", lambda: tx.jit(lambda x: (x, "s"))(X), TE, r"str output"),
    (
        "jit",
        "out= under jit",
        lambda: tx.jit(lambda a: torch.sin(a, out=_out_t()))(X),
        UnsupportedOperationError,
        r"sin\(\.\.\., out=",
    ),
    (
        "grad",
        "out= under grad",
        lambda: tx.grad(lambda a: torch.exp(a, out=_out_t()).sum())(X),
        UnsupportedOperationError,
        r"exp\(\.\.\., out=",
    ),
    # make_jaxpr
    ("make_jaxpr", "not callable", lambda: tx.make_jaxpr(3), TE, r"make_jaxpr: fun must be"),
    (
        "make_jaxpr",
        "static on zero-arg function",
        lambda: tx.make_jaxpr(lambda: X, static_argnums=0),
        VE,
        r"static_argnums 0.*takes 0 positional",
    ),
    ("make_jaxpr", "static 5", lambda: tx.make_jaxpr(f, static_argnums=5), VE, r"static_argnums 5"),
    ("make_jaxpr", "static str", lambda: tx.make_jaxpr(f, static_argnums="a"), TE, r"static_arg"),
    ("make_jaxpr", "arg obj", lambda: tx.make_jaxpr(f)([object()]), TypeError, r"object"),
    (
        "eval_jaxpr",
        "too few args",
        lambda: tx.eval_jaxpr(tx.make_jaxpr(two)(X, X).jaxpr, [], X),
        VE,
        r"eval_jaxpr: the jaxpr takes 0 consts and 2 arguments, got 0 and 1",
    ),
    ("jit", "lower arg str", lambda: tx.jit(f).lower("s"), TypeError, r"jit.*str"),
    ("jit", "lower static", lambda: tx.jit(f, static_argnames="k"), VE, r"'k' is not a param"),
    # stop_gradient, functional_call
    ("stop_gradient", "str", lambda: tx.stop_gradient("a"), TE, r"stop_gradient.*str"),
    ("stop_gradient", "obj leaf", lambda: tx.stop_gradient([X, object()]), TE, r"object"),
    ("functional_call", "module", lambda: tx.functional_call(3, {}, (X,)), TE, r"module"),
    ("functional_call", "dict", lambda: tx.functional_call(MODEL, 3, (X,)), TE, r"dict.*int"),
    (
        "functional_call",
        "unknown name",
        lambda: tx.functional_call(MODEL, {"nope": X}, (X,)),
        VE,
        r"no parameter or buffer named 'nope'",
    ),
    (
        "functional_call",
        "unknown submodule",
        lambda: tx.functional_call(MODEL, {"sub.weight": X}, (X,)),
        VE,
        r"no submodule 'sub'",
    ),
    (
        "functional_call",
        "duplicate key",
        lambda: tx.functional_call(MODEL, (PARAMS, PARAMS), (X,)),
        VE,
        r"'weight' appears in more than one",
    ),
    ("functional_call", "kwargs", lambda: tx.functional_call(MODEL, {}, (X,), 3), TE, r"kwargs"),
    # thunderx.testing
    ("testing", "check_grads f", lambda: check_grads(3, (X,)), TE, r"check_grads: f must be"),
    ("testing", "check_grads args", lambda: check_grads(f, X), TE, r"check_grads: args"),
    ("testing", "check_grads order", lambda: check_grads(f, (X,), order=0), VE, r"order.*>= 1"),
    ("testing", "check_grads modes", lambda: check_grads(f, (X,), modes="fwd"), VE, r"modes"),
    ("testing", "check_jit f", lambda: check_jit(None, (X,)), TE, r"check_jit: f must be"),
    ("testing", "check_vmap args", lambda: check_vmap(f, X2), TE, r"check_vmap: args"),
    ("testing", "check_transpose", lambda: check_transpose(1, (X,)), TE, r"check_transpose: f"),
    # misuse inside another transform: the inner error surfaces and every trace is unwound
    (
        "jit",
        "nested argnums",
        lambda: tx.jit(lambda x: tx.grad(scalar, argnums=3)(x))(X),
        VE,
        r"argnums 3",
    ),
    (
        "grad",
        "nested in_axes",
        lambda: tx.grad(lambda x: tx.vmap(f, in_axes=2)(x).sum())(X),
        ValueError,
        r"in_axes=2",
    ),
    (
        "vmap",
        "nested tangent",
        lambda: tx.vmap(lambda x: tx.jvp(f, (x,), (torch.ones(2),))[1])(X2),
        VE,
        r"tangent 0.*\(2,\)",
    ),
    (
        "jit",
        "nested out_axes",
        lambda: tx.jit(lambda x: tx.vmap(f, out_axes=4)(x))(X2),
        VE,
        r"out_axes=4",
    ),
]


def _custom_vjp_with(bwd_out):
    @tx.custom_vjp
    def g(x):
        return torch.sin(x)

    g.defvjp(lambda x: (torch.sin(x), x), lambda res, ct: (bwd_out(ct),))
    return g


def _custom_jvp_with(t_out):
    @tx.custom_jvp
    def g(x):
        return torch.sin(x)

    g.defjvp(lambda p, t: (torch.sin(p[0]), t_out(t[0])))
    return g


CUSTOM_CASES = [
    ("custom_jvp not callable", lambda: tx.custom_jvp(3), TE, r"custom_jvp: fun must be callable"),
    ("custom_vjp not callable", lambda: tx.custom_vjp(3), TE, r"custom_vjp: fun must be callable"),
    ("defjvp not callable", lambda: tx.custom_jvp(f).defjvp(3), TE, r"defjvp: jvp must be"),
    ("defvjp not callable", lambda: tx.custom_vjp(f).defvjp(3, 4), TE, r"defvjp: fwd must be"),
    (
        "bwd cotangent shape",
        lambda: tx.grad(lambda x: _custom_vjp_with(lambda ct: ct[:2])(x).sum())(X),
        TypeError,
        r"custom_vjp g: cotangent leaf 0 is f64\[2\], but the primal is f64\[3\]",
    ),
    (
        "bwd cotangent broadcastable shape",
        lambda: tx.grad(lambda x: _custom_vjp_with(lambda ct: ct.sum(0, keepdim=True))(x).sum())(X),
        TypeError,
        r"cotangent leaf 0 is f64\[1\]",
    ),
    (
        "bwd cotangent dtype",
        lambda: tx.grad(lambda x: _custom_vjp_with(lambda ct: ct.float())(x).sum())(X),
        TypeError,
        r"cotangent leaf 0 is f32\[3\], but the primal is f64\[3\]",
    ),
    (
        "jvp rule tangent shape",
        lambda: tx.jvp(_custom_jvp_with(lambda t: t[:2]), (X,), (X,)),
        TypeError,
        r"custom_jvp g: tangent output leaf 0 is f64\[2\]",
    ),
    (
        "jvp rule tangent dtype",
        lambda: tx.jvp(_custom_jvp_with(lambda t: t.float()), (X,), (X,)),
        TypeError,
        r"tangent output leaf 0 is f32\[3\]",
    ),
    (
        "jvp rule tangent shape under grad",
        lambda: tx.grad(lambda x: _custom_jvp_with(lambda t: t.sum(0, keepdim=True))(x).sum())(X),
        TypeError,
        r"tangent output leaf 0 is f64\[1\]",
    ),
]


def _assert_clean_and_valid(entry):
    assert type(current_trace()) is EvalTrace, f"trace left behind: {current_trace()!r}"
    VALID[entry]()
    assert type(current_trace()) is EvalTrace


@pytest.mark.parametrize(
    "entry,bad,exc,pattern", [c[:1] + c[2:] for c in CASES], ids=[f"{c[0]}: {c[1]}" for c in CASES]
)
def test_bad_input_is_refused_clearly(entry, bad, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        bad()
    err = info.value
    # never a bare internal error: ours, or a ValueError/TypeError raised on purpose by thunderx
    assert isinstance(err, (ThunderxError, TypeError, ValueError)), type(err)
    msg = str(err)
    assert re.search(LINE, msg), f"the message does not name the user's line: {msg}"
    _assert_clean_and_valid(entry)


@pytest.mark.parametrize(
    "bad,exc,pattern", [c[1:] for c in CUSTOM_CASES], ids=[c[0] for c in CUSTOM_CASES]
)
def test_bad_custom_rule_is_refused_clearly(bad, exc, pattern):
    """The rule's outputs are checked against the primal's shapes and dtypes (the message names
    the custom function; the rule itself runs inside the transform)."""
    with pytest.raises(exc, match=pattern):
        bad()
    _assert_clean_and_valid("custom")


def test_case_count_covers_every_entry_point():
    entries = {c[0] for c in CASES}
    assert len(CASES) + len(CUSTOM_CASES) >= 60
    assert entries | {"custom"} == set(VALID), set(VALID) - entries


def test_load_profile_unknown_name_is_refused():
    with pytest.raises(ArgumentValueError, match=rf"unknown profile 'nope'.*{LINE}"):
        load_profile("nope")
    assert load_profile() in ("ci", "dev", "thorough")


# ---------------------------------------------------- accepted input: correct semantics


def test_has_aux_accepts_any_pytree_as_jax_does():
    """Non-tensor aux leaves come back unchanged; tensor leaves as the primal values (torch.func
    refuses non-tensor aux; JAX returns it: we follow JAX, which loses nothing)."""

    def g(x):
        h = torch.sin(x)
        return (h * x).sum(), {"step": 3, "name": "s", "h": h, "none": None}

    grad_, aux = tx.grad(g, has_aux=True)(X)
    _close(grad_, tf.grad(lambda x: g(x)[0])(X))
    assert aux["step"] == 3 and aux["name"] == "s" and aux["none"] is None
    _close(aux["h"], torch.sin(X))
    out, fn, aux = tx.vjp(lambda x: (f(x), ("tag", x * 2)), X, has_aux=True)
    assert aux[0] == "tag"
    _close(aux[1], X * 2)
    _, t, aux = tx.jvp(lambda x: (f(x), "tag"), (X,), (torch.ones_like(X),), has_aux=True)
    assert aux == "tag"
    jac, aux = tx.jacrev(lambda x: (f(x), ["a", x.sum()]), has_aux=True)(X)
    _close(jac, tf.jacrev(f)(X))
    assert aux[0] == "a"
    _close(aux[1], X.sum())
    jac, aux = tx.jacfwd(lambda x: (f(x), object), has_aux=True)(X)
    assert aux is object
    h, aux = tx.hessian(lambda x: (scalar(x), 7), has_aux=True)(X)
    _close(h, tf.hessian(scalar)(X))
    assert aux == 7


def test_jacobians_of_functions_with_no_outputs_or_inputs_are_empty_trees():
    assert tx.jacrev(lambda x: ())(X) == ()
    assert tx.jacfwd(lambda x: ())(X) == ()
    assert tx.jacrev(lambda x: {"a": ()})(X) == {"a": ()}
    assert tx.jacfwd(lambda t: X * 2)(()) == ()


def test_out_is_fine_outside_transforms():
    t = torch.empty(3, dtype=torch.float64)
    torch.abs(-X, out=t)
    _close(t, X.abs())


def test_validate_docstring_examples():
    import doctest

    import thunderx.validate

    result = doctest.testmod(
        thunderx.validate,
        extraglobs={"torch": torch, "thunderx": tx},
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0 and result.failed == 0
