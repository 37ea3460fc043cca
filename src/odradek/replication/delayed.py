"""The three delayed operations of the replica manager (Kafka's DelayedProduce,
DelayedFetch and DelayedDeleteRecords), each completed through the purgatory.

* ``DelayedProduce`` (REQ-R7, R8): an ``acks=all`` produce waits until the high
  watermark passes the last offset of each partition's batch, or answers
  REQUEST_TIMED_OUT at the request's timeout. If the ISR shrank below
  ``min.insync.replicas`` meanwhile the answer is NOT_ENOUGH_REPLICAS_AFTER_APPEND; if the
  replica stopped leading, NOT_LEADER_OR_FOLLOWER.
* ``DelayedFetch`` (REQ-R17): a fetch that found fewer than ``min_bytes`` waits up to
  ``max_wait``; an append (followers), a high-watermark move (consumers), a truncation or
  a role change on any of its partitions re-checks it, and it answers with a fresh read.
  With ``min_bytes <= 1`` (every follower and most consumers) the check is one integer
  comparison per partition; only a larger ``min_bytes`` reads to count bytes.
* ``DelayedDeleteRecords`` (REQ-R24): waits until the ISR's smallest log start offset
  reaches the requested offset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from odradek.errors import ErrorCode
from odradek.replication.purgatory import DelayedOperation

if TYPE_CHECKING:
    from odradek.protocol.produce_response import PartitionProduceResult
    from odradek.replication.fetch_session import FetchSession
    from odradek.replication.partition import Partition


class _PartitionWait(Protocol):
    def check(self) -> bool: ...

    def expire(self) -> None: ...


__all__ = [
    "DelayedDeleteRecords",
    "DelayedPartitions",
    "DelayedFetch",
    "DelayedProduce",
    "FetchWatch",
    "PendingDelete",
    "PendingProduce",
]


@dataclass(slots=True)
class PendingProduce:
    """One partition of a delayed produce: answered when ``done`` (Kafka's
    ProducePartitionStatus)."""

    partition: Partition
    last_offset: int
    result: PartitionProduceResult
    durable: bool = False  # acks=1 on an odradek.ack.fsync topic: wait for the fsync
    done: bool = False

    def check(self) -> bool:
        if self.done:
            return True
        code = self.partition.produce_completion(self.last_offset, self.durable)
        if code is None:
            return False
        self.done = True
        if code != ErrorCode.none:
            self.result.error_code = int(code)
            if code != ErrorCode.not_enough_replicas_after_append:
                self.result.base_offset = -1
        return True

    def expire(self) -> None:
        self.done = True
        self.result.error_code = int(ErrorCode.request_timed_out)
        self.result.base_offset = -1


class DelayedPartitions(DelayedOperation[bool]):
    """Completes when every partition's answer is known (``check``), or at the timeout,
    when the partitions still waiting take their timeout answer (``expire``). Each
    partition is checked even after one was found waiting, so its answer is fixed at
    the moment its own condition held."""

    __slots__ = ("pending",)

    def __init__(self, timeout_s: float, pending: Sequence[_PartitionWait]) -> None:
        super().__init__(timeout_s)
        self.pending = pending

    def try_complete(self) -> bool | None:
        finished = [p.check() for p in self.pending]
        return True if all(finished) else None

    def on_expiration(self) -> bool:
        for p in self.pending:
            if not p.check():
                p.expire()
        return True


class DelayedProduce(DelayedPartitions):
    pending: Sequence[PendingProduce]


@dataclass(slots=True)
class FetchWatch:
    """What a delayed fetch watches on one partition: the replica it read, the epoch
    and the offset it will resume from."""

    partition: Partition | None
    leader_epoch: int
    fetch_offset: int


class DelayedFetch(DelayedOperation[Any]):
    """``read()`` re-reads the partitions of the fetch and returns (result, bytes,
    errored). A follower's session fetch (``session``) has no per-partition watches: the
    session's change count says when a re-read (of its active partitions) is due."""

    __slots__ = ("watches", "committed_only", "min_bytes", "read", "session", "_marks")

    def __init__(
        self,
        timeout_s: float,
        watches: list[FetchWatch],
        committed_only: bool,
        min_bytes: int,
        read: Callable[[], tuple[Any, int, bool]],
        session: FetchSession | None = None,
    ) -> None:
        super().__init__(timeout_s)
        self.watches = watches
        self.committed_only = committed_only
        self.min_bytes = min_bytes
        self.read = read
        self.session = session
        self._marks = session.marks if session is not None else 0

    def try_complete(self) -> Any:
        session = self.session
        if session is not None:
            if session.marks == self._marks:
                return None
            self._marks = session.marks
            result, total, errored = self.read()
            return result if total >= max(self.min_bytes, 1) or errored else None
        changed = False
        for w in self.watches:
            p = w.partition
            if p is None:
                continue
            if not p.is_leader or p.leader_epoch != w.leader_epoch:
                return self.read()[0]  # the read reports the partition's new error
            end = p.readable_end(self.committed_only)
            if end != w.fetch_offset:
                changed = True  # new data, or a truncation below the fetch offset
                if self.min_bytes <= 1:
                    return self.read()[0]
        if not changed:
            return None
        result, total, errored = self.read()
        if total >= self.min_bytes or errored:
            return result
        return None

    def on_expiration(self) -> Any:
        return self.read()[0]


@dataclass(slots=True)
class PendingDelete:
    """One partition of a DeleteRecords request (Kafka's DeleteRecordsPartitionStatus)."""

    index: int
    partition: Partition | None
    target: int
    error: ErrorCode = ErrorCode.none
    low_watermark: int = -1

    def check(self) -> bool:
        """Done: an error, or the low watermark reached the target (sets the answer)."""
        if self.error != ErrorCode.none or self.partition is None:
            return True
        p = self.partition
        if not p.is_leader:
            self.error = ErrorCode.not_leader_or_follower
            return True
        low = p.low_watermark()
        if low >= self.target:
            self.low_watermark = low
            return True
        return False

    def expire(self) -> None:
        self.error = ErrorCode.request_timed_out
        self.low_watermark = -1


class DelayedDeleteRecords(DelayedPartitions):
    pending: Sequence[PendingDelete]
