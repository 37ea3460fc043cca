"""The event-loop stall detector names the code that blocked the loop."""

from __future__ import annotations

import asyncio
import gc
import time
from pathlib import Path

import pytest

from odradek.broker import stall_detector


def test_reports_a_blocking_call_with_its_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "stalls.txt"
    monkeypatch.setenv(stall_detector.ENV, "50")
    monkeypatch.setenv(stall_detector.ENV_FILE, str(report))

    def block_the_loop() -> None:
        time.sleep(0.3)  # what an fsync on the loop looks like

    async def main() -> int:
        det = stall_detector.maybe_start(asyncio.get_running_loop())
        assert det is not None
        await asyncio.sleep(0.05)
        block_the_loop()
        # Wait for the report of this stall itself: on a loaded machine another pause
        # past 50 ms may have been counted first, and stopping on that one raced the
        # detector's report of the blocking call.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (
            not report.exists() or "block_the_loop" not in report.read_text()
        ):
            await asyncio.sleep(0.01)
        det.stop()
        return det.stalls

    # At least the one stall (a loaded machine may pause the loop past 50 ms elsewhere
    # too), and the report names the blocking call.
    assert asyncio.run(main()) >= 1
    assert "block_the_loop" in report.read_text()


def test_off_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(stall_detector.ENV, raising=False)

    async def main() -> object:
        return stall_detector.maybe_start(asyncio.get_running_loop())

    assert asyncio.run(main()) is None


def test_lateness_histogram_counts_a_stall_in_its_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every heartbeat's lateness is counted: a 300 ms block lands in the (0.25, 0.5] s
    bucket, so the histogram (odradek_eventloop_lag_seconds) shows stalls by size."""
    monkeypatch.setenv(stall_detector.ENV, "8")
    monkeypatch.delenv(stall_detector.ENV_FILE, raising=False)

    async def main() -> tuple[list[tuple[float, int]], float]:
        det = stall_detector.maybe_start(asyncio.get_running_loop())
        assert det is not None
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # blocks the loop
        await asyncio.sleep(0.05)
        det.stop()
        return det.lag_histogram()

    buckets, total_s = asyncio.run(main())
    bounds = dict(buckets)
    assert buckets[-1][0] == float("inf") and buckets[-1][1] >= 10  # every heartbeat
    assert [n for _, n in buckets] == sorted(n for _, n in buckets)  # cumulative
    assert bounds[0.25] < bounds[0.5]  # the 300 ms stall (a loaded machine adds, never hides)
    assert total_s >= 0.29


def _scripted_watcher(
    monkeypatch: pytest.MonkeyPatch, reads: list[float]
) -> tuple[stall_detector.StallDetector, list[float]]:
    """A detector (threshold 200 ms, last heartbeat at 100.0) whose watcher, run with
    ``_watch()``, reads the clock values ``reads`` at its successive wake-ups and stops
    after the last; the list it returns fills with each wait's timeout (ms precision)."""
    loop = asyncio.new_event_loop()
    try:
        det = stall_detector.StallDetector(loop, 200)
    finally:
        loop.close()
    det.last_tick = 100.0
    clock = iter(reads)
    now = [100.0]
    waits: list[float] = []

    class Script:
        def wait(self, timeout: float) -> bool:
            waits.append(round(timeout, 3))
            try:
                now[0] = next(clock)
            except StopIteration:
                return True  # stop
            return False

        def is_set(self) -> bool:
            return False

    monkeypatch.setattr(det, "_stop", Script())
    monkeypatch.setattr(det, "_clock", lambda: now[0])
    return det, waits


def test_the_watcher_sleeps_until_a_heartbeat_would_be_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With metrics on every broker runs a detector: while the loop ticks, the watcher
    wakes about once per threshold (not four times), at the moment the last heartbeat
    would become a stall; a stall is reported once, then looked at every N/4."""
    det, waits = _scripted_watcher(monkeypatch, [100.05, 100.19, 100.3, 100.35])
    det._watch()
    # 0.2 at first; at 100.05 the tick is 50 ms old: 151 ms more; at 100.19, 11 ms more;
    # at 100.3 it is a stall (reported), then every 50 ms; 100.35 is the same stall.
    assert waits == [0.2, 0.151, 0.011, 0.05, 0.05]
    assert det.stalls == 1


def test_full_collections_are_timed_and_named_in_a_stall_report(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full garbage collection stops the loop for as long as it scans every object: the
    detector times generation-2 collections (not the young ones) and a stall it was part
    of says so, so the loop's stack is not taken for the cause."""
    full = stall_detector.FullCollections()
    full("start", {"generation": 0})
    full("stop", {"generation": 0, "collected": 0})
    assert full.count == 0
    gc.callbacks.append(full)
    try:
        gc.collect()  # a full collection
    finally:
        gc.callbacks.remove(full)
    assert full.count == 1 and full.total_s > 0 and full.take_max() > 0
    assert full.take_max() == 0.0  # since the previous take
    assert full.during(full.last_end - 1) == full.last_s and full.during(full.last_end) == 0.0

    det, _ = _scripted_watcher(monkeypatch, [100.3])
    det.collections.last_end, det.collections.last_s = 100.25, 0.23
    with caplog.at_level("WARNING", logger=stall_detector.__name__):
        det._watch()
    assert det.stalls == 1
    assert "a full garbage collection took 230 ms of it" in caplog.text
