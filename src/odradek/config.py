"""Broker properties and topic configs, with Kafka's names and defaults.

A Kafka user's ``server.properties`` works unchanged (docs/requirements.md: where a
behaviour involves a Kafka setting, Odradek uses Kafka's name and default). Definitions live in ``odradek.configdefs``; this
module parses ``.properties`` files, builds :class:`BrokerConfig`, validates topic
overrides (CreateTopics / AlterConfigs) and answers DescribeConfigs.

Precedence rules copied from Kafka:

* ``log.retention.ms`` > ``log.retention.minutes`` > ``log.retention.hours`` (any
  negative result means "no limit", -1), and likewise ``log.roll.ms`` > ``log.roll.hours``.
* a topic config takes its topic override, else the first of its broker synonyms set in
  the properties file, else the broker synonym's default (``retention.ms`` ← 168 h).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from odradek.configdefs import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigSource,
    ConfigType,
    ConfigValueError,
    Support,
    Synonym,
    parse_list,
    settings_from,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.zookeeper_auth import parse_zk_auth

__all__ = [
    "BrokerConfig",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigType",
    "TOPIC_CONFIGS",
    "BROKER_CONFIGS",
    "parse_properties",
    "parse_listeners",
    "parse_connection_overrides",
    "validate_topic_configs",
    "describe_topic_config",
    "describe_broker_config",
    "log_config_for_topic",
    "topic_override",
    "dynamic_broker_value",
]

logger = logging.getLogger(__name__)

_S = TypeVar("_S")


class ConfigError(KafkaError):
    """A broker property is missing or invalid; ``key`` names it (INVALID_CONFIG)."""

    def __init__(self, key: str, message: str) -> None:
        if key and key not in message:
            message = f"{key}: {message}"
        super().__init__(ErrorCode.invalid_config, message)
        self.key = key


# --- Java .properties ---------------------------------------------------------------

_LINE_SPLIT = re.compile(r"\r\n|\r|\n")
_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _odd_trailing_backslashes(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= len(text):
            break  # a lone trailing backslash is dropped, as java.util.Properties does
        c = text[i]
        if c == "u":
            hexdigits = text[i + 1 : i + 5]
            if len(hexdigits) != 4 or any(h not in "0123456789abcdefABCDEF" for h in hexdigits):
                raise ConfigError("", "Malformed \\uxxxx encoding.")
            out.append(chr(int(hexdigits, 16)))
            i += 5
        else:
            out.append(_ESCAPES.get(c, c))
            i += 1
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    """Key ends at the first unescaped '=', ':' or blank; one separator may follow."""
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _WS:
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(_WS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WS)
    return key, rest


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text like ``java.util.Properties.load``.

    Comments start with ``#`` or ``!``; separators are ``=``, ``:`` or blanks; a line
    ending in an odd number of backslashes continues on the next line (whose leading
    blanks are dropped); ``\\t \\n \\r \\f \\uXXXX`` escapes are decoded and any other
    escaped character stands for itself. Later duplicates win.
    """
    lines = _LINE_SPLIT.split(text)
    props: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _odd_trailing_backslashes(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(_WS)
            i += 1
        key, value = _split_key_value(line)
        props[_unescape(key)] = _unescape(value)
    return props


# --- listeners ----------------------------------------------------------------------

_LISTENER = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*?)\]?:(-?[0-9]+)$")


def parse_listeners(value: str, key: str = "listeners") -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` → ``[(NAME, host, port)]``; names upper-cased, unique."""
    endpoints: list[tuple[str, str, int]] = []
    for item in parse_list(value):
        m = _LISTENER.match(item)
        if not m:
            raise ConfigError(key, f"Unable to parse {item} to a broker endpoint")
        name, host, port_s = m.group(1).upper(), m.group(2), int(m.group(3))
        if not 0 <= port_s <= 65535:
            raise ConfigError(key, f"Invalid port {port_s} in {key}: {item}")
        if any(e[0] == name for e in endpoints):
            raise ConfigError(key, f"Each listener must have a different name, {key}: {value}")
        endpoints.append((name, host, port_s))
    if not endpoints:
        raise ConfigError(key, f"{key} must not be empty")
    return endpoints


# --- connection limits ---------------------------------------


def parse_connection_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,...`` (Kafka's CSV map; the
    host may be a name, resolved when the listener starts, or an IP address)."""
    out: dict[str, int] = {}
    for item in parse_list(value or ""):
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(
                "max.connections.per.ip.overrides",
                f"Invalid value {value} for configuration "
                "max.connections.per.ip.overrides: expected host:count,...",
            )
        out[host] = int(count)
    return out


# --- broker config -----------------------------------------------------------------


def _check_zookeeper_security(values: Mapping[str, Any]) -> None:
    """``zookeeper.set.acl=true`` without ZooKeeper authentication stops the broker, as
    in Kafka ("zookeeper.set.acl is true, but ZooKeeper client TLS configuration
    identifying at least ... was not present"): creator-only ACLs need a creator."""
    try:
        auth = parse_zk_auth(values["odradek.zookeeper.auth"])
    except ValueError as e:
        raise ConfigError(
            "odradek.zookeeper.auth", f"Invalid odradek.zookeeper.auth: {e}"
        ) from None
    if values["zookeeper.set.acl"] and auth is None:
        raise ConfigError(
            "zookeeper.set.acl",
            "zookeeper.set.acl is true, but no ZooKeeper authentication is "
            "configured (set odradek.zookeeper.auth)",
        )
    if auth is not None and auth.scheme == "sasl" and importlib.util.find_spec("puresasl") is None:
        raise ConfigError(
            "odradek.zookeeper.auth",
            "ZooKeeper SASL needs the pure-sasl "
            "package (kazoo's SASL client): pip install pure-sasl",
        )


def _default(name: str) -> Any:
    """A broker setting's default, parsed, from the one table (configdefs.py): the typed
    fields below never write a default a second time (issue 16, REQ-R27 tooling)."""
    d = BROKER_CONFIGS[name]
    return d.parse(d.default)


@dataclass
class BrokerConfig:
    """A broker's ``server.properties``: its identity and endpoints, checked at parse
    time, and every property (``raw``) for the components' settings objects
    (:meth:`settings`), with Kafka's names and defaults."""

    broker_id: int
    zookeeper_connect: str
    listeners: str = _default("listeners")
    advertised_listeners: str | None = _default("advertised.listeners")
    log_dirs: list[str] = field(default_factory=lambda: [_default("log.dir")])
    raw: dict[str, str] = field(default_factory=dict)

    # -- construction ---------------------------------------------------------------

    @classmethod
    def from_properties_file(cls, path: str | Path) -> BrokerConfig:
        data = Path(path).read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("latin-1")  # Properties.load(InputStream) is ISO-8859-1
        return cls.from_dict(parse_properties(text))

    @classmethod
    def from_dict(cls, props: dict[str, str]) -> BrokerConfig:
        """Typed config from raw properties. Unknown keys are kept and logged (Kafka
        warns "The configuration 'x' was supplied but isn't a known config")."""
        raw = {str(k): str(v) for k, v in props.items()}
        for key in raw:
            d = BROKER_CONFIGS.get(key)
            if d is None:
                # listener.name.<listener>.<setting> are Kafka's per-listener overrides.
                if not key.startswith("listener.name."):
                    logger.warning(
                        "The configuration '%s' was supplied but isn't a known config.", key
                    )
            elif d.support is Support.IGNORED:
                # A setting that changes nothing must say so (docs/configuration.md).
                logger.warning(
                    "The configuration '%s' is accepted but ignored by Odradek: %s.", key, d.reason
                )
        values = _typed_broker_values(raw)
        for required in ("broker.id", "zookeeper.connect"):
            if required not in raw or not raw[required].strip():
                raise ConfigError(
                    required,
                    f"Missing required configuration \"{required}\" which has no default value.",
                )
        if values["broker.id"] < 0:
            raise ConfigError(
                "broker.id",
                f"Invalid value {values['broker.id']} for configuration broker.id: Value must be at least 0",
            )
        listeners = values["listeners"]
        parse_listeners(listeners, "listeners")
        if values["advertised.listeners"] is not None:
            parse_listeners(values["advertised.listeners"], "advertised.listeners")
        log_dirs = values["log.dirs"] if values["log.dirs"] is not None else [values["log.dir"]]
        if not log_dirs:
            raise ConfigError("log.dirs", "log.dirs must contain at least one directory")
        overrides = parse_connection_overrides(values["max.connections.per.ip.overrides"])
        if values["max.connections.per.ip"] == 0 and not overrides:
            raise ConfigError(
                "max.connections.per.ip",
                "max.connections.per.ip can be set to zero only if "
                "max.connections.per.ip.overrides property is set.",
            )
        _check_zookeeper_security(values)
        return cls(
            broker_id=values["broker.id"],
            zookeeper_connect=values["zookeeper.connect"],
            listeners=listeners,
            advertised_listeners=values["advertised.listeners"],
            log_dirs=log_dirs,
            raw=raw,
        )

    # -- accessors ------------------------------------------------------------------

    def get(self, name: str) -> Any:
        """Typed effective value of any known broker property (raw value or default).

        Components do not call this with a setting's name: they declare the settings they
        use as a frozen dataclass of ``configdefs.setting(...)`` fields and read them
        through :meth:`settings` (tests/unit/test_config_access.py keeps it that way)."""
        d = BROKER_CONFIGS.get(name)
        if d is None:
            raise KeyError(name)
        return _parse_broker(d, self.raw.get(name, d.default))

    def settings(self, cls: type[_S]) -> _S:
        """A component's typed settings object (a dataclass of ``configdefs.setting``
        fields) filled with this broker's effective values: the one way code outside
        this module reads a broker property (Redpanda's model: each setting declared
        once, in the table, and read through that declaration)."""
        return settings_from(cls, self.get)

    def text(self, name: str) -> str | None:
        """The effective value of ``name`` in Kafka's string form (as given, else the
        table's default), for the few settings their component parses itself (listener
        maps, JAAS sections, TLS files)."""
        value = self.raw.get(name)
        if value is None:
            d = BROKER_CONFIGS.get(name)
            value = d.default if d is not None else None
        return value

    def is_set(self, name: str) -> bool:
        """Whether the properties give ``name`` a non-empty value (Kafka refuses some
        pairs only when both are given)."""
        return bool(self.raw.get(name))

    def listener_override(
        self, listener: str, key: str, mechanism: str | None = None
    ) -> str | None:
        """Kafka's per-listener setting ``listener.name.<listener>[.<mechanism>].<key>``
        as given, or None."""
        middle = f"{mechanism.lower()}." if mechanism else ""
        return self.raw.get(f"listener.name.{listener.lower()}.{middle}{key}")

    def listener_value(self, listener: str, key: str) -> str | None:
        """``listener.name.<listener>.<key>`` if set, else ``<key>`` (:meth:`text`)."""
        value = self.listener_override(listener, key)
        return value if value is not None else self.text(key)

    def advertised_endpoint(self) -> tuple[str, int]:
        """(host, port) published in Metadata: advertised.listeners, else listeners.

        Kafka would advertise the canonical host name for an empty host; Odradek binds
        loopback aliases (docs/platform-notes.md) and requires the host to be explicit.
        """
        key = "advertised.listeners" if self.advertised_listeners else "listeners"
        _, host, port = parse_listeners(self.advertised_listeners or self.listeners, key)[0]
        if not host:
            raise ConfigError(
                key, f"{key}: an explicit host is required to advertise (got an empty host)"
            )
        if host == "0.0.0.0":
            raise ConfigError(
                key,
                f"{key} cannot use the nonroutable meta-address 0.0.0.0. Use a routable IP address.",
            )
        return host, port

    def topic_defaults(self) -> dict[str, str]:
        """Effective default (string form) of every topic config under this broker."""
        raw = self.raw
        return {name: _broker_topic_value(d, raw)[0] for name, d in TOPIC_CONFIGS.items()}


def _parse_broker(d: ConfigDef, value: str | None) -> Any:
    try:
        return d.parse(value)
    except ConfigValueError as e:
        raise ConfigError(d.name, str(e)) from None


def _typed_broker_values(raw: dict[str, str]) -> dict[str, Any]:
    """Every known broker property parsed and validated (ConfigError names the key)."""
    values: dict[str, Any] = {}
    for name, d in BROKER_CONFIGS.items():
        values[name] = _parse_broker(d, raw.get(name, d.default))
    return values


# --- topic configs -----------------------------------------------------------------


def _synonym_to_topic_value(syn: Synonym, d: ConfigDef, broker_value: str) -> str:
    """A broker synonym's value in the topic config's terms (hours → ms, etc.)."""
    if syn.ms_per_unit == 1:
        if d.type is ConfigType.LIST:
            return ",".join(parse_list(broker_value))
        return broker_value.strip()
    ms = int(broker_value.strip()) * syn.ms_per_unit
    if d.name == "retention.ms" and ms < 0:
        ms = -1  # KafkaConfig.logRetentionTimeMillis
    return str(ms)


Synonyms = list[tuple[str, str | None, int]]


def kafka_synonyms(
    name: str,
    names: Sequence[str],
    layers: Sequence[tuple[Mapping[str, str], ConfigSource]],
    sensitive: bool = False,
) -> Synonyms:
    """Kafka's ``configSynonyms``: for each layer in precedence order (dynamic broker,
    dynamic default, static, default), the synonym names it sets in ``names`` order;
    then everything before the first entry named ``name`` is dropped (Kafka drops
    e.g. ``log.retention.hours`` when describing ``log.retention.ms``, so a
    ``retention.ms`` resting on the hours default has no synonyms at all)."""
    out: Synonyms = []
    for values, source in layers:
        for n in names:
            if n in values:
                out.append((n, None if sensitive else values[n], int(source)))
    while out and out[0][0] != name:
        out.pop(0)
    return out


@functools.cache
def _static_defaults() -> Mapping[str, str]:
    # Built once: every described topic config with synonyms asks for it (a dict of all
    # broker properties each time made DescribeConfigs of a few topics cost ~100 ms).
    return MappingProxyType(
        {n: d.default for n, d in BROKER_CONFIGS.items() if d.default is not None}
    )


def _broker_topic_value(
    d: ConfigDef, raw: dict[str, str]
) -> tuple[str, ConfigSource, list[tuple[str, str | None, int]]]:
    """(value, source, synonyms) of topic config ``d`` before any topic override.

    The value follows the broker's precedence (the first synonym name set, e.g.
    log.retention.ms over .minutes over .hours; then their defaults); synonyms and source
    are Kafka's (``kafka_synonyms`` over the static and default layers; source
    DEFAULT_CONFIG when there are none).
    """
    chosen: str | None = None
    for syn in d.synonyms:
        if syn.name in raw:
            chosen = _synonym_to_topic_value(syn, d, raw[syn.name])
            break
    if chosen is None:
        for syn in d.synonyms:
            bdef = BROKER_CONFIGS.get(syn.name)
            if bdef is not None and bdef.default is not None:
                chosen = _synonym_to_topic_value(syn, d, bdef.default)
                break
    if chosen is None:
        chosen = d.default if d.default is not None else ""
    synonyms: Synonyms = []
    if d.synonyms:
        names = [s.name for s in d.synonyms]
        synonyms = kafka_synonyms(
            names[0],
            names,
            [
                (raw, ConfigSource.STATIC_BROKER_CONFIG),
                (_static_defaults(), ConfigSource.DEFAULT_CONFIG),
            ],
            d.sensitive,
        )
    source = ConfigSource(synonyms[0][2]) if synonyms else ConfigSource.DEFAULT_CONFIG
    return chosen, source, synonyms


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_config, message)


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Validate topic overrides (CreateTopics / AlterConfigs); returns the kept ones.

    A ``None`` value means "no override" (Kafka's AlterConfigs DELETE) and is dropped.
    Raises ``KafkaError(INVALID_CONFIG)`` with Kafka's messages for unknown names and
    bad values, and for min.compaction.lag.ms > max.compaction.lag.ms.
    """
    out: dict[str, str] = {}
    typed: dict[str, Any] = {}
    for name, value in configs.items():
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            raise _invalid(f"Unknown topic config name: {name}")
        if value is None:
            continue
        try:
            typed[name] = d.parse(value)
        except ConfigValueError as e:
            raise _invalid(str(e)) from None
        if d.support is Support.IGNORED and value != d.default:
            logger.warning(
                "Topic config '%s=%s' is accepted but ignored by Odradek: %s.",
                name,
                value,
                d.reason,
            )
        out[name] = value
    min_lag = typed.get("min.compaction.lag.ms", 0)
    max_lag = typed.get("max.compaction.lag.ms", LONG_MAX)
    if min_lag > max_lag:
        raise _invalid(
            f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
            f"max.compaction.lag.ms ({max_lag})"
        )
    return out


@dataclass
class ConfigEntry:
    """One DescribeConfigs result entry (fields of DescribeConfigsResourceResult)."""

    name: str
    value: str | None
    source: int
    read_only: bool
    is_default: bool
    is_sensitive: bool
    synonyms: list[tuple[str, str | None, int]]
    config_type: int
    documentation: str | None


_TopicBase = tuple[tuple[str, str, ConfigSource, Synonyms], ...]


def _topic_base(broker: BrokerConfig) -> _TopicBase:
    """(name, value, source, synonyms) of every topic config before topic overrides,
    under this broker's settings. Cached on what they depend on (``raw``): DescribeConfigs
    runs on the event loop and must not re-parse every broker property per topic
    (issue 29)."""
    key = tuple(sorted(broker.raw.items()))
    base = _TOPIC_BASES.get(key)
    if base is None:
        raw = broker.raw
        base = tuple(
            (name, *_broker_topic_value(TOPIC_CONFIGS[name], raw)) for name in sorted(TOPIC_CONFIGS)
        )
        if len(_TOPIC_BASES) >= 8:  # configs seen by this process: a handful at most
            _TOPIC_BASES.clear()
        _TOPIC_BASES[key] = base
    return base


_TOPIC_BASES: dict[tuple[Any, ...], _TopicBase] = {}


def describe_topic_config(
    broker: BrokerConfig, overrides: Mapping[str, str], keys: Collection[str] | None = None
) -> list[ConfigEntry]:
    """Every topic config with value and source, like Kafka's DescribeConfigs(TOPIC);
    only those named in ``keys`` when given (the request's configuration_keys)."""
    entries: list[ConfigEntry] = []
    for name, value, source, synonyms in _topic_base(broker):
        if keys is not None and name not in keys:
            continue
        d = TOPIC_CONFIGS[name]
        if name in overrides and overrides[name] is not None:
            value = overrides[name]
            source = ConfigSource.DYNAMIC_TOPIC_CONFIG
            synonyms = [(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG), *synonyms]
        entries.append(
            ConfigEntry(
                name=name,
                value=None if d.sensitive else value,
                source=int(source),
                read_only=False,
                is_default=source is ConfigSource.DEFAULT_CONFIG,
                is_sensitive=d.sensitive,
                synonyms=[(n, v, int(s)) for n, v, s in synonyms],
                config_type=int(d.type),
                documentation=d.describe_support(),
            )
        )
    return entries


# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: names that set the same property.
_BROKER_SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_synonyms(name: str) -> list[str]:
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return list(group)
    return [name]


def describe_broker_config(
    broker: BrokerConfig,
    dynamic: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
    *,
    per_broker: bool = True,
) -> list[ConfigEntry]:
    """The broker properties Odradek knows, like Kafka's DescribeConfigs(BROKER).

    ``dynamic`` / ``dynamic_default``: the overrides of ``/config/brokers/<id>`` and
    ``<default>``. ``per_broker`` False describes the ``<default>`` resource (empty
    name): only the dynamic defaults are listed and per-broker values are left out of
    the synonyms, as Kafka does. Values follow the precedence dynamic > dynamic default
    > static > default; synonyms and source are Kafka's (``kafka_synonyms``). Only
    ``DYNAMIC_BROKER_CONFIGS`` are writable. Passwords are never returned.
    """
    dyn = dict(dynamic or {}) if per_broker else {}
    dyn_default = dict(dynamic_default or {})
    raw = broker.raw
    layers: list[tuple[Mapping[str, str], ConfigSource]] = [
        (dyn, ConfigSource.DYNAMIC_BROKER_CONFIG),
        (dyn_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        (raw, ConfigSource.STATIC_BROKER_CONFIG),
        (_static_defaults(), ConfigSource.DEFAULT_CONFIG),
    ]
    names = (
        sorted(BROKER_CONFIGS)
        if per_broker
        else sorted(n for n in dyn_default if n in BROKER_CONFIGS)
    )
    entries: list[ConfigEntry] = []
    for name in names:
        d = BROKER_CONFIGS[name]
        value: str | None = None
        for values, _ in layers:
            if name in values:
                value = values[name]
                break
        synonyms = kafka_synonyms(name, broker_synonyms(name), layers, d.sensitive)
        source = ConfigSource(synonyms[0][2]) if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(
            ConfigEntry(
                name=name,
                value=None if d.sensitive else value,
                source=int(source),
                read_only=name not in DYNAMIC_BROKER_CONFIGS,
                is_default=source is ConfigSource.DEFAULT_CONFIG,
                is_sensitive=d.sensitive,
                synonyms=synonyms,
                config_type=int(d.type),
                documentation=d.describe_support(),
            )
        )
    # Custom configs (names that are no broker property, kept by AlterConfigs), as Kafka
    # lists them: of unknown type, so treated as sensitive (no value) and read-only.
    for name in sorted({*dyn, *dyn_default} - BROKER_CONFIGS.keys()):
        synonyms = kafka_synonyms(name, [name], layers, sensitive=True)
        entries.append(
            ConfigEntry(
                name=name,
                value=None,
                source=synonyms[0][2],
                read_only=True,
                is_default=False,
                is_sensitive=True,
                synonyms=synonyms,
                config_type=int(ConfigType.UNKNOWN),
                documentation=None,
            )
        )
    return entries


def effective_topic_configs(broker: BrokerConfig, overrides: dict[str, str]) -> dict[str, Any]:
    """Typed effective value of every topic config (override > broker > default)."""
    defaults = broker.topic_defaults()
    result: dict[str, Any] = {}
    for name, d in TOPIC_CONFIGS.items():
        raw_value = overrides.get(name)
        if raw_value is None:
            raw_value = defaults[name]
        try:
            result[name] = d.parse(raw_value)
        except ConfigValueError as e:
            raise _invalid(str(e)) from None
    return result


def topic_override(overrides: Mapping[str, str], name: str) -> Any:
    """The typed value of topic config ``name`` in a topic's overrides (its
    ``/config/topics/<topic>``), or None when the topic does not override it: the one
    path for a component that falls back to its own broker-level setting. A value that
    does not parse (AlterConfigs validates, another tool may not) counts as no override."""
    return _parse_stored(TOPIC_CONFIGS[name], overrides.get(name), "topic config override")


def dynamic_broker_value(name: str, value: str | None) -> Any:
    """The typed value of dynamic broker config ``name`` as stored in ZooKeeper
    (``/config/brokers``), or None when unset or malformed (warned: the static value
    stays in force)."""
    return _parse_stored(BROKER_CONFIGS[name], value, "dynamic broker config")


def _parse_stored(d: ConfigDef, value: str | None, what: str) -> Any:
    """A value read back from ZooKeeper, parsed; None if absent or malformed (warned)."""
    if value is None:
        return None
    try:
        return d.parse(value)
    except ConfigValueError as e:
        logger.warning("ignoring %s: %s", what, e)
        return None


def log_config_for_topic(broker: BrokerConfig, overrides: dict[str, str]) -> dict[str, Any]:
    """The typed values storage and replication need for one topic.

    ``cleanup_policy`` is a list (Kafka's LIST type: "compact,delete" is legal).
    """
    c = effective_topic_configs(broker, overrides)
    return {
        "segment_bytes": c["segment.bytes"],
        "segment_ms": c["segment.ms"],
        "segment_jitter_ms": c["segment.jitter.ms"],
        "index_interval_bytes": c["index.interval.bytes"],
        "segment_index_bytes": c["segment.index.bytes"],
        "max_message_bytes": c["max.message.bytes"],
        "message_timestamp_type": c["message.timestamp.type"],
        "message_timestamp_before_max_ms": c["message.timestamp.before.max.ms"],
        "message_timestamp_after_max_ms": c["message.timestamp.after.max.ms"],
        "flush_messages": c["flush.messages"],
        "flush_ms": c["flush.ms"],
        "retention_ms": c["retention.ms"],
        "retention_bytes": c["retention.bytes"],
        "cleanup_policy": c["cleanup.policy"],
        "delete_retention_ms": c["delete.retention.ms"],
        "min_compaction_lag_ms": c["min.compaction.lag.ms"],
        "max_compaction_lag_ms": c["max.compaction.lag.ms"],
        "min_cleanable_dirty_ratio": c["min.cleanable.dirty.ratio"],
        "file_delete_delay_ms": c["file.delete.delay.ms"],
        "preallocate": c["preallocate"],
        "compression_type": c["compression.type"],
        "min_insync_replicas": c["min.insync.replicas"],
        "unclean_leader_election_enable": c["unclean.leader.election.enable"],
        "ack_fsync": c["odradek.ack.fsync"],
        "key_schema_validation": c["confluent.key.schema.validation"],
        "value_schema_validation": c["confluent.value.schema.validation"],
        "key_subject_name_strategy": c["confluent.key.subject.name.strategy"],
        "value_subject_name_strategy": c["confluent.value.subject.name.strategy"],
    }
