"""The main job: a Structured Streaming pipeline on Odradek that survives a leader crash.

1. Start a local 3-broker cluster (real ZooKeeper and broker processes).
2. Produce a stream of page-view events (keyed by user, JSON values with the URL and an
   event time) with an idempotent acks=all producer into ``page-views`` (RF 3, min ISR 2).
3. A Spark Structured Streaming query reads ``page-views`` with the ``odradek`` source,
   counts views per URL in 5-second event-time windows (watermark 2 s, append mode) and
   writes each finished window to the ``url-counts`` topic (``odradek`` sink, exactly-once
   across replays) and to Parquet.
4. In the middle, SIGKILL the leader of a ``page-views`` partition (SPEC R4): the
   producer and the query ride through the failover.
5. At the end, recompute the same windowed counts as a batch job over the whole input
   topic and check that the streamed results (in Odradek and in Parquet) are equal to it.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from odradek.cluster.local import LocalCluster

URLS = [f"/page/{i}" for i in range(12)]
WINDOW = "5 seconds"


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class EventProducer:
    """Page views at a steady rate; event times follow wall time."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        from confluent_kafka import Producer  # noqa: PLC0415

        self.topic, self.rate = topic, rate
        self.acked = 0
        self.errors: list[str] = []
        self._p = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                            "enable.idempotence": True, "linger.ms": 5})
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._rnd = random.Random(7)

    def _cb(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(err.name())
        else:
            self.acked += 1

    def _run(self) -> None:
        sent = 0
        t0 = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while sent < due:
                user = f"user-{self._rnd.randrange(500)}"
                url = self._rnd.choice(URLS)
                value = json.dumps({"user": user, "url": url, "ts": int(time.time() * 1000)})
                self._p.produce(self.topic, key=user.encode(), value=value.encode(),
                                on_delivery=self._cb)
                sent += 1
            self._p.poll(0.01)
        self._p.flush(60)

    def send_watermark_flush(self) -> None:
        """One event far in the future closes every open window (append mode)."""
        value = json.dumps({"user": "flush", "url": "__flush__",
                            "ts": int(time.time() * 1000) + 3_600_000})
        self._p.produce(self.topic, key=b"flush", value=value.encode(), on_delivery=self._cb)
        self._p.flush(30)

    def start(self) -> None:
        self._t.start()

    def stop(self) -> None:
        self._stop.set()
        self._t.join(90)


def _parse(df: Any) -> Any:
    """JSON page views with their event time (the flush event included)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    return (df.select(F.from_json(F.col("value").cast("string"),
                                  "user STRING, url STRING, ts LONG").alias("e"))
            .select("e.*").withColumn("event_time", F.timestamp_millis("ts")))


def _counts(events: Any) -> Any:
    """Views per URL per 5-second window. The flush event is dropped here, after any
    watermark, so that the watermark still sees it and closes every window."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    return (events.where(F.col("url") != "__flush__")
            .groupBy(F.window("event_time", WINDOW), "url").count())


def _watermark(q: Any) -> str:
    """The query's latest event-time watermark (ISO UTC string, "" if none yet)."""
    marks = [(p.get("eventTime") or {}).get("watermark", "") for p in q.recentProgress]
    return max(marks, default="")


def _executor_sources(spark: Any) -> list[str]:
    """Where each executor's Python imports odradek from (the shipped zip, if any)."""
    rdd = spark.sparkContext.parallelize(range(2), 2)
    return sorted(set(rdd.map(lambda _: __import__("odradek").__file__).collect()))


def run_pipeline_demo(seconds: int = 20, rate: int = 1000, directory: Path | None = None,
                      kill_leader: bool = True, spark_master: str | None = None,
                      driver_host: str = "127.0.0.1") -> int:
    """``spark_master`` None: ``local[2]``. Else a ``spark://`` standalone master: the
    connector ships to its executors as a zip (``spark.submit.pyFiles``), the way a
    deployment would, and executors reach the brokers by their own addresses."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415

    from odradek.spark import register  # noqa: PLC0415

    workdir = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="odradek-pipeline-"))
    for old in ("out", "cluster"):  # a fresh run: no topics or checkpoints from before
        shutil.rmtree(workdir / old, ignore_errors=True)
    t_start = time.monotonic()
    _say(f"Odradek pipeline demo: {seconds} s of page views at {rate}/s; work dir {workdir}")
    with LocalCluster.start(workdir / "cluster", 3,
                            broker_config={"replica.lag.time.max.ms": "5000"},
                            zk_session_timeout_ms=4000) as cluster:
        bs = cluster.bootstrap_servers
        _say(f"cluster up: bootstrap.servers={bs}")
        from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

        admin = AdminClient({"bootstrap.servers": bs})
        futs = admin.create_topics([
            NewTopic("page-views", 4, 3, config={"min.insync.replicas": "2"}),
            NewTopic("url-counts", 2, 3, config={"min.insync.replicas": "2"})])
        for f in futs.values():
            f.result(30)
        _say("topics page-views (4 partitions, RF 3, min ISR 2) and url-counts created")

        builder = (SparkSession.builder.master(spark_master or "local[2]")
                   .appName("odradek-pipeline-demo")
                   .config("spark.sql.shuffle.partitions", "4")
                   .config("spark.ui.enabled", "false"))
        if spark_master:
            from odradek.cluster.spark_standalone import connector_zip  # noqa: PLC0415

            pyfile = connector_zip(workdir / "dist" / "odradek-connector.zip")
            # 1 core and 512 MB per executor, 2 cores in all: a shared 2-core machine.
            # Executors unpack it into ./odradek-connector (see connector_zip for why
            # not --py-files); the driver uses the installed package.
            builder = (builder.config("spark.archives", f"{pyfile}#odradek-connector")
                       .config("spark.executorEnv.PYTHONPATH", "odradek-connector")
                       .config("spark.executor.cores", "1").config("spark.cores.max", "2")
                       .config("spark.executor.memory", "512m")
                       .config("spark.driver.host", driver_host)
                       .config("spark.driver.bindAddress", driver_host))
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        _say(f"Spark {spark.version} session started on {spark.sparkContext.master}")
        if spark_master:
            _say(f"executors import odradek from {', '.join(_executor_sources(spark))}")

        stream = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bs)
                  .option("subscribe", "page-views").option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", 20000).load())
        counts = _counts(_parse(stream).withWatermark("event_time", "2 seconds"))
        out = counts.select(
            F.concat_ws("|", F.col("window.start").cast("string"), "url").alias("key"),
            F.to_json(F.struct(F.col("window.start").alias("start"), "url", "count"))
            .alias("value"))
        q_topic = (out.writeStream.format("odradek").outputMode("append")
                   .option("kafka.bootstrap.servers", bs).option("topic", "url-counts")
                   .option("checkpointLocation", str(workdir / "out" / "ck-topic"))
                   .trigger(processingTime="2 seconds").start())
        q_parquet = (counts.select(F.col("window.start").alias("start"), "url", "count")
                     .writeStream.format("parquet").outputMode("append")
                     .option("path", str(workdir / "out" / "parquet"))
                     .option("checkpointLocation", str(workdir / "out" / "ck-parquet"))
                     .trigger(processingTime="2 seconds").start())
        _say("streaming queries started: windowed counts -> topic url-counts and Parquet")

        prod = EventProducer(bs, "page-views", rate)
        prod.start()
        deadline = time.monotonic() + seconds
        killed = None
        while time.monotonic() < deadline:
            time.sleep(2)
            p = q_topic.lastProgress or {}
            _say(f"produced {prod.acked:,} acked; last micro-batch: "
                 f"{p.get('numInputRows', 0)} rows (batch {p.get('batchId', '-')})")
            if kill_leader and killed is None and time.monotonic() > deadline - seconds / 2:
                md = admin.list_topics("page-views", timeout=10).topics["page-views"]
                killed = md.partitions[0].leader
                _say(f"SIGKILL broker {killed}, leader of page-views-0 (SPEC R4)")
                cluster.stop_broker(killed, signal.SIGKILL)
        prod.stop()
        prod.send_watermark_flush()
        _say(f"producer stopped: {prod.acked:,} events acknowledged, errors {len(prod.errors)}")
        if killed is not None:
            cluster.start_broker(killed)
            _say(f"broker {killed} restarted")

        # Wait until both queries have consumed everything (the flush event included).
        from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

        c = Consumer({"bootstrap.servers": bs, "group.id": "demo-check"})
        ends = {p: c.get_watermark_offsets(TopicPartition("page-views", p), timeout=10)[1]
                for p in range(4)}
        c.close()

        def caught_up(q: Any) -> bool:
            prog = q.lastProgress
            if not prog or not prog.get("sources"):
                return False
            end = prog["sources"][0].get("endOffset")
            if isinstance(end, str):
                end = json.loads(end)
            got = (end or {}).get("page-views", {})
            return all(int(got.get(str(p), -1)) >= e for p, e in ends.items())

        wait_until = time.monotonic() + 180
        while time.monotonic() < wait_until and not (caught_up(q_topic) and caught_up(q_parquet)):
            time.sleep(1)
        # Append mode emits a window once the watermark has passed its end: give the
        # queries a few more triggers, then compare every window they have closed.
        n0 = {id(q): len(q.recentProgress) for q in (q_topic, q_parquet)}
        while time.monotonic() < wait_until and any(
                len(q.recentProgress) < n0[id(q)] + 3 for q in (q_topic, q_parquet)):
            time.sleep(0.5)
        watermark = min(_watermark(q_topic), _watermark(q_parquet))
        q_topic.stop()
        q_parquet.stop()
        _say("streaming queries stopped; recomputing the same counts as a batch job")

        batch = (spark.read.format("odradek").option("kafka.bootstrap.servers", bs)
                 .option("subscribe", "page-views").load())
        all_windows = {(r["start"], r["url"], r["end"]): r["count"]
                       for r in _counts(_parse(batch)).select(
                           F.col("window.start").alias("start"),
                           F.col("window.end").alias("end"), "url", "count").collect()}
        # Windows whose end the streams' watermark has passed are final: those must match.
        wm_ts = (datetime.datetime.fromisoformat(watermark.replace("Z", "+00:00"))
                 .astimezone().replace(tzinfo=None) if watermark else None)
        expected = {(st, u): n for (st, u, end), n in all_windows.items()
                    if wm_ts is not None and end <= wm_ts}
        open_windows = len(all_windows) - len(expected)
        parquet = {(r["start"], r["url"]): r["count"]
                   for r in spark.read.parquet(str(workdir / "out" / "parquet")).collect()
                   if (r["start"], r["url"]) in expected}
        topic_rows = (spark.read.format("odradek").option("kafka.bootstrap.servers", bs)
                      .option("subscribe", "url-counts").load()
                      .select(F.from_json(F.col("value").cast("string"),
                                          "start TIMESTAMP, url STRING, count LONG").alias("r"))
                      .select("r.*").collect())
        topic_rows = [r for r in topic_rows if (r["start"], r["url"]) in expected]
        from_topic = {(r["start"], r["url"]): r["count"] for r in topic_rows}
        spark.stop()

    total = sum(all_windows.values())
    ok_parquet = parquet == expected
    ok_topic = from_topic == expected and len(topic_rows) == len(expected)
    _say(f"batch recomputation: {len(all_windows)} windows x URLs, {total:,} events; "
         f"{len(expected)} closed by the streams' watermark {watermark or '-'} are compared, "
         f"{open_windows} still open")
    _say(f"streamed to Parquet == batch: {ok_parquet}"
         + ("" if ok_parquet else f" (missing {len(set(expected) - set(parquet))}, "
            f"differing {sum(1 for k in expected if k in parquet and parquet[k] != expected[k])})"))
    _say(f"streamed to topic url-counts == batch: {ok_topic} ({len(topic_rows)} records, "
         f"duplicates {len(topic_rows) - len(from_topic)})")
    events_acked = prod.acked - 1  # the flush event is not a page view
    ok = (ok_parquet and ok_topic and total == events_acked and not prod.errors
          and len(expected) > 0)
    _say(f"page views acknowledged {events_acked:,}, counted {total:,}")
    print(f"== {'OK' if ok else 'FAILED'} in {time.monotonic() - t_start:.0f} s", flush=True)
    return 0 if ok else 1
