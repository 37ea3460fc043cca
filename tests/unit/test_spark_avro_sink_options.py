"""The sink's ``value.format=avro`` option rules and which columns make the value
(issue 27); encoding against a real registry is in tests/integration/test_spark_avro_sink.py."""

from __future__ import annotations

import json

import pytest

from odradek.spark.offsets import SparkOptionError
from odradek.spark.value_sink import sink_value_options as avro_sink_options
from odradek.spark.value_sink import value_columns

URL = {"value.format": "avro", "schema.registry.url": "http://127.0.0.1:8081/,http://x"}


def test_binary_is_no_avro_and_avro_needs_a_registry() -> None:
    assert avro_sink_options({}) is None
    with pytest.raises(SparkOptionError, match=r"schema\.registry\.url"):
        avro_sink_options({"value.format": "avro"})
    with pytest.raises(SparkOptionError, match="binary, avro, protobuf, json"):
        avro_sink_options({"value.format": "xml"})


def test_defaults_follow_confluents_serializer() -> None:
    o = avro_sink_options(URL)
    assert o is not None
    assert (o.registry_url, o.subject, o.version, o.inline_schema, o.auto_register) == (
        "http://127.0.0.1:8081",
        None,
        "latest",
        None,
        True,
    )


def test_inline_schema_rules() -> None:
    good = json.dumps({"type": "record", "name": "E", "fields": [{"name": "n", "type": "long"}]})
    o = avro_sink_options({**URL, "value.schema": good, "auto.register.schemas": "false"})
    assert o is not None and o.inline_schema == good and not o.auto_register
    with pytest.raises(SparkOptionError, match="not a valid Avro schema"):
        avro_sink_options({**URL, "value.schema": '{"type": "nope"}'})
    with pytest.raises(SparkOptionError, match="exclude each other"):
        avro_sink_options({**URL, "value.schema": good, "value.schema.version": "1"})
    with pytest.raises(SparkOptionError, match="version number"):
        avro_sink_options({**URL, "value.schema.version": "one"})


def test_value_columns() -> None:
    # a `value` column is the value; otherwise every column but the sink's own
    assert value_columns(["key", "Value", "topic"]) == ["Value"]
    assert value_columns(["key", "id", "item", "topic", "partition", "headers"]) == ["id", "item"]
