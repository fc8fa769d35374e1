"""Size budget at a glance: `python -m thunderx.stats` prints the primitive count, the rules each
table holds, and lines of code per package. `python -m thunderx.stats --table` prints the
primitive table of docs/primitives.md (one row per primitive, from the registry);
`--write` regenerates that file."""

from __future__ import annotations

import pathlib
import sys

import thunderx  # noqa: F401  (registers everything)
from thunderx import core

ROOT = pathlib.Path(__file__).parent.parent
TABLE_PATH = ROOT / "docs" / "primitives.md"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--write" in argv:
        TABLE_PATH.write_text(primitive_table())
        print(f"wrote {TABLE_PATH.relative_to(ROOT)}")
        return
    if "--table" in argv:
        print(primitive_table(), end="")
        return
    print(f"primitives: {len(core.primitives)}")
    tables = {
        "jvp": core.jvp_rules,
        "transpose": core.transpose_rules,
        "batch": core.batch_rules,
        "torch codegen": core.torch_codegen_rules,
        "nvFuser": core.nvfuser_rules,
    }
    for name, table in tables.items():
        print(f"  {name} rules: {len(table)}")
    from thunderx.lang._base import torch_table

    print(f"torch callables in the language layer: {len(torch_table)}")
    for folder in ("thunderx", "primitives", "transforms", "tests"):
        files = list((ROOT / folder).rglob("*.py"))
        lines = sum(len(p.read_text().splitlines()) for p in files)
        biggest = max(files, key=lambda p: len(p.read_text().splitlines()))
        print(
            f"{folder + '/':<12} {len(files):>3} modules {lines:>6} lines "
            f"(largest: {biggest.name}, {len(biggest.read_text().splitlines())})"
        )


def _mark(present: bool) -> str:
    return "✓" if present else ""


def _aliases(props: core.Properties) -> str:
    if props.aliases == core.ALL_OPERANDS:
        return "any operand"
    return ", ".join(f"operand {i}" for i in props.aliases)


def _inplace(props: core.Properties) -> str:
    if props.inplace_out is not None:
        return f"`{props.inplace_out}` (out=, any operand)"
    if props.inplace is None:
        return ""
    note = " (floating)" if props.inplace_floating_only else ""
    return f"`{props.inplace}`{note}"


def _jvp(prim) -> str:
    if prim in core.jvp_rules:
        return "linear" if prim in core.linear_primitives else "✓"
    return "none" if prim in core.not_differentiable else ""


def primitive_table() -> str:
    """Markdown: one row per registered primitive, its rules and declared properties."""
    lines = [
        "# Primitives",
        "",
        "Generated from the registry by `python -m thunderx.stats --write`; "
        "tests/test_properties.py checks that it is up to date and that every declared property "
        "holds for the implementation. *aliases*: operands an output may be a view of (the "
        "torch executor never writes into them while the output lives); *in place*: the Tensor "
        "method (or the aten out= overload) the torch executor uses to reuse a dead operand's "
        "buffer, or a dead reshape or transpose covering a whole buffer the program allocated "
        "(never an expand, a view whose elements overlap); the same out= kernel writes a large "
        "output into a buffer recycled across calls (tests/test_recycle.py); *effects*: `rng` reads "
        "and advances torch's random state (never removed or merged).",
        "",
        "A primitive is one `thunderx.core.declare` call beside its rules, e.g.",
        "",
        "```python",
        "exp_p = declare(",
        '    "exp",',
        "    impl=torch.exp,",
        "    abstract_eval=lambda x: x.strip_weak(),",
        "    jvp=_exp_jvp,",
        "    batch=lambda args, dims: elementwise_batch(exp_p, args, dims),",
        '    torch_codegen=lambda args, avals: f"torch.exp({args[0]})",',
        "    nvfuser=lambda fd, x: fd.ops.exp(x),",
        "    elementwise=True,  # properties: what executors and passes may assume",
        '    inplace="exp_",',
        ")",
        "```",
        "",
        "(families use factories: `def_unary`, `def_binary`, `def_reduction`).",
        "",
        f"{len(core.primitives)} primitives.",
        "",
        "| primitive | aliases | in place | effects | elementwise | jvp | transpose | batch "
        "| torch code | nvFuser |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in sorted(core.primitives):
        prim = core.primitives[name]
        props = prim.props
        nvfuser = _mark(prim in core.nvfuser_rules)
        if prim in core.nvfuser_checks:
            nvfuser += " (checked)"
        cells = [
            f"`{name}`",
            _aliases(props),
            _inplace(props),
            ", ".join(sorted(props.effects)),
            _mark(props.elementwise),
            _jvp(prim),
            _mark(prim in core.transpose_rules),
            _mark(prim in core.batch_rules),
            "✓" if prim in core.torch_codegen_rules else "impl call",
            nvfuser,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
