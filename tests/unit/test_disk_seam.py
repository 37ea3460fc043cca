"""The fsync seam (odradek.runtime.disk): in production its names are os's own functions,
and the storage layer fsyncs through it only -- so the simulator's recording disk sees
every fsync, and a broker pays nothing for the seam."""

from __future__ import annotations

import os
import re
from pathlib import Path

from odradek.runtime import disk

SRC = Path(__file__).resolve().parents[2] / "src" / "odradek"


def test_production_seam_is_os_itself() -> None:
    assert disk.fsync is os.fsync
    assert disk.fdatasync is os.fdatasync


def test_install_and_restore() -> None:
    seen: list[int] = []
    disk.install(seen.append, seen.append)
    try:
        disk.fsync(3)
        disk.fdatasync(4)
    finally:
        disk.restore()
    assert seen == [3, 4]
    assert disk.fsync is os.fsync and disk.fdatasync is os.fdatasync


def test_storage_fsyncs_only_through_the_seam() -> None:
    direct = re.compile(r"\bos\.(fsync|fdatasync)\(|from odradek\.runtime\.disk import", re.M)
    hits = [
        f"{p.relative_to(SRC)}: {m.group(0)}"
        for pkg in ("storage", "log_manager", "replication")
        for p in sorted((SRC / pkg).rglob("*.py"))
        for m in direct.finditer(p.read_text())
    ]
    assert hits == []
