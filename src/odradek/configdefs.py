"""Config definitions: Kafka's names, types, defaults, validators and broker synonyms.

The tables mirror Kafka 3.9 (the last Kafka line with ZooKeeper mode, which Odradek
follows, REQ-R12): ``LogConfig`` for topic configs, ``ServerLogConfigs`` /
``KafkaConfig`` for broker properties and ``ServerTopicConfigSynonyms`` for the
broker-level names a topic config falls back to. Values are kept as Kafka's *string*
form; ``ConfigDef.parse`` turns them into typed values with Kafka's error messages
("Invalid value x for configuration y: ..."), so a Kafka user sees familiar text.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final, TypeVar

__all__ = [
    "ConfigType",
    "ConfigSource",
    "ConfigDef",
    "ConfigValueError",
    "Support",
    "Synonym",
    "Range",
    "ValidString",
    "ValidList",
    "TOPIC_CONFIGS",
    "BROKER_CONFIGS",
    "DYNAMIC_BROKER_CONFIGS",
    "LONG_MAX",
    "INT_MAX",
    "parse_list",
    "python_type",
    "broker_default",
    "setting",
    "settings_from",
]

LONG_MAX: Final = 9223372036854775807
LONG_MIN: Final = -9223372036854775808
INT_MAX: Final = 2147483647
INT_MIN: Final = -2147483648
SHORT_MAX: Final = 32767
SHORT_MIN: Final = -32768


class ConfigType(enum.IntEnum):
    """DescribeConfigs v3+ ``ConfigType`` (KIP-569)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs v1+ ``ConfigSource`` (KIP-226)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class Support(enum.Enum):
    """What Odradek does with a setting (one column of the table, shown everywhere).

    HONOURED: the value changes the broker's behaviour as in Kafka.
    IGNORED: accepted and validated for compatibility with Kafka's files and tools, but
    it changes nothing; the broker warns at start when one is given, and the reason is
    in ``docs/configuration.md`` and in DescribeConfigs' documentation.
    REFUSED: only the default is accepted; any other value is an error (at start for a
    broker property, INVALID_CONFIG for a topic config), because accepting it would
    promise a behaviour Odradek does not have.
    """

    HONOURED = "honoured"
    IGNORED = "ignored"
    REFUSED = "refused"


class ConfigValueError(ValueError):
    """A value failed parsing or validation; ``str()`` is Kafka's ConfigException text."""

    def __init__(self, name: str, value: object, reason: str) -> None:
        super().__init__(f"Invalid value {value} for configuration {name}: {reason}")
        self.name = name
        self.value = value
        self.reason = reason


def parse_list(value: str) -> list[str]:
    """Kafka's LIST parsing: trim, then split on commas with surrounding blanks."""
    trimmed = value.strip()
    if not trimmed:
        return []
    return [item.strip() for item in trimmed.split(",")]


# --- validators: callables (name, typed value) -> None, raising ConfigValueError ----


@dataclass(frozen=True)
class Range:
    """Kafka's ``ConfigDef.Range`` (atLeast / between)."""

    min: float | None = None
    max: float | None = None

    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        if self.min is not None and value < self.min:
            raise ConfigValueError(name, value, f"Value must be at least {_num(self.min)}")
        if self.max is not None and value > self.max:
            raise ConfigValueError(name, value, f"Value must be no more than {_num(self.max)}")

    def describe(self) -> str:
        if self.max is None:
            return f"[{_num(self.min)},...]"
        return f"[{_num(self.min)},...,{_num(self.max)}]"


def _num(x: float | None) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


@dataclass(frozen=True)
class RangeOr:
    """A range plus isolated allowed values (gzip level: -1 or 1..9)."""

    range: Range
    also: tuple[int, ...]

    def __call__(self, name: str, value: Any) -> None:
        if value in self.also:
            return
        try:
            self.range(name, value)
        except ConfigValueError:
            raise ConfigValueError(
                name, value, f"Value must be in {self.range.describe()} or one of {list(self.also)}"
            ) from None


@dataclass(frozen=True)
class ValidString:
    """Kafka's ``ValidString.in``: case-sensitive enumeration."""

    values: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        if value is not None and value not in self.values:
            raise ConfigValueError(name, value, "String must be one of: " + ", ".join(self.values))


@dataclass(frozen=True)
class ValidList:
    """Kafka's ``ValidList.in``: every element of a LIST must be one of ``values``."""

    values: tuple[str, ...]
    allow_empty: bool = False

    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        if not value and not self.allow_empty:
            raise ConfigValueError(name, "", "Configuration '" + name + "' must not be empty")
        for item in value:
            if item not in self.values:
                raise ConfigValueError(name, item, "String must be one of: " + ", ".join(self.values))


def throttled_replicas(name: str, value: Any) -> None:
    """Kafka's ThrottledReplicaListValidator: "*" or "partition:broker,...". """
    if not value or value == ["*"]:
        return
    for item in value:
        parts = item.split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise ConfigValueError(
                name,
                ",".join(value),
                "must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
            )


Validator = Callable[[str, Any], None]


@dataclass(frozen=True)
class Synonym:
    """A broker property a topic config falls back to, with its unit (ms per unit)."""

    name: str
    ms_per_unit: int = 1


@dataclass(frozen=True)
class ConfigDef:
    """One config key: Kafka's name, type, default (string form, None = no default)."""

    name: str
    type: ConfigType
    default: str | None
    doc: str
    validator: Validator | None = None
    synonyms: tuple[Synonym, ...] = field(default=())  # topic configs only, Kafka's order
    support: Support = Support.HONOURED
    reason: str = ""  # why an IGNORED / REFUSED setting is not honoured
    # Can the value change without a restart? Topic configs: AlterConfigs applies them to
    # live logs. Broker properties: read once at start, except DYNAMIC_BROKER_CONFIGS.
    dynamic: bool = False

    @property
    def sensitive(self) -> bool:
        return self.type is ConfigType.PASSWORD

    def parse(self, value: str | None) -> Any:
        """Typed value of ``value`` (Kafka's ``ConfigDef.parseType``), validated."""
        if value is None:
            return None
        typed = _parse_type(self.name, value, self.type)
        if self.validator is not None:
            self.validator(self.name, typed)
        if self.support is Support.REFUSED and self.default is not None and value != self.default:
            if typed != _parse_type(self.name, self.default, self.type):
                raise ConfigValueError(self.name, value, f"Odradek only supports "
                                       f"{self.default!r}: {self.reason}")
        return typed

    def describe_support(self) -> str:
        """One line for DescribeConfigs' documentation and the reference."""
        if self.support is Support.HONOURED:
            return self.doc
        return f"{self.doc} [{self.support.value.upper()} by Odradek: {self.reason}]"

    def parsed_default(self) -> Any:
        return self.parse(self.default)


def _parse_int(name: str, value: str, kind: str, lo: int, hi: int) -> int:
    trimmed = value.strip()
    try:
        n = int(trimmed, 10)
    except ValueError:
        raise ConfigValueError(name, value, f"Not a number of type {kind}") from None
    if not lo <= n <= hi or "_" in trimmed:
        raise ConfigValueError(name, value, f"Not a number of type {kind}")
    return n


def _parse_type(name: str, value: str, ctype: ConfigType) -> Any:
    trimmed = value.strip()
    if ctype is ConfigType.BOOLEAN:
        low = trimmed.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        raise ConfigValueError(name, value, "Expected value to be either true or false")
    if ctype is ConfigType.INT:
        return _parse_int(name, value, "INT", INT_MIN, INT_MAX)
    if ctype is ConfigType.SHORT:
        return _parse_int(name, value, "SHORT", SHORT_MIN, SHORT_MAX)
    if ctype is ConfigType.LONG:
        return _parse_int(name, value, "LONG", LONG_MIN, LONG_MAX)
    if ctype is ConfigType.DOUBLE:
        try:
            d = float(trimmed)
        except ValueError:
            raise ConfigValueError(name, value, "Not a number of type DOUBLE") from None
        if "_" in trimmed or trimmed.lower() in ("inf", "infinity", "-inf", "-infinity"):
            raise ConfigValueError(name, value, "Not a number of type DOUBLE")
        return d
    if ctype is ConfigType.LIST:
        return parse_list(value)
    if ctype in (ConfigType.STRING, ConfigType.CLASS):
        return trimmed
    return value  # PASSWORD: kept verbatim, like Kafka


# --- topic configs (Kafka 3.9 LogConfig) -------------------------------------------

_L = str(LONG_MAX)
_MS = Synonym
_HOUR = 3_600_000
_MINUTE = 60_000


def _topic(
    name: str,
    ctype: ConfigType,
    default: str | None,
    doc: str,
    validator: Validator | None = None,
    synonyms: Sequence[str | Synonym] = (),
) -> ConfigDef:
    syns = tuple(s if isinstance(s, Synonym) else Synonym(s) for s in synonyms)
    return ConfigDef(name, ctype, default, doc, validator, syns)


T = ConfigType
_COMPRESSION = ValidString(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"))
_TS_TYPES = ValidString(("CreateTime", "LogAppendTime"))
_CLEANUP = ValidList(("compact", "delete"), allow_empty=True)

# Confluent Server's broker-side schema id validation (issue 27): the subject a record's
# schema id must be registered under, by Confluent's SubjectNameStrategy class names.
_SUBJECT_STRATEGIES = ValidString(tuple(
    f"io.confluent.kafka.serializers.subject.{s}"
    for s in ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")))
_TOPIC_STRATEGY = "io.confluent.kafka.serializers.subject.TopicNameStrategy"

_TOPIC_LIST: list[ConfigDef] = [
    _topic("cleanup.policy", T.LIST, "delete",
           "Retention policy for old segments: delete (REQ-R24), compact (REQ-R25) or both.",
           _CLEANUP, ["log.cleanup.policy"]),
    _topic("compression.gzip.level", T.INT, "-1", "Compression level for gzip.",
           RangeOr(Range(1, 9), (-1,)), ["compression.gzip.level"]),
    _topic("compression.lz4.level", T.INT, "9", "Compression level for lz4.",
           Range(1, 17), ["compression.lz4.level"]),
    _topic("compression.type", T.STRING, "producer",
           "Final compression of the topic's data; 'producer' keeps the producer's codec.",
           _COMPRESSION, ["compression.type"]),
    _topic("compression.zstd.level", T.INT, "3", "Compression level for zstd.",
           Range(-131072, 22), ["compression.zstd.level"]),
    _topic("confluent.key.schema.validation", T.BOOLEAN, "false",
           "Confluent Server's: each record's key must carry (magic byte 0, 4-byte id) a "
           "schema id the registry has under the key's subject; else the batch is refused "
           "(INVALID_RECORD). Null keys pass. Needs confluent.schema.registry.url."),
    _topic("confluent.key.subject.name.strategy", T.STRING, _TOPIC_STRATEGY,
           "Confluent Server's: the subject a key's schema id must be registered under "
           "(TopicNameStrategy: <topic>-key; RecordNameStrategy: the schema's full name; "
           "TopicRecordNameStrategy: <topic>-<full name>).", _SUBJECT_STRATEGIES),
    _topic("confluent.value.schema.validation", T.BOOLEAN, "false",
           "Confluent Server's: each record's value must carry (magic byte 0, 4-byte id) a "
           "schema id the registry has under the value's subject; else the batch is refused "
           "(INVALID_RECORD). Tombstones (null values) pass. Needs "
           "confluent.schema.registry.url."),
    _topic("confluent.value.subject.name.strategy", T.STRING, _TOPIC_STRATEGY,
           "Confluent Server's: the subject a value's schema id must be registered under "
           "(TopicNameStrategy: <topic>-value; RecordNameStrategy: the schema's full name; "
           "TopicRecordNameStrategy: <topic>-<full name>).", _SUBJECT_STRATEGIES),
    _topic("delete.retention.ms", T.LONG, "86400000",
           "How long delete tombstones are kept on compacted topics (REQ-R25).",
           Range(0), ["log.cleaner.delete.retention.ms"]),
    _topic("file.delete.delay.ms", T.LONG, "60000",
           "Time to wait before deleting a file from the filesystem.",
           Range(0), ["log.segment.delete.delay.ms"]),
    _topic("flush.messages", T.LONG, _L,
           "Force an fsync after this many messages (default: rely on replication, REQ-R18).",
           Range(1), ["log.flush.interval.messages"]),
    _topic("flush.ms", T.LONG, _L,
           "Force an fsync after this much time (default: rely on replication, REQ-R18).",
           Range(0), [_MS("log.flush.interval.ms"), _MS("log.flush.scheduler.interval.ms")]),
    _topic("follower.replication.throttled.replicas", T.LIST, "",
           "Replicas whose log replication is throttled on the follower side.",
           throttled_replicas),
    _topic("index.interval.bytes", T.INT, "4096",
           "Bytes between entries of the sparse offset index.",
           Range(0), ["log.index.interval.bytes"]),
    _topic("leader.replication.throttled.replicas", T.LIST, "",
           "Replicas whose log replication is throttled on the leader side.",
           throttled_replicas),
    _topic("local.retention.bytes", T.LONG, "-2",
           "Local size limit when tiered storage is on (-2: use retention.bytes).",
           Range(-2), ["log.local.retention.bytes"]),
    _topic("local.retention.ms", T.LONG, "-2",
           "Local time limit when tiered storage is on (-2: use retention.ms).",
           Range(-2), ["log.local.retention.ms"]),
    _topic("max.compaction.lag.ms", T.LONG, _L,
           "Maximum time a message stays ineligible for compaction.",
           Range(1), ["log.cleaner.max.compaction.lag.ms"]),
    _topic("max.message.bytes", T.INT, "1048588",
           "Largest record batch size allowed (after compression).",
           Range(0), ["message.max.bytes"]),
    _topic("message.downconversion.enable", T.BOOLEAN, "true",
           "Whether down-conversion of message formats is enabled for old consumers.",
           None, ["log.message.downconversion.enable"]),
    _topic("message.format.version", T.STRING, "3.0-IV1",
           "Deprecated: message format version (ignored, always v2).",
           None, ["log.message.format.version"]),
    _topic("message.timestamp.after.max.ms", T.LONG, _L,
           "Allowed amount a CreateTime timestamp may be ahead of the broker's clock.",
           Range(0), ["log.message.timestamp.after.max.ms"]),
    _topic("message.timestamp.before.max.ms", T.LONG, _L,
           "Allowed amount a CreateTime timestamp may be behind the broker's clock.",
           Range(0), ["log.message.timestamp.before.max.ms"]),
    _topic("message.timestamp.difference.max.ms", T.LONG, _L,
           "Deprecated: maximum difference between broker and record timestamps.",
           Range(0), ["log.message.timestamp.difference.max.ms"]),
    _topic("message.timestamp.type", T.STRING, "CreateTime",
           "Whether record timestamps are the producer's (CreateTime) or append time.",
           _TS_TYPES, ["log.message.timestamp.type"]),
    _topic("min.cleanable.dirty.ratio", T.DOUBLE, "0.5",
           "Minimum dirty/total ratio before the compactor cleans a log (REQ-R25).",
           Range(0, 1), ["log.cleaner.min.cleanable.ratio"]),
    _topic("min.compaction.lag.ms", T.LONG, "0",
           "Minimum time a message stays uncompacted.",
           Range(0), ["log.cleaner.min.compaction.lag.ms"]),
    _topic("min.insync.replicas", T.INT, "1",
           "Minimum ISR size for acks=all produce to succeed (REQ-R8).",
           Range(1), ["min.insync.replicas"]),
    _topic("odradek.ack.fsync", T.BOOLEAN, "false",
           "Beyond Kafka: acknowledge produce only after the data is fsynced.",
           None, []),
    _topic("preallocate", T.BOOLEAN, "false",
           "Preallocate the segment file when a new segment is created.",
           None, ["log.preallocate"]),
    _topic("remote.log.copy.disable", T.BOOLEAN, "false",
           "Stop copying to tiered storage (tiered storage is not supported).", None, []),
    _topic("remote.log.delete.on.disable", T.BOOLEAN, "false",
           "Delete tiered data when tiered storage is disabled (not supported).", None, []),
    _topic("remote.storage.enable", T.BOOLEAN, "false",
           "Tiered storage for the topic (not supported by Odradek).", None, []),
    _topic("retention.bytes", T.LONG, "-1",
           "Maximum partition size before old segments are deleted (-1: no limit, REQ-R24).",
           None, ["log.retention.bytes"]),
    _topic("retention.ms", T.LONG, "604800000",
           "Maximum age of a segment before it is deleted (-1: no limit, REQ-R24).",
           Range(-1),
           [_MS("log.retention.ms"), _MS("log.retention.minutes", _MINUTE),
            _MS("log.retention.hours", _HOUR)]),
    # Kafka 3.x: atLeast(LegacyRecord.RECORD_OVERHEAD_V0); 4.0 raised it to 1 MiB.
    _topic("segment.bytes", T.INT, "1073741824",
           "Segment file size (REQ-R23).", Range(14), ["log.segment.bytes"]),
    _topic("segment.index.bytes", T.INT, "10485760",
           "Size of the offset index file of a segment.",
           Range(4), ["log.index.size.max.bytes"]),
    _topic("segment.jitter.ms", T.LONG, "0",
           "Maximum random jitter subtracted from segment.ms.",
           Range(0), [_MS("log.roll.jitter.ms"), _MS("log.roll.jitter.hours", _HOUR)]),
    _topic("segment.ms", T.LONG, "604800000",
           "Time after which a segment is rolled even if not full (REQ-R23).",
           Range(1), [_MS("log.roll.ms"), _MS("log.roll.hours", _HOUR)]),
    _topic("unclean.leader.election.enable", T.BOOLEAN, "false",
           "Allow out-of-ISR replicas to become leader, at the cost of data loss (REQ-R10, REQ-R15).",
           None, ["unclean.leader.election.enable"]),
]

TOPIC_CONFIGS: Final[dict[str, ConfigDef]] = {d.name: d for d in _TOPIC_LIST}


# --- broker properties (Kafka 3.9 KafkaConfig, ZooKeeper mode) ---------------------


def _b(name: str, ctype: ConfigType, default: str | None, doc: str,
       validator: Validator | None = None) -> ConfigDef:
    return ConfigDef(name, ctype, default, doc, validator)


_BROKER_LIST: list[ConfigDef] = [
    _b("broker.id", T.INT, "-1", "The broker id (required by Odradek)."),
    _b("broker.rack", T.STRING, None, "Rack of the broker."),
    _b("listeners", T.STRING, "PLAINTEXT://:9092", "Listener URIs: NAME://host:port,..."),
    _b("advertised.listeners", T.STRING, None, "Listeners published to clients (default: listeners)."),
    _b("listener.security.protocol.map", T.STRING,
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
       "Listener name to security protocol."),
    _b("inter.broker.listener.name", T.STRING, None, "Listener used between brokers."),
    _b("security.inter.broker.protocol", T.STRING, "PLAINTEXT", "Protocol between brokers."),
    _b("zookeeper.connect", T.STRING, None, "ZooKeeper connection string (required)."),
    _b("zookeeper.session.timeout.ms", T.INT, "18000", "ZooKeeper session timeout."),
    _b("zookeeper.connection.timeout.ms", T.INT, None,
       "Max wait to establish the ZooKeeper connection (default: session timeout)."),
    _b("zookeeper.max.in.flight.requests", T.INT, "10", "Unacknowledged ZooKeeper requests.", Range(1)),
    _b("odradek.zookeeper.multi.max.ops", T.INT, "500",
       "Beyond Kafka: operations per ZooKeeper transaction or multiRead of the controller "
       "and the metadata store (partition states are written and read in chunks of this "
       "size, zookeeper.max.in.flight.requests chunks at once).", Range(3, 5000)),
    _b("log.dir", T.STRING, "/tmp/kafka-logs", "Log directory (used when log.dirs is unset)."),
    _b("log.dirs", T.LIST, None, "Comma-separated log directories."),
    _b("num.partitions", T.INT, "1", "Default partition count of new topics.", Range(1)),
    _b("default.replication.factor", T.INT, "1", "Default replication factor of new topics."),
    _b("auto.create.topics.enable", T.BOOLEAN, "true", "Create topics on first metadata use."),
    _b("delete.topic.enable", T.BOOLEAN, "true", "Allow topic deletion."),
    _b("message.max.bytes", T.INT, "1048588", "Largest record batch size allowed.", Range(0)),
    _b("socket.request.max.bytes", T.INT, "104857600", "Largest request size.", Range(1)),
    _b("socket.send.buffer.bytes", T.INT, "102400", "SO_SNDBUF (-1: OS default)."),
    _b("socket.receive.buffer.bytes", T.INT, "102400", "SO_RCVBUF (-1: OS default)."),
    _b("num.network.threads", T.INT, "3", "Network threads (ignored: asyncio).", Range(1)),
    _b("num.io.threads", T.INT, "8", "I/O threads (ignored: asyncio).", Range(1)),
    _b("background.threads", T.INT, "10", "Background threads (ignored).", Range(1)),
    _b("queued.max.requests", T.INT, "500",
       "Requests read from sockets but not yet handled, across all connections, before "
       "connections stop reading.", Range(1)),
    _b("connections.max.idle.ms", T.LONG, "600000",
       "Close connections with no bytes read or written for this long (-1: never)."),
    _b("max.connections", T.INT, str(INT_MAX),
       "Connections the broker accepts at once; at the limit it stops accepting until one "
       "closes.", Range(0)),
    _b("max.connections.per.ip", T.INT, str(INT_MAX),
       "Connections allowed from one IP address; more are closed as they arrive.", Range(0)),
    _b("max.connections.per.ip.overrides", T.STRING, "",
       "Per-IP or hostname limits overriding max.connections.per.ip, e.g. "
       "'hostName:100,127.0.0.1:200'."),
    _b("odradek.request.max.elements", T.INT, "200000",
       "Beyond Kafka: array elements one request may decode to (a decoded element costs "
       "~50-200 bytes of memory, so this bounds a request's memory beyond "
       "socket.request.max.bytes); a larger request closes the connection.", Range(1)),
    _b("odradek.max.partitions.per.request", T.INT, "10000",
       "Beyond Kafka's configs: new partitions one CreateTopics or CreatePartitions request "
       "may add (Kafka's controller hard-codes 10,000 records per request and answers "
       "POLICY_VIOLATION beyond).", Range(1)),
    _b("odradek.max.partitions", T.INT, "200000",
       "Beyond Kafka: partitions the whole cluster may have (Kafka's guidance is at most "
       "200,000); creations past it get POLICY_VIOLATION.", Range(1)),
    _b("log.segment.bytes", T.INT, "1073741824", "Segment file size (REQ-R23).", Range(14)),
    _b("log.roll.ms", T.LONG, None, "Segment roll time in ms (overrides log.roll.hours)."),
    _b("log.roll.hours", T.INT, "168", "Segment roll time in hours.", Range(1)),
    _b("log.roll.jitter.ms", T.LONG, None, "Roll jitter in ms."),
    _b("log.roll.jitter.hours", T.INT, "0", "Roll jitter in hours.", Range(0)),
    _b("log.retention.ms", T.LONG, None, "Retention in ms (wins over minutes and hours; -1: none)."),
    _b("log.retention.minutes", T.INT, None, "Retention in minutes (wins over hours)."),
    _b("log.retention.hours", T.INT, "168", "Retention in hours (REQ-R24)."),
    _b("log.retention.bytes", T.LONG, "-1", "Size limit of a partition (REQ-R24)."),
    _b("log.retention.check.interval.ms", T.LONG, "300000", "Retention check period.", Range(1)),
    _b("log.cleanup.policy", T.LIST, "delete", "Default cleanup policy.", _CLEANUP),
    _b("log.cleaner.enable", T.BOOLEAN, "true", "Run the log compactor."),
    _b("log.cleaner.threads", T.INT, "1", "Compactor threads.", Range(0)),
    _b("log.cleaner.backoff.ms", T.LONG, "15000", "Compactor idle sleep.", Range(0)),
    _b("log.cleaner.delete.retention.ms", T.LONG, "86400000", "Tombstone retention.", Range(0)),
    _b("log.cleaner.min.compaction.lag.ms", T.LONG, "0", "Minimum compaction lag.", Range(0)),
    _b("log.cleaner.max.compaction.lag.ms", T.LONG, _L, "Maximum compaction lag.", Range(1)),
    _b("log.cleaner.min.cleanable.ratio", T.DOUBLE, "0.5", "Minimum dirty ratio.", Range(0, 1)),
    _b("log.cleaner.dedupe.buffer.size", T.LONG, "134217728",
       "Memory bound of the compactor's key map (all cleaner threads), bytes.", Range(1)),
    _b("log.index.size.max.bytes", T.INT, "10485760", "Offset index size.", Range(4)),
    _b("log.index.interval.bytes", T.INT, "4096", "Bytes between index entries.", Range(0)),
    _b("log.flush.interval.messages", T.LONG, _L, "Messages between forced fsyncs.", Range(1)),
    _b("log.flush.interval.ms", T.LONG, None, "Time between forced fsyncs."),
    _b("log.flush.scheduler.interval.ms", T.LONG, _L, "Flusher check period."),
    _b("log.flush.offset.checkpoint.interval.ms", T.INT, "60000",
       "Recovery-point checkpoint period.", Range(0)),
    _b("log.flush.start.offset.checkpoint.interval.ms", T.INT, "60000",
       "Log-start-offset checkpoint period.", Range(0)),
    _b("log.segment.delete.delay.ms", T.LONG, "60000", "Delay before deleting files.", Range(0)),
    _b("log.preallocate", T.BOOLEAN, "false", "Preallocate segment files."),
    _b("log.message.timestamp.type", T.STRING, "CreateTime", "Default timestamp type.", _TS_TYPES),
    _b("log.message.timestamp.difference.max.ms", T.LONG, _L, "Deprecated.", Range(0)),
    _b("log.message.timestamp.before.max.ms", T.LONG, _L, "Past timestamp bound.", Range(0)),
    _b("log.message.timestamp.after.max.ms", T.LONG, _L, "Future timestamp bound.", Range(0)),
    _b("log.message.downconversion.enable", T.BOOLEAN, "true", "Down-conversion."),
    _b("log.message.format.version", T.STRING, "3.0-IV1", "Deprecated."),
    _b("log.local.retention.ms", T.LONG, "-2", "Tiered storage local retention.", Range(-2)),
    _b("log.local.retention.bytes", T.LONG, "-2", "Tiered storage local size.", Range(-2)),
    _b("num.recovery.threads.per.data.dir", T.INT, "1", "Recovery threads.", Range(1)),
    _b("compression.type", T.STRING, "producer", "Default topic compression.", _COMPRESSION),
    _b("compression.gzip.level", T.INT, "-1", "gzip level.", RangeOr(Range(1, 9), (-1,))),
    _b("compression.lz4.level", T.INT, "9", "lz4 level.", Range(1, 17)),
    _b("compression.zstd.level", T.INT, "3", "zstd level.", Range(-131072, 22)),
    _b("min.insync.replicas", T.INT, "1", "Default min ISR for acks=all (REQ-R8).", Range(1)),
    _b("unclean.leader.election.enable", T.BOOLEAN, "false", "Unclean election (REQ-R10)."),
    _b("replica.lag.time.max.ms", T.LONG, "30000", "Follower lag before ISR removal (REQ-R6)."),
    _b("replica.fetch.wait.max.ms", T.INT, "500", "Follower fetch long-poll (REQ-R17)."),
    _b("replica.fetch.min.bytes", T.INT, "1", "Follower fetch minimum bytes."),
    _b("replica.fetch.max.bytes", T.INT, "1048576", "Follower fetch bytes per partition.", Range(0)),
    _b("replica.fetch.response.max.bytes", T.INT, "10485760", "Follower fetch total.", Range(0)),
    _b("replica.fetch.backoff.ms", T.INT, "1000", "Follower backoff on error.", Range(0)),
    _b("replica.socket.timeout.ms", T.INT, "30000", "Follower socket timeout."),
    _b("max.incremental.fetch.session.cache.slots", T.INT, "1000",
       "Fetch sessions (KIP-227) the broker keeps.", Range(0)),
    _b("min.incremental.fetch.session.eviction.ms", T.INT, "120000",
       "Idle time after which any new fetch session may take a session's slot.", Range(0)),
    _b("replica.socket.receive.buffer.bytes", T.INT, "65536", "Follower SO_RCVBUF."),
    _b("replica.high.watermark.checkpoint.interval.ms", T.LONG, "5000", "HW checkpoint period."),
    _b("num.replica.fetchers", T.INT, "1", "Fetcher threads per source broker."),
    # KIP-73 replication throttles. The two rates are dynamic broker configs (set with
    # IncrementalAlterConfigs on /config/brokers/<id> or <default>, like Kafka's
    # DynamicConfig.Broker); Long.MAX_VALUE means unthrottled.
    _b("leader.replication.throttled.rate", T.LONG, "9223372036854775807",
       "Bytes/s a leader serves to throttled, out-of-sync followers.", Range(0)),
    _b("follower.replication.throttled.rate", T.LONG, "9223372036854775807",
       "Bytes/s a follower fetches for throttled, out-of-sync replicas.", Range(0)),
    _b("replication.quota.window.num", T.INT, "11",
       "Samples kept for replication quotas.", Range(1)),
    _b("replication.quota.window.size.seconds", T.INT, "1",
       "Span of each replication quota sample.", Range(1)),
    _b("quota.window.num", T.INT, "11",
       "Samples kept for client quotas (KIP-13).", Range(1)),
    _b("quota.window.size.seconds", T.INT, "1",
       "Span of each client quota sample.", Range(1)),
    _b("auto.leader.rebalance.enable", T.BOOLEAN, "true", "Preferred leader election (REQ-R5)."),
    _b("leader.imbalance.check.interval.seconds", T.LONG, "300", "Imbalance check period.", Range(1)),
    _b("leader.imbalance.per.broker.percentage", T.INT, "10", "Allowed imbalance (REQ-R5)."),
    _b("controlled.shutdown.enable", T.BOOLEAN, "true", "Move leadership away on shutdown."),
    _b("controlled.shutdown.max.retries", T.INT, "3", "Controlled shutdown retries."),
    _b("controlled.shutdown.retry.backoff.ms", T.LONG, "5000", "Controlled shutdown backoff."),
    _b("controller.socket.timeout.ms", T.INT, "30000", "Controller-to-broker timeout."),
    _b("offsets.topic.num.partitions", T.INT, "50", "__consumer_offsets partitions.", Range(1)),
    _b("offsets.topic.replication.factor", T.SHORT, "3", "__consumer_offsets RF.", Range(1)),
    _b("offsets.topic.segment.bytes", T.INT, "104857600", "__consumer_offsets segment size.", Range(1)),
    _b("offsets.retention.minutes", T.INT, "10080", "Committed offset retention.", Range(1)),
    _b("offsets.commit.timeout.ms", T.INT, "5000", "Offset commit timeout.", Range(1)),
    _b("group.initial.rebalance.delay.ms", T.INT, "3000", "First rebalance delay."),
    _b("group.min.session.timeout.ms", T.INT, "6000", "Minimum consumer session timeout."),
    _b("group.max.session.timeout.ms", T.INT, "1800000", "Maximum consumer session timeout."),
    _b("group.max.size", T.INT, str(INT_MAX), "Maximum consumers per group.", Range(1)),
    _b("transaction.state.log.replication.factor", T.SHORT, "3", "Transaction log RF.", Range(1)),
    _b("transaction.state.log.min.isr", T.INT, "2", "Transaction log min ISR.", Range(1)),
    _b("transaction.state.log.num.partitions", T.INT, "50", "Transaction log partitions.", Range(1)),
    _b("transaction.state.log.segment.bytes", T.INT, "104857600",
       "__transaction_state segment size.", Range(1)),
    _b("transaction.max.timeout.ms", T.INT, "900000",
       "Largest transaction.timeout.ms a producer may ask for.", Range(1)),
    _b("transaction.abort.timed.out.transaction.cleanup.interval.ms", T.INT, "10000",
       "How often the coordinator looks for timed-out transactions to abort.", Range(1)),
    _b("transaction.partition.verification.enable", T.BOOLEAN, "true",
       "KIP-890: before a transactional batch opens a transaction on a partition, its "
       "leader asks the transaction coordinator whether the partition is in the "
       "producer's transaction (a late batch would otherwise hang read_committed "
       "consumers)."),
    _b("transactional.id.expiration.ms", T.INT, "604800000",
       "Idle time after which a transactional id is forgotten.", Range(1)),
    _b("transaction.remove.expired.transaction.cleanup.interval.ms", T.INT, "3600000",
       "How often the coordinator looks for expired transactional ids.", Range(1)),
    _b("fetch.max.bytes", T.INT, "57671680", "Largest Fetch response.", Range(1024)),
    _b("odradek.lost.records.retention.bytes", T.LONG, "1073741824",
       "Beyond Kafka: size cap of the lost-records ledger of a log dir (truncated batches "
       "kept in <log dir>/lost-records); oldest entries dropped first; -1 unbounded, "
       "0 disables it.", Range(-1)),
    _b("odradek.trace.records.every", T.LONG, "0",
       "Beyond Kafka: log the replication timeline (append, follower fetch, HW, consumer "
       "fetch) of each record whose offset is a multiple of N; 0 (default) is off.",
       Range(0)),
    _b("confluent.schema.registry.url", T.LIST, "",
       "Confluent Server's: schema registry URL(s), comma-separated, that the broker asks "
       "for the schema ids of topics with confluent.value.schema.validation or "
       "confluent.key.schema.validation (tried in order; empty: such a produce is "
       "refused)."),
    _b("confluent.basic.auth.user.info", T.PASSWORD, None,
       "Confluent Server's (with confluent.basic.auth.credentials.source=USER_INFO): "
       "USER:PASSWORD the broker logs in to the schema registry with (HTTP basic "
       "authentication); unset: no login."),
    _b("confluent.ssl.truststore.location", T.STRING, None,
       "Confluent Server's: CA certificate(s) (PEM) the broker verifies an https schema "
       "registry with; unset: the system's CAs."),
    _b("metrics.listener", T.STRING, None,
       "Prometheus metrics at http://HOST:PORT/metrics (Kafka's MBean names as the JMX "
       "exporter maps them); unset (default): no metrics listener and no request "
       "timing."),
    # --- TLS (issue 14): PEM key material; listener.name.<l>.<setting> overrides ---
    _b("ssl.keystore.type", T.STRING, "JKS",
       "Keystore format; Odradek reads PEM only (set PEM: a file with the private key and "
       "the certificate chain, or ssl.keystore.key + ssl.keystore.certificate.chain)."),
    _b("ssl.keystore.location", T.STRING, None,
       "PEM file with the listener's private key and certificate chain."),
    _b("ssl.keystore.password", T.PASSWORD, None,
       "Password of the key in ssl.keystore.location when ssl.key.password is unset."),
    _b("ssl.key.password", T.PASSWORD, None, "Password of an encrypted private key."),
    _b("ssl.keystore.key", T.PASSWORD, None, "The private key itself, as PEM text."),
    _b("ssl.keystore.certificate.chain", T.PASSWORD, None,
       "The certificate chain itself, as PEM text."),
    _b("ssl.truststore.type", T.STRING, "JKS",
       "Truststore format; Odradek reads PEM only (set PEM)."),
    _b("ssl.truststore.location", T.STRING, None,
       "PEM file of the CA certificates trusted for client certificates and for "
       "inter-broker connections."),
    _b("ssl.truststore.password", T.PASSWORD, None, "Unused for PEM truststores."),
    _b("ssl.truststore.certificates", T.PASSWORD, None,
       "The trusted CA certificates themselves, as PEM text."),
    _b("ssl.client.auth", T.STRING, "none",
       "Client certificates: required, requested or none. A verified client certificate "
       "makes the principal User:<subject DN> on SSL listeners.",
       ValidString(("required", "requested", "none"))),
    _b("ssl.enabled.protocols", T.LIST, "TLSv1.2,TLSv1.3", "TLS versions accepted."),
    _b("ssl.protocol", T.STRING, "TLSv1.3", "Highest TLS version (informational)."),
    _b("ssl.cipher.suites", T.LIST, "",
       "TLS 1.2 cipher suites in OpenSSL's names (empty: Python's secure default)."),
    _b("ssl.endpoint.identification.algorithm", T.STRING, "https",
       "Host name verification of the broker a broker connects to (empty: off)."),
    _b("ssl.principal.mapping.rules", T.STRING, "DEFAULT",
       "Certificate subject to principal; only DEFAULT (the full RFC 2253 DN)."),
    # --- SASL (issue 14) ---
    _b("sasl.enabled.mechanisms", T.LIST, "GSSAPI",
       "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
       "(Kafka's default GSSAPI is not supported and must be replaced)."),
    _b("sasl.mechanism.inter.broker.protocol", T.STRING, "GSSAPI",
       "Mechanism brokers use on a SASL inter-broker listener."),
    _b("sasl.jaas.config", T.PASSWORD, None,
       "JAAS login entry; usually set per listener and mechanism as "
       "listener.name.<listener>.<mechanism>.sasl.jaas.config."),
    # Kafka's Kerberos (GSSAPI) settings: accepted, dynamic as in Kafka (librdkafka's
    # 0081_admin alters one on a broker), and ignored: GSSAPI is not offered.
    _b("sasl.kerberos.service.name", T.STRING, None,
       "Kerberos principal name that Kafka runs as."),
    _b("sasl.kerberos.kinit.cmd", T.STRING, "/usr/bin/kinit", "Kerberos kinit command path."),
    _b("sasl.kerberos.min.time.before.relogin", T.LONG, "60000",
       "Login thread sleep time between refresh attempts."),
    _b("sasl.kerberos.ticket.renew.window.factor", T.DOUBLE, "0.8",
       "Share of the ticket's lifetime after which the login thread renews it."),
    _b("sasl.kerberos.ticket.renew.jitter", T.DOUBLE, "0.05",
       "Random jitter added to the renewal time."),
    _b("sasl.kerberos.principal.to.local.rules", T.LIST, "DEFAULT",
       "Rules mapping Kerberos principal names to short names."),
    _b("sasl.server.max.receive.size", T.INT, "524288",
       "Largest frame accepted before a SASL client is authenticated.", Range(1)),
    _b("odradek.authentication.timeout.ms", T.INT, "10000",
       "Odradek's own: a TLS handshake, and then a SASL authentication, must each complete "
       "within this long after the connection is accepted, or it is closed (Kafka bounds "
       "both by connections.max.idle.ms only).", Range(1)),
    _b("connection.failed.authentication.delay.ms", T.INT, "100",
       "After a failed authentication the answer is sent and the connection closed this "
       "much later (slows down password guessing).", Range(0)),
    _b("connections.max.reauth.ms", T.LONG, "0",
       "KIP-368: session lifetime of SASL connections; the client must re-authenticate "
       "before it ends (0: sessions never expire).", Range(0)),
    # --- authorization (issue 14) ---
    _b("authorizer.class.name", T.STRING, "",
       "kafka.security.authorizer.AclAuthorizer enables ACLs kept in ZooKeeper "
       "(/kafka-acl); empty: no authorizer (every client may do everything)."),
    _b("super.users", T.STRING, "",
       "Principals allowed everything, separated by ';' (User:admin;User:broker)."),
    _b("allow.everyone.if.no.acl.found", T.BOOLEAN, "false",
       "Allow an operation on a resource that has no ACL at all."),
    # --- ZooKeeper security (issue 14) ---
    _b("zookeeper.set.acl", T.BOOLEAN, "false",
       "Create every znode with Kafka's secure ACLs: all rights for the creating "
       "(authenticated) identity, world read except for /config/users, /config/brokers "
       "and /delegation_token (creator only). Needs odradek.zookeeper.auth. Existing "
       "znodes keep their ACLs: see odradek zookeeper-security-migration."),
    _b("odradek.zookeeper.auth", T.PASSWORD, None,
       "Beyond Kafka's properties (Kafka takes it from a JAAS Client section): how the "
       "broker authenticates to ZooKeeper, digest:<user>:<password> (ZooKeeper's digest "
       "scheme) or sasl:<user>:<password> (SASL DIGEST-MD5 against the server's JAAS "
       "Server section). Every broker must use the same identity."),
]

BROKER_CONFIGS: Final[dict[str, ConfigDef]] = {d.name: d for d in _BROKER_LIST}

# Broker configs that may change at runtime (IncrementalAlterConfigs/AlterConfigs on a
# BROKER resource); every other broker property is read-only, as it is static in Odradek.
DYNAMIC_BROKER_CONFIGS: Final[frozenset[str]] = frozenset({
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "transaction.partition.verification.enable",
    # Dynamic in Kafka too (DynamicListenerConfig); ignored here (no GSSAPI).
    "sasl.kerberos.service.name",
    "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.principal.to.local.rules",
})

# --- what Odradek does with each setting --------------------------------------------
# Every key above is HONOURED unless listed here. tests/unit/test_config_table.py proves
# that each honoured key is read by the code, so a setting cannot silently do nothing.

_NO_TIERED = "tiered storage is not implemented"
_ONE_LOOP = "the broker is one asyncio event loop; there are no thread pools to size"
_ONLY_V2 = "Odradek stores and serves only the v2 record format (no down-conversion)"
_NO_LEVELS = ("when compression.type makes Odradek recompress, it uses the codec's "
              "default level")
_NO_GSSAPI = ("GSSAPI (Kerberos) is not offered; SASL listeners take PLAIN and "
              "SCRAM-SHA-256/512")
_NO_TS_BOUNDS = ("CreateTime timestamps are stored as the producer sent them; the bound is "
                 "not enforced")

_TOPIC_SUPPORT: dict[str, tuple[Support, str]] = {
    "compression.gzip.level": (Support.IGNORED, _NO_LEVELS),
    "compression.lz4.level": (Support.IGNORED, _NO_LEVELS),
    "compression.zstd.level": (Support.IGNORED, _NO_LEVELS),
    "local.retention.bytes": (Support.IGNORED, _NO_TIERED),
    "local.retention.ms": (Support.IGNORED, _NO_TIERED),
    "remote.log.copy.disable": (Support.IGNORED, _NO_TIERED),
    "remote.log.delete.on.disable": (Support.IGNORED, _NO_TIERED),
    "remote.storage.enable": (Support.REFUSED, _NO_TIERED),
    "message.downconversion.enable": (Support.IGNORED, _ONLY_V2),
    "message.format.version": (Support.IGNORED, _ONLY_V2),
    "message.timestamp.after.max.ms": (Support.IGNORED, _NO_TS_BOUNDS),
    "message.timestamp.before.max.ms": (Support.IGNORED, _NO_TS_BOUNDS),
    "message.timestamp.difference.max.ms": (Support.IGNORED, _NO_TS_BOUNDS),
    "preallocate": (Support.IGNORED, "segment files grow as written (sparse files on Linux "
                    "make preallocation a no-op for Kafka too)"),
    "segment.jitter.ms": (Support.IGNORED, "segments roll exactly at segment.ms"),
}

_BROKER_SUPPORT: dict[str, tuple[Support, str]] = {
    "broker.rack": (Support.IGNORED, "replica assignment is not rack-aware"),
    "socket.send.buffer.bytes": (Support.IGNORED, "sockets keep the OS default buffers"),
    "socket.receive.buffer.bytes": (Support.IGNORED, "sockets keep the OS default buffers"),
    "replica.socket.receive.buffer.bytes": (Support.IGNORED,
                                            "sockets keep the OS default buffers"),
    "num.network.threads": (Support.IGNORED, _ONE_LOOP),
    "num.io.threads": (Support.IGNORED, _ONE_LOOP),
    "background.threads": (Support.IGNORED, _ONE_LOOP),
    "num.replica.fetchers": (Support.IGNORED, "a broker runs one fetcher per source "
                             "broker (one connection, all partitions in each request)"),
    "log.flush.start.offset.checkpoint.interval.ms": (
        Support.IGNORED, "the log start offset is checkpointed with the recovery points "
        "(log.flush.offset.checkpoint.interval.ms)"),
    "controlled.shutdown.max.retries": (Support.IGNORED, "controlled shutdown retries "
                                        "until its deadline instead of a retry count"),
    "controlled.shutdown.retry.backoff.ms": (Support.IGNORED, "controlled shutdown retries "
                                             "until its deadline instead of a retry count"),
    "controller.socket.timeout.ms": (Support.IGNORED, "the controller talks to brokers "
                                     "through ZooKeeper, not over sockets"),
    "offsets.retention.minutes": (Support.IGNORED,
                                  "committed offsets are kept until the group is deleted"),
    "group.max.size": (Support.IGNORED, "group size is not limited"),
    "ssl.protocol": (Support.IGNORED, "the TLS versions offered are ssl.enabled.protocols; "
                     "the handshake picks the highest both sides support"),
    **{name: (Support.IGNORED, _NO_GSSAPI) for name in (
        "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.ticket.renew.window.factor",
        "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.principal.to.local.rules")},
}


def _annotate() -> None:
    """Apply the support columns; topic configs are dynamic (AlterConfigs), and a broker
    property that is only a topic config's fallback shares that config's support."""
    for name, d in list(TOPIC_CONFIGS.items()):
        support, reason = _TOPIC_SUPPORT.get(name, (Support.HONOURED, ""))
        TOPIC_CONFIGS[name] = replace(d, support=support, reason=reason, dynamic=True)
    inherited: dict[str, tuple[Support, str]] = {}
    for d in TOPIC_CONFIGS.values():
        if d.support is not Support.HONOURED:
            for syn in d.synonyms:
                inherited.setdefault(syn.name, (d.support, d.reason))
    for name, d in list(BROKER_CONFIGS.items()):
        support, reason = _BROKER_SUPPORT.get(name) or inherited.get(
            name, (Support.HONOURED, ""))
        BROKER_CONFIGS[name] = replace(d, support=support, reason=reason,
                                       dynamic=name in DYNAMIC_BROKER_CONFIGS)


_annotate()


# --- typed settings objects ---------------------------------------------------------
# A component declares a frozen dataclass of just the settings it uses; each field names
# its table key with ``setting(...)``, which also supplies the table's default, so no
# default is written twice. ``settings_from`` fills one from a broker's effective values.
# tests/unit/test_config_table.py checks every such field against the table.

_S = TypeVar("_S")

_PYTHON_TYPES: dict[ConfigType, type] = {
    ConfigType.BOOLEAN: bool, ConfigType.INT: int, ConfigType.SHORT: int,
    ConfigType.LONG: int, ConfigType.DOUBLE: float, ConfigType.STRING: str,
    ConfigType.LIST: list, ConfigType.CLASS: str, ConfigType.PASSWORD: str,
}


def python_type(d: ConfigDef) -> type:
    """The Python type ``ConfigDef.parse`` returns for this setting."""
    return _PYTHON_TYPES[d.type]


def broker_default(name: str) -> Any:
    """Broker property ``name``'s default, parsed: for a parameter or constant that
    stands for a setting's default outside a settings object (never a second literal)."""
    return BROKER_CONFIGS[name].parsed_default()


def setting(name: str) -> Any:
    """A settings-dataclass field holding broker property ``name`` (default: the table's)."""
    d = BROKER_CONFIGS[name]
    # A password (odradek.zookeeper.auth) never shows in a settings object's repr. A LIST
    # is a tuple here: settings objects are frozen, and a dataclass refuses a list default.
    return field(default=_frozen(d.parsed_default()), metadata={"setting": name},
                 repr=not d.sensitive)


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def settings_from(cls: type[_S], get: Callable[[str], Any] | None = None) -> _S:
    """An instance of the settings dataclass ``cls`` with each field's effective value
    (``get`` is ``BrokerConfig.get``; None gives the table's defaults). A field that
    names no table key (a nested settings object) keeps its default."""
    values = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if "setting" not in f.metadata:
            continue
        name = f.metadata["setting"]
        values[f.name] = _frozen(
            get(name) if get is not None else BROKER_CONFIGS[name].parsed_default()
        )
    return cls(**values)
