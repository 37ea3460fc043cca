"""Broker properties (Kafka 3.9 KafkaConfig, ZooKeeper mode) of replication and
leadership: min.insync.replicas, unclean election, the follower fetchers, fetch sessions
(KIP-227), replication throttles (KIP-73) and client quota windows, preferred leader
election, controlled shutdown and the controller.

Part of ``odradek.configdefs`` (see there), which assembles ``BROKER_CONFIGS`` from the
broker_* modules, in the order of ``odradek.config_tables``, and applies the Support
column.
"""

from __future__ import annotations

from odradek.config_tables.definitions import (
    ConfigDef,
    Range,
    T,
)
from odradek.config_tables.definitions import broker as _b

__all__ = ["REPLICATION_CONFIGS"]


REPLICATION_CONFIGS: list[ConfigDef] = [
    _b("min.insync.replicas", T.INT, "1", "Default min ISR for acks=all (REQ-R8).", Range(1)),
    _b("unclean.leader.election.enable", T.BOOLEAN, "false", "Unclean election (REQ-R10)."),
    _b("replica.lag.time.max.ms", T.LONG, "30000", "Follower lag before ISR removal (REQ-R6)."),
    _b("replica.fetch.wait.max.ms", T.INT, "500", "Follower fetch long-poll (REQ-R17)."),
    _b("replica.fetch.min.bytes", T.INT, "1", "Follower fetch minimum bytes."),
    _b(
        "replica.fetch.max.bytes", T.INT, "1048576", "Follower fetch bytes per partition.", Range(0)
    ),
    _b("replica.fetch.response.max.bytes", T.INT, "10485760", "Follower fetch total.", Range(0)),
    _b("replica.fetch.backoff.ms", T.INT, "1000", "Follower backoff on error.", Range(0)),
    _b("replica.socket.timeout.ms", T.INT, "30000", "Follower socket timeout."),
    _b(
        "max.incremental.fetch.session.cache.slots",
        T.INT,
        "1000",
        "Fetch sessions (KIP-227) the broker keeps.",
        Range(0),
    ),
    _b(
        "min.incremental.fetch.session.eviction.ms",
        T.INT,
        "120000",
        "Idle time after which any new fetch session may take a session's slot.",
        Range(0),
    ),
    _b("replica.socket.receive.buffer.bytes", T.INT, "65536", "Follower SO_RCVBUF."),
    _b("replica.high.watermark.checkpoint.interval.ms", T.LONG, "5000", "HW checkpoint period."),
    _b("num.replica.fetchers", T.INT, "1", "Fetcher threads per source broker."),
    # KIP-73 replication throttles. The two rates are dynamic broker configs (set with
    # IncrementalAlterConfigs on /config/brokers/<id> or <default>, like Kafka's
    # DynamicConfig.Broker); Long.MAX_VALUE means unthrottled.
    _b(
        "leader.replication.throttled.rate",
        T.LONG,
        "9223372036854775807",
        "Bytes/s a leader serves to throttled, out-of-sync followers.",
        Range(0),
    ),
    _b(
        "follower.replication.throttled.rate",
        T.LONG,
        "9223372036854775807",
        "Bytes/s a follower fetches for throttled, out-of-sync replicas.",
        Range(0),
    ),
    _b(
        "replication.quota.window.num",
        T.INT,
        "11",
        "Samples kept for replication quotas.",
        Range(1),
    ),
    _b(
        "replication.quota.window.size.seconds",
        T.INT,
        "1",
        "Span of each replication quota sample.",
        Range(1),
    ),
    _b("quota.window.num", T.INT, "11", "Samples kept for client quotas (KIP-13).", Range(1)),
    _b("quota.window.size.seconds", T.INT, "1", "Span of each client quota sample.", Range(1)),
    _b("auto.leader.rebalance.enable", T.BOOLEAN, "true", "Preferred leader election (REQ-R5)."),
    _b(
        "leader.imbalance.check.interval.seconds",
        T.LONG,
        "300",
        "Imbalance check period.",
        Range(1),
    ),
    _b("leader.imbalance.per.broker.percentage", T.INT, "10", "Allowed imbalance (REQ-R5)."),
    _b("controlled.shutdown.enable", T.BOOLEAN, "true", "Move leadership away on shutdown."),
    _b("controlled.shutdown.max.retries", T.INT, "3", "Controlled shutdown retries."),
    _b("controlled.shutdown.retry.backoff.ms", T.LONG, "5000", "Controlled shutdown backoff."),
    _b("controller.socket.timeout.ms", T.INT, "30000", "Controller-to-broker timeout."),
]
