"""Broker properties (Kafka 3.9 KafkaConfig, ZooKeeper mode) of the coordinators: the
group coordinator (__consumer_offsets, group sessions) and the transaction coordinator
(__transaction_state, timeouts, KIP-890 verification).

Part of ``odradek.configdefs`` (see there), which assembles ``BROKER_CONFIGS`` from the
broker_* modules, in the order of ``odradek.config_tables``, and applies the Support
column.
"""

from __future__ import annotations

from odradek.config_tables.definitions import (
    INT_MAX,
    ConfigDef,
    Range,
    T,
)
from odradek.config_tables.definitions import broker as _b

__all__ = ["COORDINATORS_CONFIGS"]


COORDINATORS_CONFIGS: list[ConfigDef] = [
    _b("offsets.topic.num.partitions", T.INT, "50", "__consumer_offsets partitions.", Range(1)),
    _b("offsets.topic.replication.factor", T.SHORT, "3", "__consumer_offsets RF.", Range(1)),
    _b(
        "offsets.topic.segment.bytes",
        T.INT,
        "104857600",
        "__consumer_offsets segment size.",
        Range(1),
    ),
    _b("offsets.retention.minutes", T.INT, "10080", "Committed offset retention.", Range(1)),
    _b("offsets.commit.timeout.ms", T.INT, "5000", "Offset commit timeout.", Range(1)),
    _b("group.initial.rebalance.delay.ms", T.INT, "3000", "First rebalance delay."),
    _b("group.min.session.timeout.ms", T.INT, "6000", "Minimum consumer session timeout."),
    _b("group.max.session.timeout.ms", T.INT, "1800000", "Maximum consumer session timeout."),
    _b("group.max.size", T.INT, str(INT_MAX), "Maximum consumers per group.", Range(1)),
    _b("transaction.state.log.replication.factor", T.SHORT, "3", "Transaction log RF.", Range(1)),
    _b("transaction.state.log.min.isr", T.INT, "2", "Transaction log min ISR.", Range(1)),
    _b(
        "transaction.state.log.num.partitions", T.INT, "50", "Transaction log partitions.", Range(1)
    ),
    _b(
        "transaction.state.log.segment.bytes",
        T.INT,
        "104857600",
        "__transaction_state segment size.",
        Range(1),
    ),
    _b(
        "transaction.max.timeout.ms",
        T.INT,
        "900000",
        "Largest transaction.timeout.ms a producer may ask for.",
        Range(1),
    ),
    _b(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        T.INT,
        "10000",
        "How often the coordinator looks for timed-out transactions to abort.",
        Range(1),
    ),
    _b(
        "transaction.partition.verification.enable",
        T.BOOLEAN,
        "true",
        "KIP-890: before a transactional batch opens a transaction on a partition, its "
        "leader asks the transaction coordinator whether the partition is in the "
        "producer's transaction (a late batch would otherwise hang read_committed "
        "consumers).",
    ),
    _b(
        "transactional.id.expiration.ms",
        T.INT,
        "604800000",
        "Idle time after which a transactional id is forgotten.",
        Range(1),
    ),
    _b(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        T.INT,
        "3600000",
        "How often the coordinator looks for expired transactional ids.",
        Range(1),
    ),
]
