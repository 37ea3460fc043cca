"""The loss checker: one PySpark job over the Parquet histories of a run (issue 6 item 3).

Input: ``RUN_DIR/<scenario>/{producer,reads,events,replicas}.parquet`` (see
``odradek.chaos.workload``). One SparkSession checks every scenario of the run; per
scenario it computes (REQ-R7, R10, R19, R20):

* ``lost``          acknowledged records absent from the final read (the HW after healing)
* ``duplicated``    records present more than once in the final read (extra copies)
* ``out_of_order``  records at a higher offset than a record sent after them
* ``unacked_read``  records read (live or final) whose send was never acknowledged
                    (legal for timed-out sends; never for records never sent)
* ``dirty_reads``   live reads whose offset later held another record (or none): a
                    consumer saw data that was then truncated -- must not happen, since
                    consumers read below the HW (REQ-R16)
* ``divergent``     offsets below each replica's HW where replicas hold different
                    records (REQ-R20: replicas never diverge)
* ``split_brain_acks``  lost records acknowledged after ZooKeeper already named a new
                    leader: the deposed leader kept accepting writes (REQ-P4, REQ-P6)
* ``split_brain_s`` how long after the new leader's election such acks went on
* ``unavailable_s`` 0.5 s windows between first and last send with no acknowledgement
* ``lost_in_ledger`` / ``lost_not_in_ledger``  lost records found / not found in any
                    broker's lost-records ledger (``ledger.parquet``); ``ledger_records``
                    distinct records quarantined (lost or not, e.g. never acknowledged)
* per phase (``History.phase``): acks, errors by name, median ack latency (REQ-R8, R9)
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["spark_session", "check_run", "BIN_S"]

BIN_S = 0.5


def spark_session(log_path: Path | None = None) -> Any:
    """A local SparkSession whose Python workers are this interpreter (platform-notes: else
    the workers lack pyarrow); quiet (no progress bars, WARN), the JVM's output in
    ``log_path``."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from odradek.terminal import quiet_spark

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-chaos-checker")
        .config("spark.ui.enabled", "false")
        # Histories are small: one task per stage keeps the ~100 stages cheap.
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
    )
    if log_path is None:
        spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        return spark
    return quiet_spark(builder, log_path)


def check_run(run_dir: Path, spark: Any | None = None) -> dict[str, dict[str, Any]]:
    """Metrics per scenario for every scenario directory in ``run_dir``; also written to
    ``run_dir/checker.json``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    run_dir = Path(run_dir)
    names = sorted(p.name for p in run_dir.iterdir() if (p / "producer.parquet").exists())
    if not names:
        return {}
    own = spark is None
    spark = spark or spark_session(run_dir / "spark.log")
    try:

        def load(table: str) -> Any:
            return spark.read.parquet(*[str(run_dir / n / f"{table}.parquet") for n in names])

        # Small inputs read many times: cache them once.
        prod, reads, events, replicas = (
            load(t).cache() for t in ("producer", "reads", "events", "replicas")
        )
        sends = (
            prod.where("kind = 'send'").groupBy("scenario", "seq").agg(F.min("ts").alias("send_ts"))
        )
        acks = (
            prod.where("kind = 'ack'")
            .groupBy("scenario", "seq")
            .agg(
                F.min("ts").alias("ack_ts"),
                F.first("offset").alias("offset"),
                F.count("*").alias("n_acks"),
            )
        )
        errors = prod.where("kind = 'error'")
        final = reads.where("phase = 'final'")
        live = reads.where("phase = 'live'")
        final_seqs = final.select("scenario", "seq").distinct()

        out: dict[str, dict[str, Any]] = {n: {"scenario": n} for n in names}
        # Every per-scenario number is one small DataFrame (scenario, key, n); they are
        # unioned and collected in ONE Spark job (a job per metric costs ~1 s each).
        parts: list[Any] = []

        def metric(key: Any, df: Any) -> None:
            k = F.lit(key) if isinstance(key, str) else key
            parts.append(df.select("scenario", k.alias("key"), F.col("n").cast("double")))

        def count(key: str, df: Any) -> None:
            metric(key, df.groupBy("scenario").agg(F.count("*").alias("n")))

        count("sent", sends)
        count("acked", acks)
        count("errors", errors)
        count(
            "failed_sends",
            errors.select("scenario", "seq")
            .distinct()
            .join(acks, ["scenario", "seq"], "left_anti"),
        )
        metric(
            F.concat(F.lit("error:"), F.col("error")),
            errors.groupBy("scenario", "error").agg(F.count("*").alias("n")),
        )

        lost = acks.join(final_seqs, ["scenario", "seq"], "left_anti")
        count("lost", lost)
        # The lost-records ledger (issue 6 item 5): every broker's quarantined records,
        # ``ledger.parquet`` (absent in runs from before the ledger existed).
        with_ledger = [n for n in names if (run_dir / n / "ledger.parquet").exists()]
        ledger = (
            spark.read.parquet(*[str(run_dir / n / "ledger.parquet") for n in with_ledger])
            if with_ledger
            else spark.createDataFrame([], "scenario string, seq long")
        )
        ledger_seqs = ledger.where("seq >= 0").select("scenario", "seq").distinct()
        count("ledger_records", ledger_seqs)
        count("lost_in_ledger", lost.join(ledger_seqs, ["scenario", "seq"], "left_semi"))
        count("lost_not_in_ledger", lost.join(ledger_seqs, ["scenario", "seq"], "left_anti"))
        count("final_records", final)
        dup = final.groupBy("scenario", "seq").agg(F.count("*").alias("c")).where("c > 1")
        metric("duplicated", dup.groupBy("scenario").agg(F.sum(F.col("c") - 1).alias("n")))

        w = (
            Window.partitionBy("scenario", "partition")
            .orderBy("offset")
            .rowsBetween(Window.unboundedPreceding, -1)
        )
        count(
            "out_of_order",
            final.withColumn("prev_max", F.max("seq").over(w)).where("seq < prev_max"),
        )

        read_seqs = reads.where("seq >= 0").select("scenario", "seq").distinct()
        count("unacked_read", read_seqs.join(acks, ["scenario", "seq"], "left_anti"))
        count(
            "never_sent_read",
            reads.select("scenario", "seq")
            .distinct()
            .join(sends, ["scenario", "seq"], "left_anti"),
        )

        fin = final.select("scenario", "partition", "offset", F.col("seq").alias("fseq"))
        dirty = live.join(fin, ["scenario", "partition", "offset"], "left").where(
            F.col("fseq").isNull() | (F.col("fseq") != F.col("seq"))
        )
        count("dirty_reads", dirty.select("scenario", "partition", "offset").distinct())

        below = replicas.where("offset < hw")
        count(
            "divergent",
            below.groupBy("scenario", "partition", "offset")
            .agg(F.countDistinct("seq").alias("k"))
            .where("k > 1"),
        )
        per_replica = replicas.groupBy("scenario", "broker").agg(
            F.max("hw").alias("hw"), F.max("leo").alias("leo")
        )
        metric("replica_hw_min", per_replica.groupBy("scenario").agg(F.min("hw").alias("n")))
        metric(
            F.concat(F.lit("leo:"), F.col("broker").cast("string")),
            per_replica.withColumnRenamed("leo", "n"),
        )

        # Leadership as ZooKeeper recorded it: the first state seen is the initial leader.
        states = events.where("kind = 'state'")
        sw = Window.partitionBy("scenario").orderBy("ts")
        first_state = (
            states.withColumn("rn", F.row_number().over(sw))
            .where("rn = 1")
            .select("scenario", F.col("leader").alias("leader0"), F.col("epoch").alias("epoch0"))
        )
        first_change = (
            states.join(first_state, "scenario")
            .where("leader >= 0 AND leader != leader0 AND epoch > epoch0")
            .groupBy("scenario")
            .agg(F.min("ts").alias("change_ts"))
        )
        count(
            "leader_changes",
            states.join(first_state, "scenario")
            .where("epoch > epoch0")
            .select("scenario", "epoch")
            .distinct(),
        )
        count("offline_seen", states.where("leader < 0"))
        sb = lost.join(first_change, "scenario").where("ack_ts > change_ts")
        count("split_brain_acks", sb)
        # How long the deposed leader went on acknowledging after the new one took over.
        metric(
            "split_brain_s",
            sb.groupBy("scenario").agg(
                F.round(F.max(F.col("ack_ts") - F.col("change_ts")), 2).alias("n")
            ),
        )

        # Availability: 0.5 s windows between the first and the last send without an ack.
        span = (
            prod.where("kind = 'send'")
            .groupBy("scenario")
            .agg(F.min("ts").alias("t0"), F.max("ts").alias("t1"))
        )
        metric("span_s", span.select("scenario", (F.col("t1") - F.col("t0")).alias("n")))
        count(
            "ack_bins",
            acks.join(span, "scenario")
            .where("ack_ts <= t1")
            .select("scenario", F.floor((F.col("ack_ts") - F.col("t0")) / BIN_S).alias("b"))
            .distinct(),
        )

        union = parts[0]
        for p in parts[1:]:
            union = union.unionByName(p)
        for n in names:
            out[n].update(error_kinds={}, replica_leo={})
            for k in (
                "sent",
                "acked",
                "errors",
                "failed_sends",
                "lost",
                "final_records",
                "duplicated",
                "out_of_order",
                "unacked_read",
                "never_sent_read",
                "dirty_reads",
                "divergent",
                "leader_changes",
                "offline_seen",
                "split_brain_acks",
                "ack_bins",
                "ledger_records",
                "lost_in_ledger",
                "lost_not_in_ledger",
            ):
                out[n][k] = 0
            out[n]["ledger_collected"] = n in with_ledger
            out[n].update(split_brain_s=0.0, replica_hw_min=None, span_s=0.0)
        for r in union.collect():
            o, key, v = out[r["scenario"]], r["key"], r["n"]
            if key.startswith("error:"):
                o["error_kinds"][key[6:]] = int(v)
            elif key.startswith("leo:"):
                o["replica_leo"][key[4:]] = int(v)
            elif key in ("split_brain_s", "span_s"):
                o[key] = float(v)
            else:
                o[key] = int(v)
        for n in names:
            o = out[n]
            total = math.ceil(o["span_s"] / BIN_S) or 1
            o["unavailable_s"] = max(0, total - o.pop("ack_bins")) * BIN_S
            o["duration_s"] = round(o.pop("span_s"), 1)

        # The event log is tiny (tens of rows per scenario): leadership, controllers and
        # phase boundaries are read on the driver; the records stay in Spark.
        ev_rows = sorted(events.collect(), key=lambda r: r["ts"])
        phase_rows: list[tuple[str, str, float, float]] = []
        for n in names:
            mine = [r for r in ev_rows if r["scenario"] == n]
            st = [r for r in mine if r["kind"] == "state"]
            o = out[n]
            o["leaders_seen"] = sorted({r["leader"] for r in st if r["leader"] >= 0})
            o["isrs_seen"] = sorted({r["isr"] for r in st})
            o["controllers_seen"] = [
                r["leader"] for r in mine if r["kind"] == "controller" and r["leader"] is not None
            ]
            o["final_leader"] = st[-1]["leader"] if st else None
            o["final_isr"] = json.loads(st[-1]["isr"]) if st else []
            o["phases"] = {}
            ph = [r for r in mine if r["kind"] == "phase"]
            for i, r in enumerate(ph):
                end = ph[i + 1]["ts"] if i + 1 < len(ph) else 1e18
                phase_rows.append((n, r["detail"], r["ts"], end))
                # Leader/ISR in effect during the phase: the state before it plus changes.
                before = [s for s in st if s["ts"] <= r["ts"]][-1:]
                during = [s for s in st if r["ts"] < s["ts"] < end]
                o["phases"][r["detail"]] = {
                    "acks": 0,
                    "p50_ms": None,
                    "p99_ms": None,
                    "errors": {},
                    "seconds": round(end - r["ts"], 2) if end < 1e17 else None,
                    "isrs": sorted({s["isr"] for s in before + during}),
                    "leaders": sorted({s["leader"] for s in before + during}),
                }

        # Phases: acks, errors and latency between consecutive phase markers (R8, R9).
        if phase_rows:
            phases = spark.createDataFrame(
                phase_rows, "scenario string, phase string, start double, end double"
            )
            lat = acks.join(sends, ["scenario", "seq"]).withColumn(
                "latency_ms", (F.col("ack_ts") - F.col("send_ts")) * 1000
            )
            pa = (
                lat.join(phases, "scenario")
                .where("ack_ts >= start AND ack_ts < end")
                .groupBy("scenario", "phase")
                .agg(
                    F.count("*").alias("acks"),
                    F.percentile_approx("latency_ms", 0.5).alias("p50_ms"),
                    F.percentile_approx("latency_ms", 0.99).alias("p99_ms"),
                    F.lit(None).cast("string").alias("error"),
                )
            )
            pe = (
                errors.join(phases, "scenario")
                .where("ts >= start AND ts < end")
                .groupBy("scenario", "phase", "error")
                .agg(
                    F.count("*").alias("acks"),
                    F.lit(None).cast("double").alias("p50_ms"),
                    F.lit(None).cast("double").alias("p99_ms"),
                )
            )
            for r in pa.unionByName(pe).collect():
                ph = out[r["scenario"]]["phases"][r["phase"]]
                if r["error"] is None:
                    ph.update(acks=r["acks"], p50_ms=r["p50_ms"], p99_ms=r["p99_ms"])
                else:
                    ph["errors"][r["error"]] = r["acks"]
        (run_dir / "checker.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
        return out
    finally:
        if own:
            spark.stop()
