"""The sink's ``value.format=avro`` against a real cluster and a real ``odradek
schema-registry`` (issue 27, item 3): typed rows written by a batch write and by a
streaming query are read back by confluent-kafka's AvroDeserializer and by the
connector's own avro read; ``auto.register.schemas`` on/off; a row that does not fit
the schema fails the write naming the row."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from schema_registry_util import RegistryProcess, start_registry
from tests.support.topics import create_topic

pyspark = pytest.importorskip("pyspark")
from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from spark_util import local_spark  # noqa: E402

from odradek.cluster.local import LocalCluster  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {
            "name": "ship",
            "type": {
                "type": "record",
                "name": "Ship",
                "fields": [
                    {
                        "name": "mode",
                        "type": {"type": "enum", "name": "Mode", "symbols": ["AIR", "SEA"]},
                    },
                    {"name": "days", "type": ["null", "int"]},
                ],
            },
        },
    ],
}
DDL = (
    "id bigint, item string, price decimal(9,2), at timestamp, tags array<string>, "
    "note string, attrs map<string,bigint>, ship struct<mode:string,days:int>"
)
EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "n", "type": "long"}, {"name": "what", "type": "string"}],
}


@pytest.fixture(scope="module")
def registry(cluster: LocalCluster) -> Iterator[RegistryProcess]:
    reg = start_registry(cluster, 8081)
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_spark("odradek-avro-sink-tests")


def order(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "item": f"item-{i}",
        "price": Decimal(f"{i}.25"),
        "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
        "tags": [f"t{i}"] * (i % 3),
        "note": None if i % 2 else f"n{i}",
        "attrs": {"n": i},
        "ship": {"mode": "SEA" if i % 2 else "AIR", "days": i or None},
    }


def writer(df: Any, cluster: LocalCluster, registry: RegistryProcess, **opts: Any) -> Any:
    w = (
        df.write.format("odradek")
        .mode("append")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("value.format", "avro")
        .option("schema.registry.url", registry.url)
    )
    for k, v in opts.items():
        w = w.option(k, str(v))
    return w


def consume(cluster: LocalCluster, registry: RegistryProcess, topic: str, n: int) -> list[Any]:
    """(key, decoded value, schema id) of the first n records, by confluent-kafka."""
    de = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
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
                out.append((m.key(), de(m.value(), ctx), int.from_bytes(m.value()[1:5], "big")))
    finally:
        c.close()
    assert len(out) == n, out
    return out


def read_avro(spark: Any, cluster: LocalCluster, registry: RegistryProcess, topic: str) -> Any:
    return (
        spark.read.format("odradek")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("subscribe", topic)
        .option("value.format", "avro")
        .option("schema.registry.url", registry.url)
        .load()
    )


def test_batch_and_stream_write_typed_rows(
    cluster: LocalCluster, registry: RegistryProcess, spark: Any, topic_name: str, tmp_path: Path
) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, partitions=1, wait_leaders=True)
    sr = SchemaRegistryClient({"url": registry.url})
    schema_id = sr.register_schema(f"{topic_name}-value", Schema(json.dumps(ORDER), "AVRO"))
    rows = [order(i) for i in range(4)]
    df = spark.createDataFrame([{**r, "key": str(r["id"])} for r in rows], f"key string, {DDL}")
    # all non-key columns are the record, encoded with the subject's latest schema
    writer(df, cluster, registry, topic=topic_name).save()
    # a struct column `value` (what to_avro users build) is the record too
    struct_df = spark.createDataFrame([order(4)], DDL).selectExpr(
        "cast(id as string) as key", "struct(*) as value"
    )
    writer(struct_df, cluster, registry, topic=topic_name).save()
    # a streaming query (file source, availableNow) writes the same way
    src = tmp_path / "in"
    src.mkdir()
    (src / "part.json").write_text(
        "\n".join(
            json.dumps(
                {**order(i), "price": float(order(i)["price"]), "at": order(i)["at"].isoformat()}
            )
            for i in (5, 6)
        )
    )
    stream = (
        spark.readStream.schema(DDL).json(str(src)).selectExpr("cast(id as string) as key", "*")
    )
    q = (
        stream.writeStream.format("odradek")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("topic", topic_name)
        .option("value.format", "avro")
        .option("schema.registry.url", registry.url)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()

    want = [order(i) for i in range(7)]
    # two Spark partitions write concurrently: compare in id order
    got = sorted(consume(cluster, registry, topic_name, 7), key=lambda g: int(g[0]))
    assert [k for k, _, _ in got] == [str(i).encode() for i in range(7)]
    assert {sid for _, _, sid in got} == {schema_id}
    for (_, value, _), w in zip(got, want, strict=True):
        assert value == {**w, "ship": {**w["ship"]}}

    back = sorted(read_avro(spark, cluster, registry, topic_name).collect(), key=lambda r: r.id)
    assert [r.item for r in back] == [w["item"] for w in want]
    assert [r.price for r in back] == [w["price"] for w in want]
    assert [r.at.timestamp() for r in back] == [w["at"].timestamp() for w in want]
    assert [r.attrs for r in back] == [w["attrs"] for w in want]
    assert [r.ship.asDict() for r in back] == [w["ship"] for w in want]
    assert [r.note for r in back] == [w["note"] for w in want]

    # a row that does not fit the schema fails the write, naming the row and the field
    bad = spark.createDataFrame([{**order(9), "item": None}], DDL)
    with pytest.raises(Exception, match=r"does not fit subject .*item"):
        writer(bad, cluster, registry, topic=topic_name).save()
    # a column the schema does not have fails before any task runs
    extra = spark.createDataFrame([(1, "x")], "id bigint, colour string")
    with pytest.raises(Exception, match=r"\['colour'\] are not fields"):
        writer(extra, cluster, registry, topic=topic_name).save()


def test_auto_register_on_and_off(
    cluster: LocalCluster, registry: RegistryProcess, spark: Any, topic_name: str
) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, partitions=1, wait_leaders=True)
    subject = f"{topic_name}-value"
    sr = SchemaRegistryClient({"url": registry.url})
    df = spark.createDataFrame([(1, "one"), (2, "two")], "n bigint, what string")
    text = json.dumps(EVENT)
    # no schema under the subject and none given: a clear failure
    with pytest.raises(Exception, match=r"no schema .*value\.schema"):
        writer(df, cluster, registry, topic=topic_name).save()
    # a schema given but registration not allowed: it must already be registered
    with pytest.raises(Exception, match=r"auto\.register\.schemas is false"):
        writer(
            df,
            cluster,
            registry,
            topic=topic_name,
            **{"value.schema": text, "auto.register.schemas": "false"},
        ).save()
    assert subject not in sr.get_subjects()
    # allowed (the default): registered, then used
    writer(df, cluster, registry, topic=topic_name, **{"value.schema": text}).save()
    registered = sr.get_latest_version(subject)
    # registered now, so registration off finds it (lookup) and writes with its id
    writer(
        df,
        cluster,
        registry,
        topic=topic_name,
        **{"value.schema": text, "auto.register.schemas": "false"},
    ).save()
    got = consume(cluster, registry, topic_name, 4)
    assert sorted((v["n"], v["what"]) for _, v, _ in got) == [
        (1, "one"),
        (1, "one"),
        (2, "two"),
        (2, "two"),
    ]
    assert {sid for _, _, sid in got} == {registered.schema_id}
    assert registered.version == 1 and sr.get_versions(subject) == [1]
    back = read_avro(spark, cluster, registry, topic_name)
    assert sorted((r.n, r.what) for r in back.collect()) == [
        (1, "one"),
        (1, "one"),
        (2, "two"),
        (2, "two"),
    ]
