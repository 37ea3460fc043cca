"""What a configuration table entry is: Kafka's config types and sources, the Support
column, validators, ``ConfigDef`` and Kafka's parsing of string values (its error texts),
and the constructors the area tables declare their settings with.

Part of ``odradek.configdefs`` (see there); imported by the table modules of this package.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "LONG_MAX",
    "LONG_MIN",
    "INT_MAX",
    "INT_MIN",
    "SHORT_MAX",
    "SHORT_MIN",
    "ConfigType",
    "ConfigSource",
    "Support",
    "ConfigValueError",
    "parse_list",
    "Range",
    "RangeOr",
    "ValidString",
    "ValidList",
    "throttled_replicas",
    "Validator",
    "Synonym",
    "ConfigDef",
    "T",
    "broker",
    "topic",
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
                raise ConfigValueError(
                    name, item, "String must be one of: " + ", ".join(self.values)
                )


def throttled_replicas(name: str, value: Any) -> None:
    """Kafka's ThrottledReplicaListValidator: "*" or "partition:broker,..."."""
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
                raise ConfigValueError(
                    self.name, value, f"Odradek only supports {self.default!r}: {self.reason}"
                )
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


# --- constructors of table entries ---------------------------------------------------

T = ConfigType


def topic(
    name: str,
    ctype: ConfigType,
    default: str | None,
    doc: str,
    validator: Validator | None = None,
    synonyms: Sequence[str | Synonym] = (),
) -> ConfigDef:
    syns = tuple(s if isinstance(s, Synonym) else Synonym(s) for s in synonyms)
    return ConfigDef(name, ctype, default, doc, validator, syns)


def broker(
    name: str, ctype: ConfigType, default: str | None, doc: str, validator: Validator | None = None
) -> ConfigDef:
    return ConfigDef(name, ctype, default, doc, validator)
