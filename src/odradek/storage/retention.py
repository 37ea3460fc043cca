"""Which leading segments retention deletes (REQ-R24) — a pure decision.

Kafka's ``UnifiedLog.deleteOldSegments`` runs three predicates, each over a *prefix* of
the segment list, and deletes the union (itself a prefix):

* **time** — ``now - segment.largestTimestamp > retention.ms``. The segment's largest
  record timestamp decides, not its file time (Kafka; a segment with no timestamps falls
  back to its file's last-modified time, which the caller supplies).
* **size** — while ``log size - retention.bytes >= segment.size``, the oldest segment
  goes (so the log never drops *below* retention.bytes by deleting).
* **log start offset** — a segment whose successor starts at or below the log start
  offset holds no visible record any more (DeleteRecords, a follower following its
  leader's log start) and is deleted too.

Two bounds always hold: the active (last) segment is never deleted, and neither is a
segment holding an offset at or past the upper bound (the high watermark on a leader):
records not yet replicated everywhere must not disappear under a follower.
``retention.ms = -1`` / ``retention.bytes = -1`` (any negative value) mean unlimited.
Applying the decision (unlinking files, advancing the log start offset) is
``Log.delete_segments``'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "SegmentSummary",
    "RetentionDecision",
    "segments_to_delete",
    "REASON_TIME",
    "REASON_SIZE",
    "REASON_LOG_START",
]

REASON_TIME = "retention.ms"
REASON_SIZE = "retention.bytes"
REASON_LOG_START = "log-start-offset"


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What the decision needs of one segment (metadata only, no I/O)."""

    base_offset: int
    next_offset: int  # last offset + 1 (== base_offset when empty)
    size: int  # bytes
    largest_timestamp: int  # max record timestamp, or the file's mtime when it has none


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    count: int  # delete segments[:count]
    reason: str | None  # the predicate that reached furthest (None when count == 0)
    detail: str  # human-readable, for the broker log
    bytes: int  # total size of the deleted segments

    @property
    def any(self) -> bool:
        return self.count > 0


def _deletable_prefix(segments: Sequence[SegmentSummary], upper_bound: int) -> int:
    """How many leading segments could be deleted at all: never the last (active) one,
    never one whose successor starts past ``upper_bound`` (it holds offsets >= the HW)."""
    n = 0
    for i in range(len(segments) - 1):
        if segments[i + 1].base_offset > upper_bound:
            break
        n = i + 1
    return n


def segments_to_delete(
    segments: Sequence[SegmentSummary],
    *,
    upper_bound: int,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    log_start_offset: int,
) -> RetentionDecision:
    """The leading segments to delete, and why (module doc). ``segments`` in offset order."""
    limit = _deletable_prefix(segments, upper_bound)
    if limit == 0:
        return RetentionDecision(0, None, "", 0)

    n_time = 0
    if retention_ms >= 0:
        while n_time < limit and now_ms - segments[n_time].largest_timestamp > retention_ms:
            n_time += 1

    n_size = 0
    if retention_bytes >= 0:
        diff = sum(s.size for s in segments) - retention_bytes
        while n_size < limit and diff - segments[n_size].size >= 0:
            diff -= segments[n_size].size
            n_size += 1

    n_start = 0
    while n_start < limit and segments[n_start + 1].base_offset <= log_start_offset:
        n_start += 1

    count = max(n_time, n_size, n_start)
    if count == 0:
        return RetentionDecision(0, None, "", 0)
    size = sum(s.size for s in segments[:count])
    first, last = segments[0].base_offset, segments[count - 1].next_offset
    if count == n_time:
        reason = REASON_TIME
        detail = (
            f"segments [{first}, {last}) have largest timestamps older than "
            f"retention.ms={retention_ms}"
        )
    elif count == n_size:
        reason = REASON_SIZE
        detail = (
            f"log size {sum(s.size for s in segments)} B exceeds "
            f"retention.bytes={retention_bytes} by at least {size} B"
        )
    else:
        reason = REASON_LOG_START
        detail = f"segments [{first}, {last}) lie wholly below log start offset {log_start_offset}"
    return RetentionDecision(count, reason, detail, size)
