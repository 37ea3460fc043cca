"""The topic configs (Kafka 3.9 LogConfig): names, types, defaults, validators and the
broker properties each falls back to (``ServerTopicConfigSynonyms``).

Part of ``odradek.configdefs`` (see there), which builds ``TOPIC_CONFIGS`` from
``TOPIC_LIST`` and applies the Support column. The validators shared with the broker
properties that are these configs' fallbacks (``broker_log``) are here too.
"""

from __future__ import annotations

from odradek.config_tables.definitions import (
    LONG_MAX,
    ConfigDef,
    Range,
    RangeOr,
    Synonym,
    T,
    ValidList,
    ValidString,
    throttled_replicas,
)
from odradek.config_tables.definitions import topic as _topic

__all__ = ["CLEANUP_POLICIES", "COMPRESSION_TYPES", "TIMESTAMP_TYPES", "TOPIC_LIST"]

_L = str(LONG_MAX)
_MS = Synonym
_HOUR = 3_600_000
_MINUTE = 60_000

COMPRESSION_TYPES = ValidString(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"))
TIMESTAMP_TYPES = ValidString(("CreateTime", "LogAppendTime"))
CLEANUP_POLICIES = ValidList(("compact", "delete"), allow_empty=True)

# Confluent Server's broker-side schema id validation (issue 27): the subject a record's
# schema id must be registered under, by Confluent's SubjectNameStrategy class names.
_SUBJECT_STRATEGIES = ValidString(
    tuple(
        f"io.confluent.kafka.serializers.subject.{s}"
        for s in ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
    )
)
_TOPIC_STRATEGY = "io.confluent.kafka.serializers.subject.TopicNameStrategy"
TOPIC_LIST: list[ConfigDef] = [
    _topic(
        "cleanup.policy",
        T.LIST,
        "delete",
        "Retention policy for old segments: delete (REQ-R24), compact (REQ-R25) or both.",
        CLEANUP_POLICIES,
        ["log.cleanup.policy"],
    ),
    _topic(
        "compression.gzip.level",
        T.INT,
        "-1",
        "Compression level for gzip.",
        RangeOr(Range(1, 9), (-1,)),
        ["compression.gzip.level"],
    ),
    _topic(
        "compression.lz4.level",
        T.INT,
        "9",
        "Compression level for lz4.",
        Range(1, 17),
        ["compression.lz4.level"],
    ),
    _topic(
        "compression.type",
        T.STRING,
        "producer",
        "Final compression of the topic's data; 'producer' keeps the producer's codec.",
        COMPRESSION_TYPES,
        ["compression.type"],
    ),
    _topic(
        "compression.zstd.level",
        T.INT,
        "3",
        "Compression level for zstd.",
        Range(-131072, 22),
        ["compression.zstd.level"],
    ),
    _topic(
        "confluent.key.schema.validation",
        T.BOOLEAN,
        "false",
        "Confluent Server's: each record's key must carry (magic byte 0, 4-byte id) a "
        "schema id the registry has under the key's subject; else the batch is refused "
        "(INVALID_RECORD). Null keys pass. Needs confluent.schema.registry.url.",
    ),
    _topic(
        "confluent.key.subject.name.strategy",
        T.STRING,
        _TOPIC_STRATEGY,
        "Confluent Server's: the subject a key's schema id must be registered under "
        "(TopicNameStrategy: <topic>-key; RecordNameStrategy: the schema's full name; "
        "TopicRecordNameStrategy: <topic>-<full name>).",
        _SUBJECT_STRATEGIES,
    ),
    _topic(
        "confluent.value.schema.validation",
        T.BOOLEAN,
        "false",
        "Confluent Server's: each record's value must carry (magic byte 0, 4-byte id) a "
        "schema id the registry has under the value's subject; else the batch is refused "
        "(INVALID_RECORD). Tombstones (null values) pass. Needs "
        "confluent.schema.registry.url.",
    ),
    _topic(
        "confluent.value.subject.name.strategy",
        T.STRING,
        _TOPIC_STRATEGY,
        "Confluent Server's: the subject a value's schema id must be registered under "
        "(TopicNameStrategy: <topic>-value; RecordNameStrategy: the schema's full name; "
        "TopicRecordNameStrategy: <topic>-<full name>).",
        _SUBJECT_STRATEGIES,
    ),
    _topic(
        "delete.retention.ms",
        T.LONG,
        "86400000",
        "How long delete tombstones are kept on compacted topics (REQ-R25).",
        Range(0),
        ["log.cleaner.delete.retention.ms"],
    ),
    _topic(
        "file.delete.delay.ms",
        T.LONG,
        "60000",
        "Time to wait before deleting a file from the filesystem.",
        Range(0),
        ["log.segment.delete.delay.ms"],
    ),
    _topic(
        "flush.messages",
        T.LONG,
        _L,
        "Force an fsync after this many messages (default: rely on replication, REQ-R18).",
        Range(1),
        ["log.flush.interval.messages"],
    ),
    _topic(
        "flush.ms",
        T.LONG,
        _L,
        "Force an fsync after this much time (default: rely on replication, REQ-R18).",
        Range(0),
        [_MS("log.flush.interval.ms"), _MS("log.flush.scheduler.interval.ms")],
    ),
    _topic(
        "follower.replication.throttled.replicas",
        T.LIST,
        "",
        "Replicas whose log replication is throttled on the follower side.",
        throttled_replicas,
    ),
    _topic(
        "index.interval.bytes",
        T.INT,
        "4096",
        "Bytes between entries of the sparse offset index.",
        Range(0),
        ["log.index.interval.bytes"],
    ),
    _topic(
        "leader.replication.throttled.replicas",
        T.LIST,
        "",
        "Replicas whose log replication is throttled on the leader side.",
        throttled_replicas,
    ),
    _topic(
        "local.retention.bytes",
        T.LONG,
        "-2",
        "Local size limit when tiered storage is on (-2: use retention.bytes).",
        Range(-2),
        ["log.local.retention.bytes"],
    ),
    _topic(
        "local.retention.ms",
        T.LONG,
        "-2",
        "Local time limit when tiered storage is on (-2: use retention.ms).",
        Range(-2),
        ["log.local.retention.ms"],
    ),
    _topic(
        "max.compaction.lag.ms",
        T.LONG,
        _L,
        "Maximum time a message stays ineligible for compaction.",
        Range(1),
        ["log.cleaner.max.compaction.lag.ms"],
    ),
    _topic(
        "max.message.bytes",
        T.INT,
        "1048588",
        "Largest record batch size allowed (after compression).",
        Range(0),
        ["message.max.bytes"],
    ),
    _topic(
        "message.downconversion.enable",
        T.BOOLEAN,
        "true",
        "Whether down-conversion of message formats is enabled for old consumers.",
        None,
        ["log.message.downconversion.enable"],
    ),
    _topic(
        "message.format.version",
        T.STRING,
        "3.0-IV1",
        "Deprecated: message format version (ignored, always v2).",
        None,
        ["log.message.format.version"],
    ),
    _topic(
        "message.timestamp.after.max.ms",
        T.LONG,
        _L,
        "Allowed amount a CreateTime timestamp may be ahead of the broker's clock.",
        Range(0),
        ["log.message.timestamp.after.max.ms"],
    ),
    _topic(
        "message.timestamp.before.max.ms",
        T.LONG,
        _L,
        "Allowed amount a CreateTime timestamp may be behind the broker's clock.",
        Range(0),
        ["log.message.timestamp.before.max.ms"],
    ),
    _topic(
        "message.timestamp.difference.max.ms",
        T.LONG,
        _L,
        "Deprecated: maximum difference between broker and record timestamps.",
        Range(0),
        ["log.message.timestamp.difference.max.ms"],
    ),
    _topic(
        "message.timestamp.type",
        T.STRING,
        "CreateTime",
        "Whether record timestamps are the producer's (CreateTime) or append time.",
        TIMESTAMP_TYPES,
        ["log.message.timestamp.type"],
    ),
    _topic(
        "min.cleanable.dirty.ratio",
        T.DOUBLE,
        "0.5",
        "Minimum dirty/total ratio before the compactor cleans a log (REQ-R25).",
        Range(0, 1),
        ["log.cleaner.min.cleanable.ratio"],
    ),
    _topic(
        "min.compaction.lag.ms",
        T.LONG,
        "0",
        "Minimum time a message stays uncompacted.",
        Range(0),
        ["log.cleaner.min.compaction.lag.ms"],
    ),
    _topic(
        "min.insync.replicas",
        T.INT,
        "1",
        "Minimum ISR size for acks=all produce to succeed (REQ-R8).",
        Range(1),
        ["min.insync.replicas"],
    ),
    _topic(
        "odradek.ack.fsync",
        T.BOOLEAN,
        "false",
        "Beyond Kafka: acknowledge produce only after the data is fsynced.",
        None,
        [],
    ),
    _topic(
        "preallocate",
        T.BOOLEAN,
        "false",
        "Preallocate the segment file when a new segment is created.",
        None,
        ["log.preallocate"],
    ),
    _topic(
        "remote.log.copy.disable",
        T.BOOLEAN,
        "false",
        "Stop copying to tiered storage (tiered storage is not supported).",
        None,
        [],
    ),
    _topic(
        "remote.log.delete.on.disable",
        T.BOOLEAN,
        "false",
        "Delete tiered data when tiered storage is disabled (not supported).",
        None,
        [],
    ),
    _topic(
        "remote.storage.enable",
        T.BOOLEAN,
        "false",
        "Tiered storage for the topic (not supported by Odradek).",
        None,
        [],
    ),
    _topic(
        "retention.bytes",
        T.LONG,
        "-1",
        "Maximum partition size before old segments are deleted (-1: no limit, REQ-R24).",
        None,
        ["log.retention.bytes"],
    ),
    _topic(
        "retention.ms",
        T.LONG,
        "604800000",
        "Maximum age of a segment before it is deleted (-1: no limit, REQ-R24).",
        Range(-1),
        [
            _MS("log.retention.ms"),
            _MS("log.retention.minutes", _MINUTE),
            _MS("log.retention.hours", _HOUR),
        ],
    ),
    # Kafka 3.x: atLeast(LegacyRecord.RECORD_OVERHEAD_V0); 4.0 raised it to 1 MiB.
    _topic(
        "segment.bytes",
        T.INT,
        "1073741824",
        "Segment file size (REQ-R23).",
        Range(14),
        ["log.segment.bytes"],
    ),
    _topic(
        "segment.index.bytes",
        T.INT,
        "10485760",
        "Size of the offset index file of a segment.",
        Range(4),
        ["log.index.size.max.bytes"],
    ),
    _topic(
        "segment.jitter.ms",
        T.LONG,
        "0",
        "Maximum random jitter subtracted from segment.ms.",
        Range(0),
        [_MS("log.roll.jitter.ms"), _MS("log.roll.jitter.hours", _HOUR)],
    ),
    _topic(
        "segment.ms",
        T.LONG,
        "604800000",
        "Time after which a segment is rolled even if not full (REQ-R23).",
        Range(1),
        [_MS("log.roll.ms"), _MS("log.roll.hours", _HOUR)],
    ),
    _topic(
        "unclean.leader.election.enable",
        T.BOOLEAN,
        "false",
        "Allow out-of-ISR replicas to become leader, at the cost of data loss (REQ-R10, REQ-R15).",
        None,
        ["unclean.leader.election.enable"],
    ),
]
