"""The aborted-transaction index of one segment: Kafka's ``.txnindex`` (KIP-98).

Every ABORT marker appended to a partition closes a transaction; its entry -- producer
id, first offset, last offset (the marker's) and the last stable offset after it
completed -- goes to the index of the segment holding the marker. A read_committed fetch
from offset ``start`` with upper bound ``end`` reads the indexes of the segment holding
``start`` and of every later one, and returns the entries whose transaction overlaps
``[start, end)`` so the consumer can drop the aborted batches (Kafka's
``collectAbortedTransactions``). It stops at the first entry whose last stable offset is
at or past ``end``: every transaction open then started at or past it.

Keeping the entries with their segment, not in one list per partition, means that
retention deletes them with the segment, truncation cuts them with the log, the cleaner
writes the survivors into the cleaned segment, and a fetch reads only the segments it
covers. The producer-state snapshot no longer carries them.

File format, as Kafka's: 34-byte entries ``version i16 (0), producer id i64, first
offset i64, last offset i64, last stable offset i64``, in last-offset order. The file
exists only once a segment has an entry and is read on first use (aborts are rare; most
segments never have one). Writes go to the page cache at once, so a process crash keeps
them; ``Log.begin_flush`` has them fsynced with the segment's data, so the entries of
every marker below the recovery point are durable.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from odradek.runtime import disk
from odradek.storage.index import _write_all

__all__ = ["AbortedTxn", "TransactionIndex", "TXN_INDEX_SUFFIX", "write_txn_index"]

logger = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """Kafka's AbortedTxn (one .txnindex entry)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return _ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def _parse(data: bytes, path: Path) -> list[AbortedTxn]:
    """The valid prefix of a file's entries. A torn last entry (a crash mid-write) or an
    entry that breaks the format's rules ends the list; the caller cuts the file there."""
    out: list[AbortedTxn] = []
    last = -1
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last_offset, lso = _ENTRY.unpack_from(data, pos)
        if version != _VERSION or first > last_offset or last_offset <= last or pid < 0:
            logger.warning("%s: invalid entry at byte %d; the index ends there", path, pos)
            break
        out.append(AbortedTxn(pid, first, last_offset, lso))
        last = last_offset
    return out


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # read on first use
        self.unsynced = False  # written since the flush that last captured it

    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            self._entries = _parse(data, self.path)
            keep = len(self._entries) * ENTRY_SIZE
            if keep < len(data):
                os.truncate(self.path, keep)
                self.unsynced = True
        return self._entries

    def append(self, entry: AbortedTxn) -> bool:
        """Add ``entry`` unless the index already has it: entries arrive in marker order,
        so one at or below the last is a replay of the log after a restart (the
        producer state is rebuilt from a snapshot older than the index). Returns True
        if the file was created (its directory entry then needs an fsync)."""
        entries = self.entries()
        if entries and entry.last_offset <= entries[-1].last_offset:
            return False
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            _write_all(fd, entry.pack())
        finally:
            os.close(fd)
        entries.append(entry)
        self.unsynced = True
        return created

    def collect(self, start: int, end: int, out: list[AbortedTxn]) -> bool:
        """Append to ``out`` the entries overlapping ``[start, end)``; True once the
        search is complete (an entry's last stable offset reached ``end``)."""
        for a in self.entries():
            if a.last_offset >= start and a.first_offset < end:
                out.append(a)
            if a.last_stable_offset >= end:
                return True
        return False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset`` (log truncation)."""
        entries = self.entries()
        n = len(entries)
        while n and entries[n - 1].last_offset >= offset:
            n -= 1
        if n < len(entries):
            del entries[n:]
            try:
                os.truncate(self.path, n * ENTRY_SIZE)
            except FileNotFoundError:
                pass
            self.unsynced = True

    def rename(self, path: Path) -> None:
        """Follow the segment's rename (``.deleted``); there may be no file."""
        try:
            os.replace(self.path, path)
        except FileNotFoundError:
            pass
        self.path = path

    def delete(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def write_txn_index(path: Path, entries: list[AbortedTxn]) -> None:
    """Write a whole index (the cleaner's output segment), fsynced; none if empty."""
    if not entries:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, b"".join(a.pack() for a in entries), 0)
        disk.fsync(fd)
    finally:
        os.close(fd)
