"""Broker properties (Kafka 3.9 KafkaConfig, ZooKeeper mode) of the logs: segments,
retention, the log cleaner (compaction), indexes, flushing, timestamps, recovery and
compression -- most of them the fallbacks of topic configs.

Part of ``odradek.configdefs`` (see there), which assembles ``BROKER_CONFIGS`` from the
broker_* modules, in the order of ``odradek.config_tables``, and applies the Support
column.
"""

from __future__ import annotations

from odradek.config_tables.definitions import (
    LONG_MAX,
    ConfigDef,
    Range,
    RangeOr,
    T,
)
from odradek.config_tables.definitions import broker as _b
from odradek.config_tables.topic import CLEANUP_POLICIES, COMPRESSION_TYPES, TIMESTAMP_TYPES

__all__ = ["LOG_CONFIGS"]

_L = str(LONG_MAX)

LOG_CONFIGS: list[ConfigDef] = [
    _b("log.segment.bytes", T.INT, "1073741824", "Segment file size (REQ-R23).", Range(14)),
    _b("log.roll.ms", T.LONG, None, "Segment roll time in ms (overrides log.roll.hours)."),
    _b("log.roll.hours", T.INT, "168", "Segment roll time in hours.", Range(1)),
    _b("log.roll.jitter.ms", T.LONG, None, "Roll jitter in ms."),
    _b("log.roll.jitter.hours", T.INT, "0", "Roll jitter in hours.", Range(0)),
    _b(
        "log.retention.ms", T.LONG, None, "Retention in ms (wins over minutes and hours; -1: none)."
    ),
    _b("log.retention.minutes", T.INT, None, "Retention in minutes (wins over hours)."),
    _b("log.retention.hours", T.INT, "168", "Retention in hours (REQ-R24)."),
    _b("log.retention.bytes", T.LONG, "-1", "Size limit of a partition (REQ-R24)."),
    _b("log.retention.check.interval.ms", T.LONG, "300000", "Retention check period.", Range(1)),
    _b("log.cleanup.policy", T.LIST, "delete", "Default cleanup policy.", CLEANUP_POLICIES),
    _b("log.cleaner.enable", T.BOOLEAN, "true", "Run the log compactor."),
    _b("log.cleaner.threads", T.INT, "1", "Compactor threads.", Range(0)),
    _b("log.cleaner.backoff.ms", T.LONG, "15000", "Compactor idle sleep.", Range(0)),
    _b("log.cleaner.delete.retention.ms", T.LONG, "86400000", "Tombstone retention.", Range(0)),
    _b("log.cleaner.min.compaction.lag.ms", T.LONG, "0", "Minimum compaction lag.", Range(0)),
    _b("log.cleaner.max.compaction.lag.ms", T.LONG, _L, "Maximum compaction lag.", Range(1)),
    _b("log.cleaner.min.cleanable.ratio", T.DOUBLE, "0.5", "Minimum dirty ratio.", Range(0, 1)),
    _b(
        "log.cleaner.dedupe.buffer.size",
        T.LONG,
        "134217728",
        "Memory bound of the compactor's key map (all cleaner threads), bytes.",
        Range(1),
    ),
    _b("log.index.size.max.bytes", T.INT, "10485760", "Offset index size.", Range(4)),
    _b("log.index.interval.bytes", T.INT, "4096", "Bytes between index entries.", Range(0)),
    _b("log.flush.interval.messages", T.LONG, _L, "Messages between forced fsyncs.", Range(1)),
    _b("log.flush.interval.ms", T.LONG, None, "Time between forced fsyncs."),
    _b("log.flush.scheduler.interval.ms", T.LONG, _L, "Flusher check period."),
    _b(
        "log.flush.offset.checkpoint.interval.ms",
        T.INT,
        "60000",
        "Recovery-point checkpoint period.",
        Range(0),
    ),
    _b(
        "log.flush.start.offset.checkpoint.interval.ms",
        T.INT,
        "60000",
        "Log-start-offset checkpoint period.",
        Range(0),
    ),
    _b("log.segment.delete.delay.ms", T.LONG, "60000", "Delay before deleting files.", Range(0)),
    _b("log.preallocate", T.BOOLEAN, "false", "Preallocate segment files."),
    _b(
        "log.message.timestamp.type",
        T.STRING,
        "CreateTime",
        "Default timestamp type.",
        TIMESTAMP_TYPES,
    ),
    _b("log.message.timestamp.difference.max.ms", T.LONG, _L, "Deprecated.", Range(0)),
    _b("log.message.timestamp.before.max.ms", T.LONG, _L, "Past timestamp bound.", Range(0)),
    _b("log.message.timestamp.after.max.ms", T.LONG, _L, "Future timestamp bound.", Range(0)),
    _b("log.message.downconversion.enable", T.BOOLEAN, "true", "Down-conversion."),
    _b("log.message.format.version", T.STRING, "3.0-IV1", "Deprecated."),
    _b("log.local.retention.ms", T.LONG, "-2", "Tiered storage local retention.", Range(-2)),
    _b("log.local.retention.bytes", T.LONG, "-2", "Tiered storage local size.", Range(-2)),
    _b("num.recovery.threads.per.data.dir", T.INT, "1", "Recovery threads.", Range(1)),
    _b("compression.type", T.STRING, "producer", "Default topic compression.", COMPRESSION_TYPES),
    _b("compression.gzip.level", T.INT, "-1", "gzip level.", RangeOr(Range(1, 9), (-1,))),
    _b("compression.lz4.level", T.INT, "9", "lz4 level.", Range(1, 17)),
    _b("compression.zstd.level", T.INT, "3", "zstd level.", Range(-131072, 22)),
]
