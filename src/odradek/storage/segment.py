"""One log segment: ``%020d.log`` plus its sparse ``.index`` and ``.timeindex`` (REQ-R23),
and the ``.txnindex`` of the transactions aborted in it (odradek.storage.txn_index).

Invariant kept by ``Log`` and checked by recovery: inside a segment, batch offsets
strictly increase and the first batch starts at or after the segment's base offset.
Gaps are legal — the log cleaner keeps each retained batch's original offset range and
drops emptied batches (REQ-R25, Kafka does the same) — but an offset going *backwards*
(e.g. a flipped bit in ``baseOffset``, which the CRC does not cover) is corruption.

Lookups (``locate`` / ``boundary``) bisect in-memory arrays of ``(last_offset,
position)``. For rolled segments these are the sparse index entries plus a short header
walk (at most ~``index.interval.bytes``). The active segment additionally records
*every* batch appended since it was opened ("dense" region from ``_dense_from``), so the
hot tail path — consumers and followers reading near the LEO — needs no I/O besides the
returned slice. The dense arrays are capped and thinned back to the sparse entries.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from pathlib import Path

from odradek.errors import ErrorCode, KafkaError
from odradek.runtime import disk
from odradek.storage.batch import (
    BATCH_HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    BatchHeader,
    scan_batches,
)
from odradek.storage.index import OffsetIndex, TimeIndex, _write_all
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

__all__ = ["Segment", "segment_file_name", "MAX_RELATIVE_OFFSET"]

MAX_RELATIVE_OFFSET = 2**31 - 1  # index entries store i32 relative offsets
_WALK_CHUNK = 16 * 1024
_RECOVER_CHUNK = 8 * 1024 * 1024
MAX_DENSE_ENTRIES = 1 << 17  # ~2 MiB of arrays per active segment


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class Segment:
    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / segment_file_name(base_offset, ".log")
        self.index = OffsetIndex(directory / segment_file_name(base_offset, ".index"), base_offset)
        self.time_index = TimeIndex(
            directory / segment_file_name(base_offset, ".timeindex"), base_offset
        )
        self.txn_index = TransactionIndex(
            directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX)
        )
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset  # last offset + 1
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.rolling_base_ms: int | None = None  # when the first batch arrived (segment.ms)
        self._bytes_since_index = 0
        # Lookup arrays: sparse entries below _dense_from, every batch at/after it.
        self._offs: array[int] = array("q")
        self._pos: array[int] = array("q")
        self._dense_from = 0
        self._dense_from_offset = base_offset
        self.closed = False
        # False when a header walk of a trusted load did not end exactly at the file end
        # (a torn tail): the caller must run a full recovery scan.
        self.consistent = True

    # ------------------------------------------------------------------ loading

    def load(self, *, recover: bool, max_batch_bytes: int) -> bool:
        """Initialise in-memory state from disk.

        ``recover=True`` scans every batch with CRC checks, truncates the file at the first
        invalid one and rebuilds both indexes; returns True if it truncated anything.
        ``recover=False`` trusts the data (below the recovery point) and loads the index
        files, rebuilding them by a header walk if they are missing or malformed.
        """
        if recover:
            return self._recover(max_batch_bytes)
        ok = self.index.load() and self.index.sane(self.size) and self.time_index.load()
        if ok:
            if len(self.time_index):
                self.max_timestamp = self.time_index.keys[-1]
                self.offset_of_max_timestamp = self.time_index.values[-1]
            start = self.index.values[-1] if len(self.index) else 0
            ok = self._walk_tail(start) and self.time_index.sane(self.next_offset)
            self._bytes_since_index = self.size - start
        if not ok:
            self._rebuild_from_headers()
        self._reset_lookup_sparse()
        return False

    def _walk_tail(self, start: int) -> bool:
        """Compute next_offset / max timestamp by walking headers from ``start``."""
        expected = self.base_offset if start == 0 else None
        end = start
        for h in self.iter_headers(start, self.size):
            if expected is not None and h.base_offset < expected:  # gaps: compaction
                return False
            expected = h.next_offset
            self._note_timestamp(h)
            end = h.position + h.size
        if end != self.size:
            return False
        if expected is not None:
            self.next_offset = expected
        return True

    def _rebuild_from_headers(self) -> None:
        self.index.clear()
        self.time_index.clear()
        self.next_offset = self.base_offset
        self.max_timestamp = self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0
        end = 0
        consistent = True
        for h in self.iter_headers(0, self.size):
            if h.base_offset < self.next_offset:  # gaps are legal (compaction)
                consistent = False
                break
            self._index_batch(h.last_offset, h.position, h.size, h.max_timestamp)
            self.next_offset = h.next_offset
            end = h.position + h.size
        self.consistent = consistent and end == self.size
        self.index.write_pending()
        self.time_index.write_pending()

    def _recover(self, max_batch_bytes: int) -> bool:
        self.index.clear()
        self.time_index.clear()
        self.next_offset = self.base_offset
        self.max_timestamp = self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0
        file_size = os.fstat(self.fd).st_size
        pos = 0
        need = _RECOVER_CHUNK
        while pos < file_size:
            window_start = pos
            buf = os.pread(self.fd, min(max(_RECOVER_CHUNK, need), file_size - pos), pos)
            need = _RECOVER_CHUNK
            sc = scan_batches(buf, verify_crc=True, max_batch_bytes=max_batch_bytes)
            corrupt = False
            for h in sc.batches:
                if (
                    h.base_offset < self.next_offset
                    or h.last_offset - self.base_offset > MAX_RELATIVE_OFFSET
                ):
                    corrupt = True  # offsets must increase; gaps are legal (module doc)
                    break
                h.position += window_start
                self._index_batch(h.last_offset, h.position, h.size, h.max_timestamp)
                self.next_offset = h.next_offset
                pos = h.position + h.size
            if corrupt:
                break
            if sc.error is None:
                continue
            if window_start + len(buf) >= file_size:
                break  # the failing batch cannot be completed: genuine corruption
            if sc.batches:
                continue  # re-read a window starting at the failing batch
            # No progress: the first batch may be larger than the window; re-read it whole
            # if its claimed size is plausible, otherwise it is corrupt.
            claimed = int.from_bytes(buf[8:12], "big", signed=True) + LOG_OVERHEAD
            if len(buf) < claimed <= max_batch_bytes and pos + claimed <= file_size:
                need = claimed
                continue
            break
        truncated = pos < file_size
        if truncated:
            os.ftruncate(self.fd, pos)
        self.size = pos
        self.index.write_pending()
        self.time_index.write_pending()
        # Entries of markers the scan cut off go with them (entries a crash lost come
        # back when the producer state is replayed over this segment).
        self.txn_index.truncate_to(self.next_offset)
        self._reset_lookup_sparse()
        return truncated

    # ------------------------------------------------------------------ headers

    def iter_headers(self, start: int, stop: int) -> Iterator[BatchHeader]:
        """Walk batch headers (no CRC) in [start, stop); positions are file positions."""
        pos = start
        buf = b""
        buf_start = start
        while pos < stop:
            rel = pos - buf_start
            if rel < 0 or rel + BATCH_HEADER_SIZE > len(buf):
                buf = os.pread(self.fd, min(_WALK_CHUNK, max(stop - pos, BATCH_HEADER_SIZE)), pos)
                buf_start, rel = pos, 0
                if len(buf) < BATCH_HEADER_SIZE:
                    return
            h = BatchHeader.unpack(buf, rel)
            if h.batch_length + LOG_OVERHEAD < BATCH_HEADER_SIZE:
                return
            h.position = pos
            yield h
            pos += h.batch_length + LOG_OVERHEAD

    def header_at(self, position: int) -> BatchHeader:
        buf = os.pread(self.fd, BATCH_HEADER_SIZE, position)
        if len(buf) < BATCH_HEADER_SIZE:
            raise KafkaError(ErrorCode.kafka_storage_error, f"short read at {position}")
        h = BatchHeader(*HEADER_STRUCT.unpack_from(buf, 0), position)  # type: ignore[call-arg]
        return h

    # ------------------------------------------------------------------ appends

    def _note_timestamp(self, h: BatchHeader) -> None:
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.offset_of_max_timestamp = h.last_offset

    def _index_batch(self, last_offset: int, position: int, size: int, max_ts: int) -> None:
        # Kafka LogSegment.append: add an entry before a batch once more than
        # index.interval.bytes were appended since the previous entry.
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.offset_of_max_timestamp = last_offset
        if self._bytes_since_index > self.index_interval_bytes:
            self.index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += size

    def append(
        self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader], now_ms: int
    ) -> None:
        """Write ``buf`` (whole batches, offsets already set) with one write at the end."""
        base = self.size
        _write_all(self.fd, buf, base)
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms
        offs, poss = self._offs, self._pos
        for h in headers:
            p = base + h.position
            self._index_batch(h.last_offset, p, h.size, h.max_timestamp)
            offs.append(h.last_offset)
            poss.append(p)
        self.size = base + len(buf)
        self.next_offset = headers[-1].next_offset
        if len(offs) - bisect_left(poss, self._dense_from) > MAX_DENSE_ENTRIES:
            self._reset_lookup_sparse()

    def _reset_lookup_sparse(self) -> None:
        """Lookup arrays := sparse index entries; nothing dense until the next append."""
        self._offs = array("q", self.index.keys)
        self._pos = array("q", self.index.values)
        self._dense_from = self.size
        self._dense_from_offset = self.next_offset

    def make_inactive(self) -> None:
        """On roll (Kafka onBecomeInactiveSegment): final time entry, persist, drop dense."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.index.write_pending()
        self.time_index.write_pending()
        self._reset_lookup_sparse()

    # ------------------------------------------------------------------ lookups

    def locate(self, target: int) -> int:
        """Position of the first batch with last_offset >= target (``size`` if none)."""
        if target >= self.next_offset:
            return self.size
        offs = self._offs
        i = bisect_left(offs, target)
        n = len(offs)
        if i < n:
            p = self._pos[i]
            if p >= self._dense_from and target >= self._dense_from_offset:
                return p  # dense region: the previous batch ends before target
            stop = p
        else:
            stop = self.size
        start = self._pos[i - 1] if i > 0 else 0
        for h in self.iter_headers(start, stop):
            if h.last_offset >= target:
                return h.position
        return stop

    def boundary(self, limit: int) -> int:
        """Greatest batch boundary (batch start or file end) <= ``limit``."""
        if limit >= self.size:
            return self.size
        j = bisect_right(self._pos, limit) - 1
        start = 0
        if j >= 0:
            start = self._pos[j]
            if start >= self._dense_from:
                return start  # dense: the next boundary is the next entry, > limit
        best = start
        for h in self.iter_headers(start, limit + 1):
            end = h.position + h.size
            if end > limit:
                break
            best = end
        return best

    def fetch_upper_bound(self, position: int) -> int:
        """An offset past every batch that starts before ``position`` (Kafka's
        ``LogSegment.fetchUpperBoundOffset``), from the lookup arrays without I/O: one
        past the last offset of the first indexed batch at or after it, else the end."""
        if position >= self.size:
            return self.next_offset
        j = bisect_left(self._pos, position)
        return self._offs[j] + 1 if j < len(self._offs) else self.next_offset

    def batch_size_at(self, position: int) -> int:
        return self.header_at(position).size

    def find_timestamp(self, ts: int) -> BatchHeader | None:
        """First batch with max_timestamp >= ts (Kafka's findOffsetByTimestamp)."""
        if self.max_timestamp < ts:
            return None
        i = bisect_left(self.time_index.keys, ts) - 1
        start = self.locate(self.time_index.values[i]) if i >= 0 else 0
        for h in self.iter_headers(start, self.size):
            if h.max_timestamp >= ts:
                return h
        return None

    # ------------------------------------------------------------------ mutation

    def truncate_to(self, offset: int) -> int:
        """Drop every batch with last_offset >= offset; return bytes removed."""
        self.txn_index.truncate_to(offset)
        cut = self.locate(offset)
        if cut >= self.size:
            return 0
        removed = self.size - cut
        os.ftruncate(self.fd, cut)
        self.size = cut
        n = bisect_left(self.index.values, cut)
        self.index.truncate_entries(n)
        # Recompute next offset, max timestamp and time index from the last kept entry.
        start = self.index.values[-1] if len(self.index) else 0
        self.next_offset = self.base_offset
        walked_max, walked_off = -1, -1
        self._bytes_since_index = 0
        for h in self.iter_headers(start, self.size):
            if h.max_timestamp > walked_max:
                walked_max, walked_off = h.max_timestamp, h.last_offset
            self.next_offset = h.next_offset
            self._bytes_since_index += h.size
        self.time_index.truncate_entries(bisect_left(self.time_index.values, self.next_offset))
        self.max_timestamp = self.offset_of_max_timestamp = -1
        if len(self.time_index):
            self.max_timestamp = self.time_index.keys[-1]
            self.offset_of_max_timestamp = self.time_index.values[-1]
        if walked_max > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = walked_max, walked_off
        if self.size == 0:
            self.rolling_base_ms = None
        # Force the rewrite of both files (entries may have been removed at the tail).
        self.index._rewrite = True
        self.time_index._rewrite = True
        self._reset_lookup_sparse()
        return removed

    def flush(self) -> None:
        self.index.write_pending(fsync=True)
        self.time_index.write_pending(fsync=True)
        disk.fsync(self.fd)

    def close(self, *, keep_fd: list[int] | None = None) -> None:
        """``keep_fd``: the file descriptor is appended to it instead of closed (a deleted
        replica's, closed after file.delete.delay.ms: odradek.replication.replica_logs)."""
        if self.closed:
            return
        self.index.write_pending()
        self.time_index.write_pending()
        self._release(keep_fd)

    def _release(self, keep_fd: list[int] | None) -> None:
        if keep_fd is None:
            os.close(self.fd)
        else:
            keep_fd.append(self.fd)
        self.closed = True

    def delete(self, *, keep_fd: list[int] | None = None) -> None:
        if not self.closed:
            self._release(keep_fd)
        for p in (self.log_path,):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        self.index.delete_file()
        self.time_index.delete_file()
        self.txn_index.delete()

    def rename_to_deleted(self) -> None:
        """First half of an asynchronous delete (Kafka's ``changeFileSuffixes("",
        ".deleted")``): the files get a ``.deleted`` suffix now — so the name is free for
        a new segment and ``Log.open`` discards them after a crash — while the fd stays
        open for FileSlices already handed to connections. ``delete()`` later closes the
        fd and unlinks the renamed files."""
        self.index.write_pending()
        self.time_index.write_pending()
        for obj, attr in ((self, "log_path"), (self.index, "path"), (self.time_index, "path")):
            old: Path = getattr(obj, attr)
            new = old.with_name(old.name + ".deleted")
            try:
                os.replace(old, new)
            except FileNotFoundError:
                pass
            setattr(obj, attr, new)
        self.txn_index.rename(self.txn_index.path.with_name(self.txn_index.path.name + ".deleted"))
