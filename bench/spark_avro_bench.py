"""Spark read of Avro values: ``value.format=avro`` typed columns vs a fastavro Python UDF.

Run: .venv/bin/python bench/spark_avro_bench.py [--records 200000] [--reps 2] [--warmup 1]
     [--json out.json]
(issue 27, part 3; prints rows/s per query; not a timed test).

N Confluent-framed Avro records with 10 fields (long, string, int, double, boolean,
timestamp-millis, array<string>, string, float, enum) are produced to a 3-partition topic
of a one-broker cluster, with the schema in an ``odradek schema-registry`` beside it. Each
repetition runs, back to back (interleaved A/B), and writes to Spark's ``noop`` sink:

* ``source``: ``spark.read.format("odradek").option("value.format", "avro")`` — the
  source decodes into typed columns (one Arrow StructArray per batch);
* ``udf``: the binary source, then a Python UDF doing what a job does today: strip the
  5-byte header, ``fastavro.schemaless_reader`` the rest, return a struct of the 10
  fields (selected as one struct column: ``udf(...).*`` would call the UDF once per field).

``--warmup`` runs each query that many times untimed first: the first query of a session
starts the Python workers, and the first ``value.format=avro`` read in a worker imports
numba and loads (or, after a code change, compiles) the decoder, a one-off cost per worker
that is not the decoding being compared.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from fastavro import parse_schema, schemaless_writer
from pyspark.sql import SparkSession

from odradek.cluster import addresses
from odradek.cluster.local import LocalCluster
from odradek.spark import register

TOPIC, PARTS = "avro-bench", 3
SCHEMA = {
    "type": "record",
    "name": "Event",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "score", "type": "double"},
        {"name": "active", "type": "boolean"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "city", "type": "string"},
        {"name": "amount", "type": "float"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    ],
}
UDF_TYPE = (
    "struct<id: bigint, user: string, age: int, score: double, active: boolean, "
    "at: timestamp, tags: array<string>, city: string, amount: float, kind: string>"
)


def record(i: int) -> dict[str, Any]:
    """The ``i``-th value of SCHEMA the benchmarks write (bench/spark_profiles.py too)."""
    return {
        "id": i,
        "user": f"user-{i % 1000}",
        "age": i % 90,
        "score": i / 7,
        "active": i % 2 == 0,
        "at": 1_700_000_000_000 + i,
        "tags": ["a", "b"][: i % 3],
        "city": "Prague",
        "amount": i * 0.5,
        "kind": "ABC"[i % 3],
    }


def start_registry(c: LocalCluster, d: Path) -> tuple[subprocess.Popen[bytes], str]:
    assert c.block is not None
    url = f"http://{addresses.zk_address(c.block, 1)}:8081"
    out = open(d / "registry.out", "wb")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "odradek",
            "schema-registry",
            "--bootstrap-server",
            c.bootstrap_servers,
            "--listen",
            url,
            "--log-file",
            str(d / "registry.log"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out.close()
    client = SchemaRegistryClient({"url": url})
    deadline = time.monotonic() + 60
    while True:
        try:
            client.get_subjects()
            return proc, url
        except Exception:  # noqa: BLE001 - not listening yet
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    f"the schema registry did not start: {(d / 'registry.out').read_text()}"
                ) from None
            time.sleep(0.2)


def produce(c: LocalCluster, url: str, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, PARTS, 1)])[TOPIC].result(30)
    schema_id = SchemaRegistryClient({"url": url}).register_schema(
        f"{TOPIC}-value", Schema(json.dumps(SCHEMA), "AVRO")
    )
    header = b"\x00" + struct.pack(">I", schema_id)
    parsed = parse_schema(SCHEMA)
    p = Producer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1000000,
        }
    )
    t0 = time.time()
    for i in range(n):
        buf = io.BytesIO()
        buf.write(header)
        schemaless_writer(
            buf,
            parsed,
            record(i),
        )
        while True:
            try:
                p.produce(TOPIC, buf.getvalue(), partition=i % PARTS)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    print(f"produce {n}: {n / (time.time() - t0):,.0f} rows/s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each query first")
    ap.add_argument("--json", help="write every measurement here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        c = LocalCluster.start(d / "c", 1)
        proc = None
        try:
            proc, url = start_registry(c, d)
            produce(c, url, args.records)
            results = bench(c, url, args)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(15)
            c.down()
    for who in ("source", "udf"):
        rates = [r["rows_per_s"] for r in results if r["who"] == who]
        print(f"{who:7} median {statistics.median(rates):12,.0f} rows/s over {len(rates)} reps")
    ratios = [
        a["rows_per_s"] / b["rows_per_s"]
        for a, b in zip(
            [r for r in results if r["who"] == "source"],
            [r for r in results if r["who"] == "udf"],
            strict=True,
        )
    ]
    print(f"source / udf: median {statistics.median(ratios):.2f}x  (load {os.getloadavg()})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def bench(c: LocalCluster, url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    from pyspark.sql.functions import col, udf

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    base = {
        "kafka.bootstrap.servers": c.bootstrap_servers,
        "subscribe": TOPIC,
        "startingOffsets": "earliest",
    }

    @udf(returnType=UDF_TYPE)
    def decode(value: bytes) -> Any:
        from fastavro import parse_schema, schemaless_reader

        global _PARSED
        try:
            parsed = _PARSED
        except NameError:
            parsed = _PARSED = parse_schema(SCHEMA)
        buf = io.BytesIO(value)
        buf.seek(5)
        return schemaless_reader(buf, parsed, None)

    def source() -> None:
        (
            spark.read.format("odradek")
            .options(**base)
            .option("value.format", "avro")
            .option("schema.registry.url", url)
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    def with_udf() -> None:
        (
            spark.read.format("odradek")
            .options(**base)
            .load()
            .select(
                col("key"),
                decode(col("value")).alias("v"),
                col("topic"),
                col("partition"),
                col("offset"),
                col("timestamp"),
                col("timestampType"),
            )
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    for _ in range(args.warmup):
        source()
        with_udf()
    results: list[dict[str, Any]] = []
    for rep in range(args.reps):
        for who, run in (("source", source), ("udf", with_udf)):
            t0 = time.monotonic()
            run()
            wall = time.monotonic() - t0
            r = {
                "who": who,
                "rep": rep,
                "rows": args.records,
                "wall_s": wall,
                "rows_per_s": args.records / wall,
                "load1": os.getloadavg()[0],
            }
            results.append(r)
            print(
                f"rep {rep} {who:7} {r['rows_per_s']:12,.0f} rows/s  wall {wall:6.1f} s  "
                f"load {r['load1']:.2f}",
                flush=True,
            )
    spark.stop()
    return results


if __name__ == "__main__":
    main()
