"""A broker's Prometheus metrics, named as the JMX exporter names Kafka's MBeans.

``BrokerMetrics`` owns the hot-path counters (``odradek.metrics.stats``: request
metrics, per-topic byte counts) and a prometheus-client ``CollectorRegistry`` whose
collector reads everything else from the broker's state *when scraped*: replica counts
from the replica manager, controller figures from the metadata image, log sizes and
offsets from the logs, the ZooKeeper session, the event-loop stall detector. Nothing is
computed between scrapes, so a broker that is not scraped pays only the counters.

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

import logging
import time
from collections.abc import Iterator
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

from odradek.metrics.stats import BrokerTopicStats, RequestMetrics, TopicStats
from odradek.protocol.versions import api_name
from odradek.replication.partition import Role

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["BrokerMetrics", "ZkSessionStats", "SESSION_STATES"]

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
    ("failedproducerequests", "failed_produce_requests",
     "Produce requests that failed, per partition"),
    ("totalfetchrequests", "fetch_requests", "Fetch requests, per partition"),
)

_REQUEST_TIMES: tuple[tuple[str, str, str], ...] = (
    ("totaltimems", "total", "Request time from arrival to answer (ms)"),
    ("requestqueuetimems", "queue", "Time a request waited before its handler ran (ms)"),
    ("localtimems", "local", "Time in the request's handler on the event loop (ms)"),
    ("remotetimems", "remote",
     "Time a request waited in a purgatory: replication, long poll (ms)"),
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


class BrokerMetrics:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.requests = RequestMetrics()
        self.topics = BrokerTopicStats()
        self.zk_session = ZkSessionStats()
        self.started = time.time()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_BrokerCollector(self))
        # The process's CPU, memory, open files and GC: a scrape-time read of /proc.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class _BrokerCollector(Collector):
    def __init__(self, metrics: BrokerMetrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Metric]:
        b = self.m.broker
        yield from self._replica_manager(b)
        yield from self._controller(b)
        yield from self._topics(b)
        yield from self._requests()
        yield from self._socket_server(b)
        yield from self._partitions_and_logs(b)
        yield from self._zookeeper(b)
        yield from self._event_loop(b)
        yield from self._client_quotas(b)
        yield _gauge("kafka_server_kafkaserver_brokerstate",
                     "Kafka's BrokerState: 3 running as broker, 6 shutting down",
                     6 if b.stopping else 3)

    # ------------------------------------------------------------------ ReplicaManager
    def _replica_manager(self, b: Broker) -> Iterator[Metric]:
        parts = list(b.replicas.partitions.values())
        live = set(b.image.brokers)
        leaders = [p for p in parts if p.is_leader]
        under = [p for p in leaders if len(p.isr) < len(p.replicas)]
        under_min = [p for p in leaders if len(p.isr) < p.min_insync_replicas]
        at_min = [p for p in leaders if len(p.isr) == p.min_insync_replicas]
        # Kafka counts replicas on a failed log dir; Odradek has one log dir per broker,
        # so a replica here is offline when its partition has no live leader.
        offline = [p for p in parts if p.role is Role.OFFLINE or
                   (p.leader_id >= 0 and live and p.leader_id not in live)]
        prefix = "kafka_server_replicamanager_"
        yield _gauge(prefix + "partitioncount", "Replicas hosted on this broker", len(parts))
        yield _gauge(prefix + "leadercount", "Partitions this broker leads", len(leaders))
        yield _gauge(prefix + "underreplicatedpartitions",
                     "Led partitions whose ISR is smaller than the replica set", len(under))
        yield _gauge(prefix + "underminisrpartitioncount",
                     "Led partitions whose ISR is below min.insync.replicas", len(under_min))
        yield _gauge(prefix + "atminisrpartitioncount",
                     "Led partitions whose ISR is exactly min.insync.replicas", len(at_min))
        yield _gauge(prefix + "offlinereplicacount",
                     "Replicas on this broker whose partition has no live leader",
                     len(offline))
        stats = b.replicas.isr_stats
        yield CounterMetricFamily(prefix + "isrshrinks",
                                  "ISR shrinks this broker recorded as leader",
                                  value=stats.shrinks)
        yield CounterMetricFamily(prefix + "isrexpands",
                                  "ISR expansions this broker recorded as leader",
                                  value=stats.expands)

    # ------------------------------------------------------------------ controller
    def _controller(self, b: Broker) -> Iterator[Metric]:
        """Kafka reports these on the active controller only (0 elsewhere), so that a
        sum over the brokers is the cluster's figure."""
        active = b.controller is not None and b.controller.active
        image = b.image
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
        yield _gauge(prefix + "activecontrollercount",
                     "1 on the broker that is the active controller", int(active))
        yield _gauge(prefix + "offlinepartitionscount",
                     "Partitions without a live leader (controller only)", offline)
        yield _gauge(prefix + "preferredreplicaimbalancecount",
                     "Partitions not led by their preferred replica (controller only)",
                     imbalance)
        yield _gauge(prefix + "globaltopiccount", "Topics (controller only)",
                     len(image.topics) if active else 0)
        yield _gauge(prefix + "globalpartitioncount", "Partitions (controller only)",
                     partitions)

    # ------------------------------------------------------------------ BrokerTopicMetrics
    def _topics(self, b: Broker) -> Iterator[Metric]:
        stats = self.m.topics
        if b.image.complete:  # a deleted topic's series go away, as Kafka's MBeans do
            for name in [t for t in stats.topics if t not in b.image.topics]:
                stats.remove(name)
        total = stats.all_topics()
        per_topic: list[tuple[str, TopicStats]] = sorted(stats.topics.items())
        for short, attr, doc in _TOPIC_COUNTERS:
            name = f"kafka_server_brokertopicmetrics_{short}"
            fam = Metric(name, doc, "counter")
            # The JMX exporter exports the all-topics MBean without a topic label and
            # each topic's with one, in the same family.
            fam.add_sample(name + "_total", {}, getattr(total, attr))
            for topic, s in per_topic:
                fam.add_sample(name + "_total", {"topic": topic}, getattr(s, attr))
            yield fam

    # ------------------------------------------------------------------ RequestMetrics
    def _requests(self) -> Iterator[Metric]:
        apis = sorted(self.m.requests.apis.items())
        reqs = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                   "Requests answered, per API and version",
                                   labels=["request", "version"])
        for key, m in apis:
            for version, n in sorted(m.requests.items()):
                reqs.add_metric([api_name(key), str(version)], n)
        yield reqs
        for short, attr, doc in _REQUEST_TIMES:
            fam = HistogramMetricFamily(f"kafka_network_requestmetrics_{short}", doc,
                                        labels=["request"])
            for key, m in apis:
                h = getattr(m, attr)
                fam.add_metric([api_name(key)], h.cumulative(), h.sum)
            yield fam

    # ------------------------------------------------------------------ SocketServer
    def _socket_server(self, b: Broker) -> Iterator[Metric]:
        """Kafka's socket-server-metrics per listener (one network processor each here:
        the event loop) and RequestChannel's queue (``queued.max.requests``, shared)."""
        prefix = "kafka_server_socket_server_metrics_"
        count = GaugeMetricFamily(prefix + "connection_count", "Open client connections",
                                  labels=["listener"])
        created = CounterMetricFamily(prefix + "connection_creation",
                                      "Connections accepted", labels=["listener"])
        closed = CounterMetricFamily(prefix + "connection_close", "Connections closed",
                                     labels=["listener"])
        rejected = CounterMetricFamily(
            "odradek_socketserver_connections_rejected",
            "Connections closed at accept: their address had max.connections.per.ip",
            labels=["listener"])
        queue = None
        for listener, srv in b.socket_servers.items():
            count.add_metric([listener], len(srv.connections))
            created.add_metric([listener], srv.connections_created)
            closed.add_metric([listener], srv.connections_closed)
            rejected.add_metric([listener], srv.connections_rejected)
            queue = srv.request_queue
        yield count
        yield created
        yield closed
        yield rejected
        if queue is not None:
            yield _gauge("kafka_network_requestchannel_requestqueuesize",
                         "Requests read but not yet handled, all connections "
                         "(bounded by queued.max.requests)", queue.queued)

    # ------------------------------------------------------------------ Partition, Log
    def _partitions_and_logs(self, b: Broker) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes in the partition's log",
                                 labels=labels)
        leo = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset",
                                labels=labels)
        lso = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset",
                                labels=labels)
        segs = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments in the log",
                                 labels=labels)
        hw = GaugeMetricFamily("odradek_log_log_highwatermark",
                               "High watermark (beyond Kafka's MBeans: consumers read "
                               "below it)", labels=labels)
        urp = GaugeMetricFamily("kafka_cluster_partition_underreplicated",
                                "1 if this leader's ISR is smaller than the replicas",
                                labels=labels)
        isr = GaugeMetricFamily("kafka_cluster_partition_insyncreplicascount",
                                "ISR size (leader only)", labels=labels)
        reps = GaugeMetricFamily("kafka_cluster_partition_replicascount",
                                 "Replica count (leader only)", labels=labels)
        under_min = GaugeMetricFamily("kafka_cluster_partition_underminisr",
                                      "1 if the ISR is below min.insync.replicas "
                                      "(leader only)", labels=labels)
        for (topic, index), p in sorted(b.replicas.partitions.items()):
            lv = [topic, str(index)]
            lg = p.log
            size.add_metric(lv, lg.size_bytes)
            leo.add_metric(lv, lg.log_end_offset)
            lso.add_metric(lv, lg.log_start_offset)
            segs.add_metric(lv, len(lg.segments))
            hw.add_metric(lv, p.high_watermark)
            if p.is_leader:
                n_isr, n_rep = len(p.isr), len(p.replicas)
                urp.add_metric(lv, int(n_isr < n_rep))
                isr.add_metric(lv, n_isr)
                reps.add_metric(lv, n_rep)
                under_min.add_metric(lv, int(n_isr < p.min_insync_replicas))
        yield from (size, leo, lso, segs, hw, urp, isr, reps, under_min)

    # ------------------------------------------------------------------ ZooKeeper
    def _zookeeper(self, b: Broker) -> Iterator[Metric]:
        zk = b.zk
        if zk is None:
            current = "CONNECTING"
        elif not zk.connected and str(zk.state) == "LOST" and b.stopping:
            current = "CLOSED"
        else:
            current = _KAZOO_TO_KAFKA.get(str(zk.state), "CONNECTING")
        prefix = "kafka_server_sessionexpirelistener_"
        state = GaugeMetricFamily(prefix + "sessionstate",
                                  "ZooKeeper session state (1 for the current one)",
                                  labels=["state"])
        for s in SESSION_STATES:
            state.add_metric([s], int(s == current))
        yield state
        z = self.m.zk_session
        yield CounterMetricFamily(prefix + "zookeeperdisconnects",
                                  "ZooKeeper connection losses", value=z.disconnects)
        yield CounterMetricFamily(prefix + "zookeeperexpires",
                                  "ZooKeeper session expirations", value=z.expires)
        yield CounterMetricFamily(prefix + "zookeepersyncconnects",
                                  "ZooKeeper (re)connections", value=z.connects)

    # ------------------------------------------------------------------ client quotas
    def _client_quotas(self, b: Broker) -> Iterator[Metric]:
        """kafka.server:type=Produce|Fetch|Request,user=U,client-id=C, attributes
        throttle-time (average ms over the quota window) and byte-rate (Request:
        request-time, % of a handler thread): one series per quota sensor, so a broker
        without quotas exports none."""
        quotas = b.context.quotas
        now_ms = time.monotonic() * 1000.0
        for kind, manager, measured, doc in (
                ("produce", quotas.produce, "byte_rate", "Produce bytes/s"),
                ("fetch", quotas.fetch, "byte_rate", "Fetch bytes/s"),
                ("request", quotas.request, "request_time",
                 "Handler time, % of one request handler thread,")):
            throttle = GaugeMetricFamily(
                f"kafka_server_{kind}_throttle_time",
                f"Average {kind} throttle time over the quota window (ms)",
                labels=["user", "client_id"])
            rate = GaugeMetricFamily(
                f"kafka_server_{kind}_{measured}",
                f"{doc} of the quota entity over the quota window",
                labels=["user", "client_id"])
            for sensor in list(manager.sensors.values()):
                labels = [sensor.user, sensor.client_id]
                throttle.add_metric(labels, sensor.throttle_avg_ms(now_ms))
                rate.add_metric(labels, sensor.byte_rate(now_ms))
            yield throttle
            yield rate

    # ------------------------------------------------------------------ event loop
    def _event_loop(self, b: Broker) -> Iterator[Metric]:
        det = b.stall_detector
        if det is None:
            return
        yield CounterMetricFamily("odradek_eventloop_stalls",
                                  "Times the event loop was late by more than the stall "
                                  "threshold (the broker log has the loop's stack)",
                                  value=det.stalls)
        yield _gauge("odradek_eventloop_stall_threshold_seconds",
                     "Lateness that counts as a stall", det.threshold_s)
        yield _gauge("odradek_eventloop_max_lag_seconds",
                     "Largest heartbeat lateness seen since the previous scrape",
                     det.take_max_lag())
