"""docs/conventions.md's table of derivatives where thunderx deliberately differs from torch.func:
its rows are exactly the deliberate differences the differential test and the special-point
checks know, and each row's thunderx behaviour holds (with torch.func still differing; the
reproducers themselves run in tests/test_differential.py and tests/test_special_points.py)."""

import pathlib
import re

import pytest

from thunderx.testing.diff_known import DELIBERATE, KNOWN_FAILURES, KNOWN_REPROS

from .conventions_rows import BEHAVIOUR
from .test_special_points import DOCUMENTED, DOCUMENTED_FUNCTIONS

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "conventions.md"
HEADING = "### Derivatives where thunderx differs from torch.func"


def _rows() -> list[str]:
    text = DOC.read_text()
    assert HEADING in text, f"{DOC} lost its table heading {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\| `([a-z0-9-]+)` \|", section, flags=re.M)


def test_the_table_is_exactly_the_known_deliberate_differences():
    rows = _rows()
    assert len(rows) == len(set(rows)), f"a row id appears twice: {rows}"
    known = (
        set(DELIBERATE.values())
        | {row for row, _ in DOCUMENTED.values()}
        | {row for row, _ in DOCUMENTED_FUNCTIONS.values()}
    )
    assert set(rows) == known, (
        f"rows without a known difference: {sorted(set(rows) - known)}; "
        f"differences without a row: {sorted(known - set(rows))}"
    )
    assert set(rows) == set(BEHAVIOUR), "every row needs its behaviour asserted below"


def test_every_deliberate_entry_has_a_reproducer_and_is_not_also_open():
    for key in DELIBERATE:
        assert key in KNOWN_REPROS, key
        assert key not in KNOWN_FAILURES, key


@pytest.mark.parametrize("row", sorted(BEHAVIOUR))
def test_documented_thunderx_behaviour(row):
    BEHAVIOUR[row]()
