"""``__transaction_state`` records in Kafka's formats (TransactionLog, KIP-98).

Key (TransactionLogKey v0): ``version i16 = 0, transactional_id string``.
Value (TransactionLogValue v0, not flexible): ``version i16 = 0, producer_id i64,
producer_epoch i16, transaction_timeout_ms i32, transaction_status i8,
transaction_partitions nullable [topic string, partition_ids [i32]],
last_update_timestamp_ms i64, start_timestamp_ms i64``. A null value is a tombstone
(the transactional id expired). Kafka's tools (``kafka-dump-log --transaction-log-decoder``)
read these records unchanged.

Every length and count is bounded by the bytes actually present before anything is
allocated: a corrupt record raises ``ValueError``, never a huge allocation.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

logger = logging.getLogger(__name__)

__all__ = [
    "TRANSACTION_TOPIC",
    "TxnLogValue",
    "encode_txn_key",
    "decode_txn_key",
    "encode_txn_value",
    "decode_txn_value",
]

TRANSACTION_TOPIC = "__transaction_state"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_VALUE_TAIL = struct.Struct(">qq")  # last update, start


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int  # txn_state.TxnState's value (Kafka's byte ids)
    partitions: tuple[tuple[str, int], ...] | None
    last_update_ms: int
    start_ms: int


def _string(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(f"truncated transaction log record at {self.pos} (+{n})")
        b = self.buf[self.pos : self.pos + n]
        self.pos += n
        return b

    def unpack(self, st: struct.Struct) -> tuple[int, ...]:
        return st.unpack(self.take(st.size))

    def string(self) -> str:
        (n,) = self.unpack(_I16)
        return self.take(n).decode()

    def count(self, min_element: int) -> int:
        (n,) = self.unpack(_I32)
        if n > (len(self.buf) - self.pos) // max(min_element, 1):
            raise ValueError(f"count {n} exceeds the record")
        return n


def encode_txn_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


def decode_txn_key(key: bytes) -> str:
    r = _Reader(key)
    (version,) = r.unpack(_I16)
    if version != 0:
        raise ValueError(f"unknown transaction log key version {version}")
    return r.string()


def encode_txn_value(v: TxnLogValue) -> bytes:
    out = bytearray(_VALUE_HEAD.pack(0, v.producer_id, v.producer_epoch, v.timeout_ms, v.status))
    if v.partitions is None:
        out += _I32.pack(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(v.partitions):
            by_topic.setdefault(topic, []).append(p)
        out += _I32.pack(len(by_topic))
        for topic, parts in by_topic.items():
            out += _string(topic)
            out += _I32.pack(len(parts))
            for p in parts:
                out += _I32.pack(p)
    out += _VALUE_TAIL.pack(v.last_update_ms, v.start_ms)
    return bytes(out)


def decode_txn_value(value: bytes) -> TxnLogValue:
    r = _Reader(value)
    version, pid, epoch, timeout, status = r.unpack(_VALUE_HEAD)
    if version not in (0, 1):
        raise ValueError(f"unknown transaction log value version {version}")
    if version == 1:
        # v1 (KIP-890) is flexible: we never write it; refuse rather than misread it.
        raise ValueError("transaction log value v1 is not supported")
    partitions: tuple[tuple[str, int], ...] | None
    (n,) = r.unpack(_I32)
    if n < 0:
        partitions = None
    else:
        r.pos -= 4
        n = r.count(6)
        acc: list[tuple[str, int]] = []
        for _ in range(n):
            topic = r.string()
            for _ in range(r.count(4)):
                acc.append((topic, r.unpack(_I32)[0]))
        partitions = tuple(acc)
    last_update, start = r.unpack(_VALUE_TAIL)
    return TxnLogValue(pid, epoch, timeout, status, partitions, last_update, start)
