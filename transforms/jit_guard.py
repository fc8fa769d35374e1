"""Generated cache-hit calls for jit: one Python function per signature the fast path has seen.

A cached call on a dict of parameters used to flatten the pytree with optree, build a key of
every leaf's (shape, dtype, device), hash it, look it up and scan the leaves for requires_grad:
about 40 us for a 13-leaf dict right after the program ran (cold caches), 8% of a small
transformer layer's step. `fast_call` writes, per signature, a function that checks the
argument structure and each leaf against what was traced (container types and lengths, the
dict's keys, each leaf's class, shape, dtype and device), reads the leaves straight out of the
containers in the order `tree.flatten` gives them, picks the program variant (torch autograd
through the call needs the one without in-place reuse), calls it and builds the outputs' pytree
as a literal. A mismatch anywhere returns MISS and the caller goes the general way. On a
13-leaf dict the call costs 13 us over the program, and a plain tensor argument about 0.7 us.

Only exact list, tuple, dict and None containers and tensor or Parameter leaves are handled; a
structure that walks differently from `tree.flatten` (checked leaf by leaf when the function
is made), and a program that writes into its arguments, gets no generated call.
"""

from __future__ import annotations

import itertools

import torch

from thunderx import tree

MISS = object()
# the leaf classes the fast path takes (jit.py's general path checks the same)
LEAF_TYPES = (torch.Tensor, torch.nn.Parameter)


class _Writer:
    """Walks the arguments, writing the checks and the leaf reads of a generated call."""

    def __init__(self):
        self.lines: list[str] = []
        self.ns: dict = {"MISS": MISS}
        self.leaves: list = []  # the argument objects, in flattening order (for the check)
        self.names: list[str] = []
        self._n = itertools.count()
        self.keyed = False  # whether a dict is read by key (a KeyError is a miss)

    def const(self, value) -> str:
        name = f"_k{next(self._n)}"
        self.ns[name] = value
        return name

    def node(self, x, expr: str, depth: int) -> bool:
        t = type(x)
        if x is None:
            self.lines.append(f"if {expr} is not None: return MISS")
            return True
        if t in LEAF_TYPES:
            return self.leaf(x, expr)
        if t in (list, tuple) and depth < 8:
            self.lines.append(
                f"if {expr}.__class__ is not {t.__name__} or len({expr}) != {len(x)}:"
            )
            self.lines.append("    return MISS")
            return self.children(list(enumerate(x)), expr, depth)
        if t is dict and depth < 8:
            try:
                keys = sorted(x)
            except TypeError:
                return False
            self.keyed = True
            self.lines.append(f"if {expr}.__class__ is not dict or len({expr}) != {len(x)}:")
            self.lines.append("    return MISS")
            return self.children([(self.const(k), x[k]) for k in keys], expr, depth)
        return False

    def children(self, items, expr, depth) -> bool:
        for key, child in items:
            name = f"n{next(self._n)}"
            self.lines.append(f"{name} = {expr}[{key}]")
            if not self.node(child, name, depth + 1):
                return False
        return True

    def leaf(self, x, expr: str) -> bool:
        i = len(self.leaves)
        self.leaves.append(x)
        self.names.append(expr)
        shape, dtype = self.const(tuple(x.shape)), self.const(x.dtype)
        device = (
            f"{expr}.is_cpu"
            if x.device.type == "cpu"
            else f"{expr}.device == {self.const(x.device)}"
        )
        cls = f"{expr}.__class__"
        self.lines.append(
            f"if not (({cls} is _T or {cls} is _P) and {expr}.shape == {shape} "
            f"and {expr}.dtype is {dtype} and {device}): return MISS  # leaf {i}"
        )
        return True


def _builder(out_tree, w: _Writer) -> str | None:
    """The source of an expression that builds the outputs' pytree from `o`, the program's
    flat results, as literals (a dict of 12 gradients costs one dict display instead of optree's
    unflatten); None where the tree holds anything but exact lists, tuples, dicts and None, or
    the literal would not rebuild exactly what `tree.unflatten` gives."""
    n = out_tree.num_leaves
    marks = [_Mark(i) for i in range(n)]
    want = tree.unflatten(out_tree, marks)

    def source(x):
        t = type(x)
        if t is _Mark:
            return f"o[{x.i}]"
        if x is None:
            return "None"
        if t is list:
            return "[" + ", ".join(source(c) for c in x) + "]"
        if t is tuple:
            return "(" + "".join(source(c) + ", " for c in x) + ")"
        if t is dict:
            items = ", ".join(f"{w.const(k)}: {source(v)}" for k, v in x.items())
            return "{" + items + "}"
        raise TypeError(t)

    try:
        text = source(want)
    except TypeError:
        return None
    got = eval(f"lambda o: {text}", w.ns)(marks)
    if not _same_tree(got, want):
        return None
    return text


class _Mark:
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


def _same_tree(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is _Mark:
        return a is b
    if type(a) is dict:
        return list(a) == list(b) and all(_same_tree(a[k], b[k]) for k in a)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same_tree(x, y) for x, y in zip(a, b))
    return a is None and b is None


def fast_call(args, leaves, hit, state, eval_trace, counts):
    """A function `call(args)` giving the outputs of the cached program `hit` (the fast path's
    record: program, its variant for torch autograd, consts, output tree, whether a const needs
    grad, writes, the versions of captured tensors read at trace time) for arguments of the
    signature of `args`, or MISS; None where this structure cannot be checked this way. `leaves`
    are `tree.flatten(args)`'s leaves."""
    fn, fn_plain, consts, single, consts_need_grad, writes, reads = hit
    if writes is not None:
        return None
    w = _Writer()
    w.ns.update(zip(("_T", "_P"), LEAF_TYPES))
    w.lines.append(f"if len(args) != {len(args)}: return MISS")
    try:
        ok = w.children(list(enumerate(args)), "args", 0)
    except Exception:  # an argument whose checks cannot be written (odd keys, shapes)
        return None
    if not ok or len(w.leaves) != len(leaves) or any(a is not b for a, b in zip(w.leaves, leaves)):
        return None
    operands = ", ".join([f"_c{i}" for i in range(len(consts))] + w.names)
    # torch autograd records through the call: a leaf that requires grad (read first: the
    # grad mode is a function call), or a captured tensor that does
    needs = " or ".join([f"{n}.requires_grad" for n in w.names])
    if consts_need_grad:
        pick = "f = _fn_plain if _grad() else _fn"
    elif w.names:
        pick = f"f = _fn_plain if ({needs}) and _grad() else _fn"
    else:
        pick = "f = _fn"
    if single is True:
        result = [f"return f({operands})"]
    else:
        build = _builder(single, w)
        result = [f"o = f({operands})", f"return {build or '_unflatten(_tree, o)'}"]
    checks = w.lines
    if w.keyed:  # a dict read by key: a KeyError is a dict with other keys
        checks = [
            "try:",
            *["    " + line for line in checks],
            "except KeyError:",
            "    return MISS",
        ]
    # captured tensors whose values the trace read: the program holds them (lang/captured.py)
    versions = [f"if _r{i}._version != {v}: return MISS" for i, (_, v) in enumerate(reads)]
    body = [
        "if _state.trace.__class__ is not _Eval: return MISS",
        *versions,
        *checks,
        pick,
        "_counts[0] += 1",
        *result,
    ]
    w.ns.update(
        _state=state,
        _Eval=eval_trace,
        _grad=torch.is_grad_enabled,
        _fn=fn,
        _fn_plain=fn_plain,
        _counts=counts,
        _tree=single,
        _unflatten=tree.unflatten,
        **{f"_c{i}": c for i, c in enumerate(consts)},
        **{f"_r{i}": t for i, (t, _) in enumerate(reads)},
    )
    src = "def call(args):\n" + "\n".join("    " + line for line in body) + "\n"
    # one filename for every guard: code objects keep their filename interned for the life of
    # the process, so a numbered one per guard grew memory by ~74 bytes per jit function
    exec(compile(src, "<thunderx-jit-guard>", "exec"), w.ns)
    call = w.ns["call"]
    call.source = src
    return call
