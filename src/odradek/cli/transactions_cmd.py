"""``odradek transactions``: kafka-transactions.sh's ``list``, ``describe`` and
``describe-producers``.

    list | --list                            every transactional id, from every broker
                                             (each coordinator lists its own, ListTransactions)
    describe | --describe --transactional-id ID
                                             FindCoordinator(TRANSACTION) then
                                             DescribeTransactions on that coordinator
    describe-producers --topic T --partition P [--broker-id N]
                                             DescribeProducers (KIP-664) on the partition's
                                             leader (or replica N): each producer's epoch,
                                             last sequence and timestamp, coordinator epoch
                                             and the start offset of its open transaction
    find-hanging (--topic T [--partition P] | --broker-id N) [--max-transaction-timeout MIN]
                                             open transactions older than the timeout (15
                                             minutes) that their coordinator does not know
                                             on that partition (ListTransactions by
                                             producer id, DescribeTransactions)
    abort --topic T --partition P (--start-offset O |
          --producer-id ID --producer-epoch E --coordinator-epoch C)
                                             an ABORT marker for that transaction on the
                                             leader (WriteTxnMarkers: CLUSTER_ACTION)

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
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.static.primitive import i8, i16, i32

from odradek.cli.common import add_command_config, client_security
from odradek.client.cluster import ClusterClient
from odradek.errors import ErrorCode, KafkaError

logger = logging.getLogger(__name__)

KEY_TYPE_TRANSACTION = 1


_COMMANDS = ("list", "describe", "describe-producers", "find-hanging", "abort")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "transactions",
        help="list and describe transactions and producers",
        description="Like kafka-transactions.sh (list, describe, "
        "describe-producers, find-hanging, abort).",
    )
    p.add_argument(
        "command",
        nargs="?",
        choices=_COMMANDS,
        help="kafka-transactions.sh's command (or use the flags below)",
    )
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true")
    action.add_argument("--describe", action="store_true")
    action.add_argument("--describe-producers", action="store_true")
    action.add_argument("--find-hanging", action="store_true")
    action.add_argument("--abort", action="store_true")
    p.add_argument("--transactional-id")
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument(
        "--broker-id",
        type=int,
        help="describe-producers: ask this replica instead of the leader; "
        "find-hanging: search the partitions with a replica on it",
    )
    p.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=15,
        help="find-hanging: minutes a transaction may stay open (default 15)",
    )
    p.add_argument("--start-offset", type=int, help="abort: the transaction's first offset")
    p.add_argument("--producer-id", type=int)
    p.add_argument("--producer-epoch", type=int)
    p.add_argument("--coordinator-epoch", type=int)
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
    if command in ("describe-producers", "abort") and (
        args.topic is None or args.partition is None
    ):
        print(f"Options --topic and --partition are required with {command}", file=sys.stderr)
        return 2
    if command == "find-hanging" and args.topic is None and args.broker_id is None:
        print(
            "The find-hanging command requires either --topic or --broker-id to limit "
            "the scope of the search",
            file=sys.stderr,
        )
        return 2
    if command == "find-hanging" and args.partition is not None and args.topic is None:
        print("The --partition argument requires --topic to be provided", file=sys.stderr)
        return 2
    if (
        command == "abort"
        and args.start_offset is None
        and None in (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    ):
        print(
            "The transaction to abort must be identified either with --start-offset or "
            "with --producer-id, --producer-epoch and --coordinator-epoch",
            file=sys.stderr,
        )
        return 2
    with ClusterClient(
        args.bootstrap_server, client_id="odradek-transactions", security=client_security(args)
    ) as cc:
        md = cc.refresh(())
        if command == "list":
            return _list(cc, sorted(md.brokers))
        if command == "describe-producers":
            return _describe_producers(cc, args.topic, args.partition, args.broker_id)
        if command == "find-hanging":
            return _find_hanging(cc, args)
        if command == "abort":
            return _abort(cc, args)
        return _describe(cc, args.transactional_id)


def describe_producers(
    cc: ClusterClient, topic: str, partition: int, broker_id: int | None = None
) -> list[Any]:
    """The DescribeProducers producer states of one partition, from its leader (or
    ``broker_id``); raises KafkaError with the partition's error."""
    broker = broker_id if broker_id is not None else cc.leader(topic, partition).leader
    resp = cc.connection(broker).request(
        DescribeProducersRequest(
            topics=(TopicRequest(name=TopicName(topic), partition_indexes=(i32(partition),)),)
        )
    )
    result = resp.topics[0].partitions[0]
    code = ErrorCode(int(result.error_code))
    if code is not ErrorCode.none:
        raise KafkaError(code, f"{topic}-{partition} on broker {broker}")
    return list(result.active_producers)


def _describe_producers(
    cc: ClusterClient, topic: str, partition: int, broker_id: int | None
) -> int:
    try:
        states = describe_producers(cc, topic, partition, broker_id)
    except KafkaError as e:
        print(f"Error: {e.code.name.upper()} for {topic}-{partition}", file=sys.stderr)
        return 1
    rows = [
        [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ]
    ]
    rows += [
        [
            str(s.producer_id),
            str(s.producer_epoch),
            str(s.coordinator_epoch),
            str(s.last_sequence),
            str(s.last_timestamp),
            str(s.current_txn_start_offset) if s.current_txn_start_offset >= 0 else "None",
        ]
        for s in states
    ]
    print(_table(rows))
    return 0


def find_hanging(
    cc: ClusterClient, partitions: list[tuple[str, int]], broker_id: int | None, max_timeout_ms: int
) -> list[tuple[str, int, Any]]:
    """Kafka's find-hanging: the open transactions (topic, partition, producer state)
    older than ``max_timeout_ms`` by their last timestamp whose producer id no
    coordinator lists, or whose transaction does not hold that partition."""
    now = int(time.time() * 1000)
    open_txns: list[tuple[str, int, Any]] = []
    for topic, partition in partitions:
        try:
            states = describe_producers(cc, topic, partition, broker_id)
        except KafkaError as e:
            logger.warning("%s-%d: %s", topic, partition, e.code.name.upper())
            continue
        open_txns += [
            (topic, partition, s)
            for s in states
            if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_timeout_ms
        ]
    if not open_txns:
        return []
    pids = {int(s.producer_id) for _, _, s in open_txns}
    ids = {
        pid: tid
        for tid, _b, pid, _s in list_transactions(
            cc, sorted(cc.metadata.brokers), producer_ids=pids
        )
    }
    hanging = []
    for topic, partition, s in open_txns:
        tid = ids.get(int(s.producer_id))
        described = describe_transaction(cc, tid)[1] if tid is not None else None
        if (
            described is None
            or described.error_code != 0
            or (topic, partition) not in described.partitions
        ):
            hanging.append((topic, partition, s))
    return hanging


def _find_hanging(cc: ClusterClient, args: argparse.Namespace) -> int:
    if args.topic is not None and args.partition is not None:
        partitions = [(args.topic, args.partition)]
    else:
        md = cc.refresh([args.topic] if args.topic is not None else None)
        partitions = sorted(
            tp
            for tp, info in md.partitions.items()
            if (args.topic is None or tp[0] == args.topic)
            and (args.broker_id is None or args.broker_id in info.replicas)
        )
    now = int(time.time() * 1000)
    rows = [
        [
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
        ]
    ]
    for topic, partition, s in find_hanging(
        cc, partitions, args.broker_id, args.max_transaction_timeout * 60_000
    ):
        rows.append(
            [
                topic,
                str(partition),
                str(s.producer_id),
                str(s.producer_epoch),
                str(s.coordinator_epoch),
                str(s.current_txn_start_offset),
                str(s.last_timestamp),
                str((now - s.last_timestamp) // 60_000),
            ]
        )
    print(_table(rows))
    return 0


def abort_transaction(
    cc: ClusterClient,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
) -> ErrorCode:
    """Kafka's Admin.abortTransaction: an ABORT marker for the producer's transaction,
    written by the partition's leader (WriteTxnMarkers, which needs CLUSTER_ACTION)."""
    leader = cc.leader(topic, partition).leader
    resp = cc.connection(leader).request(
        WriteTxnMarkersRequest(
            markers=(
                WritableTxnMarker(
                    producer_id=ProducerId(producer_id),
                    producer_epoch=i16(producer_epoch),
                    transaction_result=False,
                    coordinator_epoch=i32(coordinator_epoch),
                    topics=(
                        WritableTxnMarkerTopic(
                            name=TopicName(topic), partition_indexes=(i32(partition),)
                        ),
                    ),
                ),
            )
        )
    )
    return ErrorCode(int(resp.markers[0].topics[0].partitions[0].error_code))


def _abort(cc: ClusterClient, args: argparse.Namespace) -> int:
    tp = f"{args.topic}-{args.partition}"
    if args.start_offset is not None:
        try:
            states = describe_producers(cc, args.topic, args.partition)
        except KafkaError as e:
            print(
                f"Failed to validate producer state for partition {tp}: {e.code.name.upper()}",
                file=sys.stderr,
            )
            return 1
        found = [s for s in states if s.current_txn_start_offset == args.start_offset]
        if not found:
            print(
                f"Could not find any open transactions starting at offset "
                f"{args.start_offset} on partition {tp}",
                file=sys.stderr,
            )
            return 1
        pid, epoch = int(found[0].producer_id), int(found[0].producer_epoch)
        coordinator_epoch = int(found[0].coordinator_epoch)
    else:
        pid, epoch = args.producer_id, args.producer_epoch
        coordinator_epoch = args.coordinator_epoch
    # As Kafka's tool: a transaction that hung before its producer's first marker has
    # coordinator epoch -1; 0 is at most any epoch a coordinator has written with.
    code = abort_transaction(cc, args.topic, args.partition, pid, epoch, max(coordinator_epoch, 0))
    if code is not ErrorCode.none:
        print(
            f"Failed to abort transaction of producer {pid} (epoch {epoch}) on {tp}: "
            f"{code.name.upper()}",
            file=sys.stderr,
        )
        return 1
    return 0


def list_transactions(
    cc: ClusterClient, brokers: list[int], producer_ids: set[int] | None = None
) -> list[tuple[str, int, int, str]]:
    """(transactional id, coordinator, producer id, state) from every broker, optionally
    only those of ``producer_ids``."""
    rows: list[tuple[str, int, int, str]] = []
    req = ListTransactionsRequest(
        producer_id_filters=tuple(ProducerId(p) for p in sorted(producer_ids or ()))
    )
    for b in brokers:
        resp = cc.connection(b).request(req)
        if int(resp.error_code) != 0:
            raise RuntimeError(f"broker {b}: {ErrorCode(int(resp.error_code)).name}")
        rows += [
            (str(s.transactional_id), b, int(s.producer_id), s.transaction_state)
            for s in resp.transaction_states
        ]
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
        b = self.buf[self.pos : self.pos + n]
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
        fc = cc.any_connection().request(
            FindCoordinatorRequest(key=txn_id, key_type=i8(KEY_TYPE_TRANSACTION))
        )
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
    rows = [
        [
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ],
        [
            str(coordinator),
            s.transactional_id,
            str(s.producer_id),
            str(s.producer_epoch),
            s.state,
            str(s.timeout_ms),
            str(s.start_ms) if s.start_ms >= 0 else "None",
            duration,
            parts,
        ],
    ]
    print(_table(rows))
    return 0
