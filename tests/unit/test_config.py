"""odradek.config: Kafka's property names, defaults, precedence and DescribeConfigs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from odradek.broker.settings import BrokerSettings
from odradek.config import (
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    describe_broker_config,
    describe_topic_config,
    dynamic_broker_value,
    log_config_for_topic,
    parse_listeners,
    parse_properties,
    topic_override,
    validate_topic_configs,
)
from odradek.configdefs import LONG_MAX
from odradek.coordinator.group_coordinator import OffsetsSettings
from odradek.errors import ErrorCode, KafkaError
from odradek.replication.settings import ReplicaManagerSettings
from odradek.server.settings import ServerSettings

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}


def broker(**extra: str) -> BrokerConfig:
    props = dict(BASE)
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return BrokerConfig.from_dict(props)


# --- .properties parsing --------------------------------------------------------------


def test_properties_separators_comments_and_blanks() -> None:
    text = (
        "# comment\n"
        "  ! another comment\n"
        "\n"
        "a=1\n"
        "b: 2\n"
        "c 3\n"
        "d\t=\t4  \n"  # trailing blanks of a value are kept, like java.util.Properties
        "e\n"  # key with empty value
        "f==x\n"  # only the first separator is consumed
    )
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "4  ", "e": "", "f": "=x"}


def test_properties_continuation_and_escapes() -> None:
    text = (
        "log.dirs=/a,\\\n"
        "         /b,\\\n"
        "   /c\n"
        "key\\ with\\=sep = v\\tal\\u00e9\\\\\n"
        "crlf=1\r\nlast=2\\"
    )
    props = parse_properties(text)
    assert props["log.dirs"] == "/a,/b,/c"
    assert props["key with=sep"] == "v\talé\\"
    assert props["crlf"] == "1"
    assert props["last"] == "2"


def test_properties_even_backslashes_do_not_continue_and_dupes_last_win() -> None:
    props = parse_properties("a=x\\\\\nb=y\na=z\n# c=1 \\\nd=2")
    assert props == {"a": "z", "b": "y", "d": "2"}


def test_properties_bad_unicode_escape() -> None:
    with pytest.raises(ConfigError):
        parse_properties("a=\\u12")


def test_from_properties_file(tmp_path: Path) -> None:
    p = tmp_path / "server.properties"
    p.write_text("broker.id=3\nzookeeper.connect=127.0.0.1:2181/kafka\nlog.dirs=/x, /y\n")
    cfg = BrokerConfig.from_properties_file(p)
    assert cfg.broker_id == 3
    assert cfg.zookeeper_connect == "127.0.0.1:2181/kafka"
    assert cfg.log_dirs == ["/x", "/y"]


# --- broker config ----------------------------------------------------------------------


def test_broker_defaults_are_kafkas() -> None:
    cfg = broker()
    assert cfg.listeners == "PLAINTEXT://:9092"
    assert cfg.log_dirs == ["/tmp/kafka-logs"]
    topic = log_config_for_topic(cfg, {})
    assert topic["retention_ms"] == 168 * 3600 * 1000  # REQ-R24: 7 days
    assert topic["segment_ms"] == 168 * 3600 * 1000
    assert topic["max_message_bytes"] == 1048588
    assert topic["flush_messages"] == LONG_MAX  # REQ-R18: no forced fsync
    assert topic["unclean_leader_election_enable"] is False  # REQ-R10
    assert topic["min_insync_replicas"] == 1  # REQ-R8
    assert cfg.settings(ReplicaManagerSettings).replica_lag_time_max_ms == 30000
    assert cfg.settings(OffsetsSettings).topic_replication_factor == 3
    assert cfg.settings(BrokerSettings).zookeeper_connection_timeout() == 18000
    assert cfg.settings(BrokerSettings).log_retention_check_interval_ms == 300000


def test_log_dir_fallback_and_log_dirs_precedence() -> None:
    assert broker(**{"log.dir": "/d"}).log_dirs == ["/d"]
    assert broker(**{"log.dir": "/d", "log.dirs": "/e,/f"}).log_dirs == ["/e", "/f"]


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, 604800000),
        ({"log.retention.hours": "1"}, 3600000),
        ({"log.retention.hours": "1", "log.retention.minutes": "2"}, 120000),
        ({"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "5"}, 5),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.hours": "-5"}, -1),  # any negative means "forever"
    ],
)
def test_retention_precedence_ms_over_minutes_over_hours(
    props: dict[str, str], expected: int
) -> None:
    cfg = broker(**props)
    assert cfg.topic_defaults()["retention.ms"] == str(expected)
    assert log_config_for_topic(cfg, {})["retention_ms"] == expected


def test_roll_ms_over_hours() -> None:
    assert broker(**{"log.roll.hours": "2"}).topic_defaults()["segment.ms"] == "7200000"
    assert (
        broker(**{"log.roll.hours": "2", "log.roll.ms": "99"}).topic_defaults()["segment.ms"]
        == "99"
    )


def test_missing_required_keys() -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig.from_dict({"zookeeper.connect": "x"})
    assert e.value.key == "broker.id"
    with pytest.raises(ConfigError) as e:
        BrokerConfig.from_dict({"broker.id": "0"})
    assert e.value.key == "zookeeper.connect"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("broker.id", "one"),
        ("num.partitions", "0"),
        ("log.segment.bytes", "99999999999"),  # not an INT
        ("auto.create.topics.enable", "yes"),
        ("log.cleanup.policy", "delete,shred"),
        ("log.message.timestamp.type", "createtime"),  # case-sensitive like Kafka
        ("listeners", "PLAINTEXT://host"),
        ("listeners", "A://:1,a://:2"),  # names are case-insensitive, must be unique
    ],
)
def test_invalid_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as e:
        broker(**{key: value})
    assert e.value.key == key
    assert e.value.code == ErrorCode.invalid_config
    assert key in str(e.value)


def test_values_are_trimmed_and_unknown_keys_kept(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        cfg = broker(**{"num.partitions": " 3 ", "my.custom.key": "v"})
    assert cfg.settings(ServerSettings).num_partitions == 3
    assert cfg.raw["my.custom.key"] == "v"
    assert "my.custom.key" in caplog.text


def test_listeners_and_advertised_endpoint() -> None:
    assert parse_listeners("plaintext://127.0.0.2:9092,INTERNAL://[::1]:9093") == [
        ("PLAINTEXT", "127.0.0.2", 9092),
        ("INTERNAL", "::1", 9093),
    ]
    cfg = broker(listeners="PLAINTEXT://127.0.0.3:19092")
    assert cfg.advertised_endpoint() == ("127.0.0.3", 19092)
    cfg = broker(
        **{"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://127.0.0.4:9092"}
    )
    assert cfg.advertised_endpoint() == ("127.0.0.4", 9092)
    with pytest.raises(ConfigError) as e:
        broker().advertised_endpoint()  # empty host: Odradek requires it explicit
    assert e.value.key == "listeners"
    with pytest.raises(ConfigError):
        broker(listeners="PLAINTEXT://0.0.0.0:9092").advertised_endpoint()


# --- topic configs ----------------------------------------------------------------------


def test_topic_config_table_has_kafkas_names_and_defaults() -> None:
    expected = {
        "cleanup.policy": "delete",
        "compression.type": "producer",
        "delete.retention.ms": "86400000",
        "file.delete.delay.ms": "60000",
        "flush.messages": str(LONG_MAX),
        "flush.ms": str(LONG_MAX),
        "index.interval.bytes": "4096",
        "max.message.bytes": "1048588",
        "message.timestamp.type": "CreateTime",
        "min.cleanable.dirty.ratio": "0.5",
        "min.insync.replicas": "1",
        "retention.bytes": "-1",
        "retention.ms": "604800000",
        "segment.bytes": "1073741824",
        "segment.index.bytes": "10485760",
        "segment.ms": "604800000",
        "unclean.leader.election.enable": "false",
        "odradek.ack.fsync": "false",
        "local.retention.ms": "-2",
    }
    for name, default in expected.items():
        assert TOPIC_CONFIGS[name].default == default, name
    assert broker().topic_defaults() == {n: d.default for n, d in TOPIC_CONFIGS.items()}
    assert "Beyond Kafka" in TOPIC_CONFIGS["odradek.ack.fsync"].doc


def test_topic_defaults_follow_broker_synonyms() -> None:
    cfg = broker(
        **{
            "log.segment.bytes": "2048",
            "message.max.bytes": "5000",
            "log.cleanup.policy": "compact, delete",
            "log.flush.scheduler.interval.ms": "1000",
            "min.insync.replicas": "2",
        }
    )
    d = cfg.topic_defaults()
    assert d["segment.bytes"] == "2048"
    assert d["max.message.bytes"] == "5000"
    assert d["cleanup.policy"] == "compact,delete"
    assert d["flush.ms"] == "1000"
    assert d["min.insync.replicas"] == "2"


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        (
            {"retention.ms": "abc"},
            "Invalid value abc for configuration retention.ms: Not a number of type LONG",
        ),
        (
            {"retention.ms": "-2"},
            "Invalid value -2 for configuration retention.ms: Value must be at least -1",
        ),
        ({"min.cleanable.dirty.ratio": "1.5"}, "Value must be no more than 1"),
        ({"cleanup.policy": "delete,purge"}, "String must be one of: compact, delete"),
        (
            {"compression.type": "brotli"},
            "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer",
        ),
        ({"message.timestamp.type": "Now"}, "String must be one of: CreateTime, LogAppendTime"),
        ({"preallocate": "1"}, "Expected value to be either true or false"),
        ({"segment.bytes": "13"}, "Value must be at least 14"),
        ({"compression.gzip.level": "0"}, "compression.gzip.level"),
        ({"leader.replication.throttled.replicas": "x"}, "[partitionId]:[brokerId]"),
        (
            {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
            "conflict topic config setting",
        ),
    ],
)
def test_validate_topic_configs_rejects(configs: dict[str, str | None], message: str) -> None:
    with pytest.raises(KafkaError) as e:
        validate_topic_configs(configs)
    assert e.value.code == ErrorCode.invalid_config
    assert message in e.value.message


def test_validate_topic_configs_accepts() -> None:
    configs: dict[str, str | None] = {
        "cleanup.policy": "compact,delete",
        "retention.ms": "-1",
        "compression.gzip.level": "-1",
        "leader.replication.throttled.replicas": "0:1,1:2",
        "follower.replication.throttled.replicas": "*",
        "odradek.ack.fsync": "TRUE",
        "segment.ms": None,  # None = no override (AlterConfigs DELETE)
    }
    out = validate_topic_configs(configs)
    assert "segment.ms" not in out
    assert out["cleanup.policy"] == "compact,delete"


def test_log_config_for_topic_overrides_win() -> None:
    cfg = broker(**{"log.retention.hours": "1"})
    lc = log_config_for_topic(
        cfg, {"retention.ms": "5000", "cleanup.policy": "compact", "odradek.ack.fsync": "true"}
    )
    assert lc["retention_ms"] == 5000
    assert lc["cleanup_policy"] == ["compact"]
    assert lc["ack_fsync"] is True
    assert lc["segment_bytes"] == 1073741824
    assert lc["flush_ms"] == LONG_MAX


# --- DescribeConfigs ----------------------------------------------------------------------


def test_describe_topic_sources_and_synonyms() -> None:
    cfg = broker(**{"log.retention.hours": "24"})
    entries = {e.name: e for e in describe_topic_config(cfg, {"segment.bytes": "1048576"})}
    assert set(entries) == set(TOPIC_CONFIGS)

    seg = entries["segment.bytes"]
    assert (seg.value, seg.source, seg.is_default) == (
        "1048576",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        False,
    )
    assert seg.synonyms[0] == ("segment.bytes", "1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert seg.config_type == ConfigType.INT

    # Kafka's configSynonyms drops every synonym before the first one named like the
    # primary broker property (log.retention.ms): resting on log.retention.hours, the
    # topic's retention.ms has no synonyms and DEFAULT_CONFIG as its source, although
    # its value follows the static hours.
    ret = entries["retention.ms"]
    assert (ret.value, ret.source, ret.synonyms) == ("86400000", ConfigSource.DEFAULT_CONFIG, [])
    assert ret.config_type == ConfigType.LONG
    seg_bytes_default = {e.name: e for e in describe_topic_config(cfg, {})}["segment.bytes"]
    assert seg_bytes_default.synonyms == [
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG)
    ]

    cfg_ms = broker(**{"log.retention.ms": "1000", "log.retention.hours": "24"})
    ret = {e.name: e for e in describe_topic_config(cfg_ms, {})}["retention.ms"]
    assert (ret.value, ret.source) == ("1000", ConfigSource.STATIC_BROKER_CONFIG)
    assert ret.synonyms == [
        ("log.retention.ms", "1000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]

    pol = entries["cleanup.policy"]
    assert (pol.value, pol.source, pol.is_default) == ("delete", ConfigSource.DEFAULT_CONFIG, True)
    assert pol.config_type == ConfigType.LIST
    assert not pol.read_only and not pol.is_sensitive and pol.documentation

    thr = entries["leader.replication.throttled.replicas"]
    assert (thr.value, thr.source, thr.synonyms) == ("", ConfigSource.DEFAULT_CONFIG, [])


def test_describe_broker_sources_and_passwords() -> None:
    cfg = broker(**{"num.partitions": "3", "ssl.keystore.password": "secret"})
    entries = {e.name: e for e in describe_broker_config(cfg)}
    np_ = entries["num.partitions"]
    assert (np_.value, np_.source, np_.is_default, np_.read_only) == (
        "3",
        ConfigSource.STATIC_BROKER_CONFIG,
        False,
        True,
    )
    rf = entries["default.replication.factor"]
    assert (rf.value, rf.source, rf.is_default) == ("1", ConfigSource.DEFAULT_CONFIG, True)
    assert entries["log.retention.ms"].value is None  # no default, like Kafka
    hours = entries["log.retention.hours"]
    assert hours.synonyms == [("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG)]
    pw = entries["ssl.keystore.password"]
    assert pw.value is None and pw.is_sensitive and pw.config_type == ConfigType.PASSWORD
    assert all(v is None for _, v, _ in pw.synonyms)


def test_describe_broker_dynamic_layers() -> None:
    cfg = broker(**{"log.retention.hours": "24"})
    rate = "follower.replication.throttled.rate"
    entries = {
        e.name: e
        for e in describe_broker_config(
            cfg, {rate: "1000"}, {rate: "5000", "leader.replication.throttled.rate": "7"}
        )
    }
    e = entries[rate]
    assert (e.value, e.source, e.read_only) == ("1000", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    assert e.synonyms == [
        (rate, "1000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        (rate, "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        (rate, "9223372036854775807", ConfigSource.DEFAULT_CONFIG),
    ]
    lead = entries["leader.replication.throttled.rate"]
    assert (lead.value, lead.source) == ("7", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert entries["num.partitions"].read_only
    # The <default> resource lists only the dynamic defaults, without per-broker values.
    defaults = {
        e.name: e
        for e in describe_broker_config(cfg, {rate: "1000"}, {rate: "5000"}, per_broker=False)
    }
    assert list(defaults) == [rate]
    assert defaults[rate].value == "5000"
    assert defaults[rate].synonyms[0] == (rate, "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_topic_override_and_dynamic_broker_value_are_typed_by_the_table(
    caplog: pytest.LogCaptureFixture,
) -> None:
    overrides = {
        "min.insync.replicas": " 2",
        "unclean.leader.election.enable": "TRUE",
        "leader.replication.throttled.replicas": "0:1, 1:2",
        "segment.bytes": "many",
    }
    assert topic_override(overrides, "min.insync.replicas") == 2
    assert topic_override(overrides, "unclean.leader.election.enable") is True
    assert topic_override(overrides, "leader.replication.throttled.replicas") == ["0:1", "1:2"]
    assert topic_override(overrides, "retention.ms") is None  # not overridden
    with caplog.at_level("WARNING"):
        assert topic_override(overrides, "segment.bytes") is None  # malformed: ignored
    assert "segment.bytes" in caplog.text
    assert dynamic_broker_value("transaction.partition.verification.enable", "false") is False
    assert dynamic_broker_value("leader.replication.throttled.rate", "1000") == 1000
    assert dynamic_broker_value("leader.replication.throttled.rate", None) is None
    assert dynamic_broker_value("leader.replication.throttled.rate", "fast") is None


def test_settings_objects_hide_passwords() -> None:
    cfg = broker(**{"odradek.zookeeper.auth": "digest:kafka:s3cret"})
    settings = cfg.settings(BrokerSettings)
    assert settings.zookeeper_auth == "digest:kafka:s3cret"
    assert "s3cret" not in repr(settings)


def test_describe_topic_config_keys_and_a_changed_broker_config() -> None:
    """Only the configuration_keys asked for are built (a console asks for one), and the
    broker defaults DescribeConfigs caches follow a change of the broker's config."""
    cfg = broker(**{"log.retention.hours": "24"})
    only = describe_topic_config(cfg, {"min.insync.replicas": "2"}, {"min.insync.replicas"})
    assert [(e.name, e.value, e.source) for e in only] == [
        ("min.insync.replicas", "2", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    ]
    assert describe_topic_config(cfg, {}, set()) == []

    def value(c: BrokerConfig, name: str) -> str | None:
        return describe_topic_config(c, {}, {name})[0].value

    assert value(cfg, "retention.ms") == "86400000"
    assert value(cfg, "delete.retention.ms") == "86400000"
    cfg.raw["log.cleaner.delete.retention.ms"] = "1234"  # the same object, changed
    assert value(cfg, "delete.retention.ms") == "1234"
