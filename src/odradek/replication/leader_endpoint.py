"""How a follower talks to its leader (Kafka's ``LeaderEndPoint``): two calls, Fetch and
OffsetsForLeaderEpoch, behind a small interface.

``RemoteLeaderEndpoint`` speaks the Kafka protocol over TCP (Fetch v12 with our broker id
as ``replica_id`` and a KIP-227 fetch session, OffsetForLeaderEpoch v4), binding this broker's own address first so
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
from odradek.protocol.replica_fetch import (
    MalformedResponse,
    ReplicaFetchPartition,
    decode_fetch_response_v12,
    encode_replica_fetch_request,
)
from odradek.replication.broker_connection import BrokerConnection, BrokerConnectionError
from odradek.replication.fetch_session_handler import FetchRequestData
from odradek.security.client_security import PLAINTEXT, ClientSecurity

logger = logging.getLogger(__name__)

__all__ = [
    "EndpointError",
    "EndpointFactory",
    "EpochRequest",
    "EpochResult",
    "FetchRequestPartition",
    "FetchRequestData",
    "FetchResult",
    "FetchedPartition",
    "LeaderEndpoint",
    "RemoteLeaderEndpoint",
]

EPOCH_VERSION = 4

EndpointError = BrokerConnectionError  # the leader cannot be reached (retry after backoff)


# One partition of a follower's fetch (its fetch offset is our LEO, REQ-R16).
FetchRequestPartition = ReplicaFetchPartition


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


@dataclass(slots=True)
class FetchResult:
    """A fetch response: its top-level error (a session error, KIP-227), the session id
    the leader answered and the partitions it carried (incremental: only those with news)."""

    error_code: int
    session_id: int
    partitions: list[FetchedPartition]


class LeaderEndpoint(Protocol):
    async def fetch(
        self, request: FetchRequestData, *, max_wait_ms: int, min_bytes: int, max_bytes: int
    ) -> FetchResult: ...

    async def offsets_for_leader_epoch(self, requests: list[EpochRequest]) -> list[EpochResult]: ...

    def close(self) -> None: ...


# (leader_id, host, port) -> an endpoint for that leader
EndpointFactory = Callable[[int, str, int], LeaderEndpoint]


class RemoteLeaderEndpoint:
    """The Kafka protocol over one connection (one request at a time, like Kafka's
    replica fetcher thread)."""

    def __init__(
        self,
        broker_id: int,
        host: str,
        port: int,
        source_ip: str | None,
        socket_timeout_ms: int,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.broker_id = broker_id
        self.socket_timeout_s = socket_timeout_ms / 1000
        self._conn = BrokerConnection(
            host,
            port,
            source_ip,
            f"replica-fetcher-{broker_id}",
            timeout_s=self.socket_timeout_s,
            security=security,
        )

    async def fetch(
        self, request: FetchRequestData, *, max_wait_ms: int, min_bytes: int, max_bytes: int
    ) -> FetchResult:
        conn = self._conn
        corr = conn.next_correlation_id()
        data = encode_replica_fetch_request(
            corr,
            conn.client_id,
            self.broker_id,
            max_wait_ms,
            min_bytes,
            max_bytes,
            request.partitions,
            session_id=request.session_id,
            session_epoch=request.epoch,
            forgotten=request.forgotten,
        )
        frame = await conn.send(data, corr, max_wait_ms / 1000 + self.socket_timeout_s)
        try:
            got, error, session_id, parts = decode_fetch_response_v12(frame)
        except MalformedResponse as e:
            conn.close()
            raise EndpointError(f"malformed fetch response from {conn.host}: {e}") from e
        if got != corr:
            conn.close()
            raise EndpointError(f"correlation id {got} != {corr}")
        return FetchResult(
            error,
            session_id,
            [
                FetchedPartition(
                    p.topic,
                    p.partition,
                    p.error_code,
                    p.high_watermark,
                    p.log_start_offset,
                    p.records,
                )
                for p in parts
            ],
        )

    async def offsets_for_leader_epoch(self, requests: list[EpochRequest]) -> list[EpochResult]:
        by_topic: dict[str, list[Any]] = {}
        for r in requests:
            by_topic.setdefault(r.topic, []).append(
                nested_request(
                    23,
                    EPOCH_VERSION,
                    "OffsetForLeaderPartition",
                    partition=r.partition,
                    current_leader_epoch=r.current_leader_epoch,
                    leader_epoch=r.leader_epoch,
                )
            )
        req = request_entity(
            23,
            EPOCH_VERSION,
            replica_id=self.broker_id,
            topics=tuple(
                nested_request(
                    23, EPOCH_VERSION, "OffsetForLeaderTopic", topic=t, partitions=tuple(ps)
                )
                for t, ps in by_topic.items()
            ),
        )
        resp = await self._conn.request(req)
        return [
            EpochResult(
                t.topic, int(r.partition), int(r.error_code), int(r.leader_epoch), int(r.end_offset)
            )
            for t in resp.topics
            for r in t.partitions
        ]

    @property
    def address(self) -> tuple[str, int]:
        return self._conn.host, self._conn.port

    def close(self) -> None:
        self._conn.close()
