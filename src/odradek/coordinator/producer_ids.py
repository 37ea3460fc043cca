"""Producer ids for idempotent producers, unique cluster-wide (KIP-98).

Each broker claims blocks of 1000 ids from ZooKeeper's ``/latest_producer_id_block``
with a conditional write (Kafka's ProducerIdManager and its JSON layout:
``{"version":1,"broker":1,"block_start":"0","block_end":"999"}``), then hands them out
from memory. Two brokers can never get the same block: the loser of a race re-reads and
claims the next one.

The InitProducerId handler is ``odradek.server.handlers.producers``.
"""

from __future__ import annotations

import json
import logging
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

logger = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = "/latest_producer_id_block"
BLOCK_SIZE = 1000


def encode_block(broker_id: int, start: int, end: int) -> bytes:
    return json.dumps(
        {"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)},
        separators=(",", ":"),
    ).encode()


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
                    self.zk.create(
                        PRODUCER_ID_BLOCK, encode_block(self.broker_id, 0, BLOCK_SIZE - 1)
                    )
                    return 0, BLOCK_SIZE - 1
                except NodeExistsError:
                    continue
            _, _, last_end = decode_block(data)
            start, end = last_end + 1, last_end + BLOCK_SIZE
            try:
                self.zk.set(
                    PRODUCER_ID_BLOCK,
                    encode_block(self.broker_id, start, end),
                    version=stat.version,
                )
                return start, end
            except BadVersionError:
                continue  # another broker claimed a block meanwhile
