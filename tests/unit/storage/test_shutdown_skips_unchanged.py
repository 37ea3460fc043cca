"""A clean shutdown syncs only logs that changed since their last flush (issue 13: the
fsyncs of thousands of idle logs took 2-11 s at shutdown), and the recovery-point
checkpoint written then stays true: after a simulated power loss every log reopens with
what it had, truncations included (REQ-R18, REQ-R27)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _storage_helpers import batch

from odradek.storage.durability import LEDGER_ENV, LEDGER_NAME, simulate_power_loss
from odradek.storage.log import Log, LogConfig


@pytest.fixture(autouse=True)
def ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEDGER_ENV, "1")  # every fsync recorded, for simulate_power_loss


def append(log: Log, n: int, tag: int = 0) -> None:
    log.append_as_leader(batch(n, tag=tag), leader_epoch=0, now_ms=1)


def ledger_lines(d: Path) -> int:
    p = d / LEDGER_NAME
    return len(p.read_text().splitlines()) if p.exists() else 0


def test_what_counts_as_changed(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=4096)
    log = Log.open(tmp_path / "t-0", cfg)
    assert not log.unchanged_since_flush  # a new directory must be synced into existence
    log.flush()
    assert log.unchanged_since_flush
    for tag in range(3):
        append(log, 1, tag)
    assert not log.unchanged_since_flush  # data past the recovery point
    log.flush()
    assert log.unchanged_since_flush
    log.truncate_to(1)  # below the recovery point: nothing new, but the file shrank
    assert log.log_end_offset == log.recovery_point == 1
    assert not log.unchanged_since_flush
    log.flush()
    assert log.unchanged_since_flush
    log.roll()  # a new segment file
    assert not log.unchanged_since_flush
    log.close()

    again = Log.open(tmp_path / "t-0", cfg, recovery_point=1)
    assert again.unchanged_since_flush  # made durable by the incarnation before
    again.close()


def test_an_unchanged_log_is_not_synced_again_at_close(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig())
    append(log, 5)
    log.close()
    before = ledger_lines(d)
    reopened = Log.open(d, LogConfig(), recovery_point=5)
    reopened.close()
    assert ledger_lines(d) == before  # no fsync recorded by the second incarnation


def test_recovery_points_stay_true_across_a_power_loss(tmp_path: Path) -> None:
    """Three logs closed cleanly after a restart -- one idle, one appended to, one
    truncated -- then a power cut: each reopens at its recovery point with its data."""
    root = tmp_path / "logs"
    first = {n: Log.open(root / f"t-{n}", LogConfig()) for n in range(3)}
    for lg in first.values():
        for tag in range(6):
            append(lg, 1, tag)
        lg.close()
    second = {n: Log.open(root / f"t-{n}", LogConfig(), recovery_point=6) for n in range(3)}
    append(second[1], 4, tag=2)
    second[2].truncate_to(2)
    points = {}
    for n, lg in second.items():
        lg.close()
        points[n] = lg.recovery_point
    assert points == {0: 6, 1: 10, 2: 2}
    simulate_power_loss(root)
    for n, rp in points.items():
        lg = Log.open(root / f"t-{n}", LogConfig(), recovery_point=rp)
        assert lg.log_end_offset == rp, (n, lg.log_end_offset)
        lg.close()
