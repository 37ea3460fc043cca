"""Transaction markers: COMMIT/ABORT control batches in partition logs (KIP-98).

Two halves, as in Kafka:

* ``write_marker_locally`` -- what a partition leader does for WriteTxnMarkers (API 27):
  append a control batch (producer id and epoch of the transaction, transactional +
  control attributes, one record with key ``version i16 = 0, type i16`` -- 0 ABORT,
  1 COMMIT -- and value ``version i16 = 0, coordinator_epoch i32``) with acks=all. The
  partition's producer state closes the transaction (LSO, aborted index). On a
  ``__consumer_offsets`` partition the group coordinator then makes the transaction's
  offsets visible (commit) or drops them (abort).
* ``TxnMarkerChannel`` -- the coordinator's side (Kafka's TransactionMarkerChannelManager):
  markers for partitions this broker leads are written directly; the others go to their
  leaders in WriteTxnMarkers requests, retried (leader moves, timeouts) until each
  partition answered success or its topic is gone.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.static.primitive import i16, i32

from odradek.errors import ErrorCode
from odradek.replication.broker_connection import BrokerConnectionError, BrokerConnectionPool
from odradek.storage.producer_state import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT
from odradek.storage.records import encode_batch

if TYPE_CHECKING:
    from odradek.coordinator.group_coordinator import GroupCoordinator
    from odradek.metadata.image import MetadataImage
    from odradek.replication.replica_manager import ReplicaManager

logger = logging.getLogger(__name__)

__all__ = ["control_batch", "write_marker_locally", "TxnMarkerChannel"]

OFFSETS_TOPIC = "__consumer_offsets"
MARKER_TIMEOUT_S = 30.0  # request.timeout.ms of Kafka's marker channel
RETRY_BACKOFF_S = 0.1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")

# Errors after which the marker is not retried: the partition is gone (Kafka drops the
# partition from the transaction then).
_GIVE_UP = {ErrorCode.unknown_topic_or_partition}


def control_batch(producer_id: int, epoch: int, commit: bool, coordinator_epoch: int) -> bytes:
    kind = CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT
    return encode_batch(
        [(_KEY.pack(0, kind), _VALUE.pack(0, coordinator_epoch))],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
    )


async def write_marker_locally(
    replicas: ReplicaManager,
    groups: GroupCoordinator,
    tp: tuple[str, int],
    producer_id: int,
    epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timeout_s: float,
) -> ErrorCode:
    code, _ = await replicas.append_and_wait(
        tp,
        control_batch(producer_id, epoch, commit, coordinator_epoch),
        timeout_s,
        allow_control=True,
    )
    if code is ErrorCode.none and tp[0] == OFFSETS_TOPIC:
        groups.complete_txn_offsets(tp[1], producer_id, commit)
    return code


class TxnMarkerChannel:
    """Sends one transaction's markers to every partition's leader until all succeed."""

    def __init__(
        self,
        broker_id: int,
        replicas: ReplicaManager,
        groups: GroupCoordinator,
        image: Callable[[], MetadataImage],
        pool: BrokerConnectionPool,
    ) -> None:
        self.broker_id = broker_id
        self.replicas = replicas
        self.groups = groups
        self._image = image
        self._pool = pool  # the coordinator's, shared with its KIP-890 verifier

    async def send(
        self,
        producer_id: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: set[tuple[str, int]],
        still_owner: Callable[[], bool],
    ) -> bool:
        """Write the markers; True once every partition has its marker (or is gone),
        False if this broker stopped being the coordinator meanwhile."""
        todo = set(partitions)
        while todo:
            if not still_owner():
                return False
            image = self._image()
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in sorted(todo):
                pinfo = image.partition(*tp)
                if pinfo is None:
                    logger.info("marker for %s-%d dropped: the partition is gone", *tp)
                    todo.discard(tp)
                    continue
                by_leader.setdefault(pinfo.leader, []).append(tp)
            results = await asyncio.gather(
                *(
                    self._send_to(leader, tps, producer_id, epoch, commit, coordinator_epoch)
                    for leader, tps in by_leader.items()
                )
            )
            for done in results:
                todo -= done
            if todo:
                await asyncio.sleep(RETRY_BACKOFF_S)
        return True

    async def _send_to(
        self,
        leader: int,
        tps: list[tuple[str, int]],
        producer_id: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> set[tuple[str, int]]:
        if leader < 0:
            return set()
        if leader == self.broker_id:
            codes = await asyncio.gather(
                *(
                    write_marker_locally(
                        self.replicas,
                        self.groups,
                        tp,
                        producer_id,
                        epoch,
                        commit,
                        coordinator_epoch,
                        MARKER_TIMEOUT_S,
                    )
                    for tp in tps
                )
            )
            return {tp for tp, c in zip(tps, codes) if c is ErrorCode.none or c in _GIVE_UP}
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        req = WriteTxnMarkersRequest(
            markers=(
                WritableTxnMarker(
                    producer_id=ProducerId(producer_id),
                    producer_epoch=i16(epoch),
                    transaction_result=commit,
                    coordinator_epoch=i32(coordinator_epoch),
                    topics=tuple(
                        WritableTxnMarkerTopic(
                            name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps)
                        )
                        for t, ps in by_topic.items()
                    ),
                ),
            )
        )
        try:
            resp = await self._pool.request(leader, req)
        except (TimeoutError, BrokerConnectionError, OSError) as e:
            logger.info("WriteTxnMarkers to broker %d failed: %r; retrying", leader, e)
            return set()
        done: set[tuple[str, int]] = set()
        for m in resp.markers:
            for t in m.topics:
                for pr in t.partitions:
                    code = ErrorCode(int(pr.error_code))
                    if code is ErrorCode.none or code in _GIVE_UP:
                        done.add((str(t.name), int(pr.partition_index)))
                    else:
                        logger.info(
                            "marker for %s-%d on broker %d: %s; retrying",
                            t.name,
                            pr.partition_index,
                            leader,
                            code.name,
                        )
        return done
