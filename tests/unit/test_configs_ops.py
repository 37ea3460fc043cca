"""Pure parts of dynamic topic configs: IncrementalAlterConfigs operations, AlterConfigs
replacement, and ``odradek configs`` parsing/output (kafka-configs.sh's format), client
quota forms included."""

from __future__ import annotations

import argparse

import pytest

from odradek.cli.configs_cmd import (
    ConfigCommandError,
    Entry,
    add_parser,
    describe_lines,
    entities_of,
    format_entry,
    parse_add_config,
    parse_delete_config,
)
from odradek.cli.quotas_cmd import DEFAULT, describe_filter, format_quota_line, quota_entity
from odradek.config import validate_topic_configs
from odradek.errors import ErrorCode, KafkaError
from odradek.server.handlers.configs import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    apply_incremental,
    replace_all,
)


# ---------------------------------------------------------------------------- operations
def test_set_and_delete() -> None:
    cur = {"retention.ms": "1000", "segment.bytes": "2048"}
    out = apply_incremental(
        cur,
        [
            ("retention.ms", OP_SET, "5000"),
            ("segment.bytes", OP_DELETE, None),
            ("min.insync.replicas", OP_SET, "2"),
        ],
    )
    assert out == {"retention.ms": "5000", "min.insync.replicas": "2"}
    assert cur == {"retention.ms": "1000", "segment.bytes": "2048"}  # input untouched


def test_delete_of_absent_or_unknown_key_is_a_no_op() -> None:
    assert (
        apply_incremental(
            {}, [("segment.bytes", OP_DELETE, None), ("not.a.config", OP_DELETE, "ignored")]
        )
        == {}
    )


def test_append_starts_from_the_default_and_keeps_elements_distinct() -> None:
    # cleanup.policy defaults to "delete" (Kafka: APPEND to an unset LIST uses the default).
    assert apply_incremental({}, [("cleanup.policy", OP_APPEND, "compact")]) == {
        "cleanup.policy": "delete,compact"
    }
    assert apply_incremental(
        {"cleanup.policy": "compact"}, [("cleanup.policy", OP_APPEND, "compact, delete")]
    ) == {"cleanup.policy": "compact,delete"}
    # Throttled-replica lists default to empty.
    assert apply_incremental(
        {}, [("leader.replication.throttled.replicas", OP_APPEND, "0:1,1:2")]
    ) == {"leader.replication.throttled.replicas": "0:1,1:2"}


def test_subtract() -> None:
    assert apply_incremental(
        {"cleanup.policy": "compact,delete"}, [("cleanup.policy", OP_SUBTRACT, "delete")]
    ) == {"cleanup.policy": "compact"}
    out = apply_incremental({}, [("cleanup.policy", OP_SUBTRACT, "delete")])
    assert out == {"cleanup.policy": ""}
    assert validate_topic_configs(out) == {"cleanup.policy": ""}  # empty list is legal


@pytest.mark.parametrize("op,word", [(OP_APPEND, "append"), (OP_SUBTRACT, "subtract")])
def test_append_subtract_only_for_list_configs(op: int, word: str) -> None:
    with pytest.raises(KafkaError) as ei:
        apply_incremental({}, [("retention.ms", op, "5")])
    assert ei.value.code == ErrorCode.invalid_config
    assert ei.value.message == f"Config value {word} is not allowed for config key: retention.ms"
    with pytest.raises(KafkaError) as ei:
        apply_incremental({}, [("no.such.config", op, "5")])
    assert ei.value.code == ErrorCode.invalid_config


def test_request_shape_errors_are_invalid_request() -> None:
    with pytest.raises(KafkaError) as ei:
        apply_incremental({}, [("retention.ms", OP_SET, "1"), ("retention.ms", OP_DELETE, None)])
    assert ei.value.code == ErrorCode.invalid_request
    assert ei.value.message == "Error due to duplicate config keys : retention.ms"
    with pytest.raises(KafkaError) as ei:
        apply_incremental({}, [("retention.ms", 7, "1")])
    assert ei.value.code == ErrorCode.invalid_request
    with pytest.raises(KafkaError) as ei:
        apply_incremental({}, [("retention.ms", OP_SET, None)])
    assert ei.value.code == ErrorCode.invalid_request
    assert ei.value.message == "Null value not supported for : retention.ms"


def test_replace_all() -> None:
    assert replace_all([("retention.ms", "1"), ("segment.ms", "2"), ("retention.ms", "3")]) == {
        "retention.ms": "3",
        "segment.ms": "2",
    }
    assert replace_all([]) == {}
    with pytest.raises(KafkaError) as ei:
        replace_all([("a", None), ("b", "1"), ("c", None)])
    assert ei.value.code == ErrorCode.invalid_request
    assert ei.value.message == "Null value not supported for : a,c"


# ---------------------------------------------------------------------------- CLI parsing
def test_parse_add_config_brackets_keep_commas() -> None:
    assert parse_add_config("k1=v1,k2=[a,b],k3 = x=y") == {"k1": "v1", "k2": "a,b", "k3": "x=y"}
    assert parse_add_config("cleanup.policy=[compact,delete]") == {
        "cleanup.policy": "compact,delete"
    }
    assert parse_add_config("") == {}
    with pytest.raises(ConfigCommandError, match="key=val"):
        parse_add_config("novalue")
    assert parse_delete_config("a, b,,c") == ["a", "b", "c"]


# ---------------------------------------------------------------------------- CLI output
def _entry(
    name: str,
    value: str | None,
    source: int,
    synonyms: tuple[tuple[str, str | None, int], ...],
    sensitive: bool = False,
) -> Entry:
    return Entry(name, value, source, sensitive, synonyms)


def test_format_entry_is_kafka_configs_line() -> None:
    e = _entry(
        "segment.bytes",
        "1024",
        1,
        (("segment.bytes", "1024", 1), ("log.segment.bytes", "1073741824", 5)),
    )
    assert format_entry(e) == (
        "  segment.bytes=1024 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1024,"
        " DEFAULT_CONFIG:log.segment.bytes=1073741824}"
    )
    pw = _entry("ssl.keystore.password", None, 4, (("ssl.keystore.password", None, 4),), True)
    assert format_entry(pw) == (
        "  ssl.keystore.password=null sensitive=true "
        "synonyms={STATIC_BROKER_CONFIG:ssl.keystore.password=null}"
    )
    assert format_entry(_entry("x", "1", 5, ())) == "  x=1 sensitive=false synonyms={}"


def test_describe_lines_dynamic_filter_and_sorting() -> None:
    entries = [
        _entry("segment.bytes", "1073741824", 5, (("log.segment.bytes", "1073741824", 5),)),
        _entry("retention.ms", "1", 1, (("retention.ms", "1", 1),)),
        _entry("cleanup.policy", "compact", 1, (("cleanup.policy", "compact", 1),)),
    ]
    assert describe_lines("topics", "T", entries, False) == [
        "Dynamic configs for topic T are:",
        "  cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact}",
        "  retention.ms=1 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1}",
    ]
    lines = describe_lines("topics", "T", entries, True)
    assert lines[0] == "All configs for topic T are:" and len(lines) == 4
    assert lines[3].startswith("  segment.bytes=1073741824 ")
    assert describe_lines("brokers", "2", entries, False) == ["Dynamic configs for broker 2 are:"]


# ---------------------------------------------------------------------------- quotas CLI
def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["configs", "--bootstrap-server", "b:1", *argv])


def test_entity_options_pair_up_in_kafka_configs_order() -> None:
    args = _parse(
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-default",
        "--describe",
    )
    assert entities_of(args) == [("users", "alice"), ("clients", DEFAULT)]
    assert args.entity_type == "users" and args.entity_name == "alice"
    args = _parse("--entity-type", "clients", "--entity-default", "--describe")
    assert entities_of(args) == [("clients", DEFAULT)] and args.entity_default
    args = _parse("--entity-type", "users", "--describe")
    assert entities_of(args) == [("users", None)]
    # The single-entity forms keep working (brokers' --entity-default).
    args = _parse("--entity-type", "brokers", "--entity-default", "--describe")
    assert args.entity_default and args.entity_type == "brokers"


def test_quota_entity_and_describe_filter() -> None:
    pairs = [("users", "alice"), ("clients", DEFAULT)]
    assert quota_entity(pairs) == [("user", "alice"), ("client-id", None)]
    assert describe_filter(pairs) == ([("user", 0, "alice"), ("client-id", 1, None)], True)
    assert describe_filter([("clients", None)]) == ([("client-id", 2, None)], True)
    with pytest.raises(ConfigCommandError):
        quota_entity([("users", None)])  # --alter needs a name or --entity-default
    with pytest.raises(ConfigCommandError):
        quota_entity([("topics", "t")])


def test_format_quota_line_is_kafka_configs_line() -> None:
    assert format_quota_line(
        [("user", "alice"), ("client-id", None)],
        {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2.0},
    ) == (
        "Quota configs for user-principal 'alice', the default client-id are "
        "consumer_byte_rate=2.0, producer_byte_rate=1024.0"
    )
    assert format_quota_line([("client-id", "c1")], {"request_percentage": 12.5}) == (
        "Quota configs for client-id 'c1' are request_percentage=12.5"
    )
