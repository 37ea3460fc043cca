#!/usr/bin/env python
"""Replication benchmark on one 3-broker cluster (RF 3, min.insync.replicas=2).

A benchmark, not a timed test (issue 3, "Benchmark"): run it by hand (bench/README.md).

1. throughput: acks=all vs acks=1, 1 KB values, the producer settings of
   bench/broker_throughput.py (4 partitions, linger.ms=5, batch.size=1000000), run side
   by side on the same cluster; reports the acks=all / acks=1 ratio (Kafka published 0.54).
2. end-to-end latency at a steady rate (default 10,000 records/s, acks=all): a consumer
   in another process subtracts each record's CreateTime from its own wall clock when the
   record arrives (same machine, same clock). CreateTime has 1 ms resolution, so the value
   also carries ``time.time_ns()`` at produce() for a µs-resolution column.
3. failover unavailability: during a steady acks=all produce (~2000 records/s) to a
   1-partition RF 3 topic, SIGKILL (then SIGTERM: controlled shutdown) the partition's
   leader and measure the longest gap between consecutive acknowledgements (ack time =
   produce() time + librdkafka's produce→delivery latency). SIGKILL is bounded below by
   ``zookeeper.session.timeout.ms``: the controller learns of the death only when the
   session expires; one cluster is started per ``--session-timeouts`` value.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import itertools

from broker_throughput import PRODUCER_PROPS, _f, mock_target

from odradek.cluster.local import LocalCluster
from odradek.perf import make_payload, parse_props, percentile, run_produce

PARTITIONS = 4
MIN_ISR = "2"
STAMP = struct.Struct(">q")  # time.time_ns() at produce(), first 8 bytes of the value


@dataclass
class Row:
    test: str
    setting: str
    value: float
    unit: str
    target: str = ""
    note: str = ""


# --- helpers ------------------------------------------------------------------------------


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int = 3) -> None:
    from confluent_kafka.admin import NewTopic

    a = admin(bootstrap)
    fut = a.create_topics(
        [NewTopic(topic, partitions, rf, config={"min.insync.replicas": MIN_ISR})],
        operation_timeout=30,
    )
    fut[topic].result(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every partition has a leader and a full ISR
        md = a.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} not ready (leaders and full ISR) in 60 s")


def leader_of(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, list[int]]:
    md = admin(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[partition]
    return md.leader, list(md.isrs)


def wait_full_isr(bootstrap: str, topic: str, rf: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            md = admin(bootstrap).list_topics(topic, timeout=5).topics[topic]
            if all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()):
                return
        except Exception:  # noqa: BLE001 - a broker restarting: retry until the deadline
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{topic}: ISR not back to {rf} replicas within {timeout:.0f} s")


def pct_ms(values: array, ps: tuple[float, ...] = (0.5, 0.99, 0.999)) -> list[float]:
    s = sorted(values)
    return [percentile(s, p) for p in ps]


# --- 1. throughput -----------------------------------------------------------------------


def committed_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records below the high watermark (replicated to the ISR), summed over partitions."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-probe"})
    try:
        return sum(
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        )
    finally:
        c.close()


def wait_replicated(bootstrap: str, topic: str, records: int, timeout: float = 120.0) -> float:
    """Seconds until every produced record is below the HW: with acks=1 the producer is done
    before the followers are, and the replication work is still to be paid."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if committed_records(bootstrap, topic, PARTITIONS) >= records:
            return time.monotonic() - start
        time.sleep(0.05)
    return math.nan


def bench_throughput(c: LocalCluster, records: int, rows: list[Row], rounds: int = 2) -> None:
    """acks=1 vs acks=all, interleaved (acks=1, all, 1, all, ...) so slow drift of the shared
    machine hits both alike; each run's topic deleted after it (the page cache). Besides the
    producer's rate, the rate until every record is replicated (below the HW): on one
    machine the followers share the CPUs with the leader, and acks=1 ends before they do."""
    ratios: list[float] = []
    replicated_ratios: list[float] = []
    for rnd in range(1, rounds + 1):
        rate: dict[str, float] = {}
        replicated: dict[str, float] = {}
        for acks in ("1", "all"):
            topic = f"tp-acks{acks}-{rnd}-{int(time.time() * 1000) % 10**8}"
            create_topic(c.bootstrap_servers, topic, PARTITIONS)
            props = dict(PRODUCER_PROPS, acks=acks)
            print(
                f"[throughput] acks={acks} round {rnd}/{rounds}: {records} x 1 KB to {topic}, "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            s = run_produce(
                c.bootstrap_servers,
                topic,
                records,
                1024,
                producer_props=props,
                out=sys.stdout,
                report_interval_s=5.0,
                flush_timeout_s=120.0,
                stall_timeout_s=60.0,
            )
            catch_up = wait_replicated(c.bootstrap_servers, topic, s.records)
            replicated[acks] = s.records / (s.elapsed_s + catch_up)
            rate[acks] = s.records_per_sec
            print(f"  {s.line()}", flush=True)
            print(
                f"  all replicated {catch_up:.2f} s after the last ack: "
                f"{replicated[acks] * 1024 / 1e6:.1f} MB/s replicated",
                flush=True,
            )
            note = f"{s.errors} errors" if s.errors else ""
            rows.append(
                Row("throughput", f"acks={acks} round {rnd}", s.mb_per_sec, "MB/s", note=note)
            )
            rows.append(
                Row(
                    "throughput",
                    f"acks={acks} round {rnd}, until replicated",
                    replicated[acks] * 1024 / 1e6,
                    "MB/s",
                    note=f"+{catch_up:.2f} s after the last ack",
                )
            )
            delete_topic(c.bootstrap_servers, topic)
        ratios.append(rate["all"] / rate["1"])
        replicated_ratios.append(replicated["all"] / replicated["1"])
    for name, vals in (
        ("acks=all / acks=1", ratios),
        ("acks=all / acks=1, until replicated", replicated_ratios),
    ):
        spread = ", ".join(f"{v:.2f}" for v in vals)
        rows.append(
            Row(
                "throughput",
                name,
                sorted(vals)[len(vals) // 2],
                "ratio",
                "≥ 0.6 (Kafka 0.54)" if "until" not in name else "",
                f"median of {len(vals)} rounds: {spread}",
            )
        )


# --- 2. end-to-end latency ---------------------------------------------------------------

_CONSUMER = r"""
import struct, sys, time
from array import array
from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
bootstrap, topic, parts, expected, out_path, idle_s, warm = sys.argv[1:8]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e", "enable.auto.commit": False,
              "fetch.wait.max.ms": 100, "fetch.min.bytes": 1, "enable.partition.eof": False})
c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(int(parts))])
# The warm-up records (one per partition) were produced before we started: once they are
# read, every partition's fetch session is live, and the clock may start.
got, deadline = 0, time.monotonic() + 60
while got < int(warm) and time.monotonic() < deadline:
    m = c.poll(0.1)
    if m is not None and m.error() is None:
        got += 1
print("ready" if got >= int(warm) else "not ready", flush=True)
ts_ms, hires_us = array("d"), array("d")
n, last = 0, time.monotonic()
while n < int(expected) and time.monotonic() - last < float(idle_s):
    # poll(), not consume(n, t): consume() waits to fill its batch, adding up to t.
    m = c.poll(0.1)
    if m is None or m.error() is not None:
        continue
    now_ns = time.time_ns()
    ts_ms.append(now_ns / 1e6 - m.timestamp()[1])
    hires_us.append((now_ns - struct.unpack_from(">q", m.value())[0]) / 1e3)
    n += 1
    last = time.monotonic()
c.close()
with open(out_path, "wb") as f:
    f.write(struct.pack(">q", len(ts_ms))); ts_ms.tofile(f); hires_us.tofile(f)
"""


def paced_produce(
    bootstrap: str,
    topic: str,
    rate: float,
    duration_s: float,
    size: int,
    props: dict[str, str],
    fault: tuple[float, Callable[[], None]] | None = None,
) -> tuple[array, array, int, int, float]:
    """Produce ``rate`` records/s for ``duration_s`` (catching up in 1 ms steps); each value
    starts with time.time_ns(). Returns (send wall times s, ack wall times s, errors,
    sent, fault wall time) — ack time = send time + librdkafka's Message.latency().
    ``fault`` = (seconds after start, callable run in a thread)."""
    from confluent_kafka import Producer

    sends, acks = array("d"), array("d")
    errors = [0]
    body = bytearray(make_payload(max(size, 8)))

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1
            return
        sent_s = STAMP.unpack_from(msg.value())[0] / 1e9
        sends.append(sent_s)
        acks.append(sent_s + (msg.latency() or 0.0))

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "on_delivery": on_delivery,
        "message.timeout.ms": 120000,
    }
    conf.update(props)
    p = Producer(conf)
    start = time.monotonic()
    fault_at = [math.nan]
    fault_thread: threading.Thread | None = None
    sent = 0
    while True:
        now = time.monotonic()
        if now - start >= duration_s:
            break
        if fault is not None and fault_thread is None and now - start >= fault[0]:

            def run_fault(fn: Callable[[], None] = fault[1]) -> None:
                fault_at[0] = time.time()
                fn()

            fault_thread = threading.Thread(target=run_fault, daemon=True)
            fault_thread.start()
        due = int((now - start) * rate)
        while sent < due:
            STAMP.pack_into(body, 0, time.time_ns())
            try:
                p.produce(topic, bytes(body))
            except BufferError:
                break
            sent += 1
        p.poll(0.001)
    p.flush(150)
    if fault_thread is not None:
        fault_thread.join(120)
    return sends, acks, errors[0], sent, fault_at[0]


def delete_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> None:
    """Delete a run's topic and wait until it is gone: keeping every run's topic fills the
    page cache and slows each following run (the machine's page cache is the trap)."""
    a = admin(bootstrap)
    try:
        a.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    except Exception as e:  # noqa: BLE001 - reported, the next run still starts
        print(f"  (delete {topic}: {e})", flush=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and topic in a.list_topics(timeout=10).topics:
        time.sleep(0.2)


def warm_up(bootstrap: str, topic: str, partitions: int, acks: str) -> None:
    """One record per partition before the clock starts (leader connections, metadata)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks})
    for part in range(partitions):
        p.produce(topic, b"\0" * 8, partition=part)
    p.flush(30)


def sched_totals(pids: list[int]) -> tuple[float, float, int]:
    """(CPU ns, run-queue wait ns, times scheduled) summed over every thread of ``pids``,
    from /proc/<pid>/task/<tid>/schedstat. Run-queue wait is time a thread was runnable but
    not running: CPU contention, as opposed to work the process did or waited for on I/O."""
    cpu = wait = 0.0
    slices = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                a, b, c = (task / "schedstat").read_text().split()[:3]
            except (OSError, ValueError):
                continue  # the thread ended between listing and reading
            cpu += float(a)
            wait += float(b)
            slices += int(c)
    return cpu, wait, slices


def latency_run(
    bootstrap: str,
    case: LatencyCase,
    duration_s: float,
    size: int,
    props: dict[str, str],
    workdir: Path,
    partitions: int,
    broker_pids: list[int] | None = None,
    metrics_urls: list[str] | None = None,
) -> dict[str, float]:
    """One timed run of ``case``: a consumer process records each record's arrival time
    minus the µs stamp the producer put in the value at produce(). With ``broker_pids``,
    also the run-queue wait of the brokers and both clients per record (sched_totals):
    how much of the latency is waiting for a CPU rather than work. With
    ``metrics_urls``, the brokers' full garbage collections during the run (each stops
    a broker's event loop: a tail the clients see)."""
    topic = f"e2e-{case.target}-rf{case.rf}-{case.rate}-{int(time.time() * 1000) % 10**8}"
    if case.target == "mock":
        partitions = MOCK_PARTITIONS  # it auto-creates topics on first produce
    else:
        create_topic(bootstrap, topic, partitions, case.rf)
    warm_up(bootstrap, topic, partitions, case.acks)
    out = workdir / f"{topic}.bin"
    expected = int(case.rate * duration_s)
    cons = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _CONSUMER,
            bootstrap,
            topic,
            str(partitions),
            str(expected),
            str(out),
            "15",
            str(partitions),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert cons.stdout is not None
        if cons.stdout.readline().strip() != "ready":
            raise RuntimeError("e2e consumer did not start")
        watched = [*(broker_pids or []), cons.pid, os.getpid()]
        before = sched_totals(watched)
        brokers_before = sched_totals(broker_pids or [])
        gcs_before = full_gcs(metrics_urls or [])
        _s, _acks, errors, sent, _ = paced_produce(
            bootstrap, topic, case.rate, duration_s, size, dict(props, acks=case.acks)
        )
        after = sched_totals(watched)  # before the consumer exits (its threads vanish)
        brokers_after = sched_totals(broker_pids or [])
        gcs_after = full_gcs(metrics_urls or [])
        cons.wait(90)
    finally:
        if cons.poll() is None:
            cons.kill()
            cons.wait()
    raw = out.read_bytes()
    n = STAMP.unpack_from(raw)[0]
    hires = array("d")
    hires.frombytes(raw[8 + 8 * n : 8 + 16 * n])
    ms = array("d", (x / 1000.0 for x in hires))
    p50, p99, p999 = pct_ms(ms)
    if case.target != "mock":
        delete_topic(bootstrap, topic)
    cpu_ns, wait_ns, slices = (x - y for x, y in zip(after, before))
    broker_cpu_ns, broker_wait_ns, _ = (x - y for x, y in zip(brokers_after, brokers_before))
    return {
        "p50": p50,
        "p99": p99,
        "p99.9": p999,
        "consumed": len(ms),
        "sent": sent,
        "errors": errors,
        "cpu_ms_per_s": cpu_ns / 1e6 / duration_s,
        "wait_us_per_record": wait_ns / 1e3 / max(sent, 1),
        "broker_cpu_ms_per_s": broker_cpu_ns / 1e6 / duration_s,
        "broker_wait_us_per_record": broker_wait_ns / 1e3 / max(sent, 1),
        "wait_us_per_slice": wait_ns / 1e3 / max(slices, 1),
        "full_gcs": gcs_after[0] - gcs_before[0],
        "full_gc_s": gcs_after[1] - gcs_before[1],
    }


def full_gcs(urls: list[str]) -> tuple[float, float]:
    """(full collections, seconds in them) summed over the brokers' ``/metrics``
    (odradek_gc_full_collections_total and _seconds_total, the stall detector's)."""
    from odradek.metrics.scrape import scrape

    count = seconds = 0.0
    for url in urls:
        try:
            m = scrape(url, timeout_s=30.0)
        except (OSError, ValueError):
            continue
        count += m.get("odradek_gc_full_collections_total") or 0.0
        seconds += m.get("odradek_gc_full_collection_seconds_total") or 0.0
    return count, seconds


def host_idle_partitions(c: LocalCluster, total: int, per_topic: int = 100) -> None:
    """``total`` idle partitions, RF 3, in topics of ``per_topic``, every ISR full: the
    latency of a broker that hosts many partitions (its heap, its fetch sessions, its
    timers), not only the benchmark's three."""
    from confluent_kafka.admin import NewTopic

    a = admin(c.bootstrap_servers)
    names = [f"hosted-{i:04d}" for i in range((total + per_topic - 1) // per_topic)]
    t0 = time.monotonic()
    for i in range(0, len(names), 20):
        topics = [
            NewTopic(n, min(per_topic, total - (i + j) * per_topic), 3)
            for j, n in enumerate(names[i : i + 20])
        ]
        for f in a.create_topics(topics, operation_timeout=60, request_timeout=120).values():
            f.result(timeout=180)
    deadline = time.monotonic() + 600
    while True:
        md = a.list_topics(timeout=30)
        parts = [
            p
            for n, t in md.topics.items()
            if n.startswith("hosted-") and t.error is None
            for p in t.partitions.values()
        ]
        if len(parts) == total and all(p.leader >= 0 and len(p.isrs) == 3 for p in parts):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{total} hosted partitions not all fully replicated in 600 s")
        time.sleep(1.0)
    print(
        f"[hosted] {total:,} idle partitions, RF 3, every ISR full in "
        f"{time.monotonic() - t0:.1f} s",
        flush=True,
    )
    # A broker that has hosted them for a while: its settled heap frozen out of full
    # collections (odradek.heap.freeze.settle.ms, 30 s by default), else the first
    # round measures the full collections of a heap that just grew by 10,000 partitions.
    t1 = time.monotonic()
    urls = [b.metrics_url for b in c.brokers if b.metrics_url]
    while urls and not all(_heap_frozen(u) for u in urls):
        if time.monotonic() - t1 > 300:
            print("[hosted] the brokers' heaps were not frozen within 300 s", flush=True)
            return
        time.sleep(1.0)
    if urls:
        print(
            f"[hosted] every broker's heap frozen {time.monotonic() - t1:.1f} s later", flush=True
        )


def _heap_frozen(url: str) -> bool:
    from odradek.metrics.scrape import scrape

    try:
        m = scrape(url + "?name[]=odradek_gc_heap_frozen", timeout_s=30.0)
    except (OSError, ValueError):
        return False
    return m.get("odradek_gc_heap_frozen") == 1.0


@dataclass(frozen=True)
class LatencyCase:
    rf: int
    acks: str
    rate: int
    target: str = "odradek"  # or "mock": the same clients against librdkafka's mock broker

    @property
    def label(self) -> str:
        who = "" if self.target == "odradek" else f"{self.target}: "
        return f"{who}RF {self.rf}, acks={self.acks}, {self.rate:,} rec/s"


LATENCY_CASES = (
    LatencyCase(1, "1", 1000),
    LatencyCase(3, "all", 1000),
    LatencyCase(1, "1", 10000),
    LatencyCase(3, "all", 10000),
)


def latency_cases(rates: set[int], peer: str | None) -> tuple[LatencyCase, ...]:
    out = []
    for case in LATENCY_CASES:
        if case.rate not in rates:
            continue
        if peer and case.rf == 1:
            out.append(LatencyCase(1, "1", case.rate, peer))
        out.append(case)
    return tuple(out)


# Peers for a latency floor, off by default (--latency-peer mock): librdkafka's mock
# broker answers the same clients with p50 in the hundreds of ms at these rates (it
# returns one batch per partition per fetch), and Tansu as well -- Odradek's own RF 1
# case is the lower floor.
MOCK_PARTITIONS = 4  # what librdkafka's mock broker gives an auto-created topic
LATENCY_AIMS = {(3, 1000): "≤ 5 ms", (3, 10000): "≤ 10 ms (Kafka 3 ms)"}


def bench_latency(
    c: LocalCluster,
    rounds: int,
    duration_s: float,
    size: int,
    props: dict[str, str],
    rows: list[Row],
    workdir: Path,
    partitions: int = 3,
    cases: tuple[LatencyCase, ...] = LATENCY_CASES,
) -> None:
    """End-to-end latency, RF 1 beside RF 3 and the peer -- the same clients against
    librdkafka's in-memory mock broker, the floor the clients and the machine set (Tansu
    is no floor here: it answers long polls late, p50 in the hundreds of ms) -- in
    interleaved rounds; medians reported."""
    with contextlib.ExitStack() as stack:
        peers: dict[str, str] = {"odradek": c.bootstrap_servers}
        if any(k.target == "mock" for k in cases):
            try:
                peers["mock"] = stack.enter_context(mock_target()).bootstrap
            except Exception as e:  # noqa: BLE001 - the peer is optional
                print(f"[latency] mock broker unavailable ({e}); its cases are skipped", flush=True)
                cases = tuple(k for k in cases if k.target != "mock")
        runs: dict[LatencyCase, list[dict[str, float]]] = {k: [] for k in cases}
        for rnd in range(1, rounds + 1):
            for case in cases:
                print(
                    f"[latency] round {rnd}/{rounds}: {case.label}, {size} B, {props}, "
                    f"{partitions} partitions, load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
                ours = case.target == "odradek"
                pids = [b.pid for b in c.brokers if b.pid] if ours else []
                urls = [b.metrics_url for b in c.brokers if b.metrics_url] if ours else []
                r = latency_run(
                    peers[case.target],
                    case,
                    duration_s,
                    size,
                    props,
                    workdir,
                    partitions,
                    pids,
                    urls,
                )
                runs[case].append(r)
                print(
                    f"  p50/p99/p99.9 = {r['p50']:.2f}/{r['p99']:.2f}/{r['p99.9']:.2f} ms; "
                    f"{int(r['consumed'])}/{int(r['sent'])} consumed, "
                    f"{int(r['errors'])} errors; brokers+clients used "
                    f"{r['cpu_ms_per_s'] / 10:.0f}% of a core (brokers "
                    f"{r['broker_cpu_ms_per_s'] / 10:.0f}%), waited for a CPU "
                    f"{r['wait_us_per_record']:.0f} µs per record (brokers "
                    f"{r['broker_wait_us_per_record']:.0f}; "
                    f"{r['wait_us_per_slice']:.0f} µs per time slice)"
                    + (
                        f"; {r['full_gcs']:.0f} full GCs in the brokers, "
                        f"{r['full_gc_s'] * 1000:.0f} ms"
                        if ours
                        else ""
                    ),
                    flush=True,
                )
    for case in cases:
        rs = runs[case]
        for key in ("p50", "p99", "p99.9", "wait_us_per_record"):
            vals = sorted(r[key] for r in rs)
            med = vals[len(vals) // 2]
            spread = ", ".join(f"{v:.2f}" for v in (r[key] for r in rs))
            aim = (
                LATENCY_AIMS.get((case.rf, case.rate), "")
                if key == "p99" and case.target == "odradek"
                else ""
            )
            name, unit = (
                ("CPU wait per record", "µs") if key == "wait_us_per_record" else (key, "ms")
            )
            rows.append(
                Row(
                    "e2e latency",
                    f"{case.label}, {name}",
                    med,
                    unit,
                    aim,
                    f"median of {len(rs)}: {spread}",
                )
            )


def trace_report(cluster_dir: Path) -> str:
    """Per-hop medians (µs after the leader's append) of every traced record, per topic,
    from the brokers' logs (``odradek.trace.records.every``), and one record's timeline."""
    from odradek.replication.trace import parse_trace_lines, timeline

    events = []
    for logf in sorted(cluster_dir.glob("broker-*/broker.log")):
        events += parse_trace_lines(logf.read_text(errors="replace").splitlines())
    by_record: dict[tuple[str, int, int], list[Any]] = {}
    for e in events:
        by_record.setdefault((e.topic, e.partition, e.offset), []).append(e)
    out: list[str] = []
    for topic in sorted({k[0] for k in by_record}):
        hops: dict[str, list[float]] = {}
        example = None
        for (t, part, off), _evs in sorted(by_record.items()):
            if t != topic or off == 0:
                continue  # offset 0 is a warm-up record
            tl = timeline(events, t, part, off)
            t_append = next((dt for dt, hop, _ in tl if hop == "append"), None)
            if t_append is None:
                continue
            # times after the leader's append; "created" (the producer's CreateTime, 1 ms
            # resolution) may come out before it
            tl = [(dt - t_append, hop, detail) for dt, hop, detail in tl]
            seen: set[str] = set()
            for dt, hop, detail in tl:
                if hop == "created":
                    continue
                broker = detail.split()[0].split("=")[1] if detail.startswith("broker=") else "?"
                key = hop if hop in ("append", "hw", "consumer.out") else f"{hop}@{broker}"
                if hop == "fetch.out":
                    key = f"fetch.out→{detail.split('to=')[1]}" if "to=" in detail else key
                if key not in seen:
                    seen.add(key)
                    hops.setdefault(key, []).append(dt / 1000.0)
            example = example or (part, off, tl)
        if not hops:
            continue
        out.append(
            f"{topic}: {len(hops.get('append', []))} traced records; median ms after "
            f"the leader's append:"
        )
        for key, vals in sorted(hops.items(), key=lambda kv: sorted(kv[1])[len(kv[1]) // 2]):
            vals.sort()
            out.append(f"  {key:<18} {vals[len(vals) // 2]:8.2f}  (n={len(vals)})")
        if example is not None:
            part, off, tl = example
            out.append(f"  one record ({topic}-{part} offset {off}):")
            out.extend(f"    +{dt / 1000:7.2f} ms  {hop:<13} {detail}" for dt, hop, detail in tl)
    return "\n".join(out)


# --- 3. failover -------------------------------------------------------------------------


def max_gap(acks: array, fault: float) -> tuple[float, float]:
    """(longest gap between consecutive acks, its start relative to ``fault``), seconds."""
    s = sorted(acks)
    if len(s) < 2:
        return math.nan, math.nan
    gap, start = max((b - a, a) for a, b in itertools.pairwise(s))
    return gap, start - fault


def bench_failover(
    c: LocalCluster,
    sig: signal.Signals,
    rate: float,
    duration_s: float,
    kill_at_s: float,
    session_ms: int,
    rows: list[Row],
    idempotent: bool,
) -> None:
    topic = f"fo-{sig.name.lower()}-{int(time.time() * 1000) % 10**8}"
    create_topic(c.bootstrap_servers, topic, 1)
    leader, isr = leader_of(c.bootstrap_servers, topic)
    print(
        f"[failover] {sig.name} leader {leader} of {topic} (ISR {isr}) at t={kill_at_s:.0f} s, "
        f"{rate:.0f} records/s acks=all, session timeout {session_ms} ms",
        flush=True,
    )

    def fault() -> None:
        c.stop_broker(leader, sig, timeout=60)

    props = {
        "acks": "all",
        "linger.ms": "1",
        "max.in.flight.requests.per.connection": "5",
        "enable.idempotence": "true" if idempotent else "false",
    }
    _sends, acks, errors, sent, fault_wall = paced_produce(
        c.bootstrap_servers, topic, rate, duration_s, 64, props, (kill_at_s, fault)
    )
    gap, gap_start = max_gap(acks, fault_wall)
    new_leader, new_isr = leader_of(c.bootstrap_servers, topic)
    note = (
        f"{len(acks)}/{sent} acked, {errors} errors, leader {leader}->{new_leader}, ISR {new_isr}"
    )
    target = "≤ session timeout + ~1 s" if sig == signal.SIGKILL else "< 1 s"
    setting = f"{sig.name}, session {session_ms} ms"
    rows.append(Row("failover", f"{setting}: longest ack gap", gap * 1000, "ms", target, note))
    rows.append(Row("failover", f"{setting}: gap start - fault", gap_start * 1000, "ms"))
    print(
        f"  longest gap {gap * 1000:.0f} ms, starting {gap_start * 1000:.0f} ms after the "
        f"fault; {note}",
        flush=True,
    )
    c.start_broker(leader, timeout=60)  # back for the next trial, and wait for a full ISR
    wait_full_isr(c.bootstrap_servers, topic, 3)


# --- main ----------------------------------------------------------------------------------


def render(rows: list[Row]) -> str:
    header = ["test", "setting", "value", "unit", "target", "note"]
    lines = [header] + [
        [r.test, r.setting, _f(r.value, ",.2f"), r.unit, r.target, r.note] for r in rows
    ]
    widths = [max(len(x[i]) for x in lines) for i in range(len(header))]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in lines)


@contextlib.contextmanager
def _watched(c: LocalCluster, on: bool, interval_s: float, pages: bool = False) -> Any:
    """The console (as ``odradek cluster up`` starts it) and a Prometheus-style scraper;
    ``pages``: with the brokers and topics pages open (their event streams, as a browser
    holds them), so the console polls as it does while someone looks."""
    if not on:
        yield
        return
    import urllib.request

    url = c.start_console()
    print(
        f"watched: console {url}, scrape every {interval_s:g} s"
        f"{', brokers and topics pages open' if pages else ''}",
        flush=True,
    )
    stop = threading.Event()

    def hold(view: str) -> None:
        with (
            contextlib.suppress(Exception),
            urllib.request.urlopen(f"{url}events?view={view}&arg=", timeout=60) as r,
        ):
            while not stop.is_set() and r.readline():  # keepalives at least every 15 s
                pass

    for view in ("brokers", "topics") if pages else ():
        threading.Thread(target=hold, args=(view,), daemon=True).start()

    def scrape() -> None:
        while not stop.wait(interval_s):
            for b in c.brokers:
                if b.metrics_url:
                    with contextlib.suppress(OSError):
                        with urllib.request.urlopen(b.metrics_url, timeout=10) as r:
                            r.read()

    t = threading.Thread(target=scrape, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(15)
        c.stop_console()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--tests",
        default="throughput,latency,failover",
        help="comma-separated subset of throughput,latency,failover",
    )
    ap.add_argument(
        "--records",
        type=int,
        default=500_000,
        help="1 KB records per throughput run (broker_throughput.py: 500,000)",
    )
    ap.add_argument(
        "--rates",
        type=lambda v: {int(x) for x in v.split(",")},
        default={1000, 10000},
        help="e2e latency: records/s, comma-separated",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="throughput and e2e latency: interleaved rounds (medians are reported)",
    )
    ap.add_argument("--duration", type=float, default=20.0, help="e2e latency: seconds per run")
    ap.add_argument(
        "--latency-peer",
        choices=["mock"],
        default=None,
        help="e2e latency: also run the RF 1 cases against librdkafka's mock broker",
    )
    ap.add_argument(
        "--broker-config",
        nargs="*",
        metavar="K=V",
        default=[],
        help="extra broker properties, e.g. odradek.trace.records.every=5000",
    )
    ap.add_argument("--e2e-size", type=int, default=100, help="e2e latency: value bytes")
    ap.add_argument(
        "--hosted-partitions",
        type=int,
        default=0,
        metavar="N",
        help="e2e latency: first create N idle partitions (RF 3, topics of 100) on the "
        "cluster, as a broker hosting many partitions runs",
    )
    ap.add_argument(
        "--e2e-producer-props",
        nargs="*",
        metavar="K=V",
        default=["linger.ms=0", "max.in.flight.requests.per.connection=5"],
        help="e2e latency producer settings (acks comes from each case); the "
        "issue's setting: linger.ms=0 and 5 requests in flight",
    )
    ap.add_argument("--failover-rate", type=float, default=2000)
    ap.add_argument(
        "--session-timeouts",
        default="6000,3000",
        help="zookeeper.session.timeout.ms values; one cluster each for failover",
    )
    ap.add_argument("--failover-signals", default="KILL,TERM")
    ap.add_argument(
        "--idempotent", action="store_true", help="failover producer enable.idempotence"
    )
    ap.add_argument(
        "--keep", metavar="DIR", help="put the clusters (and their logs) here and keep them"
    )
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument(
        "--watched",
        action="store_true",
        help="as `odradek cluster up` runs it: the web console on (its default "
        "polling) and a Prometheus-style scrape of every broker every "
        "--scrape-interval s (issue 29)",
    )
    ap.add_argument(
        "--watched-pages",
        action="store_true",
        help="with --watched: the brokers and topics pages open in the console",
    )
    ap.add_argument("--scrape-interval", type=float, default=15.0)
    args = ap.parse_args(argv)
    tests = {t.strip() for t in args.tests.split(",") if t.strip()}
    sessions = [int(x) for x in args.session_timeouts.split(",") if x.strip()]
    sigs = [signal.Signals[f"SIG{s.strip().upper()}"] for s in args.failover_signals.split(",")]

    rows: list[Row] = []
    started = time.monotonic()
    load0 = os.getloadavg()[0]  # a shared machine: say how busy it was
    broker_config = {
        "min.insync.replicas": MIN_ISR,
        "default.replication.factor": "3",
        **parse_props(args.broker_config),
    }
    try:
        with tempfile.TemporaryDirectory(prefix="odradek-repl-bench-") as tmp_dir:
            tmp = args.keep or tmp_dir
            for i, session_ms in enumerate(sessions):
                first = i == 0
                if not first and "failover" not in tests:
                    break
                print(f"== 3-broker cluster, zookeeper.session.timeout.ms={session_ms}", flush=True)
                with (
                    LocalCluster.start(
                        Path(tmp) / f"c{session_ms}",
                        3,
                        broker_config=broker_config,
                        zk_session_timeout_ms=session_ms,
                        timeout=90,
                    ) as c,
                    _watched(c, args.watched, args.scrape_interval, args.watched_pages),
                ):
                    if first and "throughput" in tests:
                        bench_throughput(c, args.records, rows, args.rounds)
                    if first and "latency" in tests:
                        if args.hosted_partitions:
                            host_idle_partitions(c, args.hosted_partitions)
                        bench_latency(
                            c,
                            args.rounds,
                            args.duration,
                            args.e2e_size,
                            parse_props(args.e2e_producer_props),
                            rows,
                            Path(tmp),
                            cases=latency_cases(args.rates, args.latency_peer),
                        )
                        if "odradek.trace.records.every" in broker_config:
                            print(trace_report(Path(tmp) / f"c{session_ms}"), flush=True)
                    if "failover" in tests:
                        for sig in sigs:
                            # kill after 5 s; run long enough to see the recovery after a KILL
                            dur = 5 + session_ms / 1000 + 10 if sig == signal.SIGKILL else 15
                            bench_failover(
                                c,
                                sig,
                                args.failover_rate,
                                dur,
                                5.0,
                                session_ms,
                                rows,
                                args.idempotent,
                            )
    finally:
        print()
        print(
            f"cpu cores: {os.cpu_count()}, load average at end {os.getloadavg()[0]:.2f} "
            f"(at start {load0:.2f}), wall {time.monotonic() - started:.0f} s; 3 brokers, RF 3, "
            f"min.insync.replicas={MIN_ISR}; throughput producer {PRODUCER_PROPS} (acks varied), "
            f"{PARTITIONS} partitions"
        )
        print(render(rows))
        if args.json:
            Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
