"""shard_map's errors name the problem and the user's line; a failing rank makes the others
fail in time, naming it, and nothing is written by the failed step.
"""

from __future__ import annotations

import os

import pytest
import torch

import thunderx
from thunderx import P, lax

from .distributed_pool import (
    Pool,
    _data,
    _mlp,
    _mlp_params,
    close_pools,
    pool,
)

HERE = os.path.basename(__file__)


@pytest.fixture(scope="module", autouse=True)
def _close_pools():
    yield
    close_pools()


# ----------------------------------------------------------------------------------- errors


def _check_errors(rank, world, mesh):
    x = torch.ones(3, 4)
    messages = {}

    def expect(key, fn, exc):
        try:
            fn()
        except exc as e:
            messages[key] = str(e)
        else:
            raise AssertionError(f"{key}: expected {exc.__name__}")

    expect(
        "divides",
        lambda: thunderx.shard_map(lambda b: b, mesh, in_specs=P("dp"), out_specs=P("dp"))(x),
        ValueError,
    )
    expect(
        "unknown_mesh_dim",
        lambda: thunderx.shard_map(lambda b: b, mesh, in_specs=P(None, "tp"), out_specs=P())(x),
        ValueError,
    )
    expect(
        "unbound_name",
        lambda: thunderx.shard_map(lambda b: lax.psum(b, "tp"), mesh, in_specs=P(), out_specs=P())(
            x
        ),
        NameError,
    )
    expect(
        "out_specs_structure",
        lambda: thunderx.shard_map(lambda b: (b, b), mesh, in_specs=P(), out_specs=(P(), P(), P()))(
            x
        ),
        ValueError,
    )
    expect(
        "out_specs_rank",
        lambda: thunderx.shard_map(lambda b: b.sum(), mesh, in_specs=P(), out_specs=P("dp"))(x),
        ValueError,
    )
    return messages


def test_errors_name_the_problem_and_the_users_line():
    messages = pool(2).run(_check_errors)[0]
    assert "does not divide" in messages["divides"] and "size 3" in messages["divides"]
    assert "'tp'" in messages["unknown_mesh_dim"] and "('dp',)" in messages["unknown_mesh_dim"]
    assert "unbound axis name 'tp'" in messages["unbound_name"]
    assert "out_specs" in messages["out_specs_structure"]
    assert "rank 0" in messages["out_specs_rank"]
    for key, msg in messages.items():
        assert HERE in msg, f"{key}: the message should name the user's line: {msg}"


# ----------------------------------------------------------------------------------- faults


def _step_or_fail(rank, world, mesh, mode, out_dir):
    p = _mlp_params()
    x, y = _data(80, 4 * world, 6), _data(81, 4 * world, 3)

    def local_loss(p, x, y):
        if rank == 1:
            if mode == "raise":
                raise ValueError("bad batch on this rank")
            os._exit(3)
        return lax.psum(((_mlp(p, x) - y) ** 2).sum(), "dp")

    step = thunderx.shard_map(
        thunderx.grad(local_loss), mesh, in_specs=(P(), P("dp"), P("dp")), out_specs=P()
    )
    try:
        new = step(p, x, y)
    except thunderx.collectives.PeerFailedError as e:
        return str(e)
    torch.save(new, os.path.join(out_dir, f"step-{rank}.pt"))  # must not happen
    return "no error"


@pytest.mark.parametrize("mode", ["raise", "exit"])
def test_a_failing_rank_makes_the_others_fail_naming_it(mode, tmp_path):
    world = 2
    p = Pool(world)
    try:
        out, elapsed = p.run_raw(_step_or_fail, mode, str(tmp_path), timeout=40)
    finally:
        p.close()
    assert 0 in out, f"rank 0 did not answer within the timeout ({elapsed:.1f}s): {out}"
    status, msg = out[0]
    assert status == "ok" and "rank 1" in msg, f"rank 0 should name rank 1: {status} {msg}"
    if mode == "raise":
        assert "bad batch on this rank" in msg and "ValueError" in msg, msg
    else:
        assert "exited" in msg, msg
    assert "rank 0" in msg and HERE in msg, msg
    assert not list(tmp_path.iterdir()), "a failed step wrote its result"
    assert elapsed < 30, f"the failure took {elapsed:.1f}s to surface"
