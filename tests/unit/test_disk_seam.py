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


# Renames in the storage layer that are not a checkpoint's move into place, each made
# durable otherwise: a new `os.replace` there must use `disk.replace_durably` (rename +
# directory fsync through the seam) or be added here with its reason.
_OTHER_RENAMES = {
    "storage/index.py": 1,  # a rewritten index: the log's next flush fsyncs the directory
    "storage/log.py": 1,  # cleaner swap renames, each batch followed by fsync_dir
    "storage/cleaner.py": 1,  # complete_swaps: all renames, then one directory fsync
    "storage/segment.py": 1,  # .deleted renames (Kafka's renameTo: no parent flush)
    "storage/txn_index.py": 1,  # the same, for the .txnindex
    "storage/truncation_ledger.py": 1,  # the .batches file: the .json's move fsyncs the dir
    # a deleted log's -delete rename: its parent's fsync follows off the loop, with the
    # next retention tick's removals (one fsync per batch of deletes)
    "storage/deleted_logs.py": 1,
}


def test_storage_renames_are_durable_or_accounted_for() -> None:
    found: dict[str, int] = {}
    for pkg in ("storage", "log_manager", "replication"):
        for p in sorted((SRC / pkg).rglob("*.py")):
            n = len(re.findall(r"\bos\.(?:replace|rename)\(", p.read_text()))
            if n:
                found[str(p.relative_to(SRC))] = n
    assert found == _OTHER_RENAMES
