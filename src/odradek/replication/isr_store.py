"""The ISR store of a broker: conditional writes of the partition state znode (REQ-R6,
R13), the only ZooKeeper write a leader makes on its own.

``ZkIsrStore.write_isrs`` writes a batch of ``/brokers/topics/T/partitions/P/state``
znodes (a leader's pending ISR changes, ``odradek.replication.alter_partition``), each
with the leader's epoch and the new ISR, conditional on the znode version the leader last
saw, together with a ``leader_and_isr`` notification in the same ZooKeeper transaction
(``KafkaZkClient.update_partition_states``: chunked multi transactions, so N partitions
cost O(N / chunk) requests, not N): brokers learn partition states from those notifications,
never by watching the state znodes, so an ISR change without one would stay invisible to
the other brokers (REQ-R13). It runs in a worker thread (the replica manager's
``asyncio.to_thread``). Each partition has its own outcome -- one partition's conflict
does not fail the others (``KafkaZkClient`` resends the rest of a rolled-back chunk):

* success → the new version;
* the version moved (the controller wrote meanwhile) → ``IsrConflict`` with the znode as
  it is now, so the partition can tell "the controller changed the ISR at my epoch"
  (adopt it) from "someone else leads now" (fence);
* ZooKeeper unreachable, the znode gone, or no answer within ``timeout_s`` →
  ``IsrStoreUnavailable``. REQ-P4 and REQ-P6: a leader that cannot reach ZooKeeper
  cannot record an ISR change, so it must stop accepting writes now; queueing the write
  until kazoo reconnects would let it keep acknowledging records that a newly elected
  leader does not have.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence

from odradek.replication.partition_state import (
    IsrConflict,
    IsrOutcome,
    IsrStoreUnavailable,
    IsrWrite,
    LeaderAndIsr,
)
from odradek.zk import znodes
from odradek.zk.kafka_zk_client import KafkaZkClient, StateWrite

logger = logging.getLogger(__name__)

__all__ = ["ZkIsrStore"]

TopicPartition = tuple[str, int]

ZK_WRITE_TIMEOUT_S = 2.0  # an ISR write that cannot reach ZooKeeper fails after this


class ZkIsrStore:
    def __init__(
        self,
        zkc: Callable[[], KafkaZkClient | None],
        topic_id: Callable[[str], uuid.UUID | None],
        writer: int,
        timeout_s: float = ZK_WRITE_TIMEOUT_S,
    ) -> None:
        self._zkc = zkc  # over the broker's current session (None before it connected)
        self._topic_id = topic_id  # carried in the notification (a recreated topic's check)
        self.writer = writer  # this broker's id, recorded in the notification
        self.timeout_s = timeout_s

    def write_isr(self, write: IsrWrite) -> int:
        """One write: the new version, or raises ``IsrConflict`` / ``IsrStoreUnavailable``."""
        got = self.write_isrs([write])[(write.topic, write.partition)]
        if isinstance(got, Exception):
            raise got
        return got

    def write_isrs(self, writes: Sequence[IsrWrite]) -> dict[TopicPartition, IsrOutcome]:
        """A batch of ISR writes in chunked multi transactions, each conditional on its
        own znode version; outcomes per partition (see the module docstring)."""
        if not writes:
            return {}
        zkc = self._zkc()
        if zkc is None or not zkc.zk.connected:
            return _all(writes, IsrStoreUnavailable("not connected to ZooKeeper"))
        batch = [
            StateWrite(
                w.topic,
                w.partition,
                self._topic_id(w.topic),
                znodes.PartitionState(
                    leader=w.leader,
                    leader_epoch=w.leader_epoch,
                    isr=list(w.isr),
                    controller_epoch=w.controller_epoch,
                ),
                w.zk_version,
            )
            for w in writes
        ]
        try:
            result = zkc.update_partition_states(
                batch, fence=None, writer=self.writer, timeout_s=self.timeout_s
            )
        except Exception as e:  # noqa: BLE001 - kazoo errors and timeouts alike
            # Chunks already committed before the failure are reported unavailable too:
            # the leader fences itself and its re-assertion finds the znode as it is.
            logger.warning("ISR write of %d partitions failed: %r", len(writes), e)
            return _all(writes, IsrStoreUnavailable(repr(e)))
        out: dict[TopicPartition, IsrOutcome] = dict(result.versions)
        for tp in result.missing:
            out[tp] = IsrStoreUnavailable(f"{znodes.partition_state_path(*tp)} does not exist")
        if result.conflicts:
            # The version moved: read the znodes as they are now (one multiRead), so each
            # leader can tell "the controller changed my ISR" from "someone else leads".
            try:
                current = zkc.get_partition_states(
                    sorted(result.conflicts), timeout_s=self.timeout_s
                )
            except Exception as e:  # noqa: BLE001 - unreachable meanwhile
                current = {}
                logger.warning(
                    "reading %d conflicting state znodes failed: %r", len(result.conflicts), e
                )
            for tp in result.conflicts:
                got = current.get(tp)
                if got is None:
                    out[tp] = IsrStoreUnavailable(
                        f"{znodes.partition_state_path(*tp)} could not be read"
                    )
                    continue
                cur, version = got
                out[tp] = IsrConflict(
                    LeaderAndIsr(
                        leader=cur.leader,
                        leader_epoch=cur.leader_epoch,
                        isr=tuple(cur.isr),
                        replicas=(),
                        zk_version=version,
                        controller_epoch=cur.controller_epoch,
                    )
                )
        return out


def _all(writes: Sequence[IsrWrite], e: IsrStoreUnavailable) -> dict[TopicPartition, IsrOutcome]:
    return {(w.topic, w.partition): e for w in writes}
