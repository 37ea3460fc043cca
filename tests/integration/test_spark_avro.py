"""``value.format=avro`` against a real cluster, a real ``odradek schema-registry`` and
confluent-kafka's AvroSerializer (issue 27, part 3): typed columns from the subject's
schema, each record decoded with its own writer schema and resolved to the query's reader
schema, in a batch read (both clients) and across a schema change in a running stream;
undecodable values fail the query naming the record, or read as null."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from schema_registry_util import RegistryProcess, start_registry
from tests.support.polling import wait_until
from tests.support.topics import create_topic

pyspark = pytest.importorskip("pyspark")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from spark_util import local_spark  # noqa: E402

from odradek.cluster.local import LocalCluster  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

V1 = {
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
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
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
V2 = {**V1, "fields": [*V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}


@pytest.fixture(scope="module")
def registry(cluster: LocalCluster) -> Iterator[RegistryProcess]:
    reg = start_registry(cluster, 8081)
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_spark("odradek-avro-tests")


def order(i: int, **extra: Any) -> dict[str, Any]:
    import datetime as dt
    from decimal import Decimal

    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i)
    return {
        "id": i,
        "item": f"item-{i}",
        "price": Decimal(f"{i}.25"),
        "at": at,
        "tags": [f"t{i}"] * (i % 3),
        "note": None if i % 2 else f"n{i}",
        "day": dt.date(2026, 1, 1 + i),
        "attrs": {"n": i},
        "ship": {"mode": "SEA" if i % 2 else "AIR", "days": i or None},
        **extra,
    }


def produce(
    cluster: LocalCluster,
    registry: RegistryProcess,
    topic: str,
    schema: dict[str, Any],
    records: list[dict[str, Any]],
    raw: list[bytes] = (),
) -> None:  # type: ignore[assignment]
    ser = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(schema))
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
    for r in records:
        p.produce(topic, value=ser(r, ctx), key=str(r["id"]).encode())
    for v in raw:
        p.produce(topic, value=v)
    assert p.flush(30) == 0


def read(
    spark: Any,
    cluster: LocalCluster,
    registry: RegistryProcess,
    topic: str,
    stream: bool = False,
    **opts: Any,
) -> Any:
    r = (spark.readStream if stream else spark.read).format("odradek")
    r = (
        r.option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("value.format", "avro")
        .option("schema.registry.url", registry.url)
    )
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


def test_batch_read_yields_typed_columns_across_versions(
    cluster: LocalCluster, registry: RegistryProcess, spark: Any, topic_name: str
) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, wait_leaders=True)
    produce(cluster, registry, topic_name, V1, [order(i) for i in range(3)])
    produce(cluster, registry, topic_name, V2, [order(i, channel="app") for i in range(3, 5)])
    want = [order(i) for i in range(5)]
    for client in ("columnar", "confluent"):
        df = read(spark, cluster, registry, topic_name, **{"odradek.client": client})
        assert df.columns == [
            "key",
            "id",
            "item",
            "price",
            "at",
            "tags",
            "note",
            "day",
            "attrs",
            "ship",
            "channel",
            "topic",
            "partition",
            "offset",
            "timestamp",
            "timestampType",
        ]
        types = dict(df.dtypes)
        assert (types["day"], types["attrs"], types["ship"]) == (
            "date",
            "map<string,bigint>",
            "struct<mode:string,days:int>",
        )
        assert (types["id"], types["price"], types["at"], types["tags"]) == (
            "bigint",
            "decimal(9,2)",
            "timestamp",
            "array<string>",
        )
        rows = sorted(df.collect(), key=lambda r: r.offset)
        # v1 records take v2's default for the field they lack
        assert [r.channel for r in rows] == ["web"] * 3 + ["app"] * 2, client
        assert [r.asDict()["item"] for r in rows] == [w["item"] for w in want]
        assert [r.price for r in rows] == [w["price"] for w in want]
        assert [r.at.timestamp() for r in rows] == [w["at"].timestamp() for w in want]
        assert [r.tags for r in rows] == [w["tags"] for w in want]
        assert [r.note for r in rows] == [w["note"] for w in want]
        assert [r.day for r in rows] == [w["day"] for w in want]
        assert [r.attrs for r in rows] == [w["attrs"] for w in want]
        assert [r.ship.asDict() for r in rows] == [w["ship"] for w in want]
        assert [r.key for r in rows] == [str(i).encode() for i in range(5)]
    # an older reader version: v2's records lose the field v1 does not have
    old = read(spark, cluster, registry, topic_name, **{"value.schema.version": 1})
    assert "channel" not in old.columns and old.count() == 5

    # value.subject reads another topic with this subject; a plain value fails the query
    # naming the record, or is a null row under value.decode.errors=null
    bad = f"{topic_name}-bad"
    create_topic(cluster.bootstrap_servers, bad, wait_leaders=True)
    produce(cluster, registry, bad, V2, [order(9, channel="pos")], raw=[b"not avro"])
    opts = {"value.subject": f"{topic_name}-value"}
    with pytest.raises(Exception, match=rf"{bad}-0 at offset 1"):
        read(spark, cluster, registry, bad, **opts).collect()
    rows = sorted(
        read(spark, cluster, registry, bad, **opts, **{"value.decode.errors": "null"}).collect(),
        key=lambda r: r.offset,
    )
    assert [(r.offset, r.id, r.channel) for r in rows] == [(0, 9, "pos"), (1, None, None)]


def test_stream_keeps_its_schema_when_a_new_version_arrives(
    cluster: LocalCluster, registry: RegistryProcess, spark: Any, topic_name: str, tmp_path: Path
) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, wait_leaders=True)
    produce(cluster, registry, topic_name, V1, [order(i) for i in range(3)])
    batches: dict[int, list[tuple[int, int, str]]] = {}

    def collect(df: Any, batch_id: int) -> None:
        assert "channel" not in df.columns  # the reader schema is fixed when the query starts
        batches[batch_id] = [(r.offset, r.id, r.item) for r in df.collect()]

    df = read(spark, cluster, registry, topic_name, stream=True)
    q = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:

        def rows() -> list[tuple[int, int, str]]:
            if q.exception() is not None:
                raise AssertionError(f"the query failed: {q.exception()}")
            return sorted(r for b in batches.values() for r in b)

        wait_until(lambda: len(rows()) >= 3, "the v1 records", timeout=90, interval=0.2)
        produce(cluster, registry, topic_name, V2, [order(i, channel="app") for i in range(3, 6)])
        wait_until(lambda: len(rows()) >= 6, "the v2 records", timeout=90, interval=0.2)
        assert rows() == [(i, i, f"item-{i}") for i in range(6)]
    finally:
        q.stop()
