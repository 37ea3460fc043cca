"""The chaos reports under the console's menu: directories written by ``odradek chaos
... --report DIR`` (``index.html``, ``summary.json``, one timeline PNG per scenario),
found under the ``--reports`` directories, served read-only.

Files are served only from inside a found report directory (resolved paths, no
symlinks out, no ``..``): the console never becomes a file server for the machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["ChaosReport", "ChaosReports"]

MAX_DEPTH = 3
MAX_VISITED = 5000  # directories looked at per listing: a huge --reports dir stays cheap


@dataclass(frozen=True)
class ChaosReport:
    rid: str
    path: Path
    title: str
    scenarios: int
    failed: int
    modified: float
    timelines: tuple[str, ...]


class ChaosReports:
    def __init__(self, roots: list[Path]) -> None:
        self.roots = [r.resolve() for r in roots]

    def _dirs(self) -> list[Path]:
        found: list[Path] = []
        visited = 0
        for root in self.roots:
            if not root.is_dir():
                continue
            stack = [(root, 0)]
            while stack and visited < MAX_VISITED:
                d, depth = stack.pop()
                visited += 1
                if (d / "index.html").is_file() and (d / "summary.json").is_file():
                    found.append(d)
                    continue
                if depth < MAX_DEPTH:
                    try:
                        stack.extend(
                            (c, depth + 1) for c in d.iterdir() if c.is_dir() and not c.is_symlink()
                        )
                    except OSError:
                        continue
        return found

    @staticmethod
    def _rid(path: Path) -> str:
        return hashlib.sha1(str(path).encode()).hexdigest()[:12]

    def list(self) -> list[ChaosReport]:
        out = []
        for d in self._dirs():
            scenarios = failed = 0
            try:
                summary = json.loads((d / "summary.json").read_text())
                rows = summary if isinstance(summary, list) else summary.get("rows", [])
                scenarios = len(rows)
                failed = sum(1 for r in rows if isinstance(r, dict) and r.get("result") == "FAIL")
            except (OSError, ValueError, AttributeError):
                pass
            out.append(
                ChaosReport(
                    self._rid(d),
                    d,
                    d.parent.name + "/" + d.name,
                    scenarios,
                    failed,
                    (d / "index.html").stat().st_mtime,
                    tuple(sorted(p.name for p in d.glob("*.png"))),
                )
            )
        return sorted(out, key=lambda r: -r.modified)

    def resolve(self, rid: str, rel: str) -> Path | None:
        for d in self._dirs():
            if self._rid(d) != rid:
                continue
            target = (d / rel).resolve()
            if target.is_file() and target.is_relative_to(d.resolve()):
                return target
        return None
