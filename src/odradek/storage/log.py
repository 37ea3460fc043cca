"""A partition's durable segmented log (SPEC R18, R23, R26, R27).

* Appends go to the page cache with ONE write per request (R18, R27); ``flush()`` fsyncs
  and advances the recovery point. Flushing is the caller's schedule
  (``flush_messages``/``flush_ms``; Kafka's default leaves it to the OS).
* Reads return a ``FileSlice`` (fd, position, size) of whole batches so the server can
  ``sendfile``/``pread`` without the bytes passing through Python objects (R26).
* Crash recovery: every segment holding data at or after the recovery point is scanned
  batch by batch; the first torn, oversized, non-v2, CRC-invalid or discontinuous batch
  and everything after it are removed, and indexes are rebuilt for scanned segments.

Thread model: sans-asyncio, no locks. The broker calls it from its event loop; slices
handed out stay valid because bytes below the high watermark are never rewritten or
truncated (``truncate_to`` is only ever called above the HW by replication).
"""

from __future__ import annotations

import os
import re
import shutil
from bisect import bisect_right
from dataclasses import dataclass
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
from odradek.storage.segment import MAX_RELATIVE_OFFSET, Segment

__all__ = ["Log", "LogConfig", "AppendInfo", "FileSlice"]

_SEGMENT_RE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")
# Leftovers of interrupted cleaner/retention/index rewrites; Kafka deletes them on load.
_STRAY_SUFFIXES = (".cleaned", ".deleted", ".swap", ".tmp")


@dataclass
class LogConfig:
    """Kafka's topic-level names: segment.bytes, segment.ms, index.interval.bytes,
    segment.index.bytes, max.message.bytes, message.timestamp.type,
    flush.messages, flush.ms (None = leave flushing to the OS, Kafka's default)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    flush_messages: int | None = None
    flush_ms: int | None = None


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    num_batches: int
    size_bytes: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Whole batches at [position, position+size) of an open segment file."""

    fd: int
    position: int
    size: int

    def read_bytes(self) -> bytes:
        out = bytearray()
        while len(out) < self.size:
            chunk = os.pread(self.fd, self.size - len(out), self.position + len(out))
            if not chunk:
                raise KafkaError(ErrorCode.kafka_storage_error, "short read from segment")
            out += chunk
        return bytes(out)


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
        self.recovery_point = recovery_point
        self.unflushed_messages = 0
        self.last_flush_ms: int | None = None
        self._dir_dirty = False
        self.closed = False

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
        directory.mkdir(parents=True, exist_ok=True)
        max_batch = max(config.max_message_bytes, config.segment_bytes)
        bases: set[int] = set()
        for entry in os.scandir(directory):
            name = entry.name
            if name.endswith(_STRAY_SUFFIXES):
                _unlink(directory / name)
                continue
            m = _SEGMENT_RE.match(name)
            if m and m.group(2) == "log":
                bases.add(int(m.group(1)))
        # Index files without a .log file are orphans.
        for entry in os.scandir(directory):
            m = _SEGMENT_RE.match(entry.name)
            if m and m.group(2) != "log" and int(m.group(1)) not in bases:
                _unlink(directory / entry.name)

        segments: list[Segment] = []
        ordered = sorted(bases)
        damaged = False
        recovered = False
        for i, base in enumerate(ordered):
            seg = Segment(directory, base, config.index_interval_bytes)
            if damaged or (segments and base < segments[-1].next_offset):
                seg.delete()  # after a truncation point, or overlapping: not trustworthy
                damaged = True
                continue
            next_base = ordered[i + 1] if i + 1 < len(ordered) else None
            if next_base is None and recovery_point > base:
                # Active segment after a clean shutdown: if a (header-checked) load shows
                # no data at or past the recovery point, skip the full CRC scan.
                seg.load(recover=False, max_batch_bytes=max_batch)
                if seg.next_offset > recovery_point or not seg.consistent:
                    damaged = seg.load(recover=True, max_batch_bytes=max_batch)
                    recovered = True
            elif next_base is None or next_base > recovery_point:
                damaged = seg.load(recover=True, max_batch_bytes=max_batch)
                recovered = True
            else:
                seg.load(recover=False, max_batch_bytes=max_batch)
            segments.append(seg)
        if not segments:
            start = log_start_offset or 0
            segments.append(Segment(directory, start, config.index_interval_bytes))
        active = segments[-1]
        if active.size:
            active.rolling_base_ms = active.header_at(0).max_timestamp
        lso = segments[0].base_offset if log_start_offset is None else log_start_offset
        lso = max(lso, segments[0].base_offset)
        log = cls(directory, config, segments, lso, recovery_point)
        if lso > log.log_end_offset:
            log.truncate_fully_and_start_at(lso)
        if recovered:
            # Everything up to the LEO is now verified; make it durable so the
            # recovery point can move to the LEO.
            log._dir_dirty = True
            log.flush()
        else:
            log.recovery_point = min(recovery_point, log.log_end_offset)
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
    ) -> AppendInfo:
        """Validate, assign offsets from the LEO, stamp the epoch, write once."""
        cfg = self.config
        buf = bytearray(records)
        headers = parse_batches(buf, verify_crc=True, max_batch_bytes=cfg.max_message_bytes)
        if not headers:
            raise KafkaError(ErrorCode.invalid_record, "produce request without record batches")
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
        self, records: bytes | bytearray | memoryview, now_ms: int = 0
    ) -> AppendInfo:
        """Append replicated batches keeping their offsets and epochs (must be >= LEO).

        A gap in offsets (a compacted leader) starts a new segment at the batch's base
        offset, so the "contiguous inside a segment" invariant holds for recovery.
        """
        mv = memoryview(records)
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
                or h.base_offset != expected
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
            if chunk[0].base_offset != self.log_end_offset:
                self.roll(chunk[0].base_offset)
            else:
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
        self.unflushed_messages += messages
        if self.last_flush_ms is None:
            self.last_flush_ms = now_ms
        fm = self.config.flush_messages
        if fm is not None and self.unflushed_messages >= fm:
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
        self._dir_dirty = True
        return seg

    # ------------------------------------------------------------------ reads

    def _segment_for(self, offset: int) -> int:
        i = bisect_right(self._bases, offset) - 1
        if i < 0:
            i = 0
        segs = self.segments
        while segs[i].next_offset <= offset and i + 1 < len(segs):
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
            self._dir_dirty = True
        seg = self.segments[-1]
        if seg.base_offset >= offset:
            seg.truncate_to(offset)
        elif seg.next_offset > offset:
            seg.truncate_to(offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        for seg in self.segments:
            seg.delete()
        self.segments = [Segment(self.directory, offset, self.config.index_interval_bytes)]
        self._bases = [offset]
        self.log_start_offset = offset
        self.recovery_point = offset
        self._dir_dirty = True

    # ------------------------------------------------------------------ durability

    def flush_due(self, now_ms: int) -> bool:
        """True when ``flush.ms`` has elapsed with unflushed data (caller schedules)."""
        fm = self.config.flush_ms
        return (
            fm is not None
            and self.unflushed_messages > 0
            and self.last_flush_ms is not None
            and now_ms - self.last_flush_ms >= fm
        )

    def flush(self, now_ms: int | None = None) -> None:
        """fsync everything up to the LEO and advance the recovery point (SPEC R18)."""
        leo = self.log_end_offset
        for seg in self.segments:
            if seg.next_offset > self.recovery_point or seg is self.active_segment:
                seg.flush()
        if self._dir_dirty:
            fsync_dir(self.directory)
            self._dir_dirty = False
        self.recovery_point = leo
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms

    def close(self) -> None:
        """Clean close: flush (recovery point = LEO) and release file descriptors."""
        if self.closed:
            return
        self.flush()
        for seg in self.segments:
            seg.close()
        self.closed = True

    def delete(self) -> None:
        for seg in self.segments:
            seg.delete()
        self.closed = True
        shutil.rmtree(self.directory, ignore_errors=True)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)
