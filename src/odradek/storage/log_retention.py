"""Retention of a partition's log (REQ-R24; Kafka's UnifiedLog.deleteOldSegments and
maybeIncrementLogStartOffset): the log start offset, which leading segments retention
deletes (decided by the pure ``odradek.storage.retention``), and deferred file deletion
-- a removed segment is renamed to ``.deleted`` at once and closed and unlinked after
``file.delete.delay.ms``, so a ``FileSlice`` of it already handed to a connection stays
readable. The log cleaner's swap (``Log.replace_segments``) defers its deletions here too.

``LogRetention`` is a base class of ``Log`` (log.py), not an object of its own: the
segments and the log start offset are the log's state, which reads and appends use. The
attributes declared in the class belong to ``Log``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.errors import ErrorCode, KafkaError
from odradek.runtime import clock
from odradek.storage.retention import RetentionDecision, SegmentSummary, segments_to_delete

if TYPE_CHECKING:
    from odradek.storage.log_types import LogConfig
    from odradek.storage.segment import Segment

__all__ = ["LogRetention"]

logger = logging.getLogger(__name__)


class LogRetention:
    """The log start offset, retention and deferred segment deletion (see the module
    docstring)."""

    directory: Path
    config: LogConfig
    segments: list[Segment]
    _bases: list[int]
    log_start_offset: int
    closed: bool
    pending_deletions: list[tuple[int, Segment]]
    _dir_dirty: bool
    _dir_changed: bool

    if TYPE_CHECKING:

        @property
        def log_end_offset(self) -> int: ...

    def maybe_increment_log_start_offset(self, offset: int, reason: str) -> bool:
        """Advance the log start offset to ``offset`` (never backwards). Kafka's
        ``maybeIncrementLogStartOffset``: retention, DeleteRecords, a follower following
        its leader. Records below it become invisible at once (reads there get
        OFFSET_OUT_OF_RANGE); whole segments below it go at the next retention check.
        The caller bounds ``offset`` by the HW; the log only by its end. Returns True if
        it moved."""
        if offset <= self.log_start_offset:
            return False
        if offset > self.log_end_offset:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"cannot move log start offset of {self.directory.name} to {offset} past "
                f"the log end {self.log_end_offset} ({reason})",
            )
        logger.info(
            "%s: log start offset %d -> %d (%s)",
            self.directory.name,
            self.log_start_offset,
            offset,
            reason,
        )
        self.log_start_offset = offset
        return True

    def segment_summaries(self) -> list[SegmentSummary]:
        """Metadata of every segment for ``odradek.storage.retention`` (no I/O except an
        fstat for a segment without record timestamps, Kafka's mtime fallback)."""
        out = []
        for seg in self.segments:
            ts = seg.max_timestamp
            if ts < 0:
                ts = os.fstat(seg.fd).st_mtime_ns // 1_000_000
            out.append(SegmentSummary(seg.base_offset, seg.next_offset, seg.size, ts))
        return out

    def retention_decision(self, upper_bound: int, now_ms: int) -> RetentionDecision:
        """Which leading segments retention would delete now (REQ-R24). Settings are read
        from ``self.config`` each time (dynamic topic configs swap it). Time and size
        apply only with cleanup.policy containing ``delete``; segments below the log
        start offset go under any policy (Kafka)."""
        cfg = self.config
        on = cfg.delete
        return segments_to_delete(
            self.segment_summaries(),
            upper_bound=upper_bound,
            now_ms=now_ms,
            retention_ms=cfg.retention_ms if on else -1,
            retention_bytes=cfg.retention_bytes if on else -1,
            log_start_offset=self.log_start_offset,
        )

    def delete_old_segments(self, upper_bound: int, now_ms: int) -> RetentionDecision:
        """Kafka's ``deleteOldSegments``: decide (metadata only) and apply. Files are
        renamed now and unlinked after file.delete.delay.ms (``run_pending_deletions``)."""
        if self.closed:
            return RetentionDecision(0, None, "", 0)
        d = self.retention_decision(upper_bound, now_ms)
        if d.count:
            logger.info(
                "%s: deleting %d segment(s), %d B: %s",
                self.directory.name,
                d.count,
                d.bytes,
                d.detail,
            )
            self.delete_segments(self.segments[: d.count], d.reason or "retention", now_ms=now_ms)
        return d

    def delete_segments(
        self, segments: Sequence[Segment], reason: str, *, now_ms: int | None = None
    ) -> int:
        """Remove leading non-active ``segments`` from the log; the log start offset moves
        to the first remaining segment's base if it was below. Files are deleted
        asynchronously (``schedule_delete``). Returns how many were removed: only the
        run of ``segments`` found at the head of the log, never the active segment."""
        wanted = {id(s) for s in segments}
        n = 0
        while n < len(self.segments) - 1 and id(self.segments[n]) in wanted:
            n += 1
        if n == 0:
            return 0
        removed = self.segments[:n]
        del self.segments[:n]
        del self._bases[:n]
        self.maybe_increment_log_start_offset(self.segments[0].base_offset, reason)
        for seg in removed:
            self.schedule_delete(seg, now_ms)
        return n

    def schedule_delete(self, segment: Segment, now_ms: int | None = None) -> None:
        """Delete ``segment``'s files asynchronously (Kafka's ``deleteSegmentFiles``).

        Public: retention and the log cleaner (``replace_segments``) both use it. The
        caller has already removed ``segment`` from ``self.segments``. Its files are
        renamed to ``<name>.deleted`` now (the base-offset name is free again; a crash
        leaves only ``.deleted`` files, which ``Log.open`` discards) while its fd stays
        open, because a ``FileSlice`` of it may still be queued on a connection. The fd
        is closed and the files unlinked by ``run_pending_deletions`` once
        ``file.delete.delay.ms`` has passed."""
        segment.rename_to_deleted()
        self._dir_dirty = self._dir_changed = True
        now = _wall_ms() if now_ms is None else now_ms
        self.pending_deletions.append((now + max(self.config.file_delete_delay_ms, 0), segment))

    def run_pending_deletions(self, now_ms: int | None = None, *, force: bool = False) -> int:
        """Close and unlink the scheduled segments whose delay has passed (all of them
        with ``force``, e.g. at close). Called from the broker's retention loop."""
        if not self.pending_deletions:
            return 0
        now = _wall_ms() if now_ms is None else now_ms
        due = [s for t, s in self.pending_deletions if force or t <= now]
        if not due:
            return 0
        self.pending_deletions = [
            (t, s) for t, s in self.pending_deletions if not (force or t <= now)
        ]
        for seg in due:
            seg.delete()
        return len(due)


def _wall_ms() -> int:
    return clock.time_ns() // 1_000_000
