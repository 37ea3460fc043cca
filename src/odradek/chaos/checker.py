"""The loss checker: one PySpark job over the Parquet histories of a run (issue 6 item 3).

Input: ``RUN_DIR/<scenario>/{producer,reads,events,replicas}.parquet`` (see
``odradek.chaos.workload``). One SparkSession checks every scenario of the run; per
scenario it computes (SPEC R7, R10, R19, R20):

* ``lost``          acknowledged records absent from the final read (the HW after healing)
* ``duplicated``    records present more than once in the final read (extra copies)
* ``out_of_order``  records at a higher offset than a record sent after them
* ``unacked_read``  records read (live or final) whose send was never acknowledged
                    (legal for timed-out sends; never for records never sent)
* ``dirty_reads``   live reads whose offset later held another record (or none): a
                    consumer saw data that was then truncated -- must not happen, since
                    consumers read below the HW (SPEC R16)
* ``divergent``     offsets below each replica's HW where replicas hold different
                    records (SPEC R20: replicas never diverge)
* ``split_brain_acks``  lost records acknowledged after ZooKeeper already named a new
                    leader: the deposed leader kept accepting writes (SPEC scenarios 4, 6)
* ``unavailable_s`` 0.5 s windows between first and last send with no acknowledgement
* per phase (``History.phase``): acks, errors by name, median ack latency (SPEC R8, R9)
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


def spark_session() -> Any:
    """A local SparkSession whose Python workers are this interpreter (FACTS: else the
    workers lack pyarrow)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("odradek-chaos-checker")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "1g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _by_scenario(rows: list[Any], key: str = "n") -> dict[str, Any]:
    return {r["scenario"]: r[key] for r in rows}


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
    spark = spark or spark_session()
    try:
        def load(table: str) -> Any:
            return spark.read.parquet(*[str(run_dir / n / f"{table}.parquet") for n in names])

        prod, reads, events, replicas = (load(t) for t in
                                         ("producer", "reads", "events", "replicas"))
        sends = (prod.where("kind = 'send'").groupBy("scenario", "seq")
                 .agg(F.min("ts").alias("send_ts")))
        acks = (prod.where("kind = 'ack'").groupBy("scenario", "seq")
                .agg(F.min("ts").alias("ack_ts"), F.first("offset").alias("offset"),
                     F.count("*").alias("n_acks")))
        errors = prod.where("kind = 'error'")
        final = reads.where("phase = 'final'")
        live = reads.where("phase = 'live'")
        final_seqs = final.select("scenario", "seq").distinct()

        out: dict[str, dict[str, Any]] = {n: {"scenario": n} for n in names}

        def put(key: str, rows: list[Any], col: str = "n", default: Any = 0) -> None:
            got = _by_scenario(rows, col)
            for n in names:
                out[n][key] = got.get(n, default)

        put("sent", sends.groupBy("scenario").agg(F.count("*").alias("n")).collect())
        put("acked", acks.groupBy("scenario").agg(F.count("*").alias("n")).collect())
        put("errors", errors.groupBy("scenario").agg(F.count("*").alias("n")).collect())
        put("failed_sends", errors.select("scenario", "seq").distinct()
            .join(acks, ["scenario", "seq"], "left_anti")
            .groupBy("scenario").agg(F.count("*").alias("n")).collect())
        err_kinds = errors.groupBy("scenario", "error").agg(F.count("*").alias("n")).collect()
        for n in names:
            out[n]["error_kinds"] = {r["error"]: r["n"] for r in err_kinds if r["scenario"] == n}

        lost = acks.join(final_seqs, ["scenario", "seq"], "left_anti")
        put("lost", lost.groupBy("scenario").agg(F.count("*").alias("n")).collect())
        put("final_records", final.groupBy("scenario").agg(F.count("*").alias("n")).collect())

        dup = final.groupBy("scenario", "seq").agg(F.count("*").alias("c")).where("c > 1")
        put("duplicated", dup.groupBy("scenario").agg(F.sum(F.col("c") - 1).alias("n"))
            .collect())

        w = (Window.partitionBy("scenario", "partition").orderBy("offset")
             .rowsBetween(Window.unboundedPreceding, -1))
        ooo = final.withColumn("prev_max", F.max("seq").over(w)).where("seq < prev_max")
        put("out_of_order", ooo.groupBy("scenario").agg(F.count("*").alias("n")).collect())

        read_seqs = reads.where("seq >= 0").select("scenario", "seq").distinct()
        unacked = read_seqs.join(acks, ["scenario", "seq"], "left_anti")
        put("unacked_read", unacked.groupBy("scenario").agg(F.count("*").alias("n")).collect())
        put("never_sent_read", reads.select("scenario", "seq").distinct()
            .join(sends, ["scenario", "seq"], "left_anti")
            .groupBy("scenario").agg(F.count("*").alias("n")).collect())

        fin = final.select("scenario", "partition", "offset", F.col("seq").alias("fseq"))
        dirty = (live.join(fin, ["scenario", "partition", "offset"], "left")
                 .where(F.col("fseq").isNull() | (F.col("fseq") != F.col("seq"))))
        put("dirty_reads", dirty.select("scenario", "partition", "offset").distinct()
            .groupBy("scenario").agg(F.count("*").alias("n")).collect())

        below = replicas.where("offset < hw")
        div = (below.groupBy("scenario", "partition", "offset")
               .agg(F.countDistinct("seq").alias("k")).where("k > 1"))
        put("divergent", div.groupBy("scenario").agg(F.count("*").alias("n")).collect())
        put("replica_hw_min", replicas.groupBy("scenario", "broker")
            .agg(F.max("hw").alias("hw")).groupBy("scenario").agg(F.min("hw").alias("n"))
            .collect(), default=None)
        leo_rows = replicas.groupBy("scenario", "broker").agg(F.max("leo").alias("leo")).collect()
        for n in names:
            out[n]["replica_leo"] = {str(r["broker"]): r["leo"] for r in leo_rows
                                     if r["scenario"] == n}

        # Leadership as ZooKeeper recorded it: the first state seen is the initial leader.
        states = events.where("kind = 'state'")
        sw = Window.partitionBy("scenario").orderBy("ts")
        first_state = (states.withColumn("rn", F.row_number().over(sw)).where("rn = 1")
                       .select("scenario", F.col("leader").alias("leader0"),
                               F.col("epoch").alias("epoch0")))
        changes = (states.join(first_state, "scenario")
                   .where("leader >= 0 AND leader != leader0 AND epoch > epoch0"))
        first_change = changes.groupBy("scenario").agg(F.min("ts").alias("change_ts"))
        put("leader_changes", states.join(first_state, "scenario").where("epoch > epoch0")
            .select("scenario", "epoch").distinct().groupBy("scenario")
            .agg(F.count("*").alias("n")).collect())
        put("leaders_seen", states.where("leader >= 0").groupBy("scenario")
            .agg(F.sort_array(F.collect_set("leader")).alias("n")).collect(), default=[])
        put("isrs_seen", states.groupBy("scenario")
            .agg(F.collect_set("isr").alias("n")).collect(), default=[])
        put("offline_seen", states.where("leader < 0").groupBy("scenario")
            .agg(F.count("*").alias("n")).collect())
        put("controllers_seen", events.where("kind = 'controller' AND leader IS NOT NULL")
            .groupBy("scenario").agg(F.collect_list("leader").alias("n")).collect(), default=[])
        put("split_brain_acks", lost.join(first_change, "scenario")
            .where("ack_ts > change_ts").groupBy("scenario").agg(F.count("*").alias("n"))
            .collect())

        # Availability: 0.5 s windows between the first and the last send without an ack.
        span = prod.where("kind = 'send'").groupBy("scenario").agg(
            F.min("ts").alias("t0"), F.max("ts").alias("t1"))
        bins = (acks.join(span, "scenario").where("ack_ts <= t1")
                .select("scenario", F.floor((F.col("ack_ts") - F.col("t0")) / BIN_S).alias("b"))
                .distinct().groupBy("scenario").agg(F.count("*").alias("n")).collect())
        got_bins = _by_scenario(bins)
        for r in span.collect():
            total = math.ceil((r["t1"] - r["t0"]) / BIN_S) or 1
            out[r["scenario"]]["unavailable_s"] = max(0, total - got_bins.get(r["scenario"], 0)) * BIN_S
            out[r["scenario"]]["duration_s"] = round(r["t1"] - r["t0"], 1)

        # Phases: acks, errors and latency between consecutive phase markers.
        pw = Window.partitionBy("scenario").orderBy("ts")
        phases = (events.where("kind = 'phase'")
                  .withColumn("end", F.coalesce(F.lead("ts").over(pw), F.lit(1e18)))
                  .select("scenario", F.col("detail").alias("phase"), F.col("ts").alias("start"),
                          "end"))
        lat = acks.join(sends, ["scenario", "seq"]).withColumn(
            "latency_ms", (F.col("ack_ts") - F.col("send_ts")) * 1000)
        pa = (lat.join(phases, "scenario").where("ack_ts >= start AND ack_ts < end")
              .groupBy("scenario", "phase").agg(
                  F.count("*").alias("acks"),
                  F.percentile_approx("latency_ms", 0.5).alias("p50_ms"),
                  F.percentile_approx("latency_ms", 0.99).alias("p99_ms")).collect())
        pe = (errors.join(phases, "scenario").where("ts >= start AND ts < end")
              .groupBy("scenario", "phase", "error").agg(F.count("*").alias("n")).collect())
        for n in names:
            out[n]["phases"] = {}
        for r in phases.collect():
            out[r["scenario"]]["phases"][r["phase"]] = {
                "acks": 0, "p50_ms": None, "p99_ms": None, "errors": {},
                "seconds": round(min(r["end"], 1e12) - r["start"], 2)
                if r["end"] < 1e17 else None}
        for r in pa:
            ph = out[r["scenario"]]["phases"].setdefault(r["phase"], {"errors": {}})
            ph.update(acks=r["acks"], p50_ms=r["p50_ms"], p99_ms=r["p99_ms"])
        for r in pe:
            ph = out[r["scenario"]]["phases"].setdefault(r["phase"], {"errors": {}, "acks": 0})
            ph["errors"][r["error"]] = r["n"]
        # Leader/ISR in effect during each phase: the state before it plus changes in it.
        st_rows = sorted(states.select("scenario", "ts", "leader", "isr").collect(),
                         key=lambda r: r["ts"])
        for n in names:
            mine = [r for r in st_rows if r["scenario"] == n]
            out[n]["final_leader"] = mine[-1]["leader"] if mine else None
            out[n]["final_isr"] = json.loads(mine[-1]["isr"]) if mine else []
            for ph in out[n]["phases"].values():
                ph.setdefault("errors", {})
                ph.setdefault("acks", 0)
            for r in phases.where(F.col("scenario") == n).collect():
                before = [s for s in mine if s["ts"] <= r["start"]][-1:]
                during = [s for s in mine if r["start"] < s["ts"] < r["end"]]
                ph = out[n]["phases"][r["phase"]]
                ph["isrs"] = sorted({s["isr"] for s in before + during})
                ph["leaders"] = sorted({s["leader"] for s in before + during})
        (run_dir / "checker.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
        return out
    finally:
        if own:
            spark.stop()
