"""torch.autocast and thunderx's transforms: where thunderx stages or differentiates (jit, grad,
jvp, jacrev, ...) its primitives take their inputs' dtypes, so autocast's casts would be lost
(jit's program ran in float32 where eager torch runs bfloat16) or mismatch the derivative's
dtypes; that is refused with a clear error naming the user's line, leaving no state behind. An
eager vmap runs torch's kernels, which apply autocast, and matches torch.func."""

import pytest
import torch
import torch.func as tf

import thunderx as tx
from thunderx.core import EvalTrace, current_trace
from thunderx.errors import UnsupportedOperationError

A = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
B = torch.randn(6, 3, generator=torch.Generator().manual_seed(1))


def _mixed(a, b):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        c = a @ b  # bfloat16 under autocast
        d = torch.relu(c)
    return c, d.float() * 2


def _clean():
    assert not torch.is_autocast_enabled("cpu")
    assert type(current_trace()) is EvalTrace


TRANSFORMS = {
    "jit": (lambda f: tx.jit(f), (A, B)),
    "grad": (lambda f: tx.grad(lambda a, b: f(a, b)[1].sum()), (A, B)),
    "jacrev": (lambda f: tx.jacrev(lambda a, b: f(a, b)[1]), (A, B)),
    "jacfwd": (lambda f: tx.jacfwd(lambda a, b: f(a, b)[1]), (A, B)),
    "vmap_grad": (
        lambda f: tx.vmap(tx.grad(lambda a, b: f(a, b)[1].sum()), in_dims=(0, None)),
        (A[None], B),
    ),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_autocast_inside_a_staging_or_differentiating_transform_is_refused(name):
    transform, args = TRANSFORMS[name]
    with pytest.raises(UnsupportedOperationError, match=r"torch.autocast\('cpu'") as info:
        transform(_mixed)(*args)
    assert "test_autocast.py" in str(info.value)  # the user's line
    _clean()


def test_a_jitted_function_called_under_autocast_is_refused_and_works_after():
    f = tx.jit(lambda a, b: torch.tanh(a @ b))
    want = torch.tanh(A @ B)
    torch.testing.assert_close(f(A, B), want)  # traced and cached in float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (A @ B).dtype == torch.bfloat16  # what eager torch runs here
        with pytest.raises(UnsupportedOperationError, match="around a call of the jitted"):
            f(A, B)  # the cached program would run in float32 (or under autocast's casts)
        with pytest.raises(UnsupportedOperationError, match="autocast"):
            tx.grad(lambda a: (a @ B).sum())(A)
    _clean()
    torch.testing.assert_close(f(A, B), want)
    assert f(A, B).dtype == torch.float32


def test_autocast_disabled_inside_is_fine():
    def f(a, b):
        with torch.autocast("cpu", enabled=False):
            return a @ b

    torch.testing.assert_close(tx.jit(f)(A, B), A @ B)
    torch.testing.assert_close(
        tx.grad(lambda a: f(a, B).sum())(A), tf.grad(lambda a: f(a, B).sum())(A)
    )


def test_eager_vmap_under_autocast_matches_torch_func():
    xs = torch.randn(5, 4, 6, generator=torch.Generator().manual_seed(2))
    ours, theirs = (
        tx.vmap(_mixed, in_dims=(0, None))(xs, B),
        tf.vmap(_mixed, in_dims=(0, None))(xs, B),
    )
    for o, t in zip(ours, theirs, strict=True):
        assert o.dtype == t.dtype
        torch.testing.assert_close(o, t, rtol=0, atol=0)
    assert ours[0].dtype == torch.bfloat16
