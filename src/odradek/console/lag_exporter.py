"""Consumer lag (and partition offsets) for Prometheus, named as kafka-exporter names
them, from the console's latest snapshot: the console is the "light collector" that
asks the cluster, so brokers need not compute lag themselves."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from odradek.console.snapshot import Snapshot

logger = logging.getLogger(__name__)

__all__ = ["LagCollector"]


class LagCollector(Collector):
    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot()
        tpl = ["consumergroup", "topic", "partition"]
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "Log end (high watermark) minus the committed offset",
            labels=tpl,
        )
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "Committed offset of the group", labels=tpl
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "Lag of the group over a topic's partitions",
            labels=["consumergroup", "topic"],
        )
        members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of the group", labels=["consumergroup"]
        )
        for g in snap.groups:
            members.add_metric([g.group_id], len(g.members))
            sums: dict[str, int] = {}
            for r in g.lags:
                lv = [g.group_id, r.topic, str(r.partition)]
                if r.committed is not None:
                    current.add_metric(lv, r.committed)
                if r.lag is not None:
                    lag.add_metric(lv, r.lag)
                    sums[r.topic] = sums.get(r.topic, 0) + r.lag
            for topic, v in sorted(sums.items()):
                lag_sum.add_metric([g.group_id, topic], v)
        pl = ["topic", "partition"]
        newest = GaugeMetricFamily(
            "kafka_topic_partition_current_offset", "High watermark of the partition", labels=pl
        )
        oldest = GaugeMetricFamily(
            "kafka_topic_partition_oldest_offset", "Log start offset of the partition", labels=pl
        )
        leader = GaugeMetricFamily("kafka_topic_partition_leader", "Leader broker id", labels=pl)
        isr = GaugeMetricFamily("kafka_topic_partition_in_sync_replica", "ISR size", labels=pl)
        urp = GaugeMetricFamily(
            "kafka_topic_partition_under_replicated_partition",
            "1 if the ISR is smaller than the replicas",
            labels=pl,
        )
        for t in snap.topics:
            for p in t.partitions:
                lv = [t.name, str(p.partition)]
                if p.high_watermark is not None:
                    newest.add_metric(lv, p.high_watermark)
                if p.log_start_offset is not None:
                    oldest.add_metric(lv, p.log_start_offset)
                leader.add_metric(lv, p.leader)
                isr.add_metric(lv, len(p.isr))
                urp.add_metric(lv, int(p.under_replicated))
        brokers = GaugeMetricFamily(
            "kafka_brokers", "Brokers up", value=sum(b.up for b in snap.brokers)
        )
        yield from (lag, current, lag_sum, members, newest, oldest, leader, isr, urp, brokers)
