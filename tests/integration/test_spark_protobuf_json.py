"""``value.format=protobuf`` and ``value.format=json`` against a real cluster, a real
``odradek schema-registry`` and confluent-kafka's ProtobufSerializer/Deserializer and
JSONSerializer/Deserializer (issue 27): values the serializers wrote read as typed Spark
columns, and rows the sink wrote decode with the deserializers, for both formats."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from schema_registry_util import RegistryProcess, start_registry
from tests.support.topics import create_topic

pyspark = pytest.importorskip("pyspark")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.json_schema import (  # noqa: E402
    JSONDeserializer,
    JSONSerializer,
)
from confluent_kafka.schema_registry.protobuf import (  # noqa: E402
    ProtobufDeserializer,
    ProtobufSerializer,
)
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from google.protobuf import message_factory  # noqa: E402
from spark_util import local_spark  # noqa: E402

from odradek.cluster.local import LocalCluster  # noqa: E402
from odradek.spark.protobuf_types import protobuf_file, protobuf_message  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PROTO = """
syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";

message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
  map<string, int64> attrs = 4;
  Ship ship = 5;
  Mode mode = 6;
  google.protobuf.Timestamp at = 7;
  uint64 big = 8;
}
message Ship { int32 days = 1; }
enum Mode { AIR = 0; SEA = 1; }
"""
PROTO_DDL = (
    "id bigint, item string, tags array<string>, attrs map<string,bigint>, "
    "ship struct<days:int>, mode string, at timestamp, big decimal(20,0)"
)
POINT = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Point",
    "type": "object",
    "properties": {
        "x": {"type": "integer"},
        "y": {"type": ["number", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "where": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "floor": {"type": "integer"}},
            "required": ["city"],
        },
    },
    "required": ["x", "tags"],
}
POINT_DDL = "x bigint, y double, tags array<string>, `where` struct<city:string,floor:bigint>"


@pytest.fixture(scope="module")
def registry(cluster: LocalCluster) -> Iterator[RegistryProcess]:
    reg = start_registry(cluster, 8081)
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_spark("odradek-protobuf-json-tests")


@pytest.fixture(scope="module")
def order_cls() -> Any:
    """The Order message class (a protoc-generated class would do the same)."""
    return message_factory.GetMessageClass(protobuf_message(protobuf_file(PROTO)))


def order(cls: Any, i: int) -> Any:
    m = cls(id=i, item=f"item-{i}", tags=[f"t{i}"] * (i % 3), mode=i % 2, big=2**64 - 1 - i)
    m.attrs["n"] = i
    if i % 2:
        m.ship.days = i
    m.at.FromDatetime(dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i))
    return m


def produce(
    cluster: LocalCluster,
    topic: str,
    ser: Callable[..., bytes],
    values: list[Any],
    raw: list[bytes] = (),
) -> None:  # type: ignore[assignment]
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
    for i, v in enumerate(values):
        p.produce(topic, value=ser(v, ctx), key=str(i).encode())
    for v in raw:
        p.produce(topic, value=v)
    assert p.flush(30) == 0


def read(
    spark: Any, cluster: LocalCluster, registry: RegistryProcess, topic: str, fmt: str, **opts: Any
) -> Any:
    r = (
        spark.read.format("odradek")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("subscribe", topic)
        .option("value.format", fmt)
        .option("schema.registry.url", registry.url)
    )
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


def write(
    df: Any, cluster: LocalCluster, registry: RegistryProcess, topic: str, fmt: str, **opts: Any
) -> None:
    w = (
        df.write.format("odradek")
        .mode("append")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("topic", topic)
        .option("value.format", fmt)
        .option("schema.registry.url", registry.url)
    )
    for k, v in opts.items():
        w = w.option(k, str(v))
    w.save()


def consume(cluster: LocalCluster, topic: str, de: Callable[..., Any], n: int) -> list[Any]:
    """(decoded value, schema id) of the first n records, by confluent-kafka."""
    ctx = SerializationContext(topic, MessageField.VALUE)
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"check-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out: list[Any] = []
    deadline = dt.datetime.now() + dt.timedelta(seconds=60)
    try:
        while len(out) < n and dt.datetime.now() < deadline:
            for m in c.consume(100, 0.5):
                assert m.error() is None, m.error()
                out.append((de(m.value(), ctx), int.from_bytes(m.value()[1:5], "big")))
    finally:
        c.close()
    assert len(out) == n, out
    return out


def test_protobuf_serializer_values_read_as_typed_columns(
    cluster: LocalCluster, registry: RegistryProcess, spark: Any, order_cls: Any, topic_name: str
) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, wait_leaders=True)
    client = SchemaRegistryClient({"url": registry.url})
    ser = ProtobufSerializer(order_cls, client, {"use.deprecated.format": False})
    produce(cluster, topic_name, ser, [order(order_cls, i) for i in range(3)], raw=[b"junk"])
    opts = {"value.decode.errors": "null"}
    for client_name in ("columnar", "confluent"):
        df = read(
            spark,
            cluster,
            registry,
            topic_name,
            "protobuf",
            **{**opts, "odradek.client": client_name},
        )
        assert df.columns[:9] == ["key", "id", "item", "tags", "attrs", "ship", "mode", "at", "big"]
        types = dict(df.dtypes)
        assert (types["attrs"], types["ship"], types["at"], types["big"]) == (
            "map<string,bigint>",
            "struct<days:int>",
            "timestamp",
            "decimal(20,0)",
        )
        rows = sorted(df.collect(), key=lambda r: r.offset)
        assert [r.id for r in rows] == [0, 1, 2, None]  # the junk value: a null row
        assert [r.item for r in rows[:3]] == ["item-0", "item-1", "item-2"]
        assert [r.tags for r in rows[:3]] == [[], ["t1"], ["t2", "t2"]]
        assert [r.attrs for r in rows[:3]] == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert [r.ship and r.ship.days for r in rows[:3]] == [None, 1, None]  # unset: null
        assert [r.mode for r in rows[:3]] == ["AIR", "SEA", "AIR"]
        assert [int(r.big) for r in rows[:3]] == [2**64 - 1, 2**64 - 2, 2**64 - 3]
        assert [r.at.timestamp() for r in rows[:3]] == [
            (dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i)).timestamp()
            for i in range(3)
        ]
    with pytest.raises(Exception, match=rf"Protobuf value of {topic_name}-0 at offset 3"):
        read(spark, cluster, registry, topic_name, "protobuf").collect()


def test_protobuf_sink_rows_decode_with_the_deserializer(
    cluster: LocalCluster, registry: RegistryProcess, spark: Any, order_cls: Any, topic_name: str
) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, partitions=1, wait_leaders=True)
    client = SchemaRegistryClient({"url": registry.url})
    schema_id = client.register_schema(f"{topic_name}-value", Schema(PROTO, "PROTOBUF"))
    at = dt.datetime(2026, 3, 1, 12, 0, 1, 500000, tzinfo=dt.UTC)
    rows = [
        (1, "pen", ["a"], {"n": 1}, {"days": 3}, "SEA", at, 2**64 - 1),
        (2, "ink", [], {}, None, "AIR", None, 0),
    ]
    from decimal import Decimal

    df = spark.createDataFrame([(*r[:7], Decimal(r[7])) for r in rows], PROTO_DDL).selectExpr(
        "cast(id as string) as key", "*"
    )
    write(df, cluster, registry, topic_name, "protobuf")
    de = ProtobufDeserializer(order_cls, {"use.deprecated.format": False})
    got = sorted(consume(cluster, topic_name, de, 2), key=lambda g: g[0].id)
    assert {sid for _, sid in got} == {schema_id}
    first, second = got[0][0], got[1][0]
    assert (first.id, first.item, list(first.tags), dict(first.attrs)) == (
        1,
        "pen",
        ["a"],
        {"n": 1},
    )
    assert (first.ship.days, first.mode, first.big) == (3, 1, 2**64 - 1)
    assert first.at.ToDatetime(tzinfo=dt.UTC) == at
    assert (second.HasField("ship"), second.HasField("at"), second.mode) == (False, False, 0)
    # and the connector's own read gives the rows back
    back = sorted(
        read(spark, cluster, registry, topic_name, "protobuf").collect(), key=lambda r: r.id
    )
    # (Spark shows timestamps as naive local datetimes: compare the instants)
    assert [(r.id, r.item, r.mode, r.at and r.at.timestamp()) for r in back] == [
        (1, "pen", "SEA", at.timestamp()),
        (2, "ink", "AIR", None),
    ]


def test_json_serializer_values_read_as_typed_columns(
    cluster: LocalCluster, registry: RegistryProcess, spark: Any, topic_name: str
) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, wait_leaders=True)
    client = SchemaRegistryClient({"url": registry.url})
    ser = JSONSerializer(json.dumps(POINT), client)
    docs = [
        {"x": 1, "y": 2.5, "tags": ["a"], "where": {"city": "Oslo", "floor": 3}},
        {"x": -5, "tags": []},
        {"x": 7, "y": None, "tags": ["b", "c"], "where": {"city": "Rome"}},
    ]
    produce(cluster, topic_name, ser, docs, raw=[b"\x00\x00\x00\x00\x01{nope"])
    df = read(spark, cluster, registry, topic_name, "json", **{"value.decode.errors": "null"})
    assert df.columns[:5] == ["key", "x", "y", "tags", "where"]
    assert dict(df.dtypes)["where"] == "struct<city:string,floor:bigint>"
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [(r.x, r.y, r.tags) for r in rows] == [
        (1, 2.5, ["a"]),
        (-5, None, []),
        (7, None, ["b", "c"]),
        (None, None, None),
    ]
    assert [r.where and r.where.asDict() for r in rows] == [
        {"city": "Oslo", "floor": 3},
        None,
        {"city": "Rome", "floor": None},
        None,
    ]
    with pytest.raises(Exception, match=rf"JSON value of {topic_name}-0 at offset 3"):
        read(spark, cluster, registry, topic_name, "json").collect()


def test_json_sink_rows_decode_with_the_deserializer(
    cluster: LocalCluster, registry: RegistryProcess, spark: Any, topic_name: str
) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, partitions=1, wait_leaders=True)
    client = SchemaRegistryClient({"url": registry.url})
    schema_id = client.register_schema(f"{topic_name}-value", Schema(json.dumps(POINT), "JSON"))
    # a compatible v2 (tags no longer required) is the latest; value.schema.id picks v1
    v2 = {**POINT, "required": ["x"]}
    assert (
        client.register_schema(f"{topic_name}-value", Schema(json.dumps(v2), "JSON")) != schema_id
    )
    df = spark.createDataFrame([(1, 2.5, ["a"], ("Oslo", 3)), (2, None, [], None)], POINT_DDL)
    write(df, cluster, registry, topic_name, "json", **{"value.schema.id": schema_id})
    de = JSONDeserializer(None, schema_registry_client=client)  # validates, by default
    got = sorted(consume(cluster, topic_name, de, 2), key=lambda g: g[0]["x"])
    assert {sid for _, sid in got} == {schema_id}
    assert [g for g, _ in got] == [
        {"x": 1, "y": 2.5, "tags": ["a"], "where": {"city": "Oslo", "floor": 3}},
        {"x": 2, "tags": []},  # nulls are left out
    ]
    # a row the schema refuses fails the write, naming the row and the path
    bad = spark.createDataFrame([(3, None, ["a"], (None, 1))], POINT_DDL)
    with pytest.raises(Exception, match=r"does not fit subject .*'city' is a required property"):
        write(bad, cluster, registry, topic_name, "json")
