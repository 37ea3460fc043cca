"""Spark read/write throughput: the odradek source and sink vs in-memory Arrow peers.

Run: .venv/bin/python bench/spark_bench.py [--records 1000000] [--brokers 3] [--reps 3]
     [--clients columnar,confluent] [--queries stream_read,batch_read,batch_write,stream_sink]
     [--json out.json]
(issues 7 and 17: 100-byte values; prints rows/s per query; not a timed test).

Every odradek query is measured next to the *same* query over an in-memory Python Data
Source that produces ready-made Arrow batches (the peer), so the ratio isolates what the
connector costs on top of Spark's Python Data Source machinery:

* batch read → noop            vs  ``memarrow`` batch read → noop
* stream (AvailableNow) → noop  vs  ``memarrow`` stream (AvailableNow) → noop — both pay
  the same streaming-query start-up, checkpoint and planning costs
* batch write to odradek       vs  ``memsink`` (an Arrow writer that only counts rows)
* stream → exactly-once sink   vs  stream → ``memsink`` stream writer (both read odradek
  with the same client)

Each repetition runs the peer and every client of a query back to back (interleaved A/B);
the summary gives medians over the repetitions and the median of the per-repetition
ratios. Sink runs write to a fresh topic that is deleted right after the run (a benchmark
that keeps every run's topic slows down run after run: page cache). ``cpu s`` is the CPU
time (user + system) of this process's whole process tree during the query — the Spark
JVM, its Python workers, ZooKeeper and the brokers — and ``rows/s/core`` = rows / cpu s;
``brokers`` is the brokers' share of it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

from odradek.cluster.local import LocalCluster
from odradek.spark import register
from odradek.spark.arrow import arrow_schema, spark_ddl

PARTS = 3
QUERIES = ("stream_read", "batch_read", "batch_write", "stream_sink")


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
        yield pa.RecordBatch.from_arrays(
            [k[:c], v[:c], t[:c], pp[:c], off, ts[:c], tt[:c]], schema=arrow_schema(False)
        )


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


# --------------------------------------------------------------------------- CPU of the tree


def _tree_cpu_s() -> float:
    """user + system seconds of this process tree (live descendants, and exited ones
    their parents waited for)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        # utime + stime, plus cutime + cstime: exited children that were waited for
        # (a Python worker Spark replaced) still count, through their parent
        cpu[int(entry)] = sum(int(x) for x in fields[11:15]) / tick
    me, total = os.getpid(), 0.0
    for pid, t in cpu.items():
        p = pid
        while p > 1 and p != me:
            p = parent.get(p, 0)
        if p == me:
            total += t
    return total


def _pids_cpu_s(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def wait_for_topics(admin: AdminClient, names: list[str], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=5).topics
        if all(
            n in md
            and len(md[n].partitions) == PARTS
            and all(p.leader >= 0 for p in md[n].partitions.values())
            for n in names
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topics {names} not ready within {timeout_s} s")


def delete_topic(admin: AdminClient, name: str, timeout_s: float = 60) -> None:
    admin.delete_topics([name], operation_timeout=30)[name].result(60)
    deadline = time.monotonic() + timeout_s
    while name in admin.list_topics(timeout=5).topics and time.monotonic() < deadline:
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--clients", default="columnar,confluent")
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--json", help="write every measurement here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        c = LocalCluster.start(Path(d) / "c", args.brokers)
        try:
            bench(c, d, args)
        finally:
            c.down()


def bench(c: LocalCluster, d: str, args: argparse.Namespace) -> None:
    n, n_brokers = args.records, args.brokers
    clients = [x for x in args.clients.split(",") if x]
    queries = [x for x in args.queries.split(",") if x]
    bs = c.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("bench", PARTS, n_brokers)])["bench"].result(30)
    wait_for_topics(admin, ["bench"])
    p = Producer(
        {
            "bootstrap.servers": bs,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1000000,
        }
    )
    val = b"x" * 100
    t0 = time.time()
    for i in range(n):
        while True:
            try:
                p.produce("bench", val, partition=i % PARTS)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    print(
        f"produce {n}: {n / (time.time() - t0):,.0f} rows/s  (load {os.getloadavg()})", flush=True
    )
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(MemSource)
    n_mem = (n // PARTS) * PARTS
    seq = [0]
    results: list[dict[str, Any]] = []

    def fresh(prefix: str) -> str:
        seq[0] += 1
        return f"{prefix}{seq[0]}"

    def out_topic() -> str:
        name = fresh("bench-out-")
        admin.create_topics([NewTopic(name, PARTS, n_brokers)])[name].result(30)
        wait_for_topics(admin, [name])
        return name

    brokers = [c.broker(b).pid or 0 for b in range(1, n_brokers + 1)]

    def measure(query: str, who: str, rep: int, rows: int, run: Callable[[], None]) -> None:
        cpu0, bcpu0, t0 = _tree_cpu_s(), _pids_cpu_s(brokers), time.monotonic()
        run()
        wall, cpu = time.monotonic() - t0, _tree_cpu_s() - cpu0
        bcpu = _pids_cpu_s(brokers) - bcpu0
        r = {
            "query": query,
            "who": who,
            "rep": rep,
            "rows": rows,
            "wall_s": wall,
            "rows_per_s": rows / wall,
            "cpu_s": cpu,
            "rows_per_core_s": rows / cpu if cpu else 0,
            "broker_cpu_s": bcpu,
            "load1": os.getloadavg()[0],
        }
        results.append(r)
        print(
            f"rep {rep} {query:12} {who:10} {r['rows_per_s']:12,.0f} rows/s  cpu {cpu:6.1f} s "
            f"(brokers {bcpu:5.1f} s) {r['rows_per_core_s']:12,.0f} rows/core-s  "
            f"load {r['load1']:.2f}",
            flush=True,
        )

    od_src = {"kafka.bootstrap.servers": bs, "subscribe": "bench", "startingOffsets": "earliest"}

    def batch_read(fmt: str, **opts: Any) -> Callable[[], None]:
        return lambda: (
            spark.read.format(fmt)
            .options(**opts)
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    def stream(
        fmt: str,
        sink: str,
        select_value: bool = False,
        sink_opts: dict[str, str] | None = None,
        **opts: Any,
    ) -> Callable[[], None]:
        def once() -> None:
            df = spark.readStream.format(fmt).options(**opts).load()
            if select_value:
                df = df.select("value")
            w = df.writeStream.format(sink).option("checkpointLocation", f"{d}/{fresh('ck')}")
            for k, v in (sink_opts or {}).items():
                w = w.option(k, v)
            w.trigger(availableNow=True).start().awaitTermination()

        return once

    m = n // 4
    src = spark.read.format("memarrow").option("n", m).load().select("value").cache()
    src.count()
    for rep in range(1, args.reps + 1):
        for q in queries:
            if q == "batch_read":
                measure(q, "peer", rep, n_mem, batch_read("memarrow", n=n))
                for cl in clients:
                    measure(
                        q, cl, rep, n, batch_read("odradek", **od_src, **{"odradek.client": cl})
                    )
            elif q == "stream_read":
                measure(q, "peer", rep, n_mem, stream("memarrow", "noop", n=n))
                for cl in clients:
                    measure(
                        q, cl, rep, n, stream("odradek", "noop", **od_src, **{"odradek.client": cl})
                    )
            elif q == "batch_write":
                measure(
                    q, "peer", rep, m, lambda: src.write.format("memarrow").mode("append").save()
                )
                for cl in clients:
                    topic = out_topic()
                    measure(
                        q,
                        cl,
                        rep,
                        m,
                        lambda topic=topic, cl=cl: (
                            src.write.format("odradek")
                            .option("kafka.bootstrap.servers", bs)
                            .option("topic", topic)
                            .option("odradek.client", cl)
                            .mode("append")
                            .save()
                        ),
                    )
                    delete_topic(admin, topic)
            elif q == "stream_sink":
                for cl in clients:
                    # the peer reads with the same client, so the ratio is the sink's cost
                    measure(
                        q,
                        f"peer/{cl}",
                        rep,
                        n,
                        stream(
                            "odradek",
                            "memarrow",
                            select_value=True,
                            **od_src,
                            **{"odradek.client": cl},
                        ),
                    )
                    topic = out_topic()
                    measure(
                        q,
                        cl,
                        rep,
                        n,
                        stream(
                            "odradek",
                            "odradek",
                            select_value=True,
                            **od_src,
                            **{"odradek.client": cl},
                            sink_opts={
                                "kafka.bootstrap.servers": bs,
                                "topic": topic,
                                "odradek.client": cl,
                            },
                        ),
                    )
                    delete_topic(admin, topic)
    spark.stop()
    summarize(results, queries, clients)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def summarize(results: list[dict[str, Any]], queries: list[str], clients: list[str]) -> None:
    def med(q: str, who: str, key: str) -> float:
        xs = [r[key] for r in results if r["query"] == q and r["who"] == who]
        return statistics.median(xs) if xs else float("nan")

    print(
        f"\n{'query':12} {'client':10} {'odradek rows/s':>15} {'peer rows/s':>12} "
        f"{'ratio':>6} {'ratios':>18} {'rows/core-s':>12} {'cpu s':>6} {'brokers':>7} "
        f"{'peer cpu s':>10}"
    )
    for q in queries:
        for cl in clients:
            peer = f"peer/{cl}" if q == "stream_sink" else "peer"
            ratios = []
            for r in results:
                if r["query"] == q and r["who"] == cl:
                    pr = [
                        x
                        for x in results
                        if x["query"] == q and x["who"] == peer and x["rep"] == r["rep"]
                    ]
                    if pr:
                        ratios.append(r["rows_per_s"] / pr[0]["rows_per_s"])
            ratio = statistics.median(ratios) if ratios else float("nan")
            print(
                f"{q:12} {cl:10} {med(q, cl, 'rows_per_s'):15,.0f} "
                f"{med(q, peer, 'rows_per_s'):12,.0f} {ratio:6.2f} "
                f"{'/'.join(f'{x:.2f}' for x in ratios):>18} "
                f"{med(q, cl, 'rows_per_core_s'):12,.0f} {med(q, cl, 'cpu_s'):6.1f} "
                f"{med(q, cl, 'broker_cpu_s'):7.1f} {med(q, peer, 'cpu_s'):10.1f}"
            )


if __name__ == "__main__":
    main()
