"""Record tracing: one sampled record's timeline across the replication path.

Off by default. With the broker property ``odradek.trace.records.every=N`` (N > 0) every
broker logs, for each record whose offset is a multiple of N, the wall-clock time (µs) at
each hop it handles -- on the same machine all brokers share one clock, so the lines of
the three brokers' logs merge into one timeline (``odradek.replication.trace.timeline``
does it; ``bench/replication_bench.py --trace`` prints it):

  leader  ``created``     the batch's CreateTime (set by the producer; ms resolution)
  leader  ``append``      the produce was appended to the leader's log
  leader  ``fetch.out``   a follower's fetch response carrying it is ready to send
  follower ``received``   the fetch response arrived at the follower
  follower ``appended``   the follower wrote it to its log
  follower ``next.fetch`` the follower sent the fetch that reports it (its new LEO)
  leader  ``hw``          the high watermark passed it (the last ISR member reported it)
  leader  ``consumer.out`` a consumer's fetch response carrying it is ready to send

The produce acknowledgement follows ``hw`` at once (same event); the consumer's receive
time is the benchmark's own measurement. Sampling by offset needs no coordination: every
replica decides alone, the same way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from odradek.runtime import clock

logger = logging.getLogger("odradek.trace")

__all__ = ["RecordTracer", "TraceEvent", "parse_trace_lines", "timeline"]

TopicPartition = tuple[str, int]


def _now_us() -> int:
    return clock.time_ns() // 1000


class RecordTracer:
    __slots__ = ("every", "enabled", "broker_id")

    def __init__(self, every: int, broker_id: int = -1) -> None:
        self.every = max(int(every), 0)
        self.enabled = self.every > 0
        self.broker_id = broker_id

    def sampled(self, first: int, last: int) -> int | None:
        """The sampled offset in [first, last], if any."""
        n = self.every
        k = -(-first // n) * n  # the first multiple of n >= first
        return k if k <= last else None

    def hop(
        self, tp: TopicPartition, offset: int, hop: str, detail: str = "", t_us: int | None = None
    ) -> None:
        logger.info(
            "TRACE %s %d %d %s %d %s",
            tp[0],
            tp[1],
            offset,
            hop,
            _now_us() if t_us is None else t_us,
            f"broker={self.broker_id} {detail}".strip(),
        )

    # -- the hops (each a no-op unless a sampled offset is in range) -------------------
    def appended_as_leader(
        self, tp: TopicPartition, first: int, last: int, create_time_ms: int = -1
    ) -> None:
        off = self.sampled(first, last)
        if off is not None:
            if create_time_ms > 0:  # the producer's CreateTime (ms resolution)
                self.hop(tp, off, "created", t_us=create_time_ms * 1000)
            self.hop(tp, off, "append")

    def fetch_answered(
        self, tp: TopicPartition, fetch_offset: int, end_offset: int, replica_id: int
    ) -> None:
        """A fetch response with records [fetch_offset, end_offset) is ready (the end is
        the HW for a consumer, the LEO for a follower, at the time of the read)."""
        off = self.sampled(fetch_offset, end_offset - 1)
        if off is not None:
            if replica_id >= 0:
                self.hop(tp, off, "fetch.out", f"to={replica_id}")
            else:
                self.hop(tp, off, "consumer.out")

    def hw_moved(self, tp: TopicPartition, old: int, new: int, by_replica: int) -> None:
        off = self.sampled(old, new - 1)
        if off is not None:
            self.hop(tp, off, "hw", f"by={by_replica}")


@dataclass(frozen=True, slots=True)
class TraceEvent:
    topic: str
    partition: int
    offset: int
    hop: str
    t_us: int
    detail: str


_LINE = re.compile(r"TRACE (\S+) (\d+) (\d+) (\S+) (\d+) ?(.*)$")


def parse_trace_lines(lines: Iterable[str]) -> list[TraceEvent]:
    out = []
    for line in lines:
        m = _LINE.search(line)
        if m:
            out.append(TraceEvent(m[1], int(m[2]), int(m[3]), m[4], int(m[5]), m[6].strip()))
    return out


def timeline(
    events: list[TraceEvent], topic: str, partition: int, offset: int
) -> list[tuple[int, str, str]]:
    """(µs since the first hop, hop, detail) for one record, in time order."""
    mine = sorted(
        (e for e in events if (e.topic, e.partition, e.offset) == (topic, partition, offset)),
        key=lambda e: e.t_us,
    )
    if not mine:
        return []
    t0 = mine[0].t_us
    return [(e.t_us - t0, e.hop, e.detail) for e in mine]
