"""How a follower talks to its leader (Kafka's ``LeaderEndPoint``): two calls, Fetch and
OffsetsForLeaderEpoch, behind a small interface.

``RemoteLeaderEndpoint`` speaks the Kafka protocol over TCP (Fetch v12 with our broker id
as ``replica_id``, OffsetForLeaderEpoch v4), binding this broker's own address first so
that source-based iptables rules of the fault tests match. The replication harness
(tests) plugs in an in-memory endpoint with fault hooks instead, so the follower logic is
the same code in both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from odradek.protocol.client_codec import nested_request, request_entity
from odradek.replication.broker_connection import BrokerConnection, BrokerConnectionError

logger = logging.getLogger(__name__)

__all__ = [
    "EndpointError",
    "EndpointFactory",
    "EpochRequest",
    "EpochResult",
    "FetchRequestPartition",
    "FetchedPartition",
    "LeaderEndpoint",
    "RemoteLeaderEndpoint",
]

FETCH_VERSION = 12
EPOCH_VERSION = 4

EndpointError = BrokerConnectionError  # the leader cannot be reached (retry after backoff)


@dataclass(slots=True)
class FetchRequestPartition:
    topic: str
    partition: int
    fetch_offset: int  # our LEO: the leader counts it toward its HW (SPEC R16)
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int


@dataclass(slots=True)
class FetchedPartition:
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview | None


@dataclass(slots=True)
class EpochRequest:
    topic: str
    partition: int
    current_leader_epoch: int
    leader_epoch: int  # the latest epoch in our leader-epoch cache


@dataclass(slots=True)
class EpochResult:
    topic: str
    partition: int
    error_code: int
    leader_epoch: int
    end_offset: int


class LeaderEndpoint(Protocol):
    async def fetch(self, partitions: list[FetchRequestPartition], *, max_wait_ms: int,
                    min_bytes: int, max_bytes: int) -> list[FetchedPartition]: ...

    async def offsets_for_leader_epoch(self, requests: list[EpochRequest]
                                       ) -> list[EpochResult]: ...

    def close(self) -> None: ...


# (leader_id, host, port) -> an endpoint for that leader
EndpointFactory = Callable[[int, str, int], LeaderEndpoint]


class RemoteLeaderEndpoint:
    """The Kafka protocol over one connection (one request at a time, like Kafka's
    replica fetcher thread)."""

    def __init__(self, broker_id: int, host: str, port: int, source_ip: str | None,
                 socket_timeout_ms: int) -> None:
        self.broker_id = broker_id
        self.socket_timeout_s = socket_timeout_ms / 1000
        self._conn = BrokerConnection(host, port, source_ip, f"replica-fetcher-{broker_id}",
                                      timeout_s=self.socket_timeout_s)

    async def fetch(self, partitions: list[FetchRequestPartition], *, max_wait_ms: int,
                    min_bytes: int, max_bytes: int) -> list[FetchedPartition]:
        by_topic: dict[str, list[Any]] = {}
        for p in partitions:
            by_topic.setdefault(p.topic, []).append(nested_request(
                1, FETCH_VERSION, "FetchPartition", partition=p.partition,
                current_leader_epoch=p.current_leader_epoch, fetch_offset=p.fetch_offset,
                last_fetched_epoch=p.last_fetched_epoch, log_start_offset=p.log_start_offset,
                partition_max_bytes=p.max_bytes))
        req = request_entity(
            1, FETCH_VERSION, replica_id=self.broker_id,
            max_wait=max_wait_ms, min_bytes=min_bytes,
            max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
            topics=tuple(nested_request(1, FETCH_VERSION, "FetchTopic", topic=t,
                                        partitions=tuple(ps)) for t, ps in by_topic.items()),
            forgotten_topics_data=(), rack_id="")
        resp = await self._conn.request(req, timeout_s=max_wait_ms / 1000
                                        + self.socket_timeout_s)
        return [FetchedPartition(t.topic, int(r.partition_index), int(r.error_code),
                                 int(r.high_watermark), int(r.log_start_offset), r.records)
                for t in resp.responses for r in t.partitions]

    async def offsets_for_leader_epoch(self, requests: list[EpochRequest]
                                       ) -> list[EpochResult]:
        by_topic: dict[str, list[Any]] = {}
        for r in requests:
            by_topic.setdefault(r.topic, []).append(nested_request(
                23, EPOCH_VERSION, "OffsetForLeaderPartition", partition=r.partition,
                current_leader_epoch=r.current_leader_epoch, leader_epoch=r.leader_epoch))
        req = request_entity(23, EPOCH_VERSION, replica_id=self.broker_id, topics=tuple(
            nested_request(23, EPOCH_VERSION, "OffsetForLeaderTopic", topic=t,
                           partitions=tuple(ps)) for t, ps in by_topic.items()))
        resp = await self._conn.request(req)
        return [EpochResult(t.topic, int(r.partition), int(r.error_code), int(r.leader_epoch),
                            int(r.end_offset)) for t in resp.topics for r in t.partitions]

    @property
    def address(self) -> tuple[str, int]:
        return self._conn.host, self._conn.port

    def close(self) -> None:
        self._conn.close()
