"""A partition's durable segmented log (REQ-R18, R23, R26, R27).

* Appends go to the page cache with ONE write per request (R18, R27); ``flush()`` fsyncs
  and advances the recovery point. Flushing is the caller's schedule
  (``flush_messages``/``flush_ms``; Kafka's default leaves it to the OS).
* Reads return a ``FileSlice`` (fd, position, size) of whole batches so the server can
  ``sendfile``/``pread`` without the bytes passing through Python objects (R26).
* Crash recovery happens at ``open`` (``log_loader``, Kafka's ``LogLoader``): every
  segment holding data at or after the recovery point is scanned batch by batch; the
  first torn, oversized, non-v2, CRC-invalid or discontinuous batch and everything after
  it are removed, and indexes are rebuilt for scanned segments.

Thread model: sans-asyncio, no locks. The broker calls it from its event loop; slices
handed out stay valid because bytes below the high watermark are never rewritten or
truncated (``truncate_to`` is only ever called above the HW by replication), and segments
removed by retention / compaction keep their fd open for ``file.delete.delay.ms``
(``schedule_delete``, REQ-R24).

Owned collaborators: ``FlushState`` (``log_flush``: recovery point, what a flush must
fsync) and ``PendingDeletions`` (segments waiting for ``file.delete.delay.ms``).
"""

from __future__ import annotations

import logging
import os
import shutil
from bisect import bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.batch import (
    BatchHeader,
    parse_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from odradek.storage.checkpoint import fsync_dir
from odradek.storage.durability import FlushJob
from odradek.storage.log_flush import FlushState
from odradek.storage.log_loader import load_segments
from odradek.storage.log_types import AppendInfo, FileSlice, LogConfig
from odradek.storage.pending_deletions import PendingDeletions
from odradek.storage.recompression import needs_recompression, recompress_batches, target_codec
from odradek.storage.retention import RetentionDecision, SegmentSummary, segments_to_delete
from odradek.storage.segment import MAX_RELATIVE_OFFSET, Segment
from odradek.storage.txn_index import AbortedTxn

__all__ = ["Log", "LogConfig", "AppendInfo", "FileSlice"]

_logger = logging.getLogger(__name__)


class Log:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[Segment],
        log_start_offset: int,
        recovery_point: int,
    ) -> None:
        self.directory = directory
        self.config = config
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = log_start_offset
        self._flush = FlushState(recovery_point)
        # The recovery point this log was opened with: batches from it on were recovered
        # (Kafka's LogSegment.recover), and re-assign their epochs to the epoch cache.
        self.opened_recovery_point = recovery_point
        # Set by the broker (odradek.log_manager.flusher): called when this log wants an fsync
        # (flush.messages reached, a roll, or any append under odradek.ack.fsync). Without
        # it (tools, tests) flush.messages flushes inline, as before.
        self.flush_listener: Callable[[Log], None] | None = None
        # Set by the broker (ReplicaLogs): called when this log schedules a segment
        # deletion, so the per-second pass over pending deletions visits only such logs
        # instead of every log (issue 29: idle CPU with 10,000 partitions).
        self.deletion_listener: Callable[[Log], None] | None = None
        self.closed = False
        # Segments renamed to .deleted, waiting for file.delete.delay.ms (owned).
        self._deletions = PendingDeletions()

    # ------------------------------------------------------------------ open/recover

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
    ) -> Log:
        directory = Path(directory)
        loaded = load_segments(directory, config, recovery_point, log_start_offset)
        segments = loaded.segments
        active = segments[-1]
        if active.size:
            active.rolling_base_ms = active.header_at(0).max_timestamp
        lso = segments[0].base_offset if log_start_offset is None else log_start_offset
        lso = max(lso, segments[0].base_offset)
        log = cls(directory, config, segments, lso, recovery_point)
        # Files and the directory itself exist durably only after fsyncs of this directory
        # and of the log dir. Nothing on disk says whether a previous incarnation did
        # them (it may have crashed first), so the first flush after open does both.
        flush = log._flush
        flush.dir_dirty = flush.parent_dirty = True
        flush.dir_changed = loaded.created  # a new partition directory is a change of ours
        if lso > log.log_end_offset:
            log.truncate_fully_and_start_at(lso)
        log.opened_recovery_point = min(recovery_point, log.log_end_offset)
        if loaded.recovered and (loaded.damaged or log.log_end_offset > recovery_point):
            # Everything up to the LEO is now verified; make it durable so the
            # recovery point can move to the LEO (and a truncation of a torn tail sticks).
            flush.dir_dirty = True
            log.flush()
        else:
            flush.recovery_point = min(recovery_point, log.log_end_offset)
        return log

    # ------------------------------------------------------------------ properties

    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ------------------------------------------------------------------ appends

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        now_ms: int,
        *,
        allow_control: bool = False,
        headers: list[BatchHeader] | None = None,
    ) -> AppendInfo:
        """Validate, assign offsets from the LEO, stamp the epoch, write once.

        ``headers``: the batches of ``records`` as the caller already validated them
        (``parse_batches(..., verify_crc=True, strict_count=True)``), so each batch is
        parsed once per replica; their offsets and epochs are rewritten here too."""
        cfg = self.config
        buf = bytearray(records)
        if headers is None:
            headers = parse_batches(
                buf, verify_crc=True, max_batch_bytes=cfg.max_message_bytes, strict_count=True
            )
        if not headers:
            raise KafkaError(ErrorCode.invalid_record, "produce request without record batches")
        codec = target_codec(cfg.compression_type)
        if codec is not None and needs_recompression(headers, codec):
            # compression.type names a codec: the leader rewrites the batches in it once;
            # followers copy these bytes. max.message.bytes applies to the result, as in
            # Kafka. The caller's header list is updated in place (offsets land in it).
            buf = recompress_batches(buf, headers, codec)
            headers[:] = parse_batches(buf, verify_crc=False, max_batch_bytes=cfg.max_message_bytes)
        if len(buf) > cfg.segment_bytes:
            # Kafka: RecordBatchTooLargeException — the set must fit in one segment.
            raise KafkaError(
                ErrorCode.record_list_too_large,
                f"{len(buf)} bytes exceed segment.bytes {cfg.segment_bytes}",
            )
        log_append = cfg.message_timestamp_type == "LogAppendTime"
        first = offset = self.log_end_offset
        max_ts, offset_of_max = -1, -1
        for h in headers:
            if h.is_control and not allow_control:
                raise KafkaError(ErrorCode.invalid_record, "clients may not write control batches")
            pos = h.position
            set_base_offset(buf, pos, offset)
            set_partition_leader_epoch(buf, pos, leader_epoch)
            h.base_offset = offset
            h.partition_leader_epoch = leader_epoch
            if log_append:
                set_log_append_time(buf, h, now_ms)
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, h.last_offset
            offset += h.last_offset_delta + 1
        if log_append:
            offset_of_max = first
        self._maybe_roll(len(buf), offset - 1, now_ms)
        self.active_segment.append(buf, headers, now_ms)
        self._after_append(offset - first, now_ms)
        return AppendInfo(
            first_offset=first,
            last_offset=offset - 1,
            max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max,
            log_append_time=now_ms if log_append else -1,
            num_batches=len(headers),
            size_bytes=len(buf),
            log_start_offset=self.log_start_offset,
        )

    def append_as_follower(
        self,
        records: bytes | bytearray | memoryview,
        now_ms: int = 0,
        *,
        headers: list[BatchHeader] | None = None,
    ) -> AppendInfo:
        """Append replicated batches keeping their offsets and epochs (must be >= LEO).

        Gaps in offsets (a compacted leader, REQ-R25) are appended as they are, like
        Kafka: segments only require increasing offsets (see odradek.storage.segment).
        ``headers``: the caller's ``parse_batches(records, verify_crc=True)`` (parse once);
        their positions are consumed here.
        """
        mv = memoryview(records)
        if headers is None:
            headers = parse_batches(mv, verify_crc=True)
        if not headers:
            raise KafkaError(ErrorCode.invalid_record, "no record batches")
        if headers[0].base_offset < self.log_end_offset:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"follower append at {headers[0].base_offset} below LEO {self.log_end_offset}",
            )
        # Split into chunks that are contiguous and each fit in one segment.
        chunks: list[list[BatchHeader]] = []
        expected = headers[0].base_offset
        chunk_bytes = 0
        for h in headers:
            if h.base_offset < expected:
                raise KafkaError(ErrorCode.corrupt_message, "out-of-order offsets in batches")
            if (
                not chunks
                or chunk_bytes + h.size > self.config.segment_bytes
                or h.last_offset - chunks[-1][0].base_offset > MAX_RELATIVE_OFFSET
            ):
                chunks.append([])
                chunk_bytes = 0
            chunks[-1].append(h)
            chunk_bytes += h.size
            expected = h.next_offset
        max_ts, offset_of_max = -1, -1
        for chunk in chunks:
            start = chunk[0].position
            end = chunk[-1].position + chunk[-1].size
            self._maybe_roll(end - start, chunk[-1].last_offset, now_ms)
            for h in chunk:
                h.position -= start
                if h.max_timestamp > max_ts:
                    max_ts, offset_of_max = h.max_timestamp, h.last_offset
            self.active_segment.append(mv[start:end], chunk, now_ms)
        first, last = headers[0].base_offset, headers[-1].last_offset
        self._after_append(sum(h.records_count for h in headers), now_ms)
        return AppendInfo(
            first_offset=first,
            last_offset=last,
            max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max,
            log_append_time=-1,
            num_batches=len(headers),
            size_bytes=len(mv),
            log_start_offset=self.log_start_offset,
        )

    def _after_append(self, messages: int, now_ms: int) -> None:
        self._flush.appended(messages, now_ms)
        cfg = self.config
        fm = cfg.flush_messages
        due = fm is not None and self._flush.unflushed_messages >= fm
        if self.flush_listener is not None:
            if due or cfg.ack_fsync:
                self.flush_listener(self)  # fsync in the broker's flusher thread
        elif due:
            self.flush(now_ms)

    def _maybe_roll(self, incoming: int, last_offset: int, now_ms: int) -> None:
        seg = self.active_segment
        cfg = self.config
        if seg.size == 0:
            return
        if (
            seg.size + incoming > cfg.segment_bytes
            or (seg.rolling_base_ms is not None and now_ms - seg.rolling_base_ms > cfg.segment_ms)
            or last_offset - seg.base_offset > MAX_RELATIVE_OFFSET
            or seg.index.size_bytes + 8 > cfg.segment_index_bytes
            or seg.time_index.size_bytes + 12 > cfg.segment_index_bytes
        ):
            self.roll()

    def roll(self, new_base: int | None = None) -> Segment:
        """Start a new active segment at ``new_base`` (default: the LEO)."""
        base = self.log_end_offset if new_base is None else new_base
        if base < self.log_end_offset:
            raise KafkaError(ErrorCode.unknown_server_error, f"roll at {base} below LEO")
        old = self.active_segment
        if old.size == 0:
            if old.base_offset == base:
                return old
            old.delete()  # an empty segment carries no offsets; replace it
            self.segments.pop()
            self._bases.pop()
        else:
            old.make_inactive()
        seg = Segment(self.directory, base, self.config.index_interval_bytes)
        self.segments.append(seg)
        self._bases.append(base)
        self._flush.files_changed()
        if self.flush_listener is not None:
            # Kafka flushes the rolled segment in the background at every roll.
            self.flush_listener(self)
        return seg

    # ------------------------------------------------------------------ reads

    def _segment_for(self, offset: int) -> int:
        i = bisect_right(self._bases, offset) - 1
        if i < 0:
            i = 0
        segs = self.segments
        # next_offset <= offset also skips segments the cleaner emptied (REQ-R25): an
        # empty segment's next_offset is its base offset.
        while (segs[i].next_offset <= offset or segs[i].size == 0) and i + 1 < len(segs):
            i += 1
        return i

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FileSlice | None:
        """Whole batches from the one containing ``offset``, all below ``max_offset``."""
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} outside [{self.log_start_offset}, {leo}]",
            )
        limit = leo if max_offset is None else min(max_offset, leo)
        if offset >= limit:
            return None
        seg = self.segments[self._segment_for(offset)]
        start = seg.locate(offset)
        stop = seg.locate(limit) if limit < seg.next_offset else seg.size
        if start >= stop:
            return None  # the batch holding `offset` reaches past max_offset
        end = min(stop, seg.boundary(start + max(max_bytes, 0)))
        if end <= start:
            if not min_one_batch:
                return None
            end = start + seg.batch_size_at(start)
        return FileSlice(seg.fd, start, end - start)

    # ------------------------------------------------------------------ aborted transactions

    def record_aborted(self, entries: Sequence[AbortedTxn]) -> None:
        """Index aborted transactions with the segment holding their ABORT marker (KIP-98,
        Kafka's ``updateTxnIndex``). Entries already indexed are skipped (a replay)."""
        for a in entries:
            if a.last_offset < self.log_start_offset or a.last_offset >= self.log_end_offset:
                continue  # the marker is not in this log (deleted, or truncated meanwhile)
            if self.segments[self._segment_for(a.last_offset)].txn_index.append(a):
                self._flush.files_changed()

    def collect_aborted(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start, end)``, for a read_committed fetch
        (Kafka's ``collectAbortedTransactions``): the indexes of the segment holding
        ``start`` and of the later ones, until an entry shows the search is complete."""
        out: list[AbortedTxn] = []
        if start >= end:
            return out
        for seg in self.segments[self._segment_for(start) :]:
            if seg.txn_index.collect(start, end, out):
                break
        return out

    def fetch_upper_bound(self, offset: int, returned: FileSlice) -> int:
        """An offset past every batch of ``returned`` (what ``read(offset, ...)`` gave):
        the bound of the aborted transactions sent with it."""
        seg = self.segments[self._segment_for(offset)]
        return seg.fetch_upper_bound(returned.position + returned.size)

    def aborted_entries(self, start: int = 0) -> list[AbortedTxn]:
        """Every indexed aborted transaction whose marker is at or above ``start``."""
        out: list[AbortedTxn] = []
        for seg in self.segments[self._segment_for(start) :]:
            out.extend(a for a in seg.txn_index.entries() if a.last_offset >= start)
        return out

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the batch holding the largest timestamp (KIP-734)."""
        best: tuple[int, int] | None = None
        for seg in self.segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best[1]):
                best = (seg.offset_of_max_timestamp, seg.max_timestamp)
        return best

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ts (ListOffsets)."""
        for seg in self.segments:
            if seg.max_timestamp < ts_ms or seg.next_offset <= self.log_start_offset:
                continue
            h = seg.find_timestamp(ts_ms)
            if h is None:
                continue
            return self._refine_timestamp(seg, h, ts_ms)
        return None

    def _refine_timestamp(self, seg: Segment, h: BatchHeader, ts_ms: int) -> tuple[int, int]:
        # Kafka decodes the found batch to return the exact record; this is a cold path.
        floor = self.log_start_offset
        if h.timestamp_type == 1:
            return max(h.base_offset, floor), h.max_timestamp
        try:
            from odradek.storage.records import decode_batch_records

            data = FileSlice(seg.fd, h.position, h.size).read_bytes()
            for rec in decode_batch_records(data):
                if rec.timestamp >= ts_ms and rec.offset >= floor:
                    return rec.offset, rec.timestamp
        except Exception:  # noqa: BLE001 - unknown codec: fall back to batch granularity
            pass
        return max(h.base_offset, floor), h.max_timestamp

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= ``offset`` (replication; never below the HW)."""
        if offset >= self.log_end_offset:
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
            self._bases.pop()
            self._flush.files_changed()
        seg = self.segments[-1]
        if seg.base_offset >= offset:
            seg.truncate_to(offset)
        elif seg.next_offset > offset:
            seg.truncate_to(offset)
        self._flush.truncated(min(self._flush.recovery_point, self.log_end_offset))

    def truncate_fully_and_start_at(self, offset: int) -> None:
        for seg in self.segments:
            seg.delete()
        self.segments = [Segment(self.directory, offset, self.config.index_interval_bytes)]
        self._bases = [offset]
        self.log_start_offset = offset
        self._flush.truncated(offset)
        self._flush.files_changed()

    # ------------------------------------------------------------------ durability

    def flush_due(self, now_ms: int) -> bool:
        """True when ``flush.ms`` has elapsed with unflushed data (caller schedules)."""
        return self._flush.due(now_ms, self.config.flush_ms)

    @property
    def recovery_point(self) -> int:
        """Where the next open's recovery scan starts: every offset below is fsynced."""
        return self._flush.recovery_point

    @property
    def durable_offset(self) -> int:
        """Every offset below this one is fsynced: the recovery point (REQ-R18)."""
        return self._flush.recovery_point

    def begin_flush(
        self, now_ms: int | None = None, *, with_indexes: bool = True
    ) -> FlushJob | None:
        """Event-loop half of a flush: capture what to fsync (odradek.storage.durability).

        ``with_indexes=False`` (group commit) syncs only the ``.log`` data of the active
        segment: its indexes are rebuilt or sanity-checked on load, and are synced at roll,
        close and every full flush. Returns None when there is nothing to do.
        """
        return self._flush.begin(
            self.directory, self.segments, self.log_end_offset, now_ms, with_indexes
        )

    def complete_flush(self, job: FlushJob) -> None:
        """Event-loop half after ``job.run()``: the recovery point moves to the LEO captured
        before the fsync (appends made meanwhile wait for the next flush)."""
        self._flush.complete(job, self.log_end_offset)

    def flush(self, now_ms: int | None = None) -> None:
        """fsync everything up to the LEO and advance the recovery point (REQ-R18).

        Blocking; the broker uses begin/complete_flush around a worker thread instead."""
        job = self.begin_flush(now_ms)
        if job is not None:
            job.run()
            self.complete_flush(job)
        self._flush.recovery_point = max(self._flush.recovery_point, self.log_end_offset)

    @property
    def unchanged_since_flush(self) -> bool:
        """Nothing here needs an fsync: no data past the recovery point, no truncation and
        no file created, renamed or deleted since the last flush (or since open).

        A clean shutdown skips such logs: they were made durable before -- by an earlier
        flush, or by the incarnation that wrote the recovery-point checkpoint they were
        opened with -- so the checkpoint written at shutdown (the marker that lets the
        next start skip their recovery scan) stays true. Re-syncing them cost 2-11 s at
        3,000-10,000 mostly idle logs (issue 13). Indexes are not part of that promise:
        they are sanity-checked on open and their tail rebuilt from the log."""
        return self._flush.unchanged(self.log_end_offset)

    def close(self, *, keep_fds: list[int] | None = None) -> None:
        """Clean close: flush (recovery point = LEO) and release file descriptors
        (``keep_fds``: appended to it instead, for the caller to close later: a deleted
        replica's, whose FileSlices may still be on their way to a socket)."""
        if self.closed:
            return
        if not self.unchanged_since_flush:
            self.flush()
        for seg in self.segments:
            seg.close(keep_fd=keep_fds)
        self._deletions.run(force=True, keep_fds=keep_fds)
        self.closed = True

    # ------------------------------------------------------------------ retention

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
        _logger.info(
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
            _logger.info(
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
        self._deletions.schedule(segment, self.config.file_delete_delay_ms, now_ms)
        self._flush.files_changed()
        if self.deletion_listener is not None:
            self.deletion_listener(self)

    @property
    def pending_deletions(self) -> int:
        """Segments renamed to ``.deleted`` whose files are not unlinked yet."""
        return len(self._deletions)

    def run_pending_deletions(self, now_ms: int | None = None, *, force: bool = False) -> int:
        """Close and unlink the scheduled segments whose delay has passed (all of them
        with ``force``, e.g. at close). Called from the broker's retention loop."""
        return self._deletions.run(now_ms, force=force)

    # ------------------------------------------------------------------ compaction

    def replace_segments(self, old: list[Segment], cleaned_base: int) -> bool:
        """Swap the cleaner's ``<cleaned_base>.*.cleaned`` files in for ``old`` (REQ-R25).

        Runs on the event loop (the Log has no locks) and is short: renames, two directory
        fsyncs and an index load. Returns False — and discards the cleaned files — when
        ``old`` is no longer a consecutive run of non-active segments of this log
        (retention, truncation or deletion got there first). Crash-safe at every step:
        ``.cleaned`` files are discarded on open, a ``.log.swap`` is completed on open
        (``odradek.storage.cleaner.complete_swaps``), like Kafka's ``replaceSegments``.
        """
        from odradek.storage.cleaner import SWAP_SUFFIX, cleaned_paths, discard_cleaned

        segs = self.segments
        try:
            i = next(k for k, s in enumerate(segs) if s is old[0]) if old else -1
        except StopIteration:
            i = -1
        if (
            self.closed
            or i < 0
            or old[0].base_offset != cleaned_base
            or i + len(old) >= len(segs)  # never the active segment
            or any(segs[i + k] is not s for k, s in enumerate(old))
        ):
            discard_cleaned(self.directory, cleaned_base)
            return False
        cleaned = cleaned_paths(self.directory, cleaned_base)
        swaps = cleaned_paths(self.directory, cleaned_base, SWAP_SUFFIX)
        finals = cleaned_paths(self.directory, cleaned_base, "")
        # Indexes first, the .log last: .log.swap is the commit point for recovery. A
        # cleaned segment without aborted transactions has no .txnindex.
        for src, dst in zip(reversed(cleaned), reversed(swaps)):
            _replace_if_exists(src, dst)
        fsync_dir(self.directory)
        for seg in old:
            # Renamed to .deleted now (frees the base-offset name for the new segment);
            # closed after file.delete.delay.ms, so in-flight FileSlices stay valid.
            self.schedule_delete(seg)
        for src, dst in zip(reversed(swaps), reversed(finals)):
            _replace_if_exists(src, dst)
        fsync_dir(self.directory)
        new = Segment(self.directory, cleaned_base, self.config.index_interval_bytes)
        new.load(
            recover=False,
            max_batch_bytes=max(self.config.max_message_bytes, self.config.segment_bytes),
        )
        segs[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]
        return True

    def delete(self) -> None:
        for seg in self.segments:
            seg.delete()
        self.run_pending_deletions(force=True)
        self.closed = True
        shutil.rmtree(self.directory, ignore_errors=True)


def _replace_if_exists(src: Path, dst: Path) -> None:
    try:
        os.replace(src, dst)
    except FileNotFoundError:
        if not src.name.endswith((".txnindex.cleaned", ".txnindex.swap")):
            raise
