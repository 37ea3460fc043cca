"""Log compaction: Kafka's LogCleaner, sans-asyncio (REQ-R25, issue #5 item 2).

A pass over one log has two phases, both run in a cleaner thread on *immutable*
non-active segments (their fds are ``dup``-ed on the event loop, so retention closing a
segment meanwhile never invalidates our reads):

1. ``build_offset_map`` — scan the *dirty* section ``[first_dirty, stop)`` (from the
   ``cleaner-offset-checkpoint`` up to the first uncleanable offset: the active segment,
   the high watermark, and segments newer than ``min.compaction.lag.ms``) and record the
   latest offset of every key, keyed by a 16-byte digest. The map is bounded
   (``log.cleaner.dedupe.buffer.size``): when it is full the pass stops at the record
   reached and the next pass continues from there (Kafka does the same).
2. ``clean_segments`` — rewrite every segment from the log start through the last one
   the map reached, in groups whose total input size fits one ``segment.bytes``, into
   ``<base>.log.cleaned`` (+ ``.index.cleaned`` / ``.timeindex.cleaned``). A record is
   kept when no newer offset exists for its key; a tombstone (null value) that was
   already in the cleaned section is dropped once its batch is older than
   ``delete.retention.ms``. Offsets, timestamps, producer id/epoch/sequence, the leader
   epoch and the compression codec of every retained batch are preserved; so are
   ``baseOffset`` and ``lastOffsetDelta`` (Kafka keeps a batch's original offset range),
   so a cleaned log has offset *gaps* but never reorders. Emptied batches are dropped.
   Transactions (Kafka's cleaner rules, KIP-98): the dirty section
   ends at the last stable offset (an open transaction's records may still be aborted),
   and records of aborted transactions are neither counted in the offset map (an aborted
   value never shadows an older committed one) nor retained; a COMMIT/ABORT marker is
   kept until no batch of its transaction is left and it has spent
   ``delete.retention.ms`` in the cleaned section. Records are decompressed only here, one batch at a time
   (bounded memory), and a batch whose records all survive is copied byte for byte.

The swap of the cleaned files into the log happens on the event loop
(``Log.replace_segments``): ``.cleaned`` → ``.swap`` (fsync dir) → old segments
scheduled for deletion → ``.swap`` → final names. ``complete_swaps`` finishes an
interrupted swap when a log is opened, like Kafka's ``LogLoader``: a ``.log.swap`` file is
the commit point.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from crc32c import crc32c

from odradek.errors import ErrorCode, KafkaError
from odradek.runtime import disk
from odradek.storage.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    BatchHeader,
)
from odradek.storage.index import OffsetIndex, TimeIndex
from odradek.storage.producer_state import CONTROL_TYPE_ABORT, control_type
from odradek.storage.records import _compress, _decompress
from odradek.storage.txn_index import AbortedTxn, write_txn_index

if TYPE_CHECKING:
    from odradek.storage.log import Log

__all__ = [
    "SegmentView",
    "CleanParams",
    "OffsetMap",
    "CleanedGroup",
    "CleanStats",
    "build_offset_map",
    "group_segments",
    "clean_segments",
    "complete_swaps",
    "record_key_check",
    "keyless_records",
    "cleaned_paths",
    "discard_cleaned",
    "clean_log",
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
]

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_FILE_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
_READ_CHUNK = 1 << 20  # pread window while scanning a segment
_WRITE_CHUNK = 1 << 20  # output buffer flushed with one write
# Approximate cost of one map entry in CPython (16-byte digest bytes object ~49 B, int
# ~32 B, dict slot ~30 B). Kafka's SkimpyOffsetMap charges 24 B per entry; we charge what
# the entry really costs, so log.cleaner.dedupe.buffer.size stays an honest memory bound.
MAP_ENTRY_BYTES = 112


@dataclass(frozen=True, slots=True)
class SegmentView:
    """A snapshot of one non-active segment taken on the event loop.

    ``fd`` is a private ``dup`` owned by the cleaning pass (closed by ``close``)."""

    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int
    fd: int

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


@dataclass(frozen=True, slots=True)
class CleanParams:
    """Topic/broker settings read at the start of a pass (they may change at runtime)."""

    segment_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int
    now_ms: int
    dedupe_buffer_bytes: int = 128 * 1024 * 1024
    # The log's aborted transactions (its .txnindex entries), in marker order
    aborted: tuple[AbortedTxn, ...] = ()

    @property
    def max_map_entries(self) -> int:
        return max(1, self.dedupe_buffer_bytes // MAP_ENTRY_BYTES)


@dataclass
class OffsetMap:
    """Key digest → latest offset over ``[start, end)``; ``full`` if the bound stopped it."""

    start: int
    end: int
    latest: dict[bytes, int] = field(default_factory=dict)
    full: bool = False

    def keep(self, digest: bytes, offset: int) -> bool:
        return offset >= self.latest.get(digest, -1)


@dataclass
class CleanedGroup:
    """One output segment: ``<base>.log.cleaned`` replacing the listed input segments."""

    base_offset: int
    sources: list[SegmentView]
    size: int = 0
    # (producer id, marker offset) of the ABORT markers this group drops: their entries
    # are left out of the cleaned segment's .txnindex.
    dropped_aborts: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class CleanStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_rewritten: int = 0
    batches_copied: int = 0
    batches_dropped: int = 0
    tombstones_dropped: int = 0
    markers_dropped: int = 0
    map_seconds: float = 0.0
    clean_seconds: float = 0.0


_blake = hashlib.blake2b


def key_digest(key: bytes) -> bytes:
    """The map key: short keys as they are (no hashing cost), longer ones as a 16-byte
    BLAKE2b digest. Both bound an entry's size; a raw key is shorter than 16 bytes, so
    it can never equal a digest."""
    if len(key) < 16:
        return key
    return hashlib.blake2b(key, digest_size=16).digest()


# ----------------------------------------------------------------------------- parsing


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise KafkaError(ErrorCode.corrupt_message, "varint too long")


def iter_records(payload: bytes, count: int) -> list[tuple[int, int, int, int, bytes | None, bool]]:
    """``(start, end, offset_delta, timestamp_delta, key, is_tombstone)`` per record of a
    decompressed batch body; ``payload[start:end]`` is the record's exact encoding.

    Hot loop of the cleaner: one- and two-byte varints are decoded inline (most are)."""
    out: list[tuple[int, int, int, int, bytes | None, bool]] = []
    append = out.append
    pos = 0
    n = len(payload)
    try:
        for _ in range(count):
            start = pos
            b = payload[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif payload[pos + 1] < 0x80:
                raw = (b & 0x7F) | (payload[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = _varint(payload, pos)
            end = pos + length
            if length < 0 or end > n:
                raise KafkaError(ErrorCode.corrupt_message, "truncated record")
            pos += 1  # record attributes
            b = payload[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif payload[pos + 1] < 0x80:
                raw = (b & 0x7F) | (payload[pos + 1] << 7)
                ts_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                ts_delta, pos = _varint(payload, pos)
            b = payload[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif payload[pos + 1] < 0x80:
                raw = (b & 0x7F) | (payload[pos + 1] << 7)
                off_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                off_delta, pos = _varint(payload, pos)
            b = payload[pos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = _varint(payload, pos)
            key: bytes | None = None
            if klen >= 0:
                key = payload[pos : pos + klen]
                pos += klen
            # A null value is the varint -1, i.e. the single byte 0x01 (zig-zag).
            append((start, end, off_delta, ts_delta, key, payload[pos] == 1))
            pos = end
    except IndexError as e:
        raise KafkaError(ErrorCode.corrupt_message, "truncated record") from e
    return out


def keyless_records(records: bytes | bytearray | memoryview) -> list[int]:
    """Indexes (within their batch, Kafka's ``batchIndex``) of the non-control records
    without a key in ``records`` (one produce request's batches). Kafka rejects those on
    compacted topics (INVALID_RECORD, "Compacted topic cannot accept message without
    key"). Decompresses: call it only for topics whose cleanup.policy contains compact —
    never on the ordinary hot path."""
    mv = memoryview(records)
    pos = 0
    out: list[int] = []
    while pos + BATCH_HEADER_SIZE <= len(mv):
        h = BatchHeader.unpack(mv, pos)
        if not h.is_control:
            payload = _decompress(h.compression, bytes(mv[pos + BATCH_HEADER_SIZE : pos + h.size]))
            for i, (_s, _e, _o, _t, key, _tomb) in enumerate(
                iter_records(payload, h.records_count)
            ):
                if key is None:
                    out.append(i)
        pos += h.size
    return out


def record_key_check(records: bytes | bytearray | memoryview) -> bool:
    """True if every non-control record in ``records`` has a key (``keyless_records``)."""
    return not keyless_records(records)


def iter_segment_batches(
    seg: SegmentView, start_pos: int = 0
) -> Iterator[tuple[BatchHeader, bytes]]:
    """Whole batches of a segment, read in ~1 MiB windows (bounded memory)."""
    pos = start_pos
    buf = b""
    buf_start = pos
    while pos < seg.size:
        rel = pos - buf_start
        if rel + LOG_OVERHEAD > len(buf):
            buf = os.pread(seg.fd, min(_READ_CHUNK, seg.size - pos), pos)
            buf_start, rel = pos, 0
            if len(buf) < LOG_OVERHEAD:
                raise KafkaError(ErrorCode.kafka_storage_error, f"short read at {pos}")
        size = struct.unpack_from(">i", buf, rel + 8)[0] + LOG_OVERHEAD
        if size < BATCH_HEADER_SIZE:
            raise KafkaError(ErrorCode.corrupt_message, f"bad batch length at {pos}")
        if rel + size > len(buf):
            buf = os.pread(seg.fd, max(min(_READ_CHUNK, seg.size - pos), size), pos)
            buf_start, rel = pos, 0
            if len(buf) < size:
                raise KafkaError(ErrorCode.kafka_storage_error, f"short read at {pos}")
        h = BatchHeader.unpack(buf, rel)
        h.position = pos
        yield h, buf[rel : rel + size]
        pos += size


# ----------------------------------------------------------------------------- phase 1


def is_aborted(h: BatchHeader, aborted: tuple[AbortedTxn, ...]) -> bool:
    """A data batch of a transaction that was aborted."""
    if not h.is_transactional or h.is_control or not aborted:
        return False
    pid, off = h.producer_id, h.base_offset
    return any(a.producer_id == pid and a.first_offset <= off <= a.last_offset for a in aborted)


def _marker_expired(
    h: BatchHeader, txn_remains: dict[int, bool], cleaned_upto: int, horizon: int
) -> bool:
    """May this COMMIT/ABORT marker go? Kafka's rule (CleanedTransactionMetadata): once
    no batch of its transaction is left in the log -- a read_committed consumer needs the
    marker only to close batches it read -- and, like a tombstone, only after it was in
    the cleaned section for ``delete.retention.ms``, so a consumer that read the
    transaction's batches before they went still reads the marker after them."""
    remains = txn_remains.pop(h.producer_id, False)
    return not remains and h.last_offset < cleaned_upto and h.max_timestamp < horizon


def build_offset_map(
    segments: list[SegmentView],
    start: int,
    stop: int,
    max_entries: int,
    aborted: tuple[AbortedTxn, ...] = (),
) -> OffsetMap:
    """Latest offset per key over ``[start, stop)`` of ``segments`` (ascending); records
    of ``aborted`` transactions do not count."""
    omap = OffsetMap(start=start, end=start)
    latest = omap.latest
    for seg in segments:
        if seg.next_offset <= start:
            continue
        if seg.base_offset >= stop:
            break
        for h, batch in iter_segment_batches(seg):
            if h.last_offset < start:
                continue
            if h.base_offset >= stop:
                break
            if h.is_control or is_aborted(h, aborted):
                # Control records carry no user key (Kafka skips them too); aborted
                # records must not shadow committed ones.
                omap.end = max(omap.end, min(h.next_offset, stop))
                continue
            payload = _decompress(h.compression, batch[BATCH_HEADER_SIZE:])
            for _s, _e, delta, _t, key, _tomb in iter_records(payload, h.records_count):
                off = h.base_offset + delta
                if off < start:
                    continue
                if off >= stop:
                    break
                if key is None:
                    omap.end = off + 1
                    continue
                d = key if len(key) < 16 else _blake(key, digest_size=16).digest()
                if d not in latest and len(latest) >= max_entries:
                    omap.full = True
                    omap.end = off  # this record and later ones wait for the next pass
                    return omap
                latest[d] = off
                omap.end = off + 1
            else:
                omap.end = max(omap.end, min(h.next_offset, stop))
    return omap


# ----------------------------------------------------------------------------- phase 2


def group_segments(segments: list[SegmentView], max_bytes: int) -> list[list[SegmentView]]:
    """Kafka's groupSegmentsBySize: consecutive inputs whose total fits one segment (the
    output is never larger than the input) and whose offsets fit i32 index entries."""
    groups: list[list[SegmentView]] = []
    for seg in segments:
        if groups:
            g = groups[-1]
            total = sum(s.size for s in g)
            if total + seg.size <= max_bytes and seg.next_offset - 1 - g[0].base_offset < 2**31 - 1:
                g.append(seg)
                continue
        groups.append([seg])
    return groups


def cleaned_paths(directory: Path, base_offset: int, suffix: str = CLEANED_SUFFIX) -> list[Path]:
    name = f"{base_offset:020d}"
    return [directory / f"{name}{ext}{suffix}" for ext in _FILE_SUFFIXES]


def discard_cleaned(directory: Path, base_offset: int) -> None:
    for p in cleaned_paths(directory, base_offset):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


class _SegmentWriter:
    """Writes one ``.cleaned`` segment and its indexes (Kafka's index rule per batch)."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        discard_cleaned(directory, base_offset)
        log_p, idx_p, tidx_p, self.txn_path = cleaned_paths(directory, base_offset)
        self.fd = os.open(log_p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.index = OffsetIndex(idx_p, base_offset)
        self.time_index = TimeIndex(tidx_p, base_offset)
        self.interval = index_interval_bytes
        self.buf = bytearray()
        self.size = 0
        self._since_index = 0
        self.max_ts = -1
        self.max_ts_offset = -1

    def append(self, batch: bytes | bytearray, last_offset: int, max_ts: int) -> None:
        if max_ts > self.max_ts:
            self.max_ts, self.max_ts_offset = max_ts, last_offset
        if self._since_index > self.interval:
            self.index.append(last_offset, self.size)
            self.time_index.maybe_append(self.max_ts, self.max_ts_offset)
            self._since_index = 0
        self._since_index += len(batch)
        self.buf += batch
        self.size += len(batch)
        if len(self.buf) >= _WRITE_CHUNK:
            self._drain()

    def _drain(self) -> None:
        mv = memoryview(self.buf)
        while mv:
            mv = mv[os.write(self.fd, mv) :]
        self.buf = bytearray()

    def finish(self, aborted: list[AbortedTxn]) -> None:
        """Complete the files; ``aborted`` is the cleaned segment's .txnindex (no file if
        empty: the swap renames it only if it exists)."""
        write_txn_index(self.txn_path, aborted)
        try:
            self._drain()
            disk.fsync(self.fd)
        finally:
            os.close(self.fd)
        if self.max_ts >= 0:  # final time entry, as on a roll (onBecomeInactiveSegment)
            self.time_index.maybe_append(self.max_ts, self.max_ts_offset)
        # Both index files are created even when empty so the swap renames all three.
        self.index._rewrite = True
        self.time_index._rewrite = True
        self.index.write_pending(fsync=True)
        self.time_index.write_pending(fsync=True)

    def abort(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def _filter_batch(
    h: BatchHeader,
    batch: bytes,
    omap: OffsetMap,
    drop_tombstones_below: int,
    stats: CleanStats,
) -> bytes | None:
    """The batch with only retained records (same bytes if all kept; None if empty)."""
    payload = _decompress(h.compression, batch[BATCH_HEADER_SIZE:])
    kept: list[tuple[int, int]] = []
    max_ts = -1
    n = 0
    latest = omap.latest.get
    base = h.base_offset
    for start, end, delta, ts_delta, key, tomb in iter_records(payload, h.records_count):
        n += 1
        off = base + delta
        if key is not None:
            # Inlined key_digest + OffsetMap.keep (the per-record hot path).
            if off < latest(key if len(key) < 16 else _blake(key, digest_size=16).digest(), -1):
                continue
            if tomb and off < drop_tombstones_below:
                stats.tombstones_dropped += 1
                continue
        kept.append((start, end))
        ts = h.base_timestamp + ts_delta
        if ts > max_ts:
            max_ts = ts
    stats.records_read += n
    stats.records_kept += len(kept)
    if len(kept) == n:
        stats.batches_copied += 1
        return batch
    if not kept:
        stats.batches_dropped += 1
        return None
    stats.batches_rewritten += 1
    body = b"".join(payload[s:e] for s, e in kept)
    data = _compress(h.compression, body)
    if h.timestamp_type == 1:
        max_ts = h.max_timestamp  # LogAppendTime: every record carries the batch time
    out = bytearray(BATCH_HEADER_SIZE)
    # Same baseOffset, lastOffsetDelta, baseTimestamp, producer id/epoch/sequence,
    # leader epoch and attributes (codec): only the count, max timestamp and CRC change.
    HEADER_STRUCT.pack_into(
        out,
        0,
        h.base_offset,
        BATCH_HEADER_SIZE - LOG_OVERHEAD + len(data),
        h.partition_leader_epoch,
        h.magic,
        0,
        h.attributes,
        h.last_offset_delta,
        h.base_timestamp,
        max_ts,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        len(kept),
    )
    out += data
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def clean_segments(
    directory: Path,
    segments: list[SegmentView],
    omap: OffsetMap,
    params: CleanParams,
    stats: CleanStats | None = None,
) -> list[CleanedGroup]:
    """Rewrite ``segments`` (log start .. last segment the map reached) into ``.cleaned``
    files, one per group; returns the groups (files exist and are fsynced)."""
    stats = stats if stats is not None else CleanStats()
    t0 = time.monotonic()
    # Tombstones already in the cleaned section (below this pass's first dirty offset)
    # whose batch is older than delete.retention.ms are removed (Kafka's delete horizon).
    horizon = params.now_ms - params.delete_retention_ms
    out: list[CleanedGroup] = []
    # Producer id -> whether a batch of its current transaction is still in the log (a
    # pass reads every segment from the log start, so it sees each transaction whole).
    txn_remains: dict[int, bool] = {}
    for group in group_segments(segments, params.segment_bytes):
        cg = CleanedGroup(group[0].base_offset, group)
        w = _SegmentWriter(directory, cg.base_offset, params.index_interval_bytes)
        try:
            for seg in group:
                for h, batch in iter_segment_batches(seg):
                    stats.bytes_read += len(batch)
                    if h.is_control:
                        if _marker_expired(h, txn_remains, omap.start, horizon):
                            stats.markers_dropped += 1
                            if control_type(batch) == CONTROL_TYPE_ABORT:
                                cg.dropped_aborts.append((h.producer_id, h.last_offset))
                            continue
                        w.append(batch, h.last_offset, h.max_timestamp)
                        continue
                    if is_aborted(h, params.aborted):
                        # Kafka's cleaner discards aborted transactions' records; their
                        # marker stays at least until a later pass finds none left.
                        txn_remains[h.producer_id] = True
                        continue
                    drop_below = omap.start if h.max_timestamp < horizon else -1
                    kept = _filter_batch(h, batch, omap, drop_below, stats)
                    if h.is_transactional:
                        txn_remains[h.producer_id] = kept is not None or txn_remains.get(
                            h.producer_id, False
                        )
                    if kept is not None:
                        w.append(kept, h.last_offset, HEADER_STRUCT.unpack_from(kept, 0)[8])
            # The surviving .txnindex entries of the group's segments: the ABORT markers
            # kept (Kafka's cleaner rebuilds the cleaned segment's index the same way).
            dropped = set(cg.dropped_aborts)
            end = group[-1].next_offset
            w.finish(
                [
                    a
                    for a in params.aborted
                    if cg.base_offset <= a.last_offset < end
                    and (a.producer_id, a.last_offset) not in dropped
                ]
            )
        except BaseException:
            w.abort()
            discard_cleaned(directory, cg.base_offset)
            for g in out:
                discard_cleaned(directory, g.base_offset)
            raise
        cg.size = w.size
        stats.bytes_written += w.size
        out.append(cg)
    stats.clean_seconds += time.monotonic() - t0
    return out


# ----------------------------------------------------------------------------- recovery


def _last_offset(path: Path) -> int:
    """Last offset of the batches in a segment file (-1 if empty), by a header walk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        last = -1
        pos = 0
        while pos + BATCH_HEADER_SIZE <= size:
            hdr = os.pread(fd, BATCH_HEADER_SIZE, pos)
            if len(hdr) < BATCH_HEADER_SIZE:
                break
            h = BatchHeader.unpack(hdr, 0)
            if h.size < BATCH_HEADER_SIZE:
                break
            last = h.last_offset
            pos += h.size
        return last
    finally:
        os.close(fd)


def complete_swaps(directory: Path) -> list[int]:
    """Finish swaps interrupted by a crash (Kafka's LogLoader ``.swap`` handling).

    A ``<B>.log.swap`` file is complete and fsynced (it was renamed from ``.cleaned`` only
    after that): every segment file it replaces — base offsets in ``[B, its last
    offset]`` — is removed, then the ``.swap`` files take their final names. Returns the
    completed base offsets. Stray ``.cleaned``/``.deleted`` files are left to the caller.
    """
    done: list[int] = []
    names = os.listdir(directory)
    swaps = sorted(
        int(n[:20]) for n in names if n.endswith(".log" + SWAP_SUFFIX) and n[:20].isdigit()
    )
    for base in swaps:
        swap_log = directory / f"{base:020d}.log{SWAP_SUFFIX}"
        last = max(base, _last_offset(swap_log))
        for n in os.listdir(directory):
            stem, _, ext = n.partition(".")
            if (
                not stem.isdigit()
                or len(stem) != 20
                or ext not in ("log", "index", "timeindex", "txnindex")
            ):
                continue
            if base <= int(stem) <= last:
                (directory / n).unlink()
        for final, swap in zip(
            cleaned_paths(directory, base, ""), cleaned_paths(directory, base, SWAP_SUFFIX)
        ):
            if swap.exists():
                os.replace(swap, final)
        done.append(base)
    if done:
        fd = os.open(directory, os.O_RDONLY)
        try:
            disk.fsync(fd)
        finally:
            os.close(fd)
    return done


# ----------------------------------------------------------------------------- one-shot


def clean_log(
    log: Log,
    first_dirty: int | None = None,
    *,
    now_ms: int | None = None,
    high_watermark: int | None = None,
    dedupe_buffer_bytes: int = 128 * 1024 * 1024,
    stats: CleanStats | None = None,
) -> int:
    """One synchronous pass over ``log`` (tools, tests, benchmarks): map, rewrite and swap
    every non-active segment below ``high_watermark`` (default: the LEO). Returns the new
    first dirty offset (the cleaner checkpoint). The log's aborted transactions come
    from its .txnindex files. The broker splits these steps between its cleaner thread
    and event loop (odradek.log_manager.log_cleaner)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    hw = log.log_end_offset if high_watermark is None else high_watermark
    start = log.log_start_offset if first_dirty is None else max(first_dirty, log.log_start_offset)
    segs = [s for s in log.segments[:-1] if s.next_offset <= hw]
    if not segs or segs[-1].next_offset <= start:
        return start
    cfg = log.config
    aborted = tuple(log.aborted_entries())
    params = CleanParams(
        cfg.segment_bytes,
        cfg.index_interval_bytes,
        cfg.delete_retention_ms,
        now,
        dedupe_buffer_bytes,
        aborted=aborted,
    )
    views = [
        SegmentView(s.base_offset, s.next_offset, s.size, s.max_timestamp, os.dup(s.fd))
        for s in segs
    ]
    try:
        t0 = time.monotonic()
        omap = build_offset_map(views, start, segs[-1].next_offset, params.max_map_entries, aborted)
        if stats is not None:
            stats.map_seconds += time.monotonic() - t0
        if omap.end <= start:
            return start
        n = sum(1 for v in views if v.base_offset < omap.end)
        k = 0
        for g in clean_segments(log.directory, views[:n], omap, params, stats):
            log.replace_segments(segs[k : k + len(g.sources)], g.base_offset)
            k += len(g.sources)
        return omap.end
    finally:
        for v in views:
            v.close()
