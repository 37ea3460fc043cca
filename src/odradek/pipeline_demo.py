"""The main job: a Structured Streaming pipeline on Odradek that survives a leader crash.

1. Start a local 3-broker cluster (real ZooKeeper and broker processes).
2. Produce a stream of page-view events (keyed by user, JSON values with the URL and an
   event time) with an idempotent acks=all producer into ``page-views`` (RF 3, min ISR 2).
3. A Spark Structured Streaming query reads ``page-views`` with the ``odradek`` source,
   counts views per URL in 5-second event-time windows (watermark 2 s, append mode) and
   writes each finished window to the ``url-counts`` topic (``odradek`` sink, exactly-once
   across replays) and to Parquet.
4. In the middle, SIGKILL the leader of a ``page-views`` partition (REQ-R4): the
   producer and the query ride through the failover.
5. At the end, one event far past the last window moves the streams' watermark beyond
   every window; Spark's no-data micro-batch then emits (closes) them all. The same
   windowed counts are recomputed as a batch job over the whole input topic and every
   window streamed to Odradek and to Parquet is compared with it.

The terminal shows progress and a one-screen summary; the full log, librdkafka's lines,
Spark's output and the brokers' logs are files in the work directory (``--verbose``
shows the details on the terminal too). The web console runs alongside (its URL is
printed).
"""

from __future__ import annotations

import contextlib
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

from rich.table import Table

from odradek.cluster.local import LocalCluster
from odradek.terminal import RunOutput, librdkafka_logger, quiet_spark

URLS = [f"/page/{i}" for i in range(12)]
STALL_S = 180  # give up waiting for the streams after this long without a micro-batch
WINDOW = "5 seconds"


class EventProducer:
    """Page views at a steady rate; event times follow wall time."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        rate: int,
        client_logger: Any,
        security: dict[str, str] | None = None,
    ) -> None:
        from confluent_kafka import Producer  # noqa: PLC0415

        self.topic, self.rate = topic, rate
        self.acked = 0
        self.errors: list[str] = []
        self.flush_ts = 0
        self._p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "logger": client_logger,
                **(security or {}),
            }
        )
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
                self._p.produce(
                    self.topic, key=user.encode(), value=value.encode(), on_delivery=self._cb
                )
                sent += 1
            self._p.poll(0.01)
        self._p.flush(60)

    def send_watermark_flush(self) -> None:
        """One event far in the future closes every open window (append mode)."""
        self.flush_ts = int(time.time() * 1000) + 3_600_000
        value = json.dumps({"user": "flush", "url": "__flush__", "ts": self.flush_ts})
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

    return (
        df.select(
            F.from_json(F.col("value").cast("string"), "user STRING, url STRING, ts LONG").alias(
                "e"
            )
        )
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
    )


def _counts(events: Any, *, streaming: bool) -> Any:
    """Views per URL per 5-second window.

    The flush event must reach the streams' watermark, so a streaming query must not
    filter it out: Spark's optimizer pushes such a filter below the watermark (it does
    not touch the event-time column), the watermark never sees the event, and the last
    windows stay open. Unfiltered, it sits in its own window an hour ahead, which the
    watermark never passes, so append mode never emits it. The batch job drops it."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    if not streaming:
        events = events.where(F.col("url") != "__flush__")
    return events.groupBy(F.window("event_time", WINDOW), "url").count()


def _watermark(q: Any) -> str:
    """The query's latest event-time watermark (ISO UTC string, "" if none yet)."""
    marks = [(p.get("eventTime") or {}).get("watermark", "") for p in q.recentProgress]
    return max(marks, default="")


def _watermark_ms(q: Any) -> int:
    w = _watermark(q)
    if not w:
        return 0
    return int(datetime.datetime.fromisoformat(w.replace("Z", "+00:00")).timestamp() * 1000)


def _executor_sources(spark: Any) -> list[str]:
    """Where each executor's Python imports odradek from (the shipped zip, if any)."""
    rdd = spark.sparkContext.parallelize(range(2), 2)
    return sorted(set(rdd.map(lambda _: __import__("odradek").__file__).collect()))


def run_pipeline_demo(
    seconds: int = 20,
    rate: int = 1000,
    directory: Path | None = None,
    kill_leader: bool = True,
    *,
    verbose: bool = False,
    console: bool = True,
    spark_master: str | None = None,
    driver_host: str = "127.0.0.1",
    security: str = "plaintext",
    hosts: str = "loopback",
) -> int:
    """``spark_master`` None: ``local[2]``. Else a ``spark://`` standalone master: the
    connector ships to its executors as a zip (``spark.archives``), the way a
    deployment would, and executors reach the brokers by their own addresses.
    ``spark_master="standalone"`` starts a master and two workers for the run
    (:meth:`SparkStandalone.beside`). ``hosts="netns"``: every broker and ZooKeeper
    server in its own network namespace; with ``standalone`` the workers, and so the
    executors, run on the client hosts c1 and c2.
    ``security="sasl_ssl"``: the cluster has TLS + SCRAM listeners and ZooKeeper
    authentication; every client (the producer, Spark's source and sink through
    ``kafka.*`` options, the console) connects as the cluster's admin user."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="odradek-pipeline-"))
    for old in ("out", "cluster"):  # a fresh run: no topics or checkpoints from before
        shutil.rmtree(workdir / old, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    out = RunOutput(workdir / "demo.log", verbose=verbose)
    try:
        return _run(
            out,
            workdir,
            seconds,
            rate,
            kill_leader,
            verbose,
            console,
            spark_master,
            driver_host,
            security,
            hosts,
        )
    finally:
        out.close()


def _run(
    out: RunOutput,
    workdir: Path,
    seconds: int,
    rate: int,
    kill_leader: bool,
    verbose: bool,
    console: bool,
    spark_master: str | None,
    driver_host: str,
    security: str = "plaintext",
    hosts: str = "loopback",
) -> int:
    from pyspark.sql import SparkSession  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415

    from odradek.spark import register  # noqa: PLC0415

    _say = out.say
    t_start = time.monotonic()
    rdk = librdkafka_logger(workdir / "librdkafka.log", verbose=verbose)
    _say(f"[bold]Odradek pipeline demo[/bold]: {seconds} s of page views at {rate}/s")
    _say(
        f"logs: {workdir / 'demo.log'} (this run), {workdir / 'librdkafka.log'}, "
        f"{workdir / 'spark.log'}, {workdir / 'cluster'}/broker-N/broker.log"
    )
    with (
        LocalCluster.start(
            workdir / "cluster",
            3,
            broker_config={"replica.lag.time.max.ms": "5000"},
            zk_session_timeout_ms=4000,
            security=security,
            hosts=hosts,
        ) as cluster,
        contextlib.ExitStack() as stack,
    ):
        bs = cluster.bootstrap_servers
        sec = cluster.client_config()  # {} on a plaintext cluster
        # The Spark source and sink take client settings as kafka.* options.
        kafka = {"kafka.bootstrap.servers": bs, **{f"kafka.{k}": v for k, v in sec.items()}}
        _say(
            f"cluster up: bootstrap.servers={bs}"
            + (f" ({sec['security.protocol']}, user {sec.get('sasl.username')})" if sec else "")
        )
        if console:
            try:
                _say(f"web console: [link]{cluster.start_console()}[/link]")
            except Exception as e:  # noqa: BLE001 - the demo does not need it
                out.detail(f"console did not start: {e}")
        from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

        admin = AdminClient({"bootstrap.servers": bs, "logger": rdk, **sec})
        futs = admin.create_topics(
            [
                NewTopic("page-views", 4, 3, config={"min.insync.replicas": "2"}),
                NewTopic("url-counts", 2, 3, config={"min.insync.replicas": "2"}),
            ]
        )
        for f in futs.values():
            f.result(30)
        _say("topics page-views (4 partitions, RF 3, min ISR 2) and url-counts created")

        if spark_master == "standalone":
            # Left before the cluster goes down: executors first, then the brokers.
            from odradek.cluster.spark_standalone import SparkStandalone  # noqa: PLC0415

            standalone = stack.enter_context(
                SparkStandalone.beside(cluster, workdir / "spark-standalone")
            )
            spark_master, driver_host = standalone.start(), standalone.host
            _say(
                f"Spark standalone: master {spark_master}, workers on "
                f"{', '.join(standalone.worker_hosts)}"
            )
        builder = (
            SparkSession.builder.master(spark_master or "local[2]")
            .appName("odradek-pipeline-demo")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.ui.enabled", "false")
        )
        if spark_master:
            from odradek.cluster.spark_standalone import connector_zip  # noqa: PLC0415

            pyfile = connector_zip(workdir / "dist" / "odradek-connector.zip")
            # 1 core and 512 MB per executor, 2 cores in all: a shared 2-core machine.
            # Executors unpack it into ./odradek-connector (see connector_zip for why
            # not --py-files); the driver uses the installed package.
            builder = (
                builder.config("spark.archives", f"{pyfile}#odradek-connector")
                .config("spark.executorEnv.PYTHONPATH", "odradek-connector")
                .config("spark.executor.cores", "1")
                .config("spark.cores.max", "2")
                .config("spark.executor.memory", "512m")
                .config("spark.driver.host", driver_host)
                .config("spark.driver.bindAddress", driver_host)
            )
        spark = quiet_spark(builder, workdir / "spark.log", verbose=verbose)
        register(spark)
        _say(f"Spark {spark.version} session started on {spark.sparkContext.master}")
        if spark_master:
            _say(f"executors import odradek from {', '.join(_executor_sources(spark))}")

        stream = (
            spark.readStream.format("odradek")
            .options(**kafka)
            .option("subscribe", "page-views")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 20000)
            .load()
        )
        counts = _counts(_parse(stream).withWatermark("event_time", "2 seconds"), streaming=True)
        rows_out = counts.select(
            F.concat_ws("|", F.col("window.start").cast("string"), "url").alias("key"),
            F.to_json(F.struct(F.col("window.start").alias("start"), "url", "count")).alias(
                "value"
            ),
        )
        q_topic = (
            rows_out.writeStream.format("odradek")
            .outputMode("append")
            .options(**kafka)
            .option("topic", "url-counts")
            .option("checkpointLocation", str(workdir / "out" / "ck-topic"))
            .trigger(processingTime="2 seconds")
            .start()
        )
        q_parquet = (
            counts.select(F.col("window.start").alias("start"), "url", "count")
            .writeStream.format("parquet")
            .outputMode("append")
            .option("path", str(workdir / "out" / "parquet"))
            .option("checkpointLocation", str(workdir / "out" / "ck-parquet"))
            .trigger(processingTime="2 seconds")
            .start()
        )
        _say("streaming queries started: windowed counts -> topic url-counts and Parquet")

        prod = EventProducer(bs, "page-views", rate, rdk, sec)
        prod.start()
        t_prod = time.monotonic()
        deadline = t_prod + seconds
        killed = None
        task = out.progress("producing page views", total=seconds)
        while time.monotonic() < deadline:
            time.sleep(1)
            p = q_topic.lastProgress or {}
            out.update(
                task,
                completed=min(time.monotonic() - t_prod, seconds),
                description=f"producing: {prod.acked:,} acked, micro-batch "
                f"{p.get('batchId', '-')} read {p.get('numInputRows', 0)} rows",
            )
            out.detail(
                f"produced {prod.acked:,} acked; last micro-batch: "
                f"{p.get('numInputRows', 0)} rows (batch {p.get('batchId', '-')})"
            )
            if kill_leader and killed is None and time.monotonic() > deadline - seconds / 2:
                md = admin.list_topics("page-views", timeout=10).topics["page-views"]
                killed = md.partitions[0].leader
                _say(
                    f"[red]SIGKILL broker {killed}[/red], leader of page-views-0 (REQ-R4); "
                    "the producer and the queries ride through the failover"
                )
                cluster.stop_broker(killed, signal.SIGKILL)
        out.done(task)
        prod.stop()
        prod.send_watermark_flush()
        # prod.acked counts the flush event too: it is not a page view.
        _say(
            f"producer stopped: {prod.acked - 1:,} page views acknowledged, errors "
            f"{len(prod.errors)}; then one event an hour ahead, to close every window"
        )
        if killed is not None:
            cluster.start_broker(killed)
            _say(f"broker {killed} restarted")

        # Wait until both queries have consumed everything (the flush event included).
        from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

        c = Consumer({"bootstrap.servers": bs, "group.id": "demo-check", "logger": rdk, **sec})
        ends = {
            p: c.get_watermark_offsets(TopicPartition("page-views", p), timeout=10)[1]
            for p in range(4)
        }
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

        # Append mode emits a window once the watermark has passed its end. The batch
        # that reads the flush event moves the watermark an hour ahead; Spark then runs
        # a no-data micro-batch with it, which emits every remaining window. A progress
        # report carrying that watermark means that batch has run. On a loaded machine
        # a micro-batch can take a minute: wait while the queries make progress, give
        # up only when neither has finished a batch for STALL_S.
        closing = prod.flush_ts - 2_000 - 1  # the flush event's watermark (delay 2 s)
        queries = (q_topic, q_parquet)

        def closed(q: Any) -> bool:
            return caught_up(q) and _watermark_ms(q) >= closing

        task = out.progress("streams: reading the rest, then closing the last windows", total=4)
        stall_deadline = hard_deadline = time.monotonic()
        stall_deadline += STALL_S
        hard_deadline += 900
        seen: tuple[Any, ...] = ()
        while not all(closed(q) for q in queries):
            now = time.monotonic()
            batches = tuple((q.lastProgress or {}).get("batchId") for q in queries)
            if batches != seen:
                seen, stall_deadline = batches, now + STALL_S
            if now > stall_deadline or now > hard_deadline:
                out.say(f"[red]the queries made no progress for {STALL_S} s[/red]")
                break
            out.update(
                task,
                completed=sum(caught_up(q) for q in queries) + sum(closed(q) for q in queries),
                description=f"streams: micro-batches {seen}, catching up and "
                "closing the last windows",
            )
            time.sleep(0.5)
        out.done(task)
        watermark = min(_watermark(q_topic), _watermark(q_parquet))
        all_closed = all(_watermark_ms(q) >= closing for q in (q_topic, q_parquet))
        q_topic.stop()
        q_parquet.stop()
        _say("streaming queries stopped; recomputing the same counts as a batch job")

        batch = (
            spark.read.format("odradek").options(**kafka).option("subscribe", "page-views").load()
        )
        all_windows = {
            (r["start"], r["url"], r["end"]): r["count"]
            for r in _counts(_parse(batch), streaming=False)
            .select(
                F.col("window.start").alias("start"),
                F.col("window.end").alias("end"),
                "url",
                "count",
            )
            .collect()
        }
        # Every window is closed now (the watermark passed them all): all must match.
        wm_ts = (
            datetime.datetime.fromisoformat(watermark.replace("Z", "+00:00"))
            .astimezone()
            .replace(tzinfo=None)
            if watermark
            else None
        )
        expected = {
            (st, u): n
            for (st, u, end), n in all_windows.items()
            if wm_ts is not None and end <= wm_ts
        }
        open_windows = len(all_windows) - len(expected)
        parquet = {
            (r["start"], r["url"]): r["count"]
            for r in spark.read.parquet(str(workdir / "out" / "parquet")).collect()
            if (r["start"], r["url"]) in expected
        }
        topic_rows = (
            spark.read.format("odradek")
            .options(**kafka)
            .option("subscribe", "url-counts")
            .load()
            .select(
                F.from_json(
                    F.col("value").cast("string"), "start TIMESTAMP, url STRING, count LONG"
                ).alias("r")
            )
            .select("r.*")
            .collect()
        )
        topic_rows = [r for r in topic_rows if (r["start"], r["url"]) in expected]
        from_topic = {(r["start"], r["url"]): r["count"] for r in topic_rows}
        spark.stop()

    total = sum(all_windows.values())
    events_acked = prod.acked - 1  # the flush event is not a page view
    missing_pq = len(set(expected) - set(parquet))
    differing_pq = sum(1 for k in expected if k in parquet and parquet[k] != expected[k])
    ok_parquet = parquet == expected
    missing_t = len(set(expected) - set(from_topic))
    differing_t = sum(1 for k in expected if k in from_topic and from_topic[k] != expected[k])
    dup_t = len(topic_rows) - len(from_topic)
    ok_topic = from_topic == expected and dup_t == 0
    ok = (
        ok_parquet
        and ok_topic
        and total == events_acked
        and not prod.errors
        and len(expected) > 0
        and open_windows == 0
        and all_closed
    )

    table = Table(title="Pipeline result", show_lines=False)
    table.add_column("check")
    table.add_column("result", justify="right")
    table.add_column("", justify="left")
    mark = lambda good: "[green]ok[/green]" if good else "[red]FAILED[/red]"  # noqa: E731
    table.add_row(
        "page views acked / counted by the batch job",
        f"{events_acked:,} / {total:,}",
        mark(total == events_acked),
    )
    table.add_row("producer errors", str(len(prod.errors)), mark(not prod.errors))
    table.add_row("windows x URLs (batch recomputation)", f"{len(all_windows)}", "")
    table.add_row(
        "windows closed by the streams and compared",
        f"{len(expected)} of {len(all_windows)}",
        mark(open_windows == 0),
    )
    table.add_row(
        "Parquet == batch (missing / differing)", f"{missing_pq} / {differing_pq}", mark(ok_parquet)
    )
    table.add_row(
        "topic url-counts == batch (missing / differing / dup.)",
        f"{missing_t} / {differing_t} / {dup_t}",
        mark(ok_topic),
    )
    if killed is not None:
        table.add_row(f"broker {killed} SIGKILLed midway, restarted", "", "")
    out.console.print(table)
    out.detail(
        f"watermark {watermark or '-'}; windows {len(all_windows)}, compared "
        f"{len(expected)}, open {open_windows}; parquet ok {ok_parquet}, topic ok "
        f"{ok_topic}"
    )
    out.say(
        f"[bold]{'OK' if ok else 'FAILED'}[/bold] in {time.monotonic() - t_start:.0f} s."
        f" Full log: {workdir / 'demo.log'}"
    )
    print(f"== {'OK' if ok else 'FAILED'} in {time.monotonic() - t_start:.0f} s", flush=True)
    return 0 if ok else 1
