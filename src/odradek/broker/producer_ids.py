"""Producer ids for idempotent producers, unique cluster-wide (KIP-98), and InitProducerId.

Each broker claims blocks of 1000 ids from ZooKeeper's ``/latest_producer_id_block``
with a conditional write (Kafka's ProducerIdManager and its JSON layout:
``{"version":1,"broker":1,"block_start":"0","block_end":"999"}``), then hands them out
from memory. Two brokers can never get the same block: the loser of a race re-reads and
claims the next one.

InitProducerId with a null transactional id is what an idempotent producer sends: it
gets a fresh producer id at epoch 0 (as Kafka does; KIP-360's epoch bump applies to
transactional ids). Transactions are not implemented, so a transactional id is refused.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from odradek.broker.responses import response
from odradek.errors import ErrorCode
from odradek.protocol.codec import RequestHeaderInfo

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = "/latest_producer_id_block"
BLOCK_SIZE = 1000


def encode_block(broker_id: int, start: int, end: int) -> bytes:
    return json.dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                       "block_end": str(end)}, separators=(",", ":")).encode()


def decode_block(data: bytes) -> tuple[int, int, int]:
    obj = json.loads(data)
    return int(obj["broker"]), int(obj["block_start"]), int(obj["block_end"])


class ProducerIdManager:
    def __init__(self, zk: KazooClient, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self._lock = threading.Lock()
        self._next = 0
        self._end = -1  # inclusive end of our current block

    def next_id(self) -> int:
        """A producer id never given out before by any broker (blocking: run in a thread)."""
        with self._lock:
            if self._next > self._end:
                self._next, self._end = self._claim_block()
            pid = self._next
            self._next += 1
            return pid

    def _claim_block(self) -> tuple[int, int]:
        while True:
            try:
                data, stat = self.zk.get(PRODUCER_ID_BLOCK)
            except NoNodeError:
                try:
                    self.zk.create(PRODUCER_ID_BLOCK,
                                   encode_block(self.broker_id, 0, BLOCK_SIZE - 1))
                    return 0, BLOCK_SIZE - 1
                except NodeExistsError:
                    continue
            _, _, last_end = decode_block(data)
            start, end = last_end + 1, last_end + BLOCK_SIZE
            try:
                self.zk.set(PRODUCER_ID_BLOCK, encode_block(self.broker_id, start, end),
                            version=stat.version)
                return start, end
            except BadVersionError:
                continue  # another broker claimed a block meanwhile


async def handle_init_producer_id(broker: Broker, header: RequestHeaderInfo, req: Any) -> Any:
    import asyncio  # noqa: PLC0415

    v = header.api_version
    if req.transactional_id is not None:
        return response(22, v, throttle_time=0,
                        error_code=ErrorCode.transactional_id_authorization_failed,
                        producer_id=-1, producer_epoch=-1)
    try:
        pid = await asyncio.to_thread(broker.producer_ids.next_id)
    except Exception:  # noqa: BLE001 - ZooKeeper unreachable
        log.exception("could not allocate a producer id")
        return response(22, v, throttle_time=0, error_code=ErrorCode.coordinator_not_available,
                        producer_id=-1, producer_epoch=-1)
    return response(22, v, throttle_time=0, error_code=ErrorCode.none, producer_id=pid,
                    producer_epoch=0)
