"""Spark read/write throughput: the odradek source vs an in-memory Arrow source, same run.

Run: .venv/bin/python bench/spark_bench.py [RECORDS=1000000] [BROKERS=1]
(issue 7 benchmark: 100-byte values; prints rows/s for each query; not a timed test).
"""
import os, sys, time, tempfile
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
from pathlib import Path
import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from odradek.cluster.local import LocalCluster
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from odradek.spark import register
from odradek.spark.arrow import arrow_schema, spark_ddl

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
BROKERS = int(sys.argv[2]) if len(sys.argv) > 2 else 1
PARTS = 3

class MemSource(DataSource):
    @classmethod
    def name(cls): return "memarrow"
    def schema(self): return spark_ddl(False)
    def reader(self, schema): return MemReader(int(self.options["n"]))

class MemReader(DataSourceReader):
    def __init__(self, n): self.n = n
    def partitions(self): return [InputPartition((p, self.n // PARTS)) for p in range(PARTS)]
    def read(self, part):
        p, n = part.value
        m = 8192
        v = pa.array([b"x" * 100] * m, pa.binary())
        k = pa.array([None] * m, pa.binary())
        t = pa.array(["t"] * m, pa.string())
        pp = pa.array([p] * m, pa.int32())
        ts = pa.array([0] * m, pa.timestamp("us", tz="UTC"))
        tt = pa.array([0] * m, pa.int32())
        for s in range(0, n, m):
            c = min(m, n - s)
            off = pa.array(range(s, s + c), pa.int64())
            yield pa.RecordBatch.from_arrays([k[:c], v[:c], t[:c], pp[:c], off, ts[:c], tt[:c]], schema=arrow_schema(False))

with tempfile.TemporaryDirectory() as d:
    c = LocalCluster.start(Path(d) / "c", BROKERS)
    try:
        bs = c.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("bench", PARTS, BROKERS)])["bench"].result(30)
        admin.create_topics([NewTopic("bench-out", PARTS, BROKERS)])["bench-out"].result(30)
        time.sleep(2)
        p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.num.messages": 10000, "queue.buffering.max.messages": 1000000})
        val = b"x" * 100
        t0 = time.time()
        for i in range(N):
            while True:
                try: p.produce("bench", val, partition=i % PARTS); break
                except BufferError: p.poll(0.01)
        p.flush(120)
        print(f"produce {N}: {N/(time.time()-t0):,.0f} rows/s", flush=True)
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.python.worker.reuse", "true").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(MemSource)
        def run(label, df, reps=2):
            best = 0
            for _ in range(reps):
                t0 = time.time(); df.write.format("noop").mode("overwrite").save(); dt = time.time() - t0
                best = max(best, N / dt)
            print(f"{label}: {best:,.0f} rows/s", flush=True)
            return best
        mem = run("in-memory Arrow source -> noop", spark.read.format("memarrow").option("n", N).load())
        od = run("odradek batch read -> noop", spark.read.format("odradek").option("kafka.bootstrap.servers", bs).option("subscribe", "bench").load())
        print(f"ratio {od/mem:.2f}")
        # streaming AvailableNow
        t0 = time.time()
        q = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bs).option("subscribe", "bench")
             .option("startingOffsets", "earliest").load().writeStream.format("noop")
             .option("checkpointLocation", f"{d}/ck").trigger(availableNow=True).start())
        q.awaitTermination(); print(f"odradek stream (AvailableNow) -> noop: {N/(time.time()-t0):,.0f} rows/s", flush=True)
        # sink
        M = N // 4
        src = spark.read.format("memarrow").option("n", M).load().select("value").cache(); src.count()
        t0 = time.time()
        src.write.format("odradek").option("kafka.bootstrap.servers", bs).option("topic", "bench-out").mode("append").save()
        print(f"sink batch write: {M/(time.time()-t0):,.0f} rows/s", flush=True)
        t0 = time.time()
        q = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bs).option("subscribe", "bench")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", M).load().select("value")
             .writeStream.format("odradek").option("kafka.bootstrap.servers", bs).option("topic", "bench-out")
             .option("checkpointLocation", f"{d}/ck2").trigger(availableNow=True).start())
        q.awaitTermination(); print(f"odradek stream -> odradek sink (exactly-once replay guard): {N/(time.time()-t0):,.0f} rows/s", flush=True)
        spark.stop()
    finally:
        c.down()
