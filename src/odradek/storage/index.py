"""Sparse offset and time indexes, kept in memory and persisted like Kafka's (REQ-R23).

* ``.index``: 8-byte entries ``(relative offset i32, position i32)``. The offset is the
  *last* offset of the batch starting at ``position`` (Kafka 3.x ``LogSegment.append``
  indexes per batch with ``batch.lastOffset()``).
* ``.timeindex``: 12-byte entries ``(timestamp i64, relative offset i32)``; the timestamp
  is the segment's max timestamp so far, so entries are non-decreasing.

Entries live in ``array('q')`` (absolute values) for O(log n) ``bisect``; the files are
plain append-only files. New entries are buffered and written by ``write_pending``
(called on flush, roll and close): index files past the recovery point are never
trusted after a crash anyway — recovery rebuilds them — so writing them eagerly would
only cost syscalls on the produce path (REQ-R18, R27).
"""

from __future__ import annotations

import os
import struct
from array import array
from pathlib import Path

from odradek.runtime import disk

__all__ = ["OffsetIndex", "TimeIndex"]

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _Index:
    _entry: struct.Struct = _OFFSET_ENTRY

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.keys: array[int] = array("q")  # offsets (offset index) / timestamps (time index)
        self.values: array[int] = array("q")  # positions / offsets
        self._persisted = 0  # entries already in the file
        self._rewrite = False  # file must be rewritten from scratch (after truncation)
        # Rewritten (tmp + rename) since the directory was last fsynced: the log's next
        # flush fsyncs the directory (``Log.begin_flush``) and clears it.
        self.renamed = False

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def size_bytes(self) -> int:
        return len(self.keys) * self._entry.size

    def clear(self) -> None:
        self.keys = array("q")
        self.values = array("q")
        self._persisted = 0
        self._rewrite = True

    def _pack(self, i: int) -> bytes:
        raise NotImplementedError

    def _unpack(self, a: int, b: int) -> tuple[int, int]:
        raise NotImplementedError

    def truncate_entries(self, n: int) -> None:
        """Keep only the first ``n`` entries."""
        if n >= len(self.keys):
            return
        del self.keys[n:]
        del self.values[n:]
        if n < self._persisted:
            self._rewrite = True
            self._persisted = 0

    def load(self) -> bool:
        """Read the file; False if missing or malformed (caller rebuilds)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        esize = self._entry.size
        if len(data) % esize:
            return False
        keys: array[int] = array("q")
        values: array[int] = array("q")
        for a, b in self._entry.iter_unpack(data):
            k, v = self._unpack(a, b)
            keys.append(k)
            values.append(v)
        self.keys, self.values = keys, values
        self._persisted = len(keys)
        self._rewrite = False
        return True

    def write_pending(self, fsync: bool = False) -> None:
        """Persist buffered entries (whole rewrite after a truncation)."""
        if self._rewrite:
            tmp = self.path.with_name(self.path.name + ".tmp")
            data = b"".join(self._pack(i) for i in range(len(self.keys)))
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, data)
                if fsync:
                    disk.fsync(fd)
            finally:
                os.close(fd)
            if fsync:
                disk.replace_durably(tmp, self.path)
            else:
                # Durable with the segment's next flush: it fsyncs this file and, seeing
                # ``renamed``, the directory (Kafka truncates its index in place and makes
                # it durable at the next flush alike) -- no fsync on the event loop here.
                os.replace(tmp, self.path)
                self.renamed = True
            self._persisted = len(self.keys)
            self._rewrite = False
            return
        if self._persisted == len(self.keys) and not fsync:
            return
        data = b"".join(self._pack(i) for i in range(self._persisted, len(self.keys)))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if data:
                _write_all(fd, data)
            if fsync:
                disk.fsync(fd)
        finally:
            os.close(fd)
        self._persisted = len(self.keys)

    def delete_file(self) -> None:
        for p in (self.path, self.path.with_name(self.path.name + ".tmp")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass


class OffsetIndex(_Index):
    """keys: absolute last offset of the indexed batch; values: its file position."""

    _entry = _OFFSET_ENTRY

    def append(self, last_offset: int, position: int) -> None:
        self.keys.append(last_offset)
        self.values.append(position)

    def _pack(self, i: int) -> bytes:
        return _OFFSET_ENTRY.pack(self.keys[i] - self.base_offset, self.values[i])

    def _unpack(self, a: int, b: int) -> tuple[int, int]:
        return a + self.base_offset, b

    def sane(self, log_size: int) -> bool:
        """Kafka's ``sanityCheck``: increasing offsets and positions inside the file."""
        prev_o, prev_p = self.base_offset - 1, -1
        for o, p in zip(self.keys, self.values):
            if o <= prev_o or p <= prev_p or p >= log_size:
                return False
            prev_o, prev_p = o, p
        return True


class TimeIndex(_Index):
    """keys: max timestamp so far; values: absolute offset where it was seen."""

    _entry = _TIME_ENTRY

    def maybe_append(self, timestamp: int, offset: int) -> None:
        # Only a strictly larger timestamp earns an entry (Kafka's TimeIndex.maybeAppend).
        if self.keys and timestamp <= self.keys[-1]:
            return
        self.keys.append(timestamp)
        self.values.append(offset)

    def _pack(self, i: int) -> bytes:
        return _TIME_ENTRY.pack(self.keys[i], self.values[i] - self.base_offset)

    def _unpack(self, a: int, b: int) -> tuple[int, int]:
        return a, b + self.base_offset

    def sane(self, next_offset: int) -> bool:
        prev_t, prev_o = None, self.base_offset - 1
        for t, o in zip(self.keys, self.values):
            if (prev_t is not None and t <= prev_t) or o < prev_o or o >= next_offset:
                return False
            prev_t, prev_o = t, o
        return True


def _write_all(fd: int, data: bytes | bytearray | memoryview, position: int | None = None) -> None:
    mv = memoryview(data)
    while mv:
        n = os.write(fd, mv) if position is None else os.pwrite(fd, mv, position)
        if position is not None:
            position += n
        mv = mv[n:]
