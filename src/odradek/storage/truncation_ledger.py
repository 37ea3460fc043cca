"""The lost-records ledger: what a replica truncates is quarantined, not discarded.

Kafka silently drops the suffix a follower removes when it learns, through
OffsetsForLeaderEpoch, that it was not the rightful leader (REQ-R19, R20), and the
records an unclean election discards (REQ-R10) or a deposed leader took alone (REQ-P4,
REQ-P6). Odradek keeps them: before ``Partition.truncate_to`` removes a
suffix, the batches being removed are copied -- raw bytes, unchanged, read from the
log's own segment files -- into ``<log dir>/lost-records/<topic>-<partition>/``:

* ``<start>-<end>-<epoch>-<time ms>.batches``  the removed batches, as they were on disk
  (``start`` = base offset of the first removed batch, ``end`` = the old LEO, exclusive;
  ``epoch`` = the newest ``partitionLeaderEpoch`` among them);
* ``<same stem>.json``  topic, partition, broker id, offsets, record count, the epochs of
  the removed data, the new leader and its epoch, the replica's HW at the time (records
  below it were *committed*: only an unclean election removes those), the reason and the
  time. Written last: an entry exists only once its JSON file does.

Both files are fsynced, renamed into place and the directory fsynced *before* the caller
truncates, so a crash right after the truncation cannot lose the evidence. The ledger is
bounded by ``odradek.lost.records.retention.bytes`` (sum of ``.batches`` sizes in one log
dir): the oldest entries are dropped first, with a warning. Truncation is rare and
never on the produce/fetch hot path; a truncation that removes nothing writes nothing.

Sans-asyncio and sans-network; the CLI (``odradek lost-records``) reads it through
``list_entries`` / ``LedgerEntry.records`` and marks replays with ``mark_replayed``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.runtime import clock, disk
from odradek.storage.batch import BatchHeader, parse_batches
from odradek.storage.checkpoint import fsync_dir
from odradek.storage.log import Log
from odradek.storage.log_chunks import read_chunks
from odradek.storage.records import decode_batch_records

__all__ = [
    "LEDGER_DIR",
    "RETENTION_CONFIG",
    "DEFAULT_RETENTION_BYTES",
    "TruncationLedger",
    "LedgerEntry",
    "LostRecord",
    "ledger_root",
    "list_entries",
    "mark_replayed",
    "unique_records",
]

logger = logging.getLogger(__name__)

LEDGER_DIR = "lost-records"
RETENTION_CONFIG = "odradek.lost.records.retention.bytes"
DEFAULT_RETENTION_BYTES = 1 << 30  # 1 GiB per log dir; -1 unbounded, 0 disables the ledger
FORMAT_VERSION = 1
_CHUNK = 8 * 1024 * 1024


def ledger_root(log_dir: Path | str) -> Path:
    """``<log dir>/lost-records`` (not a ``topic-N`` name: log loading skips it)."""
    return Path(log_dir) / LEDGER_DIR


@dataclass(slots=True)
class LostRecord:
    """One decoded record of a ledger entry, with its batch's producer/epoch context."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    producer_id: int
    producer_epoch: int
    sequence: int  # the batch's base sequence + offset delta; -1 if not idempotent
    leader_epoch: int  # partitionLeaderEpoch of the batch (the epoch that wrote it)
    batch_key: tuple[str, int, int, int, int]  # (topic, partition, base offset, epoch, crc)


@dataclass
class LedgerEntry:
    """One truncation: the metadata file and its batches file."""

    path: Path  # the .json file
    topic: str
    partition: int
    broker_id: int
    start_offset: int
    end_offset: int  # exclusive: the LEO before the truncation
    truncated_to: int
    records: int
    batches: int
    size_bytes: int
    data_epochs: list[int]
    new_leader_id: int
    new_leader_epoch: int
    high_watermark: int
    below_high_watermark: bool
    reason: str
    time_ms: int
    replayed: dict[str, Any] | None = None
    replayed_offsets: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def batches_path(self) -> Path:
        return self.path.with_suffix(".batches")

    @property
    def epoch(self) -> int:
        """The newest leader epoch among the removed batches (the data's epoch)."""
        return max(self.data_epochs) if self.data_epochs else -1

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in _FIELDS}
        d.update(self.extra)
        d["version"] = FORMAT_VERSION
        return d

    @classmethod
    def from_json(cls, path: Path, d: dict[str, Any]) -> LedgerEntry:
        known = {k: d[k] for k in _FIELDS if k in d}
        extra = {k: v for k, v in d.items() if k not in _FIELDS and k != "version"}
        return cls(path=path, extra=extra, **known)

    def read_batches(self) -> bytes:
        return self.batches_path.read_bytes()

    def headers(self) -> list[BatchHeader]:
        return parse_batches(self.read_batches(), verify_crc=True)

    def iter_records(self) -> Iterator[LostRecord]:
        """Decoded data records (control batches -- transaction markers -- skipped)."""
        data = self.read_batches()
        for h in parse_batches(data, verify_crc=True):
            if h.is_control:
                continue
            key = (self.topic, self.partition, h.base_offset, h.partition_leader_epoch, h.crc)
            for r in decode_batch_records(memoryview(data)[h.position : h.position + h.size]):
                seq = h.base_sequence + (r.offset - h.base_offset) if h.base_sequence >= 0 else -1
                yield LostRecord(
                    self.topic,
                    self.partition,
                    r.offset,
                    r.timestamp,
                    r.key,
                    r.value,
                    list(r.headers),
                    h.producer_id,
                    h.producer_epoch,
                    seq,
                    h.partition_leader_epoch,
                    key,
                )


_FIELDS = (
    "topic",
    "partition",
    "broker_id",
    "start_offset",
    "end_offset",
    "truncated_to",
    "records",
    "batches",
    "size_bytes",
    "data_epochs",
    "new_leader_id",
    "new_leader_epoch",
    "high_watermark",
    "below_high_watermark",
    "reason",
    "time_ms",
    "replayed",
    "replayed_offsets",
)


class TruncationLedger:
    """One per log dir (owned by the replica manager); ``record`` before truncating."""

    def __init__(
        self, root: Path | str, broker_id: int, retention_bytes: int = DEFAULT_RETENTION_BYTES
    ) -> None:
        self.root = Path(root)
        self.broker_id = broker_id
        self.retention_bytes = retention_bytes

    @property
    def enabled(self) -> bool:
        return self.retention_bytes != 0

    def record(
        self,
        lg: Log,
        topic: str,
        partition: int,
        offset: int,
        *,
        reason: str,
        new_leader_id: int = -1,
        new_leader_epoch: int = -1,
        high_watermark: int = -1,
        now_ms: int | None = None,
    ) -> LedgerEntry | None:
        """Copy every batch ``lg.truncate_to(offset)`` is about to remove and make it
        durable. Returns the entry, or None when nothing would be removed."""
        if not self.enabled:
            return None
        offset = max(offset, lg.log_start_offset)
        leo = lg.log_end_offset
        if offset >= leo:
            return None
        now_ms = clock.wall_ms() if now_ms is None else now_ms
        pdir = self.root / f"{topic}-{partition}"
        created = not pdir.is_dir()
        pdir.mkdir(parents=True, exist_ok=True)
        tmp = pdir / f".pending-{os.getpid()}-{now_ms}.batches.tmp"
        headers: list[BatchHeader] = []
        size = 0
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            # Segment.truncate_to drops every batch whose last offset >= offset, and
            # Log.read starts at exactly that batch: the copy is what will be removed.
            for chunk in read_chunks(lg, offset, leo, chunk_bytes=_CHUNK):
                _write_all(fd, chunk.data)
                for h in chunk.headers:
                    h.position += size  # a position in the .batches file
                headers.extend(chunk.headers)
                size += len(chunk.data)
            disk.fsync(fd)
        finally:
            os.close(fd)
        if not headers:
            tmp.unlink(missing_ok=True)
            return None
        epochs = sorted({h.partition_leader_epoch for h in headers})
        start = headers[0].base_offset
        stem = f"{start:020d}-{leo:020d}-{epochs[-1]}-{now_ms}"
        n = 1
        while (pdir / f"{stem}.json").exists() or (pdir / f"{stem}.batches").exists():
            stem = f"{start:020d}-{leo:020d}-{epochs[-1]}-{now_ms}-{n}"
            n += 1
        below = 0 <= high_watermark and start < high_watermark
        if below:
            reason += f"; below the high watermark {high_watermark}: committed records removed"
        entry = LedgerEntry(
            path=pdir / f"{stem}.json",
            topic=topic,
            partition=partition,
            broker_id=self.broker_id,
            start_offset=start,
            end_offset=leo,
            truncated_to=offset,
            records=sum(h.records_count for h in headers),
            batches=len(headers),
            size_bytes=size,
            data_epochs=epochs,
            new_leader_id=new_leader_id,
            new_leader_epoch=new_leader_epoch,
            high_watermark=high_watermark,
            below_high_watermark=below,
            reason=reason,
            time_ms=now_ms,
        )
        os.replace(tmp, entry.batches_path)  # made durable by the json's directory fsync
        _write_json_durably(entry.path, entry.to_json())  # the commit point of the entry
        fsync_dir(pdir)
        if created:
            fsync_dir(self.root)
        logger.warning(
            "%s-%d: %d record(s) at offsets [%d, %d) of epoch(s) %s quarantined in %s "
            "before truncation (%s)",
            topic,
            partition,
            entry.records,
            start,
            leo,
            epochs,
            entry.path,
            reason,
        )
        self.enforce_retention(keep=entry.path)
        return entry

    def enforce_retention(self, keep: Path | None = None) -> list[Path]:
        """Drop the oldest entries until the batches fit ``retention.bytes``."""
        _remove_leftovers(self.root)
        if self.retention_bytes < 0:
            return []
        entries = list_entries(self.root)
        total = sum(e.size_bytes for e in entries)
        dropped: list[Path] = []
        for e in sorted(entries, key=lambda e: (e.time_ms, e.path.name)):
            if total <= self.retention_bytes:
                break
            if e.path == keep:
                continue
            logger.warning(
                "lost-records ledger over %s=%d: dropping the oldest entry %s "
                "(%d record(s) of %s-%d)",
                RETENTION_CONFIG,
                self.retention_bytes,
                e.path,
                e.records,
                e.topic,
                e.partition,
            )
            e.path.unlink(missing_ok=True)  # first: the entry no longer exists
            e.batches_path.unlink(missing_ok=True)
            total -= e.size_bytes
            dropped.append(e.path)
        return dropped


def list_entries(root: Path | str, topic: str | None = None) -> list[LedgerEntry]:
    """Every committed entry under ``root`` (a ``lost-records`` dir), oldest first.
    Batches files without their JSON (a crash mid-write) are not entries."""
    root = Path(root)
    out: list[LedgerEntry] = []
    if not root.is_dir():
        return out
    for pdir in sorted(root.iterdir()):
        if not pdir.is_dir():
            continue
        for meta in sorted(pdir.glob("*.json")):
            try:
                entry = LedgerEntry.from_json(meta, json.loads(meta.read_text()))
            except (OSError, ValueError, TypeError) as e:
                logger.warning("unreadable ledger entry %s: %s", meta, e)
                continue
            if topic is None or entry.topic == topic:
                out.append(entry)
    out.sort(key=lambda e: (e.time_ms, e.topic, e.partition, e.start_offset))
    return out


def mark_replayed(
    entry: LedgerEntry,
    *,
    offsets: Iterable[int] = (),
    complete: bool,
    info: dict[str, Any] | None = None,
) -> None:
    """Record (atomically) that ``offsets`` of the entry were re-produced; ``complete``
    marks the whole entry so later replays skip it."""
    done = sorted(set(entry.replayed_offsets) | set(offsets))
    if complete:
        entry.replayed = {"time_ms": time.time_ns() // 1_000_000, **(info or {})}
        entry.replayed_offsets = []
    else:
        entry.replayed_offsets = done
    _write_json_durably(entry.path, entry.to_json())


def unique_records(entries: Iterable[LedgerEntry]) -> Iterator[tuple[LostRecord, LedgerEntry]]:
    """Decoded records, each batch once: a batch a leader and a follower both truncated
    (same topic, partition, base offset, epoch and CRC) is the same data twice."""
    seen: set[tuple[str, int, int, int, int]] = set()
    for e in entries:
        current: tuple[str, int, int, int, int] | None = None
        for r in e.iter_records():
            if r.batch_key != current:
                if r.batch_key in seen:
                    continue
                current = r.batch_key
                seen.add(current)
            yield r, e


def _remove_leftovers(root: Path) -> None:
    """Pending copies and batches without their JSON are what a crash before the commit
    point leaves; the truncation had not happened then, so the data is still in the log."""
    if not root.is_dir():
        return
    for pdir in root.iterdir():
        if not pdir.is_dir():
            continue
        for f in pdir.iterdir():
            if f.name.startswith(".pending-") or (
                f.suffix == ".batches" and not f.with_suffix(".json").exists()
            ):
                f.unlink(missing_ok=True)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_json_durably(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, (json.dumps(obj, sort_keys=True) + "\n").encode())
        disk.fsync(fd)
    finally:
        os.close(fd)
    disk.replace_durably(tmp, path)
