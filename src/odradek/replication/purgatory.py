"""One delayed-operation purgatory for Produce, Fetch and DeleteRecords (Kafka's
``DelayedOperation.scala`` / ``DelayedOperationPurgatory``), on the asyncio loop.

A request that cannot be answered yet (acks=all waiting for the high watermark, a fetch
waiting for ``min_bytes``, DeleteRecords waiting for the followers' log start offsets)
becomes a ``DelayedOperation`` watched under the partitions it depends on. The events
that can satisfy it -- an append, a high-watermark move, a follower's log start moving, a
role or epoch change, a truncation -- call ``check_and_complete(tp)``, which re-checks
only the operations watching that partition. An operation completes exactly once: when
its condition holds (``try_complete``) or when its timeout fires (``on_expiration``),
whichever comes first; the request's coroutine awaits ``op.done``.

Why no wake-up can be lost: everything runs on the event loop, and
``try_complete_else_watch`` checks the condition and registers the watchers in the same
synchronous step, so no event can slip between the check and the registration (Kafka
needs a second check after watching because its purgatory is multi-threaded).

Completed operations are dropped from their watcher lists eagerly (each list is a dict
keyed by operation id), so a partition that is never touched again holds no garbage.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Hashable, Iterable
from typing import Any, Generic, TypeVar

logger = logging.getLogger(__name__)

__all__ = ["DelayedOperation", "DelayedOperationPurgatory"]

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")

_ids = itertools.count()


class DelayedOperation(Generic[R]):
    """Subclasses implement ``try_complete`` (return the result when the operation can
    complete now, else ``None``) and ``on_expiration`` (the result at the deadline)."""

    __slots__ = ("op_id", "timeout_s", "done", "_timer", "_keys")

    def __init__(self, timeout_s: float) -> None:
        self.op_id = next(_ids)
        self.timeout_s = timeout_s
        self.done: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._timer: asyncio.TimerHandle | None = None
        self._keys: tuple[Any, ...] = ()

    @property
    def completed(self) -> bool:
        return self.done.done()

    def try_complete(self) -> R | None:
        raise NotImplementedError

    def on_expiration(self) -> R:
        raise NotImplementedError

    def force_complete(self, result: R) -> bool:
        """Complete with ``result`` unless already completed; True if this call did it."""
        if self.done.done():
            return False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.done.set_result(result)
        return True

    def _expire(self) -> None:
        self._timer = None
        if self.done.done():
            return
        try:
            result = self.on_expiration()
        except Exception as e:  # noqa: BLE001 - the request gets the error, not the loop
            self.done.set_exception(e)
            return
        self.done.set_result(result)


class DelayedOperationPurgatory(Generic[K]):
    """Watches delayed operations by key (a TopicPartition) for one kind of operation."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[K, dict[int, DelayedOperation[Any]]] = {}

    def __len__(self) -> int:
        """Operations still watched (a completed one is counted until its keys are
        checked or it is cancelled -- the figure is for tests and metrics)."""
        return len(
            {op.op_id for ops in self._watchers.values() for op in ops.values() if not op.completed}
        )

    def try_complete_else_watch(self, op: DelayedOperation[R], keys: Iterable[K]) -> bool:
        """Complete ``op`` now if it can; otherwise watch it under ``keys`` until an event
        on one of them completes it or its timeout expires. Returns True if completed."""
        try:
            result = op.try_complete()
        except Exception as e:  # noqa: BLE001
            op.done.set_exception(e)
            return True
        if result is not None:
            op.force_complete(result)
            return True
        keys = tuple(keys)
        op._keys = keys
        for key in keys:
            self._watchers.setdefault(key, {})[op.op_id] = op
        op._timer = asyncio.get_running_loop().call_later(max(op.timeout_s, 0.0), self._expire, op)
        op.done.add_done_callback(lambda _f, op=op: self._unwatch(op))  # type: ignore[misc]
        return False

    def check_and_complete(self, key: K) -> int:
        """An event on ``key``: re-check the operations watching it. Returns how many
        completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops.values()):
            if op.completed:
                continue
            try:
                result = op.try_complete()
            except Exception as e:  # noqa: BLE001
                if not op.done.done():
                    op.done.set_exception(e)
                completed += 1
                continue
            if result is not None and op.force_complete(result):
                completed += 1
        return completed

    def check_and_complete_all(self) -> int:
        """Re-check every watched operation (shutdown, or a change that touches all)."""
        return sum(self.check_and_complete(k) for k in list(self._watchers))

    def watched_keys(self) -> list[K]:
        return list(self._watchers)

    def _expire(self, op: DelayedOperation[Any]) -> None:
        op._expire()

    def _unwatch(self, op: DelayedOperation[Any]) -> None:
        for key in op._keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.pop(op.op_id, None)
                if not ops:
                    del self._watchers[key]
        if op._timer is not None:
            op._timer.cancel()
            op._timer = None
