"""Random nestings of thunderx's call-like constructs (custom_jvp, custom_vjp, checkpoint,
autograd.Function, an inner jit, lax.cond, lax.scan), each applied to several rows, under jit,
grad, vmap and their compositions. The oracle is the same program with every construct replaced
by its plain body, through torch.func (a loop of torch.func gradients for the batched checks).

jit inlines nested calls; a substitution keyed by the id of a freed variable once gave a later
call an earlier call's value (a silent wrong answer this test finds in about 2% of its checks)."""

import random

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx import lax

F64 = torch.float64
KINDS = ["none", "custom_jvp", "custom_vjp", "checkpoint", "jit", "cond", "scan", "function"]
FORWARD_MODE = {"none", "custom_jvp", "checkpoint", "jit", "cond", "scan"}
BODIES = [
    lambda x: torch.sin(x) * 1.5,
    lambda x: torch.tanh(x) + 0.3 * x,
    lambda x: x * x * 0.5,
    lambda x: torch.exp(-x * x),
]


def _custom_jvp(inner):
    f = tx.custom_jvp(lambda x: inner(x))
    f.defjvp(lambda p, t: (inner(p[0]), tx.jvp(inner, (p[0],), (t[0],))[1]))
    return f


def _custom_vjp(inner):
    f = tx.custom_vjp(lambda x: inner(x))
    f.defvjp(lambda x: (inner(x), x), lambda x, g: (tx.vjp(inner, x)[1](g)[0],))
    return f


def _function(inner):
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return inner(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return tx.vjp(inner, x)[1](g)[0]

    return lambda x: Fn.apply(x)


WRAP = {
    "none": lambda inner: inner,
    "custom_jvp": _custom_jvp,
    "custom_vjp": _custom_vjp,
    "checkpoint": tx.checkpoint,
    "jit": tx.jit,
    "cond": lambda inner: lambda x: lax.cond(True, inner, lambda y: inner(y) * 1.0, x),
    "scan": lambda inner: lambda x: lax.scan(lambda c, _: (inner(c), None), x, None, length=1)[0],
    "function": _function,
}


def build(seed: int, plain: bool):
    """(program, the constructs used): one construct per level, innermost first."""
    rng = random.Random(seed)
    depth = rng.choice([1, 2, 3])
    kinds = [rng.choice(KINDS) for _ in range(depth)]
    bodies = [BODIES[rng.randrange(len(BODIES))] for _ in range(depth)]
    f = None
    for kind, body in zip(kinds, bodies):
        inner = body if f is None else (lambda g, b: lambda x: b(g(x)))(f, body)
        f = inner if plain else WRAP[kind](inner)
    reps = rng.choice([1, 2, 3])

    def program(x):  # the construct called on several rows
        return torch.stack([f(x[i]) for i in range(reps)]).sum(0) + x.sum(0)

    return program, kinds


def _loss(f):
    return lambda x: (f(x) ** 2).sum()


@pytest.mark.parametrize("seed", range(9100000, 9100048))
def test_nested_constructs_match_their_plain_bodies(seed):
    prog, kinds = build(seed, plain=False)
    ref, _ = build(seed, plain=True)
    x = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(seed))
    xb = torch.randn(2, 3, 4, dtype=F64, generator=torch.Generator().manual_seed(seed + 1))
    per_row = lambda: torch.stack([tf.grad(_loss(ref))(r) for r in xb])  # noqa: E731
    checks = {
        "jit": (lambda: tx.jit(prog)(x), lambda: ref(x)),
        "grad": (lambda: tx.grad(_loss(prog))(x), lambda: tf.grad(_loss(ref))(x)),
        "jit(grad)": (lambda: tx.jit(tx.grad(_loss(prog)))(x), lambda: tf.grad(_loss(ref))(x)),
        "vmap": (lambda: tx.vmap(prog)(xb), lambda: torch.stack([ref(r) for r in xb])),
        "vmap(grad)": (lambda: tx.vmap(tx.grad(_loss(prog)))(xb), per_row),
        "jit(vmap(grad))": (lambda: tx.jit(tx.vmap(tx.grad(_loss(prog))))(xb), per_row),
    }
    if all(k in FORWARD_MODE for k in kinds):  # custom_vjp and Function define reverse mode only
        checks["jvp"] = (
            lambda: tx.jvp(prog, (x,), (x,))[1],
            lambda: tf.jvp(ref, (x,), (x,))[1],
        )
        checks["hessian"] = (
            lambda: tx.hessian(_loss(prog))(x[:, :2]),
            lambda: tf.hessian(_loss(ref))(x[:, :2]),
        )
    for name, (ours, oracle) in checks.items():
        torch.testing.assert_close(ours(), oracle(), rtol=1e-9, atol=1e-10, msg=f"{kinds} {name}")
