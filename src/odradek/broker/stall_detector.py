"""Event-loop stall detector: which code held the loop when requests waited.

Every request of a broker runs on one asyncio loop, so anything that blocks it — an
fsync, a large decode, a long GC pass — delays every client at once and shows up only as
latency tails. With ``ODRADEK_LOOP_STALL_MS=N`` set (and optionally
``ODRADEK_LOOP_STALL_FILE=path`` to collect the reports of several brokers), the broker ticks a heartbeat on the
loop every N/4 ms and a watcher thread logs the loop thread's stack whenever the
heartbeat is more than N ms late (at most one report per stall), so the culprit is named
by file and line. Off by default: the heartbeat costs a few wake-ups per second.

Every heartbeat's lateness also goes into a histogram (``LAG_BUCKETS_S``, exported as
``odradek_eventloop_lag_seconds``): with a small threshold (``ODRADEK_LOOP_STALL_MS=4``:
a heartbeat every millisecond) it is the distribution of the loop's stalls, which is
how a change's cost to the loop is measured (bench/console_cost_bench.py).
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import logging
import os
import sys
import threading
import time
import traceback

logger = logging.getLogger(__name__)

ENV = "ODRADEK_LOOP_STALL_MS"
ENV_FILE = "ODRADEK_LOOP_STALL_FILE"
# Upper bounds (s) of the lateness histogram; one more bucket counts the rest (+Inf).
LAG_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


class FullCollections:
    """The interpreter's full (generation-2) garbage collections, timed: one stops every
    thread, the event loop included, for as long as it takes to scan every tracked
    object -- with 10,000 partitions a broker holds 500,000-700,000 of them. A stall
    report then says a collection was (part of) the stall, instead of blaming whatever
    code the loop thread happened to be in when it started. Installed in ``gc.callbacks``
    (called for every collection, young ones too: two comparisons each)."""

    def __init__(self) -> None:
        self.count = 0
        self.total_s = 0.0
        self.max_s = 0.0  # longest since take_max()
        self.last_end = 0.0  # time.monotonic() when the last one ended
        self.last_s = 0.0  # how long it took
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        now = time.monotonic()
        if phase == "start":
            self._start = now
            return
        took = now - self._start
        self.count += 1
        self.total_s += took
        self.last_end, self.last_s = now, took
        if took > self.max_s:
            self.max_s = took

    def take_max(self) -> float:
        """The longest collection since the previous call (a scrape), then start over."""
        longest, self.max_s = self.max_s, 0.0
        return longest

    def during(self, since: float) -> float:
        """Seconds of full collection that ended after ``since`` (the last one only)."""
        return self.last_s if self.last_end > since else 0.0


class StallDetector:
    def __init__(self, loop: asyncio.AbstractEventLoop, threshold_ms: float) -> None:
        self.loop = loop
        self.threshold_s = threshold_ms / 1000
        self.last_tick = time.monotonic()
        self.stalls = 0
        self.max_lag_s = 0.0  # largest lateness of a heartbeat since take_max_lag()
        # Heartbeats per lateness bucket (LAG_BUCKETS_S, then +Inf) and their sum (s).
        self.lag_counts = [0] * (len(LAG_BUCKETS_S) + 1)
        self.lag_sum_s = 0.0
        self.report_file = os.environ.get(ENV_FILE)  # also append reports here
        self._loop_thread = threading.get_ident()
        self._started = False
        self._clock = time.monotonic  # the watcher's (a test scripts it)
        self.collections = FullCollections()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stall-detector", daemon=True)

    def start(self) -> None:
        self.loop.call_soon(self._tick)
        gc.callbacks.append(self.collections)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.collections in gc.callbacks:
            gc.callbacks.remove(self.collections)

    def _tick(self) -> None:
        now = time.monotonic()
        # How late this heartbeat ran: the loop's scheduling lag (metrics).
        lag = now - self.last_tick - self.threshold_s / 4
        if self._started:  # the first tick's "lateness" is the time since __init__
            lag_pos = max(lag, 0.0)
            self.lag_counts[bisect.bisect_left(LAG_BUCKETS_S, lag_pos)] += 1
            self.lag_sum_s += lag_pos
        self._started = True
        if lag > self.max_lag_s:
            self.max_lag_s = lag
        self.last_tick = now
        if not self._stop.is_set():
            self.loop.call_later(self.threshold_s / 4, self._tick)

    def lag_histogram(self) -> tuple[list[tuple[float, int]], float]:
        """Cumulative (upper bound s, heartbeats) pairs ending with +Inf, and the sum (s):
        a Prometheus histogram of heartbeat lateness since the detector started."""
        out, total = [], 0
        for bound, n in zip((*LAG_BUCKETS_S, float("inf")), self.lag_counts, strict=True):
            total += n
            out.append((bound, total))
        return out, self.lag_sum_s

    def take_max_lag(self) -> float:
        """The largest lag since the previous call (a scrape), then start over."""
        lag, self.max_lag_s = self.max_lag_s, 0.0
        return max(lag, 0.0)

    def _watch(self) -> None:
        # The watcher sleeps until the last heartbeat would be a stall, not a fixed N/4:
        # with metrics on (the default) every broker runs a detector (N = 250 ms), and
        # an idle broker woke this thread 16 times a second for nothing: 0.2 % of a core
        # per broker, idle at 10,000 partitions, a tenth of the idle aim. Now about once
        # per N, and a stall is caught at its deadline, sooner than the fixed poll did.
        reported_for = 0.0
        wait_s = self.threshold_s
        clock = self._clock
        while not self._stop.wait(wait_s):
            tick = self.last_tick
            late = clock() - tick
            if late <= self.threshold_s:
                wait_s = self.threshold_s - late + 0.001
                continue
            wait_s = self.threshold_s / 4  # stalled: look again until the loop ticks
            if tick != reported_for:
                reported_for = tick
                self.stalls += 1
                frame = sys._current_frames().get(self._loop_thread)
                stack = "".join(traceback.format_stack(frame)) if frame else "(no frame)"
                collected = self.collections.during(tick)
                why = (
                    f" (a full garbage collection took {collected * 1000:.0f} ms of it)"
                    if collected
                    else ""
                )
                logger.warning(
                    "event loop stalled for %.0f ms so far%s; loop thread stack:\n%s",
                    late * 1000,
                    why,
                    stack,
                )
                if self.report_file:
                    with open(self.report_file, "a") as f:
                        f.write(f"--- pid {os.getpid()} stalled {late * 1000:.0f} ms{why}\n{stack}")


def maybe_start(
    loop: asyncio.AbstractEventLoop, default_ms: float | None = None
) -> StallDetector | None:
    """Start a detector if ``ODRADEK_LOOP_STALL_MS`` is set (see module doc), else with
    ``default_ms`` if given (a broker with metrics exports the detector's figures)."""
    raw = os.environ.get(ENV) or (str(default_ms) if default_ms else None)
    if not raw:
        return None
    det = StallDetector(loop, float(raw))
    det.start()
    logger.info("event-loop stall detector on: threshold %s ms", raw)
    return det
