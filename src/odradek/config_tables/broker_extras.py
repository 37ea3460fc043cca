"""Broker properties (Kafka 3.9 KafkaConfig, ZooKeeper mode, and beyond) outside the
other areas: the Fetch response bound, Odradek's own lost-records ledger and record
tracing, Confluent Server's schema id validation and the metrics listener.

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

__all__ = ["EXTRAS_CONFIGS"]


EXTRAS_CONFIGS: list[ConfigDef] = [
    _b("fetch.max.bytes", T.INT, "57671680", "Largest Fetch response.", Range(1024)),
    _b(
        "odradek.lost.records.retention.bytes",
        T.LONG,
        "1073741824",
        "Beyond Kafka: size cap of the lost-records ledger of a log dir (truncated batches "
        "kept in <log dir>/lost-records); oldest entries dropped first; -1 unbounded, "
        "0 disables it.",
        Range(-1),
    ),
    _b(
        "odradek.heap.freeze.settle.ms",
        T.LONG,
        "30000",
        "Beyond Kafka: once no partition was added to or removed from the broker for "
        "this long, its heap is frozen out of Python's full garbage collections "
        "(gc.freeze), which otherwise stop the broker for 0.1-0.4 s at 10,000 "
        "partitions; unfrozen when a partition is removed and every 15 minutes. "
        "0 disables it.",
        Range(0),
    ),
    _b(
        "odradek.trace.records.every",
        T.LONG,
        "0",
        "Beyond Kafka: log the replication timeline (append, follower fetch, HW, consumer "
        "fetch) of each record whose offset is a multiple of N; 0 (default) is off.",
        Range(0),
    ),
    _b(
        "confluent.schema.registry.url",
        T.LIST,
        "",
        "Confluent Server's: schema registry URL(s), comma-separated, that the broker asks "
        "for the schema ids of topics with confluent.value.schema.validation or "
        "confluent.key.schema.validation (tried in order; empty: such a produce is "
        "refused).",
    ),
    _b(
        "confluent.basic.auth.user.info",
        T.PASSWORD,
        None,
        "Confluent Server's (with confluent.basic.auth.credentials.source=USER_INFO): "
        "USER:PASSWORD the broker logs in to the schema registry with (HTTP basic "
        "authentication); unset: no login.",
    ),
    _b(
        "confluent.ssl.truststore.location",
        T.STRING,
        None,
        "Confluent Server's: CA certificate(s) (PEM) the broker verifies an https schema "
        "registry with; unset: the system's CAs.",
    ),
    _b(
        "metrics.listener",
        T.STRING,
        None,
        "Prometheus metrics at http://HOST:PORT/metrics (Kafka's MBean names as the JMX "
        "exporter maps them); unset (default): no metrics listener and no request "
        "timing.",
    ),
]
