"""The repository is self-contained: nothing refers to files outside it, and requirement
citations use the identifiers docs/requirements.md defines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_TREES = ["src", "tests", "docs", "bench", "scripts", "deploy"]
_SUFFIXES = {
    ".py",
    ".md",
    ".sh",
    ".toml",
    ".txt",
    ".dot",
    ".cfg",
    ".ini",
    ".properties",
    ".service",
}
# Spelled in pieces so this file does not match itself.
_OUTSIDE = re.compile("|".join([r"shared" + "/", r"\bSP" + r"EC\b", r"FAC" + r"TS\b"]))


def _files() -> list[Path]:
    out = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for tree in _TREES:
        out += [
            p
            for p in (ROOT / tree).rglob("*")
            if p.suffix in _SUFFIXES and p.is_file() and ".venv" not in p.parts
        ]
    return out


def test_nothing_refers_outside_the_repository() -> None:
    hits = []
    for path in _files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if _OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert hits == [], "\n".join(hits)


def test_cited_requirements_exist() -> None:
    text = (ROOT / "docs" / "requirements.md").read_text()
    defined = set(re.findall(r"^- \*\*([RP]\d+):", text, flags=re.M))
    assert {f"R{i}" for i in range(1, 28)} | {f"P{i}" for i in range(1, 9)} <= defined
    cited: set[str] = set()
    for path in _files():
        cited |= set(re.findall(r"\bREQ-([RP]\d+)\b", path.read_text(errors="replace")))
    assert cited - defined == set()
