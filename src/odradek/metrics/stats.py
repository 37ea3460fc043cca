"""Hot-path counters: plain integers bumped by the broker, read by the metrics collector.

The produce and fetch paths run on the broker's one event-loop thread, so a counter is
an ``int`` attribute incremented in place: no lock, no label lookup in a registry, no
Prometheus object on the hot path (a labelled ``prometheus_client.Counter`` costs a dict
lookup and a lock per increment). The collector (``odradek.broker.metrics``) turns these
into Prometheus families only when scraped.

Names follow Kafka's MBeans: ``BrokerTopicMetrics`` (BytesInPerSec, BytesOutPerSec,
MessagesInPerSec, ...) and ``RequestMetrics`` (RequestsPerSec, TotalTimeMs,
RequestQueueTimeMs, LocalTimeMs, RemoteTimeMs).
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

__all__ = [
    "LATENCY_BUCKETS_MS",
    "LatencyHistogram",
    "ApiRequestMetrics",
    "RequestMetrics",
    "TopicStats",
    "BrokerTopicStats",
    "IsrStats",
]

# Upper bounds (ms) of the request latency buckets: sub-millisecond answers on loopback
# up to the 30 s request timeout. 18 buckets keep a scrape small for ~26 APIs x 4 parts.
LATENCY_BUCKETS_MS: tuple[float, ...] = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
    30000.0,
)


class LatencyHistogram:
    """Counts per bucket (non-cumulative; the last one is +Inf) and the sum, in ms."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.sum = 0.0

    def observe(self, ms: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le=bound).
        self.counts[bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        self.sum += ms

    def copy(self) -> LatencyHistogram:
        """An independent snapshot (a scrape renders it off the event loop while the
        original keeps counting)."""
        c = LatencyHistogram()
        c.counts = list(self.counts)
        c.sum = self.sum
        return c

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus buckets: (le, cumulative count), ending with +Inf."""
        out: list[tuple[str, int]] = []
        acc = 0
        for bound, n in zip(LATENCY_BUCKETS_MS, self.counts):
            acc += n
            out.append((repr(bound), acc))
        out.append(("+Inf", acc + self.counts[-1]))
        return out


@dataclass(slots=True)
class ApiRequestMetrics:
    """Kafka's ``kafka.network:type=RequestMetrics,request=<Api>`` for one API.

    total = queue + local + remote (+ the wait for an earlier answer on the same
    connection, which is part of total only): *queue* from the frame's arrival until its
    handler starts (behind a request still being answered on the connection), *local*
    the handler's own work on the event loop (decode, append or read, encode), *remote*
    the wait in a purgatory (acks=all replication, a fetch's long poll, a ZooKeeper
    write)."""

    requests: dict[int, int] = field(default_factory=dict)  # per request version
    total: LatencyHistogram = field(default_factory=LatencyHistogram)
    queue: LatencyHistogram = field(default_factory=LatencyHistogram)
    local: LatencyHistogram = field(default_factory=LatencyHistogram)
    remote: LatencyHistogram = field(default_factory=LatencyHistogram)


class RequestMetrics:
    """Request metrics of every API key, created on first use."""

    def __init__(self) -> None:
        self.apis: dict[int, ApiRequestMetrics] = {}

    def api(self, api_key: int) -> ApiRequestMetrics:
        m = self.apis.get(api_key)
        if m is None:
            m = self.apis[api_key] = ApiRequestMetrics()
        return m

    def record(
        self,
        api_key: int,
        version: int,
        queue_ms: float,
        local_ms: float,
        remote_ms: float,
        total_ms: float,
    ) -> None:
        m = self.apis.get(api_key)
        if m is None:
            m = self.api(api_key)
        m.requests[version] = m.requests.get(version, 0) + 1
        m.queue.observe(queue_ms)
        m.local.observe(local_ms)
        m.remote.observe(remote_ms)
        m.total.observe(total_ms)


@dataclass(slots=True)
class TopicStats:
    """Kafka's ``BrokerTopicMetrics`` for one topic (counts since the broker started)."""

    bytes_in: int = 0  # BytesInPerSec: produce requests' record bytes (leader)
    messages_in: int = 0  # MessagesInPerSec: records appended as leader
    bytes_out: int = 0  # BytesOutPerSec: record bytes sent to consumers
    replication_bytes_out: int = 0  # ReplicationBytesOutPerSec: sent to followers
    produce_requests: int = 0  # TotalProduceRequestsPerSec (per partition, as Kafka)
    failed_produce_requests: int = 0  # FailedProduceRequestsPerSec
    fetch_requests: int = 0  # TotalFetchRequestsPerSec (per partition)


class BrokerTopicStats:
    """Per-topic ``TopicStats``; the all-topics figures are their sum at scrape time."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}

    def topic(self, name: str) -> TopicStats:
        s = self.topics.get(name)
        if s is None:
            s = self.topics[name] = TopicStats()
        return s

    def remove(self, name: str) -> None:
        """A deleted topic's series go away (Kafka removes its MBeans)."""
        self.topics.pop(name, None)

    def all_topics(self) -> TopicStats:
        total = TopicStats()
        for s in list(self.topics.values()):
            total.bytes_in += s.bytes_in
            total.messages_in += s.messages_in
            total.bytes_out += s.bytes_out
            total.replication_bytes_out += s.replication_bytes_out
            total.produce_requests += s.produce_requests
            total.failed_produce_requests += s.failed_produce_requests
            total.fetch_requests += s.fetch_requests
        return total


@dataclass(slots=True)
class IsrStats:
    """``ReplicaManager`` IsrShrinksPerSec / IsrExpandsPerSec: ISR changes this broker
    made as leader and ZooKeeper recorded."""

    shrinks: int = 0
    expands: int = 0

    def record_change(self, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        # A write may both remove and add members (rare): count each direction.
        if set(old) - set(new):
            self.shrinks += 1
        if set(new) - set(old):
            self.expands += 1
