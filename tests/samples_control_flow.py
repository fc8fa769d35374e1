"""Sample generators for the control-flow primitives: each traces small bodies into the
sub-jaxprs the primitive holds, so the generated rule checks (jvp vs finite differences, vjp as
the transpose of jvp, vmap vs a loop, jit vs eager) run on them like on any primitive."""

from __future__ import annotations

import torch

from thunderx import tree
from thunderx.control_flow import _trace

F64 = torch.float64


def _jaxpr(fun, *example_trees):
    from thunderx.core import get_aval

    trees, avals = [], []
    for t in example_trees:
        leaves, treedef = tree.flatten(t)
        trees.append(treedef)
        avals += [get_aval(x) for x in leaves]
    j, consts, _ = _trace(fun, trees, avals, "sample")
    assert not consts
    return j


def cond_sample(d, Sample):
    shape = d.shape(max_rank=2)
    x, w = d.tensor(shape), d.tensor(shape)
    branches = (
        _jaxpr(lambda a: (a[0].sin() * a[1],), (x, w)),
        _jaxpr(lambda a: (a[0].cos() + a[1] * a[0],), (x, w)),
        _jaxpr(lambda a: (a[1].tanh(),), (x, w)),
    )
    index = torch.tensor(d.int(-1, 3), dtype=torch.int32)  # out of range: clamped
    return Sample([index, x, w], {"branches": branches}, rtol=1e-4, atol=1e-6)


def scan_sample(d, Sample):
    shape = d.shape(max_rank=2)
    n = d.int(0, 3)
    w, c, xs = d.tensor(shape), d.tensor(shape), d.tensor((n,) + shape)
    body = _jaxpr(
        lambda w, c, x: (c.tanh() * w + x.sin(), c * x), w, c, xs[0] if n else d.tensor(shape)
    )
    params = {"jaxpr": body, "num_consts": 1, "num_carry": 1, "length": n, "reverse": d.bool()}
    return Sample([w, c, xs], params, rtol=1e-4, atol=1e-6)


def while_sample(d, Sample):
    shape = d.shape(max_rank=2)
    w, x = d.tensor(shape), d.tensor(shape)
    limit = torch.tensor(d.int(0, 3))
    # a float counter (every output differentiable) off the integer limits, so the finite
    # differences never move the trip count
    i0 = torch.tensor(0.5, dtype=F64)
    cond = _jaxpr(lambda lim, c: c[0] < lim, limit, (i0, x))
    body = _jaxpr(lambda w, c: (c[0] + 1.0, c[1].sin() * w + c[1]), w, (i0, x))
    params = {
        "cond_jaxpr": cond,
        "body_jaxpr": body,
        "cond_nconsts": 1,
        "body_nconsts": 1,
        "num_stacked": 0,
    }
    return Sample([limit, w, i0, x], params, rtol=1e-4, atol=1e-6)


def checkpoint_sample(d, Sample):
    from thunderx.checkpointing import checkpoint_policies as P

    shape = d.shape(max_rank=2)
    x, w = d.tensor(shape), d.tensor(shape)
    j = _jaxpr(lambda a, b: ((a.sin() * b).exp(), a * b), x, w)
    policy = d.choice([None, P.dots_saveable, P.everything_saveable])
    return Sample([x, w], {"jaxpr": j, "policy": policy}, rtol=1e-4, atol=1e-6)


SAMPLERS = {
    "cond": cond_sample,
    "scan": scan_sample,
    "while": while_sample,
    "checkpoint": checkpoint_sample,
}
