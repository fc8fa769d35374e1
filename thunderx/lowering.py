"""What `jit(f).lower(*args)` returns: the staged program at each stage, as text; `.compile()`
gives the callable program for that signature, and `.cost_analysis()` counts what it does."""

from __future__ import annotations

import math
from collections import Counter

import torch

from thunderx import tree
from thunderx.core import flops_rules
from thunderx.errors import user_frame
from thunderx.executors import get_executor
from thunderx.ir import Jaxpr, Var
from thunderx.passes import optimize
from thunderx.transforms.jaxpr_cache import compiled_for


class Lowered:
    """The traced jaxpr, the optimized jaxpr, and the execution program for one signature."""

    def __init__(self, entry, executor: str, name: str, call=None):
        self.entry = entry
        # (jit function, args, kwargs) of the lowering call: the signature `compile()` checks
        self._call = call
        self.executor = executor
        self.name = name
        self.jaxpr = entry.closed
        self.optimized = optimize(entry.jaxpr)
        self.executor_impl = get_executor(executor)
        # the program jit runs for this signature (one per jaxpr and executor), so that its
        # state (the tiered executor's tier) shows
        self.program = compiled_for(entry.jaxpr, executor)

    def as_text(self, max_lines: int | None = None) -> str:
        parts = [
            f"# {self.name}: optimized jaxpr (consts first)",
            str(self.optimized),
            f"# execution program: {self.executor_impl.describe()}",
            self.program_text(),
        ]
        writes = self.entry.writes
        if writes:
            n = len(self.optimized.outvars) - len(writes)
            copies = ", ".join(
                f"{'' if grad else 'no_grad '}arg {i}.copy_(out {n + k})"
                for k, (i, grad) in enumerate(writes)
            )
            parts.append(
                f"# after each call, captured tensors and arguments written back in place: {copies}"
            )
        text = "\n".join(parts)
        if max_lines is not None:
            lines = text.splitlines()
            if len(lines) > max_lines:
                text = "\n".join(lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"])
        return text

    def program_text(self) -> str:
        return self.program.as_text()

    @property
    def regions(self) -> list[int | None] | None:
        """The fusion region of each optimized equation, or None for a non-fusing executor."""
        return self.executor_impl.partition(self.optimized)

    def __repr__(self) -> str:
        return self.as_text()

    def cost_analysis(self) -> dict:
        """Counts over the optimized jaxpr (see `cost_analysis`)."""
        return cost_analysis(self.optimized)

    def compile(self) -> Compiled:
        """The program as a callable for this signature (JAX's `Lowered.compile()`)."""
        if self._call is None:
            raise TypeError("compile: this Lowered was not made by jit(...).lower(...)")
        return Compiled(self)


class Compiled:
    """`jit(f).lower(*args).compile()`: call it with the arguments of the lowering call minus
    the static ones (those are fixed), with the same shapes, dtypes and devices; anything else
    is a TypeError, never a retrace.

    >>> f = thunderx.jit(lambda x, n: x * n, static_argnums=1)
    >>> c = f.lower(torch.ones(2), 3).compile()
    >>> c(torch.tensor([1., 2.]))
    tensor([3., 6.])
    >>> c.cost_analysis()["equations"]
    1
    """

    def __init__(self, lowered: Lowered):
        jit_fn, args, kwargs = lowered._call
        self.lowered = lowered
        self.name = lowered.name
        self._static_pos = sorted(jit_fn._static_positions(len(args), kwargs))
        self._static_names = set(jit_fn.static_argnames) & set(kwargs)
        self._nargs = len(args)
        (treedef, keys, _), _, _, _ = jit_fn._key(args, kwargs)
        self._treedef, self._keys = treedef, keys
        entry = lowered.entry
        self._program = lowered.program  # Executor.lower gives a runnable program
        self._consts = list(entry.consts)
        self._out_tree = entry.out_tree

    def __call__(self, *args, **kwargs):
        from thunderx.lang.captured import check_write_aliases, write_back
        from thunderx.transforms.jit_key import leaf_key, needs_autograd

        expected = self._nargs - len(self._static_pos)
        if len(args) != expected:
            raise TypeError(
                f"{self.name} (compiled): expected {expected} positional arguments (the static "
                f"ones are fixed at lowering), got {len(args)} (at {user_frame()})"
            )
        extra = self._static_names & set(kwargs)
        if extra:
            raise TypeError(
                f"{self.name} (compiled): static arguments {sorted(extra)} are fixed at lowering"
            )
        it = iter(args)
        full = tuple(None if i in self._static_pos else next(it) for i in range(self._nargs))
        leaves, treedef = tree.flatten((full, kwargs))
        if treedef != self._treedef:
            raise TypeError(
                f"{self.name} (compiled): arguments have structure {treedef}, lowered for "
                f"{self._treedef} (at {user_frame()})"
            )
        keys = tuple(leaf_key(x) for x in leaves)
        if keys != self._keys:
            bad = next(i for i, (a, b) in enumerate(zip(keys, self._keys)) if a != b)
            raise TypeError(
                f"{self.name} (compiled): argument leaf {bad} is {_describe(keys[bad])}, lowered "
                f"for {_describe(self._keys[bad])}; lower again for new shapes (at {user_frame()})"
            )
        leaves = [torch.tensor(x) if type(x) in (bool, int, float) else x for x in leaves]
        prog = self._program
        fn = prog.fn_plain if needs_autograd(leaves, self._consts) else prog.fn
        writes = self.lowered.entry.writes
        if writes:
            operands = (*self._consts, *leaves)
            check_write_aliases(operands, writes, self.name, len(self._consts))
            return tree.unflatten(self._out_tree, write_back(operands, writes, fn(*operands)))
        return tree.unflatten(self._out_tree, fn(*self._consts, *leaves))

    def as_text(self) -> str:
        return self.lowered.as_text()

    def cost_analysis(self) -> dict:
        """Counts over the compiled program's jaxpr (see `cost_analysis`)."""
        return cost_analysis(self.lowered.optimized)

    def __repr__(self) -> str:
        return f"Compiled({self.name}, executor={self.lowered.executor!r})"


def _describe(key) -> str:
    if isinstance(key, tuple):
        shape, dtype, device = key
        return f"{dtype} {tuple(shape)} on {device}"
    return f"a Python {key.__name__}"


# ------------------------------------------------------------------------------- cost analysis


def _nbytes(x) -> int:
    if not isinstance(x, Var):
        return 0
    a = x.aval
    return math.prod(a.shape) * a.dtype.itemsize


def _flops(e) -> int:
    """The primitive's declared flops (contractions); 0 for primitives that declare none."""
    rule = flops_rules.get(e.prim)
    if rule is None:
        return 0
    return rule([x.aval for x in e.inputs], [v.aval for v in e.outputs], **e.params)


def cost_analysis(jaxpr: Jaxpr) -> dict:
    """What a program does, for comparing variants of a function (like JAX's
    `Compiled.cost_analysis()`, counted on the jaxpr rather than by a compiler):

    - `equations`: number of equations; `primitives`: equations per primitive name;
    - `fusion_regions` / `fused_equations`: the regions the nvFuser executor forms (whichever
      executor runs it) and how many equations they hold;
    - `flops`: 2 x multiply-adds of `dot_general` and `conv` (other primitives count 0);
    - `bytes_accessed`: bytes each equation reads and writes, run one by one (torch executor);
    - `bytes_accessed_fused`: bytes crossing the boundaries of fusion regions and unfused
      equations (what the nvFuser partition moves through memory).
    """
    from thunderx.executors.nvfuser_exec import partition, schedule

    regions = partition(jaxpr)
    units = schedule(jaxpr, regions)
    counts = Counter(e.prim.name for e in jaxpr.eqns)
    return {
        "equations": len(jaxpr.eqns),
        "primitives": dict(sorted(counts.items())),
        "fusion_regions": len({r for r in regions if r is not None}),
        "fused_equations": sum(r is not None for r in regions),
        "flops": sum(_flops(e) for e in jaxpr.eqns),
        "bytes_accessed": sum(
            _nbytes(x) for e in jaxpr.eqns for x in list(e.inputs) + list(e.outputs)
        ),
        "bytes_accessed_fused": sum(
            _nbytes(x) for u in units for x in list(u.inputs) + list(u.outputs)
        ),
    }
