"""The clock seam (odradek.runtime.clock): in production its names are time's own
functions, and the replication runtime reads time through it only -- so the simulator's
virtual clock reaches every read, and a broker pays nothing for the seam."""

from __future__ import annotations

import re
import time
from pathlib import Path

from odradek.runtime import clock

REPLICATION = Path(__file__).resolve().parents[2] / "src" / "odradek" / "replication"


def test_production_clock_is_the_time_module_itself() -> None:
    assert clock.monotonic is time.monotonic
    assert clock.time_ns is time.time_ns


def test_install_and_restore() -> None:
    clock.install(lambda: 5.0, lambda: 7)
    try:
        assert clock.monotonic() == 5.0 and clock.time_ns() == 7
    finally:
        clock.restore()
    assert clock.monotonic is time.monotonic and clock.time_ns is time.time_ns


def test_replication_reads_time_only_through_the_seam() -> None:
    direct = re.compile(
        r"\btime\.(monotonic|time|time_ns|perf_counter)\(|^import time$|"
        r"from time import|from odradek\.runtime\.clock import",
        re.M,
    )
    hits = [
        f"{p.name}: {m.group(0)}"
        for p in sorted(REPLICATION.glob("*.py"))
        for m in direct.finditer(p.read_text())
    ]
    assert hits == []
