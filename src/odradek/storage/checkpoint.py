"""Kafka's text checkpoint files (recovery points, high watermarks, log start offsets).

Format (Kafka's ``CheckpointFile``)::

    0                 <- version
    2                 <- number of entries
    orders 0 1234     <- "topic partition offset"
    orders 1 99

Writes are atomic: write a ``.tmp`` sibling, fsync it, rename over the target, fsync the
directory — so a crash leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from odradek.errors import ErrorCode, KafkaError
from odradek.runtime import disk

__all__ = ["read_checkpoint", "write_checkpoint", "CHECKPOINT_VERSION"]

CHECKPOINT_VERSION = 0


def read_checkpoint(path: Path | str) -> dict[tuple[str, int], int]:
    """Parse a checkpoint file; a missing file is an empty checkpoint."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    lines = text.splitlines()
    try:
        if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION:
            raise ValueError(f"unsupported version line {lines[:1]}")
        count = int(lines[1])
        entries = [ln for ln in lines[2:] if ln.strip()]
        if len(entries) != count:
            raise ValueError(f"expected {count} entries, found {len(entries)}")
        out: dict[tuple[str, int], int] = {}
        for ln in entries:
            topic, partition, offset = ln.split()
            out[(topic, int(partition))] = int(offset)
        return out
    except ValueError as e:
        raise KafkaError(ErrorCode.kafka_storage_error, f"malformed checkpoint {p}: {e}") from e


# The broker writes checkpoints from a worker thread (periodic) and from the loop
# (shutdown): one writer at a time, or two could interleave on the same .tmp file.
_WRITE_LOCK = threading.Lock()


def write_checkpoint(path: Path | str, entries: dict[tuple[str, int], int]) -> None:
    with _WRITE_LOCK:
        _write_checkpoint(Path(path), entries)


def _write_checkpoint(p: Path, entries: dict[tuple[str, int], int]) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{t} {part} {off}" for (t, part), off in sorted(entries.items())]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    tmp = p.with_name(p.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        disk.fsync(fd)
    finally:
        os.close(fd)
    disk.replace_durably(tmp, p)


def fsync_dir(directory: Path) -> None:
    """Make renames/creations/deletions in ``directory`` durable."""
    disk.fsync_directory(directory)
