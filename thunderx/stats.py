"""Size budget at a glance: `python -m thunderx.stats` prints the primitive count, the rules each
table holds, and lines of code per package."""

from __future__ import annotations

import pathlib

import thunderx  # noqa: F401  (registers everything)
from thunderx import core


def main() -> None:
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
    root = pathlib.Path(__file__).parent.parent
    for folder in ("thunderx", "primitives", "transforms", "tests"):
        files = list((root / folder).rglob("*.py"))
        lines = sum(len(p.read_text().splitlines()) for p in files)
        biggest = max(files, key=lambda p: len(p.read_text().splitlines()))
        print(
            f"{folder + '/':<12} {len(files):>3} modules {lines:>6} lines "
            f"(largest: {biggest.name}, {len(biggest.read_text().splitlines())})"
        )


if __name__ == "__main__":
    main()
