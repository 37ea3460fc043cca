"""Cluster view for the synchronous client: metadata, leader connections, ListOffsets.

``ClusterClient`` keeps one ``KafkaConnection`` per broker it talks to, learns leaders
from Metadata (v12), and re-learns them when a request answers with an error that says
the metadata is stale (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, ...) or the
connection to a leader breaks: the same rule librdkafka follows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, ProducerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from odradek.client.connection import ConnectionLost, KafkaConnection, parse_address
from odradek.errors import ErrorCode, KafkaError
from odradek.security.client_security import PLAINTEXT, ClientSecurity

__all__ = ["ClusterClient", "PartitionInfo", "Metadata", "STALE_METADATA", "EARLIEST", "LATEST"]

logger = logging.getLogger(__name__)

TP = tuple[str, int]
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps

# Errors after which a client refreshes metadata and retries (Kafka's
# InvalidMetadataException family, plus an election in progress).
STALE_METADATA = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_controller,
        ErrorCode.offset_not_available,
        ErrorCode.kafka_storage_error,
        ErrorCode.replica_not_available,
    }
)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    error_code: int
    replicas: tuple[int, ...] = ()


@dataclass(slots=True)
class Metadata:
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    partitions: dict[TP, PartitionInfo] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)

    def partition_count(self, topic: str) -> int:
        return sum(1 for t, _ in self.partitions if t == topic)


class ClusterClient:
    """Connections to the brokers of one cluster (one owner thread)."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "odradek",
        timeout_s: float = 30.0,
        max_response_bytes: int = 128 << 20,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.security = security
        self.bootstrap = [parse_address(a) for a in bootstrap_servers.split(",") if a.strip()]
        if not self.bootstrap:
            raise ValueError("bootstrap.servers is empty")
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.metadata = Metadata()
        self._conns: dict[int, KafkaConnection] = {}  # broker id -> connection
        self._bootstrap_conn: KafkaConnection | None = None

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        if self._bootstrap_conn is not None:
            self._bootstrap_conn.close()
            self._bootstrap_conn = None

    # ------------------------------------------------------------------ connections

    def _connect(self, host: str, port: int) -> KafkaConnection:
        return KafkaConnection(
            host,
            port,
            client_id=self.client_id,
            timeout_s=self.timeout_s,
            max_response_bytes=self.max_response_bytes,
            security=self.security,
        )

    def any_connection(self) -> KafkaConnection:
        """A live connection to some broker: a known one first, then the bootstrap list."""
        for c in self._conns.values():
            if not c.closed and c.in_flight == 0:
                return c
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        last: Exception | None = None
        for host, port in [*self.metadata.brokers.values(), *self.bootstrap]:
            try:
                self._bootstrap_conn = self._connect(host, port)
                return self._bootstrap_conn
            except ConnectionLost as e:
                last = e
        raise ConnectionLost(f"no broker reachable ({last})")

    def connection(self, broker_id: int) -> KafkaConnection:
        c = self._conns.get(broker_id)
        if c is not None and not c.closed:
            return c
        addr = self.metadata.brokers.get(broker_id)
        if addr is None:
            raise KafkaError(ErrorCode.leader_not_available, f"broker {broker_id} unknown")
        c = self._conns[broker_id] = self._connect(*addr)
        return c

    def drop(self, broker_id: int) -> None:
        c = self._conns.pop(broker_id, None)
        if c is not None:
            c.close()

    # ------------------------------------------------------------------ metadata

    def refresh(self, topics: Iterable[str] | None) -> Metadata:
        """Metadata for ``topics`` (None: all); merges into ``self.metadata``."""
        names = None if topics is None else sorted(set(topics))
        req = MetadataRequest(
            topics=None
            if names is None
            else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        try:
            resp = self.any_connection().request(req)
        except ConnectionLost:
            self._bootstrap_conn = None
            resp = self.any_connection().request(req)
        md = self.metadata
        if names is None:  # a full listing: forget topics that are gone
            md.partitions.clear()
            md.topic_errors.clear()
        md.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        for t in resp.topics:
            md.topic_errors[t.name] = int(t.error_code)
            for old in [tp for tp in md.partitions if tp[0] == t.name]:
                del md.partitions[old]
            for p in t.partitions:
                md.partitions[(t.name, p.partition_index)] = PartitionInfo(
                    p.leader_id,
                    p.leader_epoch,
                    int(p.error_code),
                    tuple(int(r) for r in p.replica_nodes),
                )
        for bid in [b for b in self._conns if b not in md.brokers]:
            self.drop(bid)
        return md

    def leader(self, topic: str, partition: int) -> PartitionInfo:
        """The partition's leader from metadata (refreshed when unknown)."""
        info = self.metadata.partitions.get((topic, partition))
        if info is None or info.leader < 0:
            self.refresh([topic])
            info = self.metadata.partitions.get((topic, partition))
        if info is None:
            code = self.metadata.topic_errors.get(topic, ErrorCode.unknown_topic_or_partition)
            raise KafkaError(
                ErrorCode(code or ErrorCode.unknown_topic_or_partition),
                f"{topic}-{partition} is not in the metadata",
            )
        if info.leader < 0:
            raise KafkaError(ErrorCode.leader_not_available, f"{topic}-{partition} has no leader")
        return info

    # ------------------------------------------------------------------ ListOffsets

    def list_offsets(
        self,
        queries: Mapping[TP, int],
        *,
        isolation_level: int = 0,
        retries: int = 30,
        retry_interval_s: float = 1.0,
    ) -> dict[TP, int]:
        """``{tp: EARLIEST | LATEST | timestamp_ms}`` -> offsets (-1: no record at/after ts).

        Sent to each partition's leader; retriable errors and lost connections refresh
        metadata and retry (a new topic, or a leader election after a crash, answers
        LEADER_NOT_AVAILABLE / NOT_LEADER_OR_FOLLOWER for a few seconds).
        """
        out: dict[TP, int] = {}
        todo = dict(queries)
        last: Exception | None = None
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(min(retry_interval_s, 0.05 * 2**attempt))
                try:
                    self.refresh({t for t, _ in todo})
                except (ConnectionLost, KafkaError) as e:
                    last = e
                    continue
            failed: dict[TP, int] = {}
            by_leader: dict[int, list[TP]] = {}
            for tp, query in todo.items():
                try:
                    by_leader.setdefault(self.leader(*tp).leader, []).append(tp)
                except KafkaError as e:
                    if e.code not in STALE_METADATA:
                        raise
                    failed[tp], last = query, e
            for broker, tps in by_leader.items():
                try:
                    got = self._list_offsets_on(
                        broker, {tp: todo[tp] for tp in tps}, isolation_level
                    )
                except (ConnectionLost, KafkaError) as e:
                    if isinstance(e, KafkaError) and e.code not in STALE_METADATA:
                        raise
                    self.drop(broker)
                    failed.update({tp: todo[tp] for tp in tps})
                    last = e
                    continue
                for tp, (code, off) in got.items():
                    if code == ErrorCode.none:
                        out[tp] = off
                    elif code in STALE_METADATA or ErrorCode(code).retriable:
                        failed[tp] = todo[tp]
                        last = KafkaError(ErrorCode(code), f"ListOffsets {tp[0]}-{tp[1]}")
                    else:
                        raise KafkaError(ErrorCode(code), f"ListOffsets {tp[0]}-{tp[1]}")
            if not failed:
                return out
            todo = failed
            logger.info("ListOffsets retry %d for %d partitions (%s)", attempt + 1, len(todo), last)
        raise KafkaError(
            ErrorCode.request_timed_out,
            f"ListOffsets for {sorted(todo)[:5]} failed {retries + 1} times: {last}",
        )

    def _list_offsets_on(
        self, broker: int, queries: Mapping[TP, int], isolation_level: int
    ) -> dict[TP, tuple[int, int]]:
        by_topic: dict[str, list[ListOffsetsPartition]] = {}
        for (topic, p), ts in queries.items():
            by_topic.setdefault(topic, []).append(
                ListOffsetsPartition(
                    partition_index=i32(p), current_leader_epoch=i32(-1), timestamp=i64(ts)
                )
            )
        req = ListOffsetsRequest(
            replica_id=BrokerId(-1),
            isolation_level=i8(isolation_level),
            topics=tuple(
                ListOffsetsTopic(name=TopicName(t), partitions=tuple(ps))
                for t, ps in by_topic.items()
            ),
        )
        resp = self.connection(broker).request(req)
        return {
            (t.name, p.partition_index): (int(p.error_code), int(p.offset))
            for t in resp.topics
            for p in t.partitions
        }

    # ------------------------------------------------------------------ producer ids

    def init_producer_id(self, retries: int = 30, retry_interval_s: float = 1.0) -> tuple[int, int]:
        """An idempotent producer id and epoch (InitProducerId without transactional id)."""
        req = InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=i32Timedelta.parse(timedelta(seconds=60)),
            producer_id=ProducerId(-1),
            producer_epoch=i16(-1),
        )
        last: Exception | None = None
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(min(retry_interval_s, 0.05 * 2**attempt))
            try:
                resp = self.any_connection().request(req)
            except ConnectionLost as e:
                self._bootstrap_conn, last = None, e
                continue
            code = ErrorCode(resp.error_code)
            if code == ErrorCode.none:
                return int(resp.producer_id), int(resp.producer_epoch)
            if not code.retriable and code not in (
                ErrorCode.coordinator_not_available,
                ErrorCode.not_coordinator,
            ):
                raise KafkaError(code, "InitProducerId")
            last = KafkaError(code, "InitProducerId")
        raise KafkaError(ErrorCode.request_timed_out, f"InitProducerId failed: {last}")
