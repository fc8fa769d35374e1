"""thunderx.disable_jit (jax.disable_jit): inside the block a jitted function runs its Python
on every call, op by op, with concrete values; outside it, and in other threads, jit stages as
before. Oracles: JAX's own disable_jit (side-effect counts), torch.func, and the jitted run."""

import os
import subprocess
import sys
import threading

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx.core import EvalTrace, current_trace
from thunderx.errors import ConcretizationError

X = torch.randn(5, generator=torch.Generator().manual_seed(0))


def _counting():
    calls = []

    def f(x):
        calls.append(1)  # a Python side effect: once per trace under jit
        return torch.sin(x) * 2

    return f, calls


def test_python_runs_on_every_call_inside_the_block_only():
    f, calls = _counting()
    g = tx.jit(f)
    for _ in range(3):
        torch.testing.assert_close(g(X), torch.sin(X) * 2)
    assert len(calls) == 1  # traced once
    with tx.disable_jit():
        for _ in range(3):
            torch.testing.assert_close(g(X), torch.sin(X) * 2)
    assert len(calls) == 4
    g(X)
    assert len(calls) == 4  # jitted again after the block: the cached program


def test_side_effect_counts_match_jax():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    counts = {}
    for name, jit, disable, mk in (
        ("thunderx", tx.jit, tx.disable_jit, lambda v: torch.tensor(v)),
        ("jax", jax.jit, jax.disable_jit, lambda v: jnp.asarray(v)),
    ):
        n = [0]

        def f(x, n=n):
            n[0] += 1
            return x * 2

        g = jit(f)
        g(mk(1.0))
        g(mk(2.0))
        with disable():
            g(mk(3.0))
            g(mk(4.0))
        g(mk(5.0))
        counts[name] = n[0]
    assert counts["thunderx"] == counts["jax"] == 3


def test_values_are_concrete_inside_the_block():
    def f(x):
        if x.sum() > 0:  # Python control flow on a value
            return x * float(x.max().item())
        return -x

    g = tx.jit(f)
    with pytest.raises(ConcretizationError):
        g(X)
    with tx.disable_jit():
        torch.testing.assert_close(g(X), f(X))
        torch.testing.assert_close(g(-X.abs()), f(-X.abs()))
    assert type(current_trace()) is EvalTrace


def test_lax_control_flow_runs_as_python_inside_the_block():
    taken = []

    def f(x):
        def pos(v):
            taken.append("pos")
            return v * 2

        def neg(v):
            taken.append("neg")
            return -v

        y = tx.lax.cond(x.sum() > 0, pos, neg, x)
        return tx.lax.fori_loop(0, 3, lambda i, v: v + i, y)

    g = tx.jit(f)
    want = g(X)
    assert sorted(taken) == ["neg", "pos"]  # both branches traced
    taken.clear()
    with tx.disable_jit():
        torch.testing.assert_close(g(X), want)
    assert taken == (["pos"] if X.sum() > 0 else ["neg"])  # only the branch taken ran


def _mlp_loss(params, x):
    for w in params:
        x = torch.tanh(x @ w)
    return x.square().mean()


def test_transforms_of_a_jitted_function_match_torch_func_inside_the_block():
    g = torch.Generator().manual_seed(1)
    params = [torch.randn(4, 4, generator=g) for _ in range(2)]
    xs = torch.randn(3, 2, 4, generator=g)
    loss = tx.jit(_mlp_loss)
    want = tf.vmap(tf.grad(_mlp_loss), in_dims=(None, 0))(params, xs)
    with tx.disable_jit():
        got = tx.vmap(tx.grad(loss), in_axes=(None, 0))(params, xs)
        jaxpr = str(tx.make_jaxpr(tx.grad(loss))(params, xs[0]))
        outer = tx.jit(tx.vmap(tx.grad(_mlp_loss), in_axes=(None, 0)))(params, xs)
    for a, b, c in zip(got, want, outer):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(c, b)
    # traced into grad's trace, op by op: no staged call of the jitted function
    assert "jit_call" not in jaxpr and "tanh" in jaxpr
    assert "jit_call" in str(tx.make_jaxpr(tx.grad(loss))(params, xs[0]))


def test_the_block_nests_and_restores_its_state_after_an_exception():
    f, calls = _counting()
    g = tx.jit(f)
    g(X)
    with tx.disable_jit():
        with tx.disable_jit(False):
            g(X)  # jit back on: the cached program
        assert len(calls) == 1
        with pytest.raises(RuntimeError, match="boom"):
            with tx.disable_jit():
                raise RuntimeError("boom")
        g(X)  # still disabled in the outer block
        assert len(calls) == 2
    g(X)
    assert len(calls) == 2


def test_the_switch_is_per_thread():
    f, calls = _counting()
    g = tx.jit(f)
    g(X)
    done = threading.Event()
    results = []

    def other():
        results.append(g(X))  # this thread's jit is on
        done.set()

    with tx.disable_jit():
        t = threading.Thread(target=other)
        t.start()
        assert done.wait(60)
        t.join(60)
    assert len(calls) == 1
    torch.testing.assert_close(results[0], torch.sin(X) * 2)


def test_the_environment_variable_disables_jit_for_a_process():
    code = (
        "import torch, thunderx as tx\n"
        "n = []\n"
        "g = tx.jit(lambda x: n.append(1) or x + 1)\n"
        "g(torch.ones(2)); g(torch.ones(2))\n"
        "print(len(n))\n"
    )
    env = dict(os.environ, THUNDERX_DISABLE_JIT="1")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "2"
