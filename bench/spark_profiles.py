"""CPU profiles of the Spark connector's Python cores, outside Spark (issues 27 / 29).

Run: .venv/bin/python bench/spark_profiles.py avro [--values 20000]
     .venv/bin/python bench/spark_profiles.py sink [--records 200000]

``avro``: ``AvroValueDecoder.transform`` over N Confluent-framed values of
``spark_avro_bench.py``'s 10-field schema, with the compiled decoder and with fastavro
per record (the decoder's fallback), next to the fastavro UDF's decoding alone; prints
CPU µs per value for 3 rounds, then a cProfile of each transform.

``sink``: one exactly-once sink task (``_Task.run``, columnar client) writing N rows of
100 B in Arrow batches of 10,000 to a 3-partition topic of a one-broker cluster, then the
driver's commit marker, for 3 micro-batches; prints wall and CPU time per batch and a
cProfile (CPU-time clock) of the last one. Not timed tests; figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))


def avro(n: int) -> None:
    from fastavro import parse_schema, schemaless_reader, schemaless_writer
    from spark_avro_bench import SCHEMA, record

    from odradek.spark.arrow import arrow_schema
    from odradek.spark.avro_values import AvroValueDecoder, ValueOptions

    parsed = parse_schema(SCHEMA)
    vals = []
    for i in range(n):
        buf = io.BytesIO()
        buf.write(b"\x00" + struct.pack(">I", 1))
        schemaless_writer(
            buf,
            parsed,
            record(i),
        )
        vals.append(buf.getvalue())
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([None] * n, pa.binary()),
            pa.array(vals, pa.binary()),
            pa.array(["t"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        schema=arrow_schema(False),
    )
    vo = ValueOptions("http://127.0.0.1:1", None, "t-value", 1, 1, json.dumps(SCHEMA), "fail")
    compiled = AvroValueDecoder(vo, arrow_schema(False))
    per_record = AvroValueDecoder(vo, arrow_schema(False))
    per_record._columnar = None  # the fastavro path, as before the compiled decoder

    def udf() -> Any:
        return [schemaless_reader(io.BytesIO(v[5:]), parsed, None) for v in vals]

    runs = (
        ("fastavro UDF decode", udf),
        ("transform, fastavro", lambda: per_record.transform(batch, "t", 0)),
        ("transform, compiled", lambda: compiled.transform(batch, "t", 0)),
    )
    for _ in range(3):
        for name, f in runs:
            t = time.process_time()
            f()
            print(f"{name:22} {(time.process_time() - t) * 1e6 / n:7.2f} CPU µs/value")
    assert compiled.transform(batch, "t", 0).equals(per_record.transform(batch, "t", 0))
    for name, f in runs[1:]:
        pr = cProfile.Profile(time.process_time)
        pr.runcall(f)
        print(f"=== {name}")
        pstats.Stats(pr).sort_stats("tottime").print_stats(10)


def sink(n: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql.types import BinaryType, StructField, StructType

    from odradek.cluster.local import LocalCluster
    from odradek.spark.sink import OdradekStreamWriter, SinkOptions, _Task

    with tempfile.TemporaryDirectory() as d:
        c = LocalCluster.start(Path(d) / "c", 1)
        try:
            admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})  # kept alive
            admin.create_topics([NewTopic("out", 3, 1)])["out"].result(30)
            schema = StructType([StructField("value", BinaryType())])
            opts = SinkOptions.parse(
                {"kafka.bootstrap.servers": c.bootstrap_servers, "topic": "out"}, schema
            )
            vals = pa.array([b"v" * 100] * 10_000, pa.binary())
            batches = [pa.RecordBatch.from_arrays([vals], names=["value"])] * (n // 10_000)
            writer = OdradekStreamWriter.__new__(OdradekStreamWriter)
            writer.opts = opts
            for bid in range(3):
                pr = cProfile.Profile(time.process_time)
                t0, c0 = time.perf_counter(), time.process_time()
                pr.enable()
                msg = _Task(opts, "q1", bid, 0, 0).run(iter(batches))
                t1 = time.perf_counter()
                writer.commit([msg], bid)
                pr.disable()
                print(
                    f"batch {bid}: task {t1 - t0:.2f} s wall, commit "
                    f"{time.perf_counter() - t1:.2f} s wall, "
                    f"{time.process_time() - c0:.2f} CPU-s, {msg.written} rows",
                    flush=True,
                )
            pstats.Stats(pr).sort_stats("cumulative").print_stats(30)
        finally:
            c.down()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("avro", "sink"))
    ap.add_argument("--values", type=int, default=20_000)
    ap.add_argument("--records", type=int, default=200_000)
    args = ap.parse_args()
    if args.what == "avro":
        avro(args.values)
    else:
        sink(args.records)


if __name__ == "__main__":
    main()
