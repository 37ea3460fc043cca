"""The suite's own layout: tests/ has no packages, so pytest imports every test module by
its file name (rootdir-relative "rootdir" import mode) and two test files with the same name
in different folders stop the whole run at collection ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_file_name() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
