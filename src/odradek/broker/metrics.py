"""A broker's Prometheus metrics, named as the JMX exporter names Kafka's MBeans.

``BrokerMetrics`` owns the hot-path counters (``odradek.metrics.stats``: request
metrics, per-topic byte counts) and a prometheus-client ``CollectorRegistry`` whose
collector reads everything else from the broker's state *when scraped*: replica counts
from the replica manager, controller figures from the metadata image, log sizes and
offsets from the logs, the ZooKeeper session, the event-loop stall detector. Nothing is
computed between scrapes, so a broker that is not scraped pays only the counters.

A scrape stays off the request path (every request runs on the broker's one event loop):
``render_async`` copies the figures it needs into a plain ``_Snapshot`` on the loop, a
slice of at most ``SLICE_S`` per loop step, and builds the families and the exposition
text in a worker thread from that copy (the metadata image is immutable, so the thread
reads it as is). The per-partition families are rendered incrementally
(``partition_metrics``): a partition's text is made again only when its figures changed
since the previous scrape. Rendering everything on the loop stopped a broker for 10-30 ms
per scrape at a few thousand partitions, and was most of a default cluster's p99; at
10,000 partitions rendering them all in the thread took ~0.5 s of CPU per scrape, with
the loop waiting for the GIL (issue 29).

The mapping (lower-cased, like the JMX exporter's Kafka example rules)::

  kafka.server:type=ReplicaManager,name=X          kafka_server_replicamanager_x
  kafka.controller:type=KafkaController,name=X     kafka_controller_kafkacontroller_x
  kafka.server:type=BrokerTopicMetrics,name=XPerSec,topic=T
                                                   kafka_server_brokertopicmetrics_x_total{topic}
  kafka.network:type=RequestMetrics,name=RequestsPerSec,request=R,version=V
                                                   kafka_network_requestmetrics_requests_total
  kafka.network:type=RequestMetrics,name=TotalTimeMs,request=R   (a histogram here)
                                                   kafka_network_requestmetrics_totaltimems_*
  kafka.log:type=Log,name=Size,topic=T,partition=P kafka_log_log_size{topic,partition}
  kafka.cluster:type=Partition,name=X,topic,partition   kafka_cluster_partition_x
  kafka.server:type=SessionExpireListener,name=X   kafka_server_sessionexpirelistener_x
  kafka.server:type=socket-server-metrics,listener=L,networkProcessor=N  (attribute A)
                                                   kafka_server_socket_server_metrics_a{listener}
  kafka.network:type=RequestChannel,name=RequestQueueSize
                                                   kafka_network_requestchannel_requestqueuesize
  kafka.server:type=Produce,user=U,client-id=C (attribute throttle-time, byte-rate)
                                                   kafka_server_produce_throttle_time{user,client_id}
  kafka.server:type=Fetch,...                      kafka_server_fetch_throttle_time, ..._byte_rate
  kafka.server:type=Request,...                    kafka_server_request_throttle_time, ..._request_time

Beyond Kafka: ``odradek_eventloop_*`` (the loop every request runs on).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from odradek.broker.partition_metrics import (
    PartitionFigures,
    PartitionSeries,
    RenderedPartitions,
    ReplicaCounts,
)
from odradek.metadata.image import MetadataImage
from odradek.metrics.stats import (
    BrokerTopicStats,
    LatencyHistogram,
    RequestMetrics,
    TopicStats,
)
from odradek.protocol.versions import api_name
from odradek.replication.partition import Role

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["BrokerMetrics", "ZkSessionStats", "SESSION_STATES", "SLICE_S"]

# Event-loop time a scrape may take in one step while it reads the partitions' figures
# (and renders those that changed): requests run between the steps (issue 29: a scrape
# must not stop the loop for more than 1 ms).
SLICE_S = 0.0005

# Kafka's SessionExpireListener SessionState values, from kazoo's states: SUSPENDED is
# "disconnected, reconnecting", LOST is an expired session until a new one is made.
SESSION_STATES = ("CONNECTED", "CONNECTING", "EXPIRED", "CLOSED")
_KAZOO_TO_KAFKA = {"CONNECTED": "CONNECTED", "SUSPENDED": "CONNECTING", "LOST": "EXPIRED"}

_TOPIC_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("bytesin", "bytes_in", "Record bytes produced to this broker as leader"),
    ("bytesout", "bytes_out", "Record bytes fetched by consumers"),
    ("messagesin", "messages_in", "Records appended as leader"),
    ("replicationbytesout", "replication_bytes_out", "Record bytes fetched by followers"),
    ("totalproducerequests", "produce_requests", "Produce requests, per partition"),
    (
        "failedproducerequests",
        "failed_produce_requests",
        "Produce requests that failed, per partition",
    ),
    ("totalfetchrequests", "fetch_requests", "Fetch requests, per partition"),
)

_REQUEST_TIMES: tuple[tuple[str, str, str], ...] = (
    ("totaltimems", "total", "Request time from arrival to answer (ms)"),
    ("requestqueuetimems", "queue", "Time a request waited before its handler ran (ms)"),
    ("localtimems", "local", "Time in the request's handler on the event loop (ms)"),
    ("remotetimems", "remote", "Time a request waited in a purgatory: replication, long poll (ms)"),
)


class ZkSessionStats:
    """Kafka's ZooKeeperDisconnectsPerSec / ZooKeeperExpiresPerSec /
    ZooKeeperSyncConnectsPerSec, from kazoo's state listener (kazoo's thread; plain int
    increments are atomic enough for counters read by a scrape)."""

    def __init__(self) -> None:
        self.disconnects = 0
        self.expires = 0
        self.connects = 0

    def on_state(self, state: str) -> None:
        if state == "SUSPENDED":
            self.disconnects += 1
        elif state == "LOST":
            self.expires += 1
        elif state == "CONNECTED":
            self.connects += 1


@dataclass(slots=True)
class _ApiRow:
    requests: dict[int, int]
    times: dict[str, LatencyHistogram]  # "total", "queue", "local", "remote"


@dataclass(slots=True)
class _Snapshot:
    """Everything a scrape reports, as plain values (safe to read from another thread)."""

    image: MetadataImage
    stopping: bool
    controller_active: bool
    isr_shrinks: int = 0
    isr_expands: int = 0
    topics: list[tuple[str, TopicStats]] = field(default_factory=list)
    apis: list[tuple[int, _ApiRow]] = field(default_factory=list)
    # listener -> (open, created, closed, rejected); the shared request queue's size
    listeners: list[tuple[str, tuple[int, int, int, int]]] = field(default_factory=list)
    request_queue: int | None = None
    partitions: RenderedPartitions | None = None
    zk_state: str = "CONNECTING"
    zk_counts: tuple[int, int, int] = (0, 0, 0)  # disconnects, expires, connects
    # stalls, threshold (s), max lag since the previous scrape (s); None: detector off
    event_loop: tuple[int, float, float] | None = None
    # cumulative (upper bound s, heartbeats) of heartbeat lateness, and its sum (s)
    event_loop_lag: tuple[list[tuple[float, int]], float] | None = None
    # full garbage collections: count, total s, longest since the previous scrape (s)
    full_gcs: tuple[int, float, float] | None = None
    heap: tuple[bool, int, int] | None = None  # frozen, freezes, unfreezes
    # (kind, measured, doc, [(user, client id, throttle ms, rate)]) per quota manager
    quotas: list[tuple[str, str, str, list[tuple[str, str, float, float]]]] = field(
        default_factory=list
    )


class BrokerMetrics:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.requests = RequestMetrics()
        self.topics = BrokerTopicStats()
        self.zk_session = ZkSessionStats()
        self.started = time.time()
        # The process's CPU, memory, open files and GC: a scrape-time read of /proc, in
        # the rendering thread.
        self._system = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._system)
        PlatformCollector(registry=self._system)
        GCCollector(registry=self._system)
        self._partition_series = PartitionSeries()
        # One snapshot at a time: the partition series is a scrape-to-scrape state.
        self._rendering = asyncio.Lock()

    async def render_async(self, names: frozenset[str] | None = None) -> bytes:
        """The exposition text (only the samples in ``names``, if given): figures copied
        on the loop in slices (the partitions' text rendered there only where their
        figures changed), the rest built in a worker thread (see the module docstring)."""
        async with self._rendering:
            snap = await self._snapshot()
            text = await asyncio.to_thread(self._format, snap, names)
            if snap.partitions is not None:
                self._partition_series.remember_order(snap.partitions)
            return text

    def _format(self, snap: _Snapshot, names: frozenset[str] | None) -> bytes:
        head = generate_latest(_Families(snap, self._system, names))
        if snap.partitions is None:
            return head
        return head + snap.partitions.text(names).encode()

    async def _snapshot(self) -> _Snapshot:
        b = self.broker
        stats = self.topics
        image = b.image
        if image.complete:  # a deleted topic's series go away, as Kafka's MBeans do
            for name in [t for t in stats.topics if t not in image.topics]:
                stats.remove(name)
        snap = _Snapshot(
            image=image,
            stopping=b.stopping,
            controller_active=b.controller is not None and b.controller.active,
        )
        isr = b.replicas.isr_stats
        snap.isr_shrinks, snap.isr_expands = isr.shrinks, isr.expands
        snap.topics = [(t, replace(ts)) for t, ts in sorted(stats.topics.items())]
        snap.apis = [
            (
                key,
                _ApiRow(
                    dict(m.requests),
                    {attr: getattr(m, attr).copy() for _, attr, _ in _REQUEST_TIMES},
                ),
            )
            for key, m in sorted(self.requests.apis.items())
        ]
        for listener, srv in b.socket_servers.items():
            snap.listeners.append(
                (
                    listener,
                    (
                        len(srv.connections),
                        srv.connections_created,
                        srv.connections_closed,
                        srv.connections_rejected,
                    ),
                )
            )
            snap.request_queue = srv.request_queue.queued
        zk = b.zk
        if zk is None:
            snap.zk_state = "CONNECTING"
        elif not zk.connected and str(zk.state) == "LOST" and b.stopping:
            snap.zk_state = "CLOSED"
        else:
            snap.zk_state = _KAZOO_TO_KAFKA.get(str(zk.state), "CONNECTING")
        z = self.zk_session
        snap.zk_counts = (z.disconnects, z.expires, z.connects)
        det = b.stall_detector
        if det is not None:
            snap.event_loop = (det.stalls, det.threshold_s, det.take_max_lag())
            snap.event_loop_lag = det.lag_histogram()
            gcs = det.collections
            snap.full_gcs = (gcs.count, gcs.total_s, gcs.take_max())
        heap = b.heap
        if heap is not None:
            snap.heap = (heap.frozen, heap.freezes, heap.unfreezes)
        quotas = b.context.quotas
        now_ms = time.monotonic() * 1000.0
        for kind, manager, measured, doc in (
            ("produce", quotas.produce, "byte_rate", "Produce bytes/s"),
            ("fetch", quotas.fetch, "byte_rate", "Fetch bytes/s"),
            (
                "request",
                quotas.request,
                "request_time",
                "Handler time, % of one request handler thread,",
            ),
        ):
            snap.quotas.append(
                (
                    kind,
                    measured,
                    doc,
                    [
                        (x.user, x.client_id, x.throttle_avg_ms(now_ms), x.byte_rate(now_ms))
                        for x in list(manager.sensors.values())
                    ],
                )
            )
        # The per-partition figures, a slice per loop step: requests run in between.
        series = self._partition_series
        series.begin()
        items = list(b.replicas.partitions.items())
        offline = Role.OFFLINE
        clock = time.perf_counter
        step_end = clock() + SLICE_S
        for n, (key, p) in enumerate(items):
            if not n & 31 and clock() > step_end:
                await asyncio.sleep(0)
                step_end = clock() + SLICE_S
            lg = p.log
            leader = p.is_leader
            series.put(
                key,
                PartitionFigures(
                    lg.size_bytes,
                    lg.log_end_offset,
                    lg.log_start_offset,
                    len(lg.segments),
                    p.high_watermark,
                    leader,
                    p.role is offline,
                    p.leader_id,
                    len(p.isr) if leader else 0,
                    len(p.replicas) if leader else 0,
                    p.min_insync_replicas,
                ),
            )
        snap.partitions = series.commit()
        return snap


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class _Families(Collector):
    """What one scrape renders: the snapshot's families, built in the rendering thread
    (each scrape has its own, so two scrapes at once cannot mix), then the process's."""

    def __init__(
        self, snap: _Snapshot, system: CollectorRegistry, names: frozenset[str] | None
    ) -> None:
        self.snap = snap
        self.system = system
        self.names = names

    def collect(self) -> Iterator[Metric]:
        if self.names is None:
            yield from self._all()
            return
        for m in self._all():  # prometheus-client's name[] rule: samples by name
            samples = [s for s in m.samples if s.name in self.names]
            if samples:
                kept = Metric(m.name, m.documentation, m.type, m.unit)
                kept.samples = samples
                yield kept

    def _all(self) -> Iterator[Metric]:
        snap = self.snap
        yield from self._replica_manager(snap)
        yield from self._controller(snap)
        yield from self._topics(snap)
        yield from self._requests(snap)
        yield from self._socket_server(snap)
        yield from self._zookeeper(snap)
        yield from self._event_loop(snap)
        yield from self._client_quotas(snap)
        yield _gauge(
            "kafka_server_kafkaserver_brokerstate",
            "Kafka's BrokerState: 3 running as broker, 6 shutting down",
            6 if snap.stopping else 3,
        )
        yield from self.system.collect()

    # ------------------------------------------------------------------ ReplicaManager
    def _replica_manager(self, snap: _Snapshot) -> Iterator[Metric]:
        c = (
            snap.partitions.counts(set(snap.image.brokers))
            if snap.partitions is not None
            else ReplicaCounts(0, 0, 0, 0, 0, 0)
        )
        prefix = "kafka_server_replicamanager_"
        yield _gauge(prefix + "partitioncount", "Replicas hosted on this broker", c.partitions)
        yield _gauge(prefix + "leadercount", "Partitions this broker leads", c.leaders)
        yield _gauge(
            prefix + "underreplicatedpartitions",
            "Led partitions whose ISR is smaller than the replica set",
            c.under_replicated,
        )
        yield _gauge(
            prefix + "underminisrpartitioncount",
            "Led partitions whose ISR is below min.insync.replicas",
            c.under_min_isr,
        )
        yield _gauge(
            prefix + "atminisrpartitioncount",
            "Led partitions whose ISR is exactly min.insync.replicas",
            c.at_min_isr,
        )
        yield _gauge(
            prefix + "offlinereplicacount",
            "Replicas on this broker whose partition has no live leader",
            c.offline,
        )
        yield CounterMetricFamily(
            prefix + "isrshrinks",
            "ISR shrinks this broker recorded as leader",
            value=snap.isr_shrinks,
        )
        yield CounterMetricFamily(
            prefix + "isrexpands",
            "ISR expansions this broker recorded as leader",
            value=snap.isr_expands,
        )

    # ------------------------------------------------------------------ controller
    def _controller(self, snap: _Snapshot) -> Iterator[Metric]:
        """Kafka reports these on the active controller only (0 elsewhere), so that a
        sum over the brokers is the cluster's figure."""
        active = snap.controller_active
        image = snap.image
        offline = imbalance = partitions = 0
        if active:
            live = set(image.brokers)
            for t in image.topics.values():
                for p in t.partitions.values():
                    partitions += 1
                    if p.leader < 0 or p.leader not in live:
                        offline += 1
                    elif p.replicas and p.leader != p.replicas[0]:
                        imbalance += 1
        prefix = "kafka_controller_kafkacontroller_"
        yield _gauge(
            prefix + "activecontrollercount",
            "1 on the broker that is the active controller",
            int(active),
        )
        yield _gauge(
            prefix + "offlinepartitionscount",
            "Partitions without a live leader (controller only)",
            offline,
        )
        yield _gauge(
            prefix + "preferredreplicaimbalancecount",
            "Partitions not led by their preferred replica (controller only)",
            imbalance,
        )
        yield _gauge(
            prefix + "globaltopiccount",
            "Topics (controller only)",
            len(image.topics) if active else 0,
        )
        yield _gauge(prefix + "globalpartitioncount", "Partitions (controller only)", partitions)

    # ------------------------------------------------------------------ BrokerTopicMetrics
    def _topics(self, snap: _Snapshot) -> Iterator[Metric]:
        total = TopicStats()
        for _, ts in snap.topics:
            for _, attr, _ in _TOPIC_COUNTERS:
                setattr(total, attr, getattr(total, attr) + getattr(ts, attr))
        for short, attr, doc in _TOPIC_COUNTERS:
            name = f"kafka_server_brokertopicmetrics_{short}"
            fam = Metric(name, doc, "counter")
            # The JMX exporter exports the all-topics MBean without a topic label and
            # each topic's with one, in the same family.
            fam.add_sample(name + "_total", {}, getattr(total, attr))
            for topic, ts in snap.topics:
                fam.add_sample(name + "_total", {"topic": topic}, getattr(ts, attr))
            yield fam

    # ------------------------------------------------------------------ RequestMetrics
    def _requests(self, snap: _Snapshot) -> Iterator[Metric]:
        reqs = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, per API and version",
            labels=["request", "version"],
        )
        for key, row in snap.apis:
            for version, n in sorted(row.requests.items()):
                reqs.add_metric([api_name(key), str(version)], n)
        yield reqs
        for short, attr, doc in _REQUEST_TIMES:
            fam = HistogramMetricFamily(
                f"kafka_network_requestmetrics_{short}", doc, labels=["request"]
            )
            for key, row in snap.apis:
                h = row.times[attr]
                fam.add_metric([api_name(key)], h.cumulative(), h.sum)
            yield fam

    # ------------------------------------------------------------------ SocketServer
    def _socket_server(self, snap: _Snapshot) -> Iterator[Metric]:
        """Kafka's socket-server-metrics per listener (one network processor each here:
        the event loop) and RequestChannel's queue (``queued.max.requests``, shared)."""
        prefix = "kafka_server_socket_server_metrics_"
        count = GaugeMetricFamily(
            prefix + "connection_count", "Open client connections", labels=["listener"]
        )
        created = CounterMetricFamily(
            prefix + "connection_creation", "Connections accepted", labels=["listener"]
        )
        closed = CounterMetricFamily(
            prefix + "connection_close", "Connections closed", labels=["listener"]
        )
        rejected = CounterMetricFamily(
            "odradek_socketserver_connections_rejected",
            "Connections closed at accept: their address had max.connections.per.ip",
            labels=["listener"],
        )
        for listener, (n_open, n_created, n_closed, n_rejected) in snap.listeners:
            count.add_metric([listener], n_open)
            created.add_metric([listener], n_created)
            closed.add_metric([listener], n_closed)
            rejected.add_metric([listener], n_rejected)
        yield count
        yield created
        yield closed
        yield rejected
        if snap.request_queue is not None:
            yield _gauge(
                "kafka_network_requestchannel_requestqueuesize",
                "Requests read but not yet handled, all connections "
                "(bounded by queued.max.requests)",
                snap.request_queue,
            )

    # ------------------------------------------------------------------ ZooKeeper
    def _zookeeper(self, snap: _Snapshot) -> Iterator[Metric]:
        prefix = "kafka_server_sessionexpirelistener_"
        state = GaugeMetricFamily(
            prefix + "sessionstate",
            "ZooKeeper session state (1 for the current one)",
            labels=["state"],
        )
        for s in SESSION_STATES:
            state.add_metric([s], int(s == snap.zk_state))
        yield state
        disconnects, expires, connects = snap.zk_counts
        yield CounterMetricFamily(
            prefix + "zookeeperdisconnects", "ZooKeeper connection losses", value=disconnects
        )
        yield CounterMetricFamily(
            prefix + "zookeeperexpires", "ZooKeeper session expirations", value=expires
        )
        yield CounterMetricFamily(
            prefix + "zookeepersyncconnects", "ZooKeeper (re)connections", value=connects
        )

    # ------------------------------------------------------------------ client quotas
    def _client_quotas(self, snap: _Snapshot) -> Iterator[Metric]:
        """kafka.server:type=Produce|Fetch|Request,user=U,client-id=C, attributes
        throttle-time (average ms over the quota window) and byte-rate (Request:
        request-time, % of a handler thread): one series per quota sensor, so a broker
        without quotas exports none."""
        for kind, measured, doc, sensors in snap.quotas:
            throttle = GaugeMetricFamily(
                f"kafka_server_{kind}_throttle_time",
                f"Average {kind} throttle time over the quota window (ms)",
                labels=["user", "client_id"],
            )
            rate = GaugeMetricFamily(
                f"kafka_server_{kind}_{measured}",
                f"{doc} of the quota entity over the quota window",
                labels=["user", "client_id"],
            )
            for user, client_id, throttle_ms, value in sensors:
                throttle.add_metric([user, client_id], throttle_ms)
                rate.add_metric([user, client_id], value)
            yield throttle
            yield rate

    # ------------------------------------------------------------------ event loop
    def _event_loop(self, snap: _Snapshot) -> Iterator[Metric]:
        if snap.event_loop is None:
            return
        stalls, threshold_s, max_lag_s = snap.event_loop
        yield CounterMetricFamily(
            "odradek_eventloop_stalls",
            "Times the event loop was late by more than the stall "
            "threshold (the broker log has the loop's stack)",
            value=stalls,
        )
        yield _gauge(
            "odradek_eventloop_stall_threshold_seconds",
            "Lateness that counts as a stall",
            threshold_s,
        )
        yield _gauge(
            "odradek_eventloop_max_lag_seconds",
            "Largest heartbeat lateness seen since the previous scrape",
            max_lag_s,
        )
        if snap.event_loop_lag is not None:
            buckets, total_s = snap.event_loop_lag
            fam = HistogramMetricFamily(
                "odradek_eventloop_lag_seconds",
                "Lateness of the stall detector's heartbeats (one every threshold/4): "
                "with a small threshold, the distribution of the loop's stalls",
            )
            fam.add_metric(
                [], [("+Inf" if b == float("inf") else repr(b), n) for b, n in buckets], total_s
            )
            yield fam
        if snap.full_gcs is not None:
            count, total_s, longest_s = snap.full_gcs
            yield CounterMetricFamily(
                "odradek_gc_full_collections",
                "Full (generation-2) garbage collections; each stops the event loop",
                value=count,
            )
            yield CounterMetricFamily(
                "odradek_gc_full_collection_seconds",
                "Time spent in full garbage collections",
                value=total_s,
            )
            yield _gauge(
                "odradek_gc_full_collection_max_seconds",
                "Longest full garbage collection since the previous scrape",
                longest_s,
            )
        if snap.heap is not None:
            frozen, freezes, unfreezes = snap.heap
            yield _gauge(
                "odradek_gc_heap_frozen",
                "1 while the settled heap is frozen out of full garbage collections "
                "(odradek.heap.freeze.settle.ms)",
                float(frozen),
            )
            yield CounterMetricFamily(
                "odradek_gc_heap_freezes", "Times the settled heap was frozen", value=freezes
            )
            yield CounterMetricFamily(
                "odradek_gc_heap_unfreezes", "Times the heap was unfrozen", value=unfreezes
            )
