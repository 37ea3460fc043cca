"""Deleted replicas' log directories, removed later and off the event loop: Kafka's
``LogManager.asyncDelete`` / ``deleteLogs`` with ``UnifiedLog.DeleteDirSuffix``.

A replica whose topic is deleted (or that is reassigned away) loses its log at once:
its directory is renamed to ``<topic>-<partition>.<uniqueId>-delete`` (one rename on the
loop: the partition's name is free for a replica moved back, and start-up no longer
loads it), while the segments' file descriptors stay open for file.delete.delay.ms (a
fetch answered just before the delete may still read its ``FileSlice``s). When due, the
descriptors are closed and the directory is removed by ``release``'s blocking half, which
the broker runs in a worker thread: an ``rmtree`` costs 5-6 ms per replica, seconds for a
1,000-partition topic, which on the loop stalled every client of the broker.

The parent directory's fsync that makes the renames durable is in that blocking half too
(one per batch of renames, the next retention tick, <= 1 s later). A power cut before it
may bring the old name back: the replica then loads as a stray log, as if the delete had
not happened, and is deleted again when the metadata says so.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from odradek.runtime import clock, disk

__all__ = ["DELETE_DIR_SUFFIX", "DeletedLogs", "delete_dir_name", "is_delete_dir"]

logger = logging.getLogger(__name__)

DELETE_DIR_SUFFIX = "-delete"  # Kafka's UnifiedLog.DeleteDirSuffix
_MAX_NAME = 255  # a file name's limit (Kafka's logDirNameWithSuffixCappedLength)
_MASK = (1 << 64) - 1


def delete_dir_name(dir_name: str, seq: int) -> str:
    """``t-0`` → ``t-0.<32 hex digits>-delete``; the topic part is cut so the name fits in
    255 characters, as Kafka's ``LocalLog.logDeleteDirName`` does. Kafka's unique id is a
    random UUID; here it is the wall clock and ``seq`` (two deletes in one clock tick):
    the simulator's clock is virtual, so its runs replay with the same names."""
    unique = f"{clock.time_ns() & _MASK:016x}{seq & _MASK:016x}"
    topic, _, partition = dir_name.rpartition("-")
    tail = f"-{partition}.{unique}{DELETE_DIR_SUFFIX}"
    return topic[: _MAX_NAME - len(tail)] + tail


def is_delete_dir(name: str) -> bool:
    return name.endswith(DELETE_DIR_SUFFIX)


class DeletedLogs:
    """Renamed directories and kept descriptors of deleted logs, until they are due."""

    __slots__ = ("_due", "_parents_to_sync", "_seq")

    def __init__(self) -> None:
        self._seq = itertools.count()
        self._due: list[tuple[int, Path | None, list[int]]] = []  # (due ms, dir, fds)
        self._parents_to_sync: set[Path] = set()  # renamed in since the last release

    def __len__(self) -> int:
        return len(self._due)

    def schedule(
        self, directory: Path, fds: list[int], delay_ms: int, now_ms: int | None = None
    ) -> Path | None:
        """Rename ``directory`` to its ``-delete`` name now; close ``fds`` and remove it
        after ``delay_ms`` (a negative one counts as 0). Returns the new path (None: there
        was no directory)."""
        target = directory.with_name(delete_dir_name(directory.name, next(self._seq)))
        renamed: Path | None = target
        try:
            os.rename(directory, target)
            self._parents_to_sync.add(directory.parent)
        except FileNotFoundError:
            renamed = None
        now = clock.wall_ms() if now_ms is None else now_ms
        self._due.append((now + max(delay_ms, 0), renamed, fds))
        return renamed

    def leftover(self, directory: Path) -> None:
        """A ``-delete`` directory found at start-up: due at once (no descriptors)."""
        self._due.append((0, directory, []))

    def release(
        self, now_ms: int | None = None, *, force: bool = False
    ) -> Callable[[], int] | None:
        """Close the descriptors of the logs whose delay has passed (all with ``force``)
        now, and return the blocking rest -- fsync the parents of renames since the last
        call, remove the due directories; it returns how many -- to run in a worker thread
        (None: nothing to do)."""
        now = clock.wall_ms() if now_ms is None else now_ms
        due = [(d, fds) for t, d, fds in self._due if force or t <= now]
        if due:
            self._due = [e for e in self._due if not (force or e[0] <= now)]
        parents, self._parents_to_sync = self._parents_to_sync, set()
        if not due and not parents:
            return None
        for _, fds in due:
            for fd in fds:
                os.close(fd)
        dirs = [d for d, _ in due if d is not None]

        def blocking() -> int:
            for parent in parents:
                try:
                    disk.fsync_directory(parent)
                except OSError:
                    logger.exception("could not fsync %s after renaming deleted logs", parent)
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
            return len(due)

        return blocking

    def sync_and_close_all(self) -> None:
        """At shutdown: close every kept descriptor and make the renames durable; the
        directories are left for the next start-up (``leftover``)."""
        for _, _, fds in self._due:
            for fd in fds:
                os.close(fd)
        self._due = [(t, d, []) for t, d, _ in self._due]
        parents, self._parents_to_sync = self._parents_to_sync, set()
        for parent in parents:
            disk.fsync_directory(parent)
