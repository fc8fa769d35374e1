"""README.md's performance table is generated from benchmarks/results/cpu.md: every number in it
must be one `make bench` wrote."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme_table():
    spec = importlib.util.spec_from_file_location(
        "readme_table", os.path.join(ROOT, "benchmarks", "readme_table.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def test_readme_table_is_generated_from_the_results():
    rt = _readme_table()
    want = rt.render(_read("benchmarks", "results", "cpu.md"))
    got = rt.readme_block(_read("README.md"))
    assert got == want, (
        "README.md's performance table differs from benchmarks/results/cpu.md: run "
        "`python benchmarks/readme_table.py --write` (or `make bench`)"
    )


def test_results_hold_every_row_with_machine_and_spread():
    rt = _readme_table()
    header, rows = rt.parse_results(_read("benchmarks", "results", "cpu.md"))
    for fact in ("machine:", "torch ", "threads ", "interleaved rounds"):
        assert fact in header, f"results header lacks {fact!r}: {header}"
    measured = [r for r in rows.values() if r["ratio"] not in ("-",)]
    assert measured, "no measured rows"
    for r in measured:
        # (first calls too: each is the median of interleaved cold compiles)
        assert r["spread"] != "-" or r["case"].startswith(("per-layer", "make_jaxpr")), (
            f"row without a spread over rounds: {r}"
        )


def test_a_changed_result_breaks_the_readme_check():
    rt = _readme_table()
    text = _read("benchmarks", "results", "cpu.md")
    case = rt.README_ROWS[0][0]
    lines = [ln for ln in text.splitlines() if ln.startswith(f"| {case} | ")]
    cells = lines[0].split(" | ")
    cells[3] = "9.99"  # the ratio column
    changed = text.replace(lines[0], " | ".join(cells))
    assert "| 9.99 |" in rt.render(changed) and rt.render(changed) != rt.render(text)
    with pytest.raises(KeyError, match="not in benchmarks/results/cpu.md"):
        rt.render(text.replace(f"| {case} | ", "| renamed | "))
