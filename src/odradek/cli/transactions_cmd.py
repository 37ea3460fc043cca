"""``odradek transactions``: kafka-transactions.sh's ``list``, ``describe`` and
``describe-producers``.

    list | --list                            every transactional id, from every broker
                                             (each coordinator lists its own, ListTransactions)
    describe | --describe --transactional-id ID
                                             FindCoordinator(TRANSACTION) then
                                             DescribeTransactions on that coordinator
    describe-producers --topic T --partition P [--broker-id N]
                                             DescribeProducers (KIP-664) on the partition's
                                             leader (or broker N): each producer's epoch,
                                             last sequence and timestamp, coordinator epoch
                                             and the start offset of its open transaction

Kafka's form (``kafka-transactions.sh --bootstrap-server B describe-producers ...``) and
the flag form are both accepted.

Output columns are kafka-transactions.sh's. It speaks the protocol with Odradek's wire
client (confluent-kafka's AdminClient has no transaction admin APIs), so it works
against any broker serving ListTransactions/DescribeTransactions (Kafka 3.0+).
"""

from __future__ import annotations

import argparse
import logging
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.list_transactions.v0.request import ListTransactionsRequest
from kio.schema.types import TopicName, TransactionalId
from kio.static.primitive import i8, i32

from odradek.cli.common import add_command_config, client_security
from odradek.client.cluster import ClusterClient
from odradek.errors import ErrorCode, KafkaError

logger = logging.getLogger(__name__)

KEY_TYPE_TRANSACTION = 1


_COMMANDS = ("list", "describe", "describe-producers")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("transactions", help="list and describe transactions and producers",
                       description="Like kafka-transactions.sh (list, describe, "
                       "describe-producers).")
    p.add_argument("command", nargs="?", choices=_COMMANDS,
                   help="kafka-transactions.sh's command (or use the flags below)")
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true")
    action.add_argument("--describe", action="store_true")
    action.add_argument("--describe-producers", action="store_true")
    p.add_argument("--transactional-id")
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--broker-id", type=int,
                   help="describe-producers: ask this broker instead of the leader")
    add_command_config(p)
    p.set_defaults(func=_run)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _run(args: argparse.Namespace) -> int:
    flags = [c for c in _COMMANDS if getattr(args, c.replace("-", "_"))]
    commands = set(flags) | ({args.command} if args.command else set())
    if len(commands) != 1:
        print(f"Exactly one command is required: {', '.join(_COMMANDS)}", file=sys.stderr)
        return 2
    command = commands.pop()
    if command == "describe" and not args.transactional_id:
        print("Option --transactional-id is required with describe", file=sys.stderr)
        return 2
    if command == "describe-producers" and (args.topic is None or args.partition is None):
        print("Options --topic and --partition are required with describe-producers",
              file=sys.stderr)
        return 2
    with ClusterClient(args.bootstrap_server, client_id="odradek-transactions",
                       security=client_security(args)) as cc:
        md = cc.refresh(())
        if command == "list":
            return _list(cc, sorted(md.brokers))
        if command == "describe-producers":
            return _describe_producers(cc, args.topic, args.partition, args.broker_id)
        return _describe(cc, args.transactional_id)


def describe_producers(cc: ClusterClient, topic: str, partition: int,
                       broker_id: int | None = None) -> list[Any]:
    """The DescribeProducers producer states of one partition, from its leader (or
    ``broker_id``); raises KafkaError with the partition's error."""
    broker = broker_id if broker_id is not None else cc.leader(topic, partition).leader
    resp = cc.connection(broker).request(DescribeProducersRequest(topics=(
        TopicRequest(name=TopicName(topic), partition_indexes=(i32(partition),)),)))
    result = resp.topics[0].partitions[0]
    code = ErrorCode(int(result.error_code))
    if code is not ErrorCode.none:
        raise KafkaError(code, f"{topic}-{partition} on broker {broker}")
    return list(result.active_producers)


def _describe_producers(cc: ClusterClient, topic: str, partition: int,
                        broker_id: int | None) -> int:
    try:
        states = describe_producers(cc, topic, partition, broker_id)
    except KafkaError as e:
        print(f"Error: {e.code.name.upper()} for {topic}-{partition}", file=sys.stderr)
        return 1
    rows = [["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
             "LastTimestamp", "CurrentTransactionStartOffset"]]
    rows += [[str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch),
              str(s.last_sequence), str(s.last_timestamp), str(s.current_txn_start_offset)]
             for s in states]
    print(_table(rows))
    return 0


def list_transactions(cc: ClusterClient, brokers: list[int]) -> list[tuple[str, int, int, str]]:
    """(transactional id, coordinator, producer id, state) from every broker."""
    rows: list[tuple[str, int, int, str]] = []
    for b in brokers:
        resp = cc.connection(b).request(ListTransactionsRequest())
        if int(resp.error_code) != 0:
            raise RuntimeError(f"broker {b}: {ErrorCode(int(resp.error_code)).name}")
        rows += [(str(s.transactional_id), b, int(s.producer_id), s.transaction_state)
                 for s in resp.transaction_states]
    return sorted(rows)


def _list(cc: ClusterClient, brokers: list[int]) -> int:
    rows = [["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]]
    rows += [[t, str(b), str(p), s] for t, b, p, s in list_transactions(cc, brokers)]
    print(_table(rows))
    return 0


@dataclass(frozen=True, slots=True)
class Described:
    """One DescribeTransactions result (v0)."""

    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_ms: int  # -1: no transaction in progress
    producer_id: int
    producer_epoch: int
    partitions: list[tuple[str, int]]


class _Reader:
    """Bounded reader for the flexible DescribeTransactions v0 response. Decoded by hand:
    kio refuses the -1 ``transaction_start_time`` Kafka sends when no transaction is in
    progress."""

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError("truncated DescribeTransactions response")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def fixed(self, fmt: str) -> int:
        st = struct.Struct(fmt)
        return int(st.unpack(self.take(st.size))[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError("varint too long")

    def string(self) -> str:
        return self.take(self.uvarint() - 1).decode()

    def count(self) -> int:
        n = self.uvarint() - 1
        if n > len(self.buf) - self.pos:
            raise ValueError("count exceeds the response")
        return max(n, 0)

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def parse_describe_transactions(body: bytes) -> list[Described]:
    r = _Reader(body)
    r.skip_tags()  # response header v1
    r.fixed(">i")  # throttle time
    out = []
    for _ in range(r.count()):
        code = r.fixed(">h")
        tid, state = r.string(), r.string()
        timeout, start, pid, epoch = r.fixed(">i"), r.fixed(">q"), r.fixed(">q"), r.fixed(">h")
        parts: list[tuple[str, int]] = []
        for _ in range(r.count()):
            topic = r.string()
            parts += [(topic, r.fixed(">i")) for _ in range(r.count())]
            r.skip_tags()
        r.skip_tags()
        out.append(Described(code, tid, state, timeout, start, pid, epoch, parts))
    return out


def describe_transaction(cc: ClusterClient, txn_id: str) -> tuple[int, Described]:
    """(coordinator id, DescribeTransactions result) of one id."""
    deadline = time.monotonic() + 30
    while True:
        fc = cc.any_connection().request(FindCoordinatorRequest(
            key=txn_id, key_type=i8(KEY_TYPE_TRANSACTION)))
        code = ErrorCode(int(fc.error_code))
        if code is ErrorCode.none:
            break
        if code is not ErrorCode.coordinator_not_available or time.monotonic() > deadline:
            raise RuntimeError(f"FindCoordinator: {code.name}")
        time.sleep(0.5)
    coordinator = int(fc.node_id)
    conn = cc.connection(coordinator)
    conn.send(DescribeTransactionsRequest(transactional_ids=(TransactionalId(txn_id),)))
    _key, _version, body = conn.receive_frame()
    return coordinator, parse_describe_transactions(bytes(body))[0]


def _describe(cc: ClusterClient, txn_id: str) -> int:
    coordinator, s = describe_transaction(cc, txn_id)
    code = ErrorCode(s.error_code)
    if code is not ErrorCode.none:
        print(f"Error: {code.name.upper()} for transactional id {txn_id}", file=sys.stderr)
        return 1
    duration = str(int(time.time() * 1000) - s.start_ms) if s.start_ms >= 0 else "None"
    parts = ",".join(f"{t}-{p}" for t, p in s.partitions)
    rows = [["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
             "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
             "TransactionDurationMs", "TopicPartitions"],
            [str(coordinator), s.transactional_id, str(s.producer_id), str(s.producer_epoch),
             s.state, str(s.timeout_ms), str(s.start_ms) if s.start_ms >= 0 else "None",
             duration, parts]]
    print(_table(rows))
    return 0
