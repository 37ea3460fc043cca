"""Spark read/write throughput: the odradek source and sink vs in-memory Arrow peers, same run.

Run: .venv/bin/python bench/spark_bench.py [RECORDS=1000000] [BROKERS=1] [REPS=2]
(issue 7 benchmark: 100-byte values; prints rows/s for each query; not a timed test).

Every odradek query is measured next to the *same* query over an in-memory Python Data
Source that produces ready-made Arrow batches (the peer), so the ratio isolates what the
connector costs on top of Spark's Python Data Source machinery:

* batch read → noop            vs  ``memarrow`` batch read → noop
* stream (AvailableNow) → noop  vs  ``memarrow`` stream (AvailableNow) → noop — both pay
  the same streaming-query start-up, checkpoint and planning costs
* batch write to odradek       vs  ``memsink`` (an Arrow writer that only counts rows)
* stream → exactly-once sink   vs  stream → ``memsink`` stream writer

Best of REPS runs per query (fresh checkpoint each time).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import pyarrow as pa  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import (  # noqa: E402
    DataSource, DataSourceArrowWriter, DataSourceReader, DataSourceStreamArrowWriter,
    DataSourceStreamReader, InputPartition, WriterCommitMessage,
)

from odradek.cluster.local import LocalCluster  # noqa: E402
from odradek.spark import register  # noqa: E402
from odradek.spark.arrow import arrow_schema, spark_ddl  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
BROKERS = int(sys.argv[2]) if len(sys.argv) > 2 else 1
REPS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
PARTS = 3


def _mem_batches(p: int, start: int, stop: int) -> Iterator[pa.RecordBatch]:
    """Offsets [start, stop) of in-memory partition p as 8192-row Arrow batches."""
    m = 8192
    v = pa.array([b"x" * 100] * m, pa.binary())
    k = pa.array([None] * m, pa.binary())
    t = pa.array(["t"] * m, pa.string())
    pp = pa.array([p] * m, pa.int32())
    ts = pa.array([0] * m, pa.timestamp("us", tz="UTC"))
    tt = pa.array([0] * m, pa.int32())
    for s in range(start, stop, m):
        c = min(m, stop - s)
        off = pa.array(range(s, s + c), pa.int64())
        yield pa.RecordBatch.from_arrays([k[:c], v[:c], t[:c], pp[:c], off, ts[:c], tt[:c]],
                                         schema=arrow_schema(False))


class MemSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "memarrow"

    def schema(self) -> str:
        return spark_ddl(False)

    def reader(self, schema: Any) -> DataSourceReader:
        return MemReader(int(self.options["n"]))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return MemStreamReader(int(self.options["n"]))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
        return MemWriter()

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamArrowWriter:
        return MemStreamWriter()


class MemReader(DataSourceReader):
    def __init__(self, n: int) -> None:
        self.n = n

    def partitions(self) -> list[InputPartition]:
        return [InputPartition((p, 0, self.n // PARTS)) for p in range(PARTS)]

    def read(self, part: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _mem_batches(*part.value)


class MemStreamReader(DataSourceStreamReader):
    """All N rows are "available" from the start, like a topic filled beforehand."""

    def __init__(self, n: int) -> None:
        self.n = n

    def initialOffset(self) -> dict[str, int]:
        return {"pos": 0}

    def latestOffset(self) -> dict[str, int]:
        return {"pos": self.n // PARTS}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition((p, start["pos"], end["pos"])) for p in range(PARTS)]

    def read(self, part: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _mem_batches(*part.value)

    def commit(self, end: dict[str, int]) -> None:
        pass


class _Count(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class MemWriter(DataSourceArrowWriter):
    def write(self, batches: Iterator[pa.RecordBatch]) -> _Count:
        return _Count(sum(b.num_rows for b in batches))


class MemStreamWriter(DataSourceStreamArrowWriter):
    def write(self, batches: Iterator[pa.RecordBatch]) -> _Count:
        return _Count(sum(b.num_rows for b in batches))

    def commit(self, messages: list[Any], batch_id: int) -> None:
        pass

    def abort(self, messages: list[Any], batch_id: int) -> None:
        pass


def wait_for_topics(admin: AdminClient, names: list[str], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=5).topics
        if all(n in md and len(md[n].partitions) == PARTS
               and all(p.leader >= 0 for p in md[n].partitions.values()) for n in names):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topics {names} not ready within {timeout_s} s")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        c = LocalCluster.start(Path(d) / "c", BROKERS)
        try:
            bench(c, d)
        finally:
            c.down()


def bench(c: LocalCluster, d: str) -> None:
    bs = c.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    for name in ("bench", "bench-out"):
        admin.create_topics([NewTopic(name, PARTS, BROKERS)])[name].result(30)
    wait_for_topics(admin, ["bench", "bench-out"])
    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1000000})
    val = b"x" * 100
    t0 = time.time()
    for i in range(N):
        while True:
            try:
                p.produce("bench", val, partition=i % PARTS)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    print(f"produce {N}: {N / (time.time() - t0):,.0f} rows/s", flush=True)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(MemSource)
    n_mem = (N // PARTS) * PARTS
    ck = [0]

    def best(label: str, rows: int, once: Any) -> float:
        rates = []
        for _ in range(REPS):
            t0 = time.time()
            once()
            rates.append(rows / (time.time() - t0))
        print(f"{label}: {max(rates):,.0f} rows/s", flush=True)
        return max(rates)

    def batch_read(fmt: str, **opts: Any) -> Any:
        return lambda: spark.read.format(fmt).options(**opts).load() \
            .write.format("noop").mode("overwrite").save()

    def stream(fmt: str, sink: str, select_value: bool = False, **opts: Any) -> Any:
        def once() -> None:
            ck[0] += 1
            df = spark.readStream.format(fmt).options(**opts).load()
            if select_value:
                df = df.select("value")
            w = df.writeStream.format(sink).option("checkpointLocation", f"{d}/ck{ck[0]}")
            if sink == "odradek":
                w = w.option("kafka.bootstrap.servers", bs).option("topic", "bench-out")
            w.trigger(availableNow=True).start().awaitTermination()
        return once

    od_src = {"kafka.bootstrap.servers": bs, "subscribe": "bench",
              "startingOffsets": "earliest"}
    rows: list[tuple[str, float, float]] = []
    mem = best("in-memory Arrow source -> noop", n_mem, batch_read("memarrow", n=N))
    od = best("odradek batch read -> noop", N, batch_read("odradek", **od_src))
    rows.append(("batch read -> noop", od, mem))
    mem = best("in-memory Arrow stream (AvailableNow) -> noop", n_mem,
               stream("memarrow", "noop", n=N))
    od = best("odradek stream (AvailableNow) -> noop", N, stream("odradek", "noop", **od_src))
    rows.append(("stream AvailableNow -> noop", od, mem))

    m = N // 4
    src = spark.read.format("memarrow").option("n", m).load().select("value").cache()
    src.count()
    mem = best("cached rows -> memsink (Arrow writer peer)", m,
               lambda: src.write.format("memarrow").mode("append").save())
    od = best("cached rows -> odradek sink (batch write)", m,
              lambda: src.write.format("odradek").option("kafka.bootstrap.servers", bs)
              .option("topic", "bench-out").mode("append").save())
    rows.append(("batch write", od, mem))
    mem = best("odradek stream -> memsink stream writer (peer)", N,
               stream("odradek", "memarrow", select_value=True, **od_src))
    od = best("odradek stream -> odradek sink (exactly-once replay guard)", N,
              stream("odradek", "odradek", select_value=True, **od_src))
    rows.append(("stream -> sink", od, mem))
    spark.stop()
    print(f"\n{'query':32} {'odradek rows/s':>15} {'peer rows/s':>13} {'ratio':>6}")
    for label, o, p_ in rows:
        print(f"{label:32} {o:15,.0f} {p_:13,.0f} {o / p_:6.2f}")


if __name__ == "__main__":
    main()
