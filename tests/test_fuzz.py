"""Random programs through every transform and composition, against independent oracles."""

import os

import torch
from hypothesis import example, given, note, settings

import thunderx as tx
from thunderx.executors.nvfuser_exec import NvFuserProgram
from thunderx.passes import closure_convert, optimize
from thunderx.testing import check_grads
from thunderx.testing.programs import Program, random_programs, run_program

from .program_oracles import per_example_grads_reference

CHECKED = {"programs": 0}


def _describe(prog, xs):
    note(repr(prog))
    note(str(tx.make_jaxpr(lambda *v: run_program(prog, *v))(*xs)))


def close(a, b, tol=1e-8):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


# THUNDERX_FUZZ_EXAMPLES overrides the count (the long local run uses it)
@settings(
    max_examples=int(os.environ.get("THUNDERX_FUZZ_EXAMPLES", 0))
    or 5 * settings.default.max_examples
)
@given(random_programs())
# torch.func refuses to differentiate batch norm's running statistics, batched or not
@example(Program(in_shapes=[(2,), (2,)], steps=[("unary", "batch_norm_eval", [0], {})], seed=0))
def test_random_programs_through_every_transform(prog):
    xs = prog.example_inputs()
    _describe(prog, xs)
    f = lambda *v: run_program(prog, *v)  # noqa: E731
    scalar = lambda *v: (run_program(prog, *v) ** 2).sum()  # noqa: E731
    want = f(*xs)
    # jit vs eager
    close(tx.jit(f)(*xs), want)
    # derivatives vs central finite differences (float64), both modes
    check_grads(scalar, xs, order=1, rtol=1e-5, atol=1e-6)
    # vmap vs loop
    bxs = prog.example_inputs(batch=3)
    close(tx.vmap(f)(*bxs), torch.stack([f(*[b[i] for b in bxs]) for i in range(3)]))
    # per-example gradients: jit(vmap(grad)) vs vmap(grad) vs torch.func
    g_ours = tx.vmap(tx.grad(scalar, argnums=(0, 1)))(*bxs)
    g_jit = tx.jit(tx.vmap(tx.grad(scalar, argnums=(0, 1))))(*bxs)
    # torch.func's, or a per-example loop where it refuses (the gradient itself is checked
    # against finite differences above)
    g_ref = per_example_grads_reference(scalar, bxs)
    for a, b, c in zip(g_ours, g_jit, g_ref):
        close(a, c, 1e-7)
        close(b, c, 1e-7)
    # nvFuser lowering (reference interpreter) vs the jaxpr's impl
    closed = tx.make_jaxpr(f)(*xs)
    prog_nvf = NvFuserProgram(optimize(closure_convert(closed.jaxpr)))
    close(prog_nvf(*closed.consts, *xs)[0], want)
    CHECKED["programs"] += 1
