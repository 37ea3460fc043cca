"""Segments a log removed but whose files wait for ``file.delete.delay.ms``: owned by the
``Log`` (Kafka's ``LocalLog.deleteSegmentFiles`` schedules the same asynchronous delete).

Retention and the log cleaner both remove segments a reader may still hold a
``FileSlice`` of (queued on a connection). Such a segment's files are renamed to
``<name>.deleted`` at once -- the base-offset name is free again, and a crash leaves only
``.deleted`` files, which ``Log.open`` discards -- while its fd stays open; ``run``
closes it and unlinks the files once the delay has passed (REQ-R24).
"""

from __future__ import annotations

from odradek.runtime import clock
from odradek.storage.segment import Segment

__all__ = ["PendingDeletions"]


class PendingDeletions:
    __slots__ = ("_due",)

    def __init__(self) -> None:
        self._due: list[tuple[int, Segment]] = []  # (due_ms, segment), in schedule order

    def __len__(self) -> int:
        return len(self._due)

    def schedule(self, segment: Segment, delay_ms: int, now_ms: int | None = None) -> None:
        """Rename ``segment``'s files to ``.deleted`` now; delete them after ``delay_ms``
        (a negative delay counts as 0). ``now_ms`` None: the wall clock."""
        segment.rename_to_deleted()
        now = clock.wall_ms() if now_ms is None else now_ms
        self._due.append((now + max(delay_ms, 0), segment))

    def run(
        self, now_ms: int | None = None, *, force: bool = False, keep_fds: list[int] | None = None
    ) -> int:
        """Close and unlink the segments whose delay has passed (all of them with
        ``force``); returns how many. ``keep_fds``: their descriptors are appended to it
        instead of closed (``Segment.close``)."""
        if not self._due:
            return 0
        now = clock.wall_ms() if now_ms is None else now_ms
        due = [s for t, s in self._due if force or t <= now]
        if not due:
            return 0
        self._due = [(t, s) for t, s in self._due if not (force or t <= now)]
        for seg in due:
            seg.delete(keep_fd=keep_fds)
        return len(due)
