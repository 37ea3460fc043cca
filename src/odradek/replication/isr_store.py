"""The ISR store of a broker: conditional writes of the partition state znode (SPEC R6,
R13), the only ZooKeeper write a leader makes on its own.

``ZkIsrStore.write_isr`` writes ``/brokers/topics/T/partitions/P/state`` with the
leader's epoch and the new ISR, conditional on the znode version the leader last saw,
together with a ``leader_and_isr`` notification in one ZooKeeper transaction
(``KafkaZkClient.update_isr``): brokers learn partition states from those notifications,
never by watching the state znodes, so an ISR change without one would stay invisible to
the other brokers (SPEC R13). It runs in a worker thread (the replica manager's
``asyncio.to_thread``):

* success → the new version;
* the version moved (the controller wrote meanwhile) → ``IsrConflict`` with the znode as
  it is now, so the partition can tell "the controller changed the ISR at my epoch"
  (adopt it) from "someone else leads now" (fence);
* ZooKeeper unreachable, the znode gone, or no answer within ``timeout_s`` →
  ``IsrStoreUnavailable``. SPEC scenarios 4 and 6: a leader that cannot reach ZooKeeper
  cannot record an ISR change, so it must stop accepting writes now; queueing the write
  until kazoo reconnects would let it keep acknowledging records that a newly elected
  leader does not have.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NoNodeError

from odradek.replication.partition_state import (
    IsrConflict, IsrStoreUnavailable, IsrWrite, LeaderAndIsr,
)
from odradek.zk import znodes
from odradek.zk.kafka_zk_client import KafkaZkClient, StateWrite

logger = logging.getLogger(__name__)

__all__ = ["ZkIsrStore"]

ZK_WRITE_TIMEOUT_S = 2.0  # an ISR write that cannot reach ZooKeeper fails after this


class ZkIsrStore:
    def __init__(self, zkc: Callable[[], KafkaZkClient | None],
                 topic_id: Callable[[str], uuid.UUID | None], writer: int,
                 timeout_s: float = ZK_WRITE_TIMEOUT_S) -> None:
        self._zkc = zkc  # over the broker's current session (None before it connected)
        self._topic_id = topic_id  # carried in the notification (a recreated topic's check)
        self.writer = writer  # this broker's id, recorded in the notification
        self.timeout_s = timeout_s

    def write_isr(self, write: IsrWrite) -> int:
        zkc = self._zkc()
        if zkc is None or not zkc.zk.connected:
            raise IsrStoreUnavailable("not connected to ZooKeeper")
        zk = zkc.zk
        path = znodes.partition_state_path(write.topic, write.partition)
        state = znodes.PartitionState(
            leader=write.leader, leader_epoch=write.leader_epoch, isr=list(write.isr),
            controller_epoch=write.controller_epoch)
        try:
            return zkc.update_isr(StateWrite(write.topic, write.partition,
                                             self._topic_id(write.topic), state,
                                             write.zk_version),
                                  self.writer, timeout_s=self.timeout_s)
        except BadVersionError:
            try:
                raw, stat = zk.get_async(path).get(timeout=self.timeout_s)
            except Exception as e:  # noqa: BLE001 - NoNode or unreachable
                raise IsrStoreUnavailable(repr(e)) from None
            cur = znodes.decode_partition_state(raw)
            raise IsrConflict(LeaderAndIsr(
                leader=cur.leader, leader_epoch=cur.leader_epoch, isr=tuple(cur.isr),
                replicas=(), zk_version=stat.version,
                controller_epoch=cur.controller_epoch)) from None
        except NoNodeError:
            raise IsrStoreUnavailable(f"{path} does not exist") from None
        except Exception as e:  # noqa: BLE001 - kazoo errors and timeouts alike
            logger.warning("%s-%d: ISR write failed: %r", write.topic, write.partition, e)
            raise IsrStoreUnavailable(repr(e)) from None
