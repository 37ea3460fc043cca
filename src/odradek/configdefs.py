"""Config definitions: Kafka's names, types, defaults, validators and broker synonyms.

The tables mirror Kafka 3.9 (the last Kafka line with ZooKeeper mode, which Odradek
follows, REQ-R12): ``LogConfig`` for topic configs, ``ServerLogConfigs`` /
``KafkaConfig`` for broker properties and ``ServerTopicConfigSynonyms`` for the
broker-level names a topic config falls back to. Values are kept as Kafka's *string*
form; ``ConfigDef.parse`` turns them into typed values with Kafka's error messages
("Invalid value x for configuration y: ..."), so a Kafka user sees familiar text.

Each setting is declared once, in the table module of its area (``odradek.config_tables``:
``definitions`` for what an entry is, ``topic`` for the topic configs, ``broker_server``,
``broker_log``, ``broker_replication``, ``broker_coordinators``, ``broker_extras`` and
``broker_security`` for the broker properties). This module assembles them into the
tables the rest of Odradek imports, says which broker properties are dynamic, holds the
Support column (what Odradek does with each setting) and the typed settings objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field, fields, replace
from typing import Any, Final, TypeVar

from odradek.config_tables.broker_coordinators import COORDINATORS_CONFIGS
from odradek.config_tables.broker_extras import EXTRAS_CONFIGS
from odradek.config_tables.broker_log import LOG_CONFIGS
from odradek.config_tables.broker_replication import REPLICATION_CONFIGS
from odradek.config_tables.broker_security import SECURITY_CONFIGS
from odradek.config_tables.broker_server import SERVER_CONFIGS
from odradek.config_tables.definitions import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    SHORT_MAX,
    SHORT_MIN,
    ConfigDef,
    ConfigSource,
    ConfigType,
    ConfigValueError,
    Range,
    RangeOr,
    Support,
    Synonym,
    T,
    Validator,
    ValidList,
    ValidString,
    parse_list,
    throttled_replicas,
)
from odradek.config_tables.topic import TOPIC_LIST

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
    # Defined in odradek.config_tables.definitions; importable from here as before.
    "LONG_MIN",
    "INT_MIN",
    "SHORT_MAX",
    "SHORT_MIN",
    "RangeOr",
    "T",
    "Validator",
    "throttled_replicas",
]

TOPIC_CONFIGS: Final[dict[str, ConfigDef]] = {d.name: d for d in TOPIC_LIST}

# One list in Kafka's order of areas (DescribeConfigs lists them in this order).
_BROKER_LIST: list[ConfigDef] = [
    *SERVER_CONFIGS,
    *LOG_CONFIGS,
    *REPLICATION_CONFIGS,
    *COORDINATORS_CONFIGS,
    *EXTRAS_CONFIGS,
    *SECURITY_CONFIGS,
]
BROKER_CONFIGS: Final[dict[str, ConfigDef]] = {d.name: d for d in _BROKER_LIST}

# Broker configs that may change at runtime (IncrementalAlterConfigs/AlterConfigs on a
# BROKER resource); every other broker property is read-only, as it is static in Odradek.
DYNAMIC_BROKER_CONFIGS: Final[frozenset[str]] = frozenset(
    {
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
    }
)

# --- what Odradek does with each setting --------------------------------------------
# Every key above is HONOURED unless listed here. tests/unit/test_config_table.py proves
# that each honoured key is read by the code, so a setting cannot silently do nothing.

_NO_TIERED = "tiered storage is not implemented"
_ONE_LOOP = "the broker is one asyncio event loop; there are no thread pools to size"
_ONLY_V2 = "Odradek stores and serves only the v2 record format (no down-conversion)"
_NO_LEVELS = "when compression.type makes Odradek recompress, it uses the codec's default level"
_NO_GSSAPI = "GSSAPI (Kerberos) is not offered; SASL listeners take PLAIN and SCRAM-SHA-256/512"
_NO_TS_BOUNDS = (
    "CreateTime timestamps are stored as the producer sent them; the bound is not enforced"
)

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
    "preallocate": (
        Support.IGNORED,
        "segment files grow as written (sparse files on Linux "
        "make preallocation a no-op for Kafka too)",
    ),
    "segment.jitter.ms": (Support.IGNORED, "segments roll exactly at segment.ms"),
}

_BROKER_SUPPORT: dict[str, tuple[Support, str]] = {
    "broker.rack": (Support.IGNORED, "replica assignment is not rack-aware"),
    "socket.send.buffer.bytes": (Support.IGNORED, "sockets keep the OS default buffers"),
    "socket.receive.buffer.bytes": (Support.IGNORED, "sockets keep the OS default buffers"),
    "replica.socket.receive.buffer.bytes": (Support.IGNORED, "sockets keep the OS default buffers"),
    "num.network.threads": (Support.IGNORED, _ONE_LOOP),
    "num.io.threads": (Support.IGNORED, _ONE_LOOP),
    "background.threads": (Support.IGNORED, _ONE_LOOP),
    "num.replica.fetchers": (
        Support.IGNORED,
        "a broker runs one fetcher per source "
        "broker (one connection, all partitions in each request)",
    ),
    "log.flush.start.offset.checkpoint.interval.ms": (
        Support.IGNORED,
        "the log start offset is checkpointed with the recovery points "
        "(log.flush.offset.checkpoint.interval.ms)",
    ),
    "controlled.shutdown.max.retries": (
        Support.IGNORED,
        "controlled shutdown retries until its deadline instead of a retry count",
    ),
    "controlled.shutdown.retry.backoff.ms": (
        Support.IGNORED,
        "controlled shutdown retries until its deadline instead of a retry count",
    ),
    "controller.socket.timeout.ms": (
        Support.IGNORED,
        "the controller talks to brokers through ZooKeeper, not over sockets",
    ),
    "offsets.retention.minutes": (
        Support.IGNORED,
        "committed offsets are kept until the group is deleted",
    ),
    "group.max.size": (Support.IGNORED, "group size is not limited"),
    "ssl.protocol": (
        Support.IGNORED,
        "the TLS versions offered are ssl.enabled.protocols; "
        "the handshake picks the highest both sides support",
    ),
    **{
        name: (Support.IGNORED, _NO_GSSAPI)
        for name in (
            "sasl.kerberos.service.name",
            "sasl.kerberos.kinit.cmd",
            "sasl.kerberos.min.time.before.relogin",
            "sasl.kerberos.ticket.renew.window.factor",
            "sasl.kerberos.ticket.renew.jitter",
            "sasl.kerberos.principal.to.local.rules",
        )
    },
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
        support, reason = _BROKER_SUPPORT.get(name) or inherited.get(name, (Support.HONOURED, ""))
        BROKER_CONFIGS[name] = replace(
            d, support=support, reason=reason, dynamic=name in DYNAMIC_BROKER_CONFIGS
        )


_annotate()


# --- typed settings objects ---------------------------------------------------------
# A component declares a frozen dataclass of just the settings it uses; each field names
# its table key with ``setting(...)``, which also supplies the table's default, so no
# default is written twice. ``settings_from`` fills one from a broker's effective values.
# tests/unit/test_config_table.py checks every such field against the table.

_S = TypeVar("_S")

_PYTHON_TYPES: dict[ConfigType, type] = {
    ConfigType.BOOLEAN: bool,
    ConfigType.INT: int,
    ConfigType.SHORT: int,
    ConfigType.LONG: int,
    ConfigType.DOUBLE: float,
    ConfigType.STRING: str,
    ConfigType.LIST: list,
    ConfigType.CLASS: str,
    ConfigType.PASSWORD: str,
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
    return field(
        default=_frozen(d.parsed_default()), metadata={"setting": name}, repr=not d.sensitive
    )


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
