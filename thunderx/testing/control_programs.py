"""The random programs of the control-flow differential test (thunderx.testing.diff_control):
thunderx.lax loops and branches nested up to three deep around random smooth bodies that close
over the program's inputs, the loop's slices and values computed before the loop; `Margins`
records how far each value-dependent decision is from flipping."""

from __future__ import annotations

import dataclasses
import random
from typing import Callable

import torch
import torch.nn.functional as F

import thunderx as tx
from thunderx import lax

F64 = torch.float64

# smooth, bounded bodies: (name, fn of one tensor)
_UNARY: list[tuple[str, Callable]] = [
    ("sin", torch.sin),
    ("tanh", torch.tanh),
    ("gauss", lambda a: torch.exp(-a * a)),
    ("softplus", F.softplus),
    ("sigmoid", torch.sigmoid),
    ("cubic", lambda a: a * a * a / (4.0 + a * a)),  # grows linearly: loops stay finite
    ("cumsum/2", lambda a: torch.cumsum(a, -1) * 0.5),
    ("roll", lambda a: torch.roll(a, 1, -1)),
    ("flip", lambda a: torch.flip(a, (-1,))),
    ("center", lambda a: a - a.mean(-1, keepdim=True)),
    ("normalize", lambda a: a / torch.sqrt(1.0 + a.square().sum())),
    ("detach", lambda a: a.detach() * 0.5 + a),
    ("inplace", lambda a: a.clone().mul_(0.7).add_(a.sin())),
]
# with a value the body closes over (an input of the program, or a loop's slice)
_BINARY: list[tuple[str, Callable]] = [
    ("*", lambda a, w: a * w),
    ("+", lambda a, w: a + w),
    ("*sin", lambda a, w: a * torch.sin(w)),
    ("+tanh*", lambda a, w: torch.tanh(a * w) + a),
    ("*sum", lambda a, w: a * w.sum() * 0.3),
    ("ignore", lambda a, w: torch.cos(w) + 0.0 * a.detach()),
]


@dataclasses.dataclass
class Chain:
    """A random chain of body ops; `"w"` steps read the closed-over value (the loop's slice or
    an input, or with `reads_v` a value the program computed before the loop)."""

    steps: list
    reads_v: bool = False

    def __call__(self, h, w):
        for kind, _name, fn in self.steps:
            h = fn(h, w) if kind == "w" else fn(h)
        return h

    def text(self) -> str:
        return " > ".join(name if kind == "u" else f"{name}w" for kind, name, _ in self.steps)


def _chain(rng: random.Random, n: int | None = None) -> Chain:
    n = rng.randint(1, 3) if n is None else n
    steps = []
    for _ in range(n):
        if rng.random() < 0.4:
            name, fn = rng.choice(_BINARY)
            steps.append(("w", name, fn))
        else:
            name, fn = rng.choice(_UNARY)
            steps.append(("u", name, fn))
    return Chain(steps, rng.random() < 0.3)


class Margins:
    """Records how far each value-dependent decision's value was from its threshold, on
    concrete runs (the oracle's); a traced value records nothing."""

    def __init__(self):
        self.values: list[float] = []

    def note(self, v) -> None:
        if type(v) is torch.Tensor and not v.requires_grad:
            self.values.append(abs(float(v)))
        elif type(v) is torch.Tensor:
            self.values.append(abs(float(v.detach())))


# ------------------------------------------------------------------------ the constructs


@dataclasses.dataclass
class Node:
    kind: str
    params: dict
    inner: list  # Chains or Nodes

    def text(self) -> str:
        inner = ", ".join(x.text() for x in self.inner)
        extra = "".join(f" {k}={v}" for k, v in self.params.items())
        return f"{self.kind}{extra}[{inner}]"

    def __call__(self, h, env):
        return _APPLY[self.kind](self, h, env)


def _inner(x, h, w, env):
    if isinstance(x, Node):
        return x(h, env)
    return x(h, env["v"] if x.reads_v else w)


def _scan(node, h, env):
    w, xs = env["w"], env["X"]
    if node.params.get("pair"):  # a pytree carry: (value, running sum), and two stacked outputs

        def body(c, x):
            a, total = c
            a2 = _inner(node.inner[0], a, x, env)
            return (a2, total + a2 * 0.5), (node.inner[1](a2, w), a2 * x)

        (c, total), (ys, zs) = lax.scan(
            body, (h, h * 0.1), xs, reverse=node.params["reverse"], unroll=node.params["unroll"]
        )
        return c + total * 0.2 + 0.3 * ys.sum(0) - 0.1 * zs.sum(0)

    def body(c, x):
        c2 = _inner(node.inner[0], c, x, env)
        return c2, node.inner[1](c2, w)

    c, ys = lax.scan(body, h, xs, reverse=node.params["reverse"], unroll=node.params["unroll"])
    return c + 0.5 * ys.sum(0) * 0.3


def _fori(node, h, env):
    w = env["w"]

    def body(i, c):
        return _inner(node.inner[0], c, w, env) * (1.0 + 0.05 * i)

    # a bound read from the integer argument is a run-time trip count (a while loop) when traced
    upper = env["k"] + 1 if node.params["n"] == "k+1" else node.params["n"]
    return lax.fori_loop(0, upper, body, h)


def _remat(node, h, env):
    w = env["w"]
    policy = tx.checkpoint_policies.nothing_saveable if node.params["policy"] else None
    return tx.checkpoint(lambda a, w: _inner(node.inner[0], a, w, env), policy=policy)(h, w)


def _while(node, h, env):
    w, margins, n = env["w"], env["margins"], node.params["n"]
    limit = node.params.get("limit")

    def cond_fun(carry):
        k, c = carry
        if limit is None:
            return k < n
        value = c.square().sum() - limit
        margins.note(value)
        return (k < n) & (value < 0)

    def body_fun(carry):
        k, c = carry
        return k + 1, _inner(node.inner[0], c, w, env) * 0.9

    k0 = torch.zeros((), dtype=torch.int64 if node.params.get("int") else F64)
    return lax.while_loop(cond_fun, body_fun, (k0, h))[1]


def _cond(node, h, env):
    w, margins = env["w"], env["margins"]
    if node.params["on"] == "value":
        value = h.sum() - node.params["at"]
        margins.note(value)
        pred = value > 0
    else:
        pred = env["k"] > 0
    return lax.cond(
        pred, lambda a: _inner(node.inner[0], a, w, env), lambda a: node.inner[1](a, w), h
    )


def _switch(node, h, env):
    w = env["w"]
    branches = [lambda a, x=x: _inner(x, a, w, env) for x in node.inner]
    return lax.switch(env["k"], branches, h)


def _map(node, h, env):
    f = lambda x: _inner(node.inner[0], x + h, env["w"], env)  # noqa: E731
    ys = lax.map(f, env["X"], batch_size=node.params["batch_size"])
    return h + ys.sum(0) * 0.3


_APPLY = {
    "scan": _scan,
    "fori_loop": _fori,
    "while_loop": _while,
    "cond": _cond,
    "switch": _switch,
    "map": _map,
    "checkpoint": _remat,
}


def _node(rng: random.Random, depth: int) -> Node:
    kind = rng.choice(list(_APPLY))

    def body():
        return _node(rng, depth + 1) if depth < 2 and rng.random() < 0.35 else _chain(rng)

    if kind == "scan":
        params = {
            "reverse": rng.random() < 0.5,
            "unroll": rng.choice([1, 1, 2]),
            "pair": rng.random() < 0.4,
        }
        return Node(kind, params, [body(), _chain(rng)])
    if kind == "fori_loop":
        return Node(kind, {"n": rng.choice([0, 1, 2, 3, "k+1"])}, [body()])
    if kind == "checkpoint":
        return Node(kind, {"policy": rng.random() < 0.5}, [body()])
    if kind == "map":
        return Node(kind, {"batch_size": rng.choice([None, None, 2])}, [body()])
    if kind == "while_loop":
        params = {"n": rng.randint(0, 3), "int": rng.random() < 0.5}
        if rng.random() < 0.5:
            params["limit"] = round(rng.uniform(0.5, 4.0), 2)
        return Node(kind, params, [body()])
    if kind == "cond":
        on = rng.choice(["value", "int"])
        params = {"on": on, "at": round(rng.uniform(-0.5, 0.5), 2)} if on == "value" else {"on": on}
        return Node(kind, params, [body(), _chain(rng)])
    if kind == "switch":
        return Node(kind, {}, [body() for _ in range(rng.randint(1, 3))])
    raise AssertionError(kind)


@dataclasses.dataclass
class Program:
    nodes: list
    shape: tuple
    length: int
    seed: int
    # vmap's in_axes for (h, w, X, k): h and w always batched, X and k sometimes
    in_axes: tuple = (0, 0, None, None)

    def text(self) -> str:
        return " ; ".join(n.text() for n in self.nodes)

    def fn(self, margins: Margins | None = None) -> Callable:
        """The program as f(h, w, X, k): h, w of `shape`, X of (length, *shape), k an integer
        0-d tensor; returns a tensor of `shape`."""
        nodes = self.nodes
        margins = margins or Margins()

        def f(h, w, X, k):
            env = {"w": w, "X": X, "k": k, "margins": margins, "v": torch.tanh(h * w)}
            for node in nodes:
                h, env["v"] = node(h, env), h
            return h

        return f


def make_program(seed: int) -> Program:
    rng = random.Random(seed)
    shape = rng.choice([(3,), (2, 3), (4,)])
    length = rng.choice([0, 1, 3, 4])
    nodes = [_node(rng, 0) for _ in range(rng.randint(1, 2))]
    in_axes = (0, 0, rng.choice([None, 0]), rng.choice([None, 0]))
    return Program(nodes, shape, length, seed, in_axes)


def draw_inputs(prog: Program, g: torch.Generator, batch: int | None = None):
    pre = () if batch is None else (batch,)
    h = torch.randn(pre + prog.shape, dtype=F64, generator=g)
    w = torch.randn(pre + prog.shape, dtype=F64, generator=g)
    X = torch.randn(pre + (prog.length,) + prog.shape, dtype=F64, generator=g) * 0.7
    k = torch.randint(-1, 3, pre, generator=g)
    return [h, w, X, k]
