"""Collectives on several processes and under vmap(axis_name=): each against a reference on
the stacked per-rank values, its transpose by the dot-product test and against vmap; psum
bucketed and overlapped by the torch executor equals separate psums.
"""

from __future__ import annotations

import os

import pytest
import torch

import thunderx
from thunderx import P, lax

from .distributed_pool import (
    _close,
    _data,
    _per_rank,
    _tree_close,
    close_pools,
    pool,
)

HERE = os.path.basename(__file__)


@pytest.fixture(scope="module", autouse=True)
def _close_pools():
    yield
    close_pools()


# ------------------------------------------------------------------------------- collectives


def _collective_cases(world):
    """(name, spmd function, reference on the stacked per-rank values [world, ...] -> stacked)."""
    shift = [(i, (i + 1) % world) for i in range(world)]
    partial = [(0, world - 1)]  # only the last member receives; the others get zeros
    return [
        ("psum", lambda x: lax.psum(x, "dp"), lambda xs: xs.sum(0).expand_as(xs)),
        ("pmean", lambda x: lax.pmean(x, "dp"), lambda xs: xs.mean(0).expand_as(xs)),
        ("pmax", lambda x: lax.pmax(x, "dp"), lambda xs: xs.amax(0).expand_as(xs)),
        ("pmin", lambda x: lax.pmin(x, "dp"), lambda xs: xs.amin(0).expand_as(xs)),
        (
            "all_gather",
            lambda x: lax.all_gather(x, "dp", axis=1),
            lambda xs: torch.stack([xs.movedim(0, 1)] * world),
        ),
        (
            "all_gather_tiled",
            lambda x: lax.all_gather(x, "dp", axis=0, tiled=True),
            lambda xs: torch.stack([torch.cat(list(xs), 0)] * world),
        ),
        (
            "psum_scatter",
            lambda x: lax.psum_scatter(x, "dp", scatter_dimension=0, tiled=True),
            lambda xs: torch.stack(xs.sum(0).chunk(world, 0)),
        ),
        (
            "ppermute",
            lambda x: lax.ppermute(x, "dp", perm=shift),
            lambda xs: torch.roll(xs, 1, 0),
        ),
        (
            "ppermute_partial",
            lambda x: lax.ppermute(x, "dp", perm=partial),
            lambda xs: torch.cat([torch.zeros_like(xs[1:]), xs[:1]]),
        ),
        (
            "all_to_all",
            lambda x: lax.all_to_all(x, "dp", 0, 1, tiled=True),
            lambda xs: torch.stack(
                [
                    torch.cat([xs[i].chunk(world, 0)[j] for i in range(world)], 1)
                    for j in range(world)
                ]
            ),
        ),
        (
            "axis_index",
            lambda x: x * lax.axis_index("dp") + lax.axis_size("dp"),
            lambda xs: xs * torch.arange(world).reshape(-1, 1, 1) + world,
        ),
    ]


def _check_collectives(rank, world, mesh):
    xs = _per_rank(world, 2 * world, 3)  # block shape (2*world, 3): divisible for the tiled ops
    cts_seed = 30
    for name, fn, ref in _collective_cases(world):
        expected = ref(xs)
        sm = thunderx.shard_map(fn, mesh, in_specs=P("dp"), out_specs=P("dp"))
        glob = xs.reshape(world * 2 * world, 3)
        out = sm(glob)
        got = out.reshape((world,) + tuple(expected.shape[1:]))
        _close(got, expected, f"{name} on {world} processes")
        _close(thunderx.jit(sm)(glob), out, f"jit({name})")
        # vmap with the same axis name runs the same program on one process
        _close(thunderx.vmap(fn, axis_name="dp")(xs), expected, f"vmap({name})")
        if name == "axis_index":
            continue
        # transpose: <ct, A x> = <A^T ct, x> summed over members, with A^T from vjp
        cts = _per_rank(world, *expected.shape[1:], seed=cts_seed)

        def both(x, ct):
            y, pullback = thunderx.vjp(fn, x)
            (xt,) = pullback(ct)
            return lax.psum((ct * y).sum(), "dp"), lax.psum((xt * x).sum(), "dp"), xt

        lhs, rhs, xt = thunderx.shard_map(both, mesh, in_specs=P("dp"), out_specs=P())(
            glob, cts.reshape((-1,) + tuple(cts.shape[2:]))
        )
        if name not in ("pmax", "pmin"):  # not linear
            _close(lhs, rhs, f"transpose of {name} (dot-product test)")
        # and against the same vjp under vmap
        _, pullback = thunderx.vjp(thunderx.vmap(fn, axis_name="dp"), xs)
        _close(xt, pullback(cts)[0][rank], f"vjp({name}) vs vmap")
    return True


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_and_transposes_match_references(world):
    assert pool(world).run(_check_collectives) == [True] * world


def _check_pmax_grad(rank, world, mesh):
    xs = torch.tensor([[1.0, 5.0], [3.0, 5.0]] * (world // 2), dtype=torch.float64)
    f = lambda x: (lax.pmax(x, "dp") * torch.tensor([1.0, 2.0], dtype=x.dtype)).sum()
    g = thunderx.shard_map(thunderx.grad(f), mesh, in_specs=P("dp"), out_specs=P("dp"))(xs)
    # member grads of the summed program: the argmax takes all world cotangents; ties share them
    expected = torch.zeros_like(xs)
    for j in range(2):
        col = xs[:, j]
        tie = (col == col.max()).double()
        expected[:, j] = tie / tie.sum() * world * (j + 1)
    _close(g, expected, "grad of pmax")
    _close(thunderx.vmap(thunderx.grad(f), axis_name="dp")(xs), expected, "vmap grad of pmax")
    return True


def test_pmax_derivative_shares_ties():
    assert pool(2).run(_check_pmax_grad) == [True, True]


# ------------------------------------------------------------- bucketed, overlapped psum


def _check_bucketed_psum(rank, world, mesh):
    from thunderx.executors import split_phase

    shapes = {"a": (3, 4), "b": (5,), "c": (2, 2, 2), "d": (7, 3), "e": (1,)}
    dtypes = {"b": torch.float32, "d": torch.float32}  # the others float64: two buffers
    blocks = {
        k: _per_rank(world, *s, seed=110 + i).to(dtypes.get(k, torch.float64))
        for i, (k, s) in enumerate(shapes.items())
    }
    glob = {k: v.reshape(-1, *v.shape[2:]) for k, v in blocks.items()}
    expected = {k: torch.sin(v * (i + 1)).sum(0) for i, (k, v) in enumerate(blocks.items())}

    def leaves(t):  # computed one after another, so early buckets can start early
        return {k: torch.sin(v * (i + 1)) for i, (k, v) in enumerate(t.items())}

    def bucketed(t):
        return lax.psum(leaves(t), "dp")  # one psum over all leaves

    def separate(t):
        return {k: lax.psum(v, "dp") for k, v in leaves(t).items()}

    def sm(f):
        return thunderx.shard_map(f, mesh, in_specs=({k: P("dp") for k in shapes},), out_specs=P())

    oracle = sm(separate)(glob)  # eager, one all_reduce per leaf
    _tree_close(oracle, expected, "separate psums", tol=1e-6)
    saved = split_phase.SPLIT_PHASE_BUCKET_BYTES
    try:
        for cap, n_buckets in ((1, len(shapes)), (1 << 30, 1)):
            split_phase.SPLIT_PHASE_BUCKET_BYTES = cap
            step = thunderx.jit(sm(bucketed))
            got = step(glob)
            for k in shapes:  # gloo's reduction order depends on the buffer: not bit for bit
                assert got[k].dtype == oracle[k].dtype, k
                tol = 1e-6 if got[k].dtype == torch.float32 else 1e-13
                _close(got[k], oracle[k], f"bucket cap {cap}: leaf {k}", tol=tol)
            src = step.lower(glob).program.source.splitlines()
            started = [i for i, ln in enumerate(src) if "_start_psum(" in ln]
            assert len(started) == n_buckets, f"{n_buckets} buckets expected:\n" + "\n".join(src)
            waited = [i for i, ln in enumerate(src) if "_wait_buckets(" in ln]
            assert len(waited) == 1 and waited[0] > started[-1], "\n".join(src)
            if n_buckets > 1:  # the first bucket travels while the later leaves are computed
                between = src[started[0] + 1 : waited[0]]
                assert any("sin" in ln for ln in between), "\n".join(src)
            # the transpose of psum is a psum: grad runs bucketed too
            g = thunderx.jit(
                thunderx.grad(lambda t: sum(v.sum() for v in sm(bucketed)(t).values()))
            )
            ref = thunderx.grad(lambda t: sum(v.sum() for v in sm(separate)(t).values()))(glob)
            _tree_close(g(glob), ref, f"grad with bucket cap {cap}", tol=1e-6)
    finally:
        split_phase.SPLIT_PHASE_BUCKET_BYTES = saved
    return True


@pytest.mark.parametrize("world", [2, 4])
def test_bucketed_psum_equals_separate_psums(world):
    assert pool(world).run(_check_bucketed_psum) == [True] * world


# ------------------------------------------------------------- named axes on one process


def test_vmap_collectives_equal_loop_references():
    xs = _data(90, 4, 8, 3)
    n = xs.shape[0]
    for name, fn, ref in _collective_cases(n):
        _close(thunderx.vmap(fn, axis_name="dp")(xs), ref(xs), f"vmap({name})")
        _close(thunderx.jit(thunderx.vmap(fn, axis_name="dp"))(xs), ref(xs), f"jit(vmap({name}))")
        _close(thunderx.vmap(thunderx.jit(fn), axis_name="dp")(xs), ref(xs), f"vmap(jit({name}))")


def test_vmap_axis_name_nests_and_passes_other_names_through():
    xs = _data(91, 2, 3, 4)
    f = lambda x: lax.psum(x, "i") - lax.psum(x, "j")
    out = thunderx.vmap(thunderx.vmap(f, axis_name="j"), axis_name="i")(xs)
    _close(
        out,
        xs.sum(0, keepdim=True).expand_as(xs) - xs.sum(1, keepdim=True).expand_as(xs),
        "nested named vmaps",
    )
    both = thunderx.vmap(
        thunderx.vmap(lambda x: lax.psum(x, ("i", "j")), axis_name="j"), axis_name="i"
    )(xs)
    _close(both, xs.sum((0, 1), keepdim=True).expand_as(xs), "psum over two names")
    idx = thunderx.vmap(
        thunderx.vmap(lambda x: lax.axis_index(("i", "j")), axis_name="j"), axis_name="i"
    )(xs)
    _close(idx, torch.arange(6, dtype=torch.int32).reshape(2, 3), "axis_index over two names")
    # a value that does not depend on the vmapped input: psum multiplies by the axis size
    c = thunderx.vmap(lambda x: lax.psum(torch.ones(()), "i"), axis_name="i")(xs)
    _close(c, torch.full((2,), 2.0), "psum of an unbatched value")


def test_unbound_axis_name_is_a_clear_error():
    with pytest.raises(NameError, match=r"unbound axis name 'k'.*" + HERE):
        thunderx.vmap(lambda x: lax.psum(x, "k"), axis_name="i")(torch.ones(3))
    with pytest.raises(NameError, match="unbound axis name 'i'"):
        lax.psum(torch.ones(3), "i")
    with pytest.raises(ValueError, match="must equal the size 3"):
        thunderx.vmap(lambda x: lax.psum_scatter(x, "i"), axis_name="i")(torch.ones(3, 2))


def test_jit_cache_keys_on_the_axis_env():
    f = thunderx.jit(lambda x: x * lax.axis_size("i"))
    a = thunderx.vmap(f, axis_name="i")(torch.ones(2, 3))
    b = thunderx.vmap(f, axis_name="i")(torch.ones(4, 3))
    _close(a, torch.full((2, 3), 2.0), "size 2")
    _close(b, torch.full((4, 3), 4.0), "size 4")
