"""The ISR store of a broker: conditional writes of the partition state znode (REQ-R6,
R13), the only ZooKeeper write a leader makes on its own.

``ZkIsrStore.write_isr`` writes ``/brokers/topics/T/partitions/P/state`` with the
leader's epoch and the new ISR, conditional on the znode version the leader last saw. It
runs in a worker thread (the replica manager's ``asyncio.to_thread``):

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
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from odradek.replication.partition_state import (
    IsrConflict,
    IsrStoreUnavailable,
    IsrWrite,
    LeaderAndIsr,
)
from odradek.zk import znodes

logger = logging.getLogger(__name__)

__all__ = ["ZkIsrStore"]

ZK_WRITE_TIMEOUT_S = 2.0  # an ISR write that cannot reach ZooKeeper fails after this


class ZkIsrStore:
    def __init__(self, zk: Callable[[], KazooClient | None],
                 timeout_s: float = ZK_WRITE_TIMEOUT_S) -> None:
        self._zk = zk  # the broker's current session (None before it connected)
        self.timeout_s = timeout_s

    def write_isr(self, write: IsrWrite) -> int:
        zk = self._zk()
        if zk is None or not zk.connected:
            raise IsrStoreUnavailable("not connected to ZooKeeper")
        path = znodes.partition_state_path(write.topic, write.partition)
        data = znodes.encode_partition_state(znodes.PartitionState(
            leader=write.leader, leader_epoch=write.leader_epoch, isr=list(write.isr),
            controller_epoch=write.controller_epoch))
        try:
            return zk.set_async(path, data, version=write.zk_version).get(
                timeout=self.timeout_s).version
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
