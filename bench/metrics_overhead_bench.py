#!/usr/bin/env python
"""Does collecting metrics slow the produce path? The perf benchmark, metrics on and off.

A benchmark, not a timed test (issue 15, item 1): run it by hand (bench/README.md).

Each round starts a fresh 3-broker cluster twice -- once with a ``metrics.listener`` on
every broker (request timing, per-topic counters, the stall detector) and scraped every
``--scrape-interval`` seconds like Prometheus would, once without any -- and runs the
same ``odradek perf produce`` workloads on each (the order alternates between rounds, so
slow drift of the shared machine hits both alike). A fresh cluster per run keeps the
page cache and log sizes equal. Workloads: 100 B values with acks=1 (the most
request-bound: metrics cost is per request and per partition) and 1 KB values with
acks=all, 4 partitions, RF 3, the producer settings of broker_throughput.py.

Reported per run: records/s, MB/s, produce p50/p99, brokers' CPU seconds (utime+stime of
the three broker processes) per million records; then the medians per mode and the
on/off ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_throughput import PRODUCER_PROPS

from odradek.cluster.local import LocalCluster
from odradek.metrics.scrape import scrape
from odradek.perf import proc_cpu_seconds, run_produce

PARTITIONS = 4
WORKLOADS = (("100B acks=1", 100, "1", 1.0), ("1KB acks=all", 1024, "all", 0.25))


@dataclass
class Run:
    round: int
    mode: str  # "on" | "off"
    workload: str
    records: int
    records_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    broker_cpu_s_per_m: float
    scrapes: int
    requests: int = 0  # requests the brokers answered during the run (metrics on only)


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics(
        [NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
    )[topic].result(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = a.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == PARTITIONS
            and all(p.leader >= 0 and len(p.isrs) == 3 for p in md.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} not ready")


class Scraper:
    """Scrape every broker every ``interval_s`` (what Prometheus would do)."""

    def __init__(self, urls: list[str], interval_s: float) -> None:
        self.urls, self.interval_s, self.count = urls, interval_s, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for u in self.urls:
                try:
                    scrape(u, 5.0)
                    self.count += 1
                except OSError:
                    pass


def one_run(base: Path, rnd: int, mode: str, records: int, scrape_s: float) -> list[Run]:
    d = base / f"r{rnd}-{mode}"
    out: list[Run] = []
    with LocalCluster.start(
        d, 3, metrics=(mode == "on"), broker_config={"auto.leader.rebalance.enable": "false"}
    ) as c:
        pids = [b.pid for b in c.brokers if b.pid]
        urls = [b.metrics_url for b in c.brokers if b.metrics_url]
        for name, size, acks, scale in WORKLOADS:
            n = int(records * scale)
            topic = f"bench-{size}-{acks}"
            _create_topic(c.bootstrap_servers, topic)
            time.sleep(1.0)  # let the brokers settle after the topic's creation
            req0 = _requests(urls)
            cpu0 = sum(proc_cpu_seconds(p) for p in pids)
            with Scraper(urls, scrape_s) if urls else _Nothing() as s:
                r = run_produce(
                    c.bootstrap_servers,
                    topic,
                    n,
                    size,
                    producer_props=dict(PRODUCER_PROPS, acks=acks),
                    report_interval_s=60.0,
                    flush_timeout_s=180.0,
                    stall_timeout_s=90.0,
                )
            cpu = sum(proc_cpu_seconds(p) for p in pids) - cpu0
            run = Run(
                rnd,
                mode,
                name,
                n,
                r.records_per_sec,
                r.mb_per_sec,
                r.p50_ms,
                r.p99_ms,
                cpu / n * 1e6,
                getattr(s, "count", 0),
                _requests(urls) - req0,
            )
            print(
                f"round {rnd} metrics {mode:3} {name:13} {run.records_per_s:>10,.0f} rec/s "
                f"{run.mb_per_s:7.1f} MB/s p50 {run.p50_ms:6.1f} p99 {run.p99_ms:7.1f} ms "
                f"CPU {run.broker_cpu_s_per_m:5.2f} s/M rec  scrapes {run.scrapes}",
                flush=True,
            )
            out.append(run)
    shutil.rmtree(d, ignore_errors=True)  # page cache: every run starts alike
    # The deleted logs' writeback and the freed page cache would otherwise land on the
    # next run (the first run of each round measured slower in either mode).
    os.sync()
    time.sleep(3.0)
    return out


def _requests(urls: list[str]) -> int:
    """Requests of every API answered so far by the brokers (0 without metrics)."""
    total = 0.0
    for u in urls:
        total += sum(scrape(u, 5.0).series("kafka_network_requestmetrics_requests_total").values())
    return int(total)


def micro(n: int = 200_000) -> None:
    """What metrics add to one request on the loop thread, in-process: the arrival
    stamp (contextvar set/reset, a deque), the metered dispatch's own work (two clocks,
    the header's api key and version, one record() into four histograms) and the
    per-partition topic counters of a produce."""
    import contextvars
    import timeit
    from collections import deque

    from odradek.metrics.stats import BrokerTopicStats, RequestMetrics

    cv: contextvars.ContextVar[float] = contextvars.ContextVar("x", default=0.0)
    arrivals: deque[float] = deque()
    m = RequestMetrics()
    stats = BrokerTopicStats()
    frame = bytes([0, 0, 0, 10, 0, 0, 0, 1]) + b"x" * 64

    def stamp() -> None:
        arrivals.append(time.perf_counter())
        tok = cv.set(arrivals.popleft())
        cv.reset(tok)

    def metered() -> None:
        start = time.perf_counter()
        api_key = (frame[0] << 8) | frame[1]
        version = (frame[2] << 8) | frame[3]
        arrived = cv.get() or start
        end = time.perf_counter()
        m.record(
            api_key,
            version,
            (start - arrived) * 1e3,
            (end - start) * 1e3,
            0.0,
            (end - arrived) * 1e3,
        )

    def topic() -> None:
        ts = stats.topic("page-views")
        ts.produce_requests += 1
        ts.bytes_in += 1000
        ts.messages_in += 10

    for name, fn in (
        ("arrival stamp", stamp),
        ("metered dispatch + record", metered),
        ("topic counters (one partition)", topic),
    ):
        per = min(timeit.repeat(fn, number=n, repeat=5)) / n
        print(f"micro: {name:32} {per * 1e9:7.0f} ns", flush=True)


def scale_micro(partitions: int) -> None:
    """What watching costs at ``partitions`` per broker, in-process (issue 29): one
    scrape's per-partition series (first scrape, unchanged, 1 % changed) against the
    same families built with prometheus-client; the console's reading of that text
    against prometheus-client's parser; a Metadata answer for every topic (built,
    kept, after one topic changed)."""
    import uuid
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import GaugeMetricFamily

    from odradek.broker.partition_metrics import FAMILIES, PartitionFigures, PartitionSeries
    from odradek.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
    from odradek.metrics.scrape import _parse_slowly, parse
    from odradek.protocol.codec import RequestHeaderInfo
    from odradek.server.handlers.metadata import handle_metadata
    from odradek.server.metadata_answers import MetadataAnswers, TopicEntries

    def timed(what: str, fn: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        print(f"scale {partitions:,}: {what:48} {(time.perf_counter() - t0) * 1e3:8.1f} ms")
        return out

    keys = [(f"hosted-{i // 100:04d}", i % 100) for i in range(partitions)]
    rows = {
        k: PartitionFigures(0, 0, 0, 1, 0, i % 3 == 0, False, 1, 3, 3, 2)
        for i, k in enumerate(keys)
    }
    series = PartitionSeries()

    def scrape_once() -> str:
        series.begin()
        for k, f in rows.items():
            series.put(k, f)
        out = series.commit()
        text = out.text()
        series.remember_order(out)
        return text

    timed("series, first scrape", scrape_once)
    timed("series, nothing changed", scrape_once)
    for k in keys[::100]:
        rows[k] = rows[k]._replace(log_end=1)
    text = timed("series, 1 % changed", scrape_once)

    class Families:
        def collect(self) -> Any:
            fams = [GaugeMetricFamily(n, d, labels=["topic", "partition"]) for n, d in FAMILIES]
            for (t, i), f in rows.items():
                for fam, v in zip(
                    fams, (f.size, f.log_end, f.log_start, f.segments, f.high_watermark)
                ):
                    fam.add_metric([t, str(i)], v)
            yield from fams

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Families())  # type: ignore[arg-type]
    timed("peer: prometheus-client families", lambda: generate_latest(reg))
    timed("console: parse", lambda: parse(text))
    timed("peer: prometheus-client's parser", lambda: _parse_slowly(text))

    brokers = {i: BrokerInfo(i, "127.0.0.1", 9092 + i) for i in (1, 2, 3)}
    topics = {
        t: TopicInfo(
            t,
            uuid.uuid4(),
            {p: PartitionInfo(p, (1, 2, 3), 1 + p % 3, 1, (1, 2, 3)) for p in range(100)},
        )
        for t in sorted({k[0] for k in keys})
    }
    ctx = SimpleNamespace(
        image=MetadataImage("c", 1, brokers, topics, True),
        authorizer=None,
        authorize=lambda *a: True,
        session=SimpleNamespace(listener="PLAINTEXT"),
        settings=SimpleNamespace(auto_create_topics_enable=False),
        metadata_answers=MetadataAnswers(),
        topic_entries=TopicEntries(),
    )
    header = RequestHeaderInfo(3, 12, 1, "bench", 0)
    req = SimpleNamespace(
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False,
    )
    timed("Metadata of every topic, built", lambda: handle_metadata(ctx, header, req))
    timed("Metadata of every topic, kept", lambda: handle_metadata(ctx, header, req))
    new = TopicInfo("new", uuid.uuid4(), {0: PartitionInfo(0, (1, 2, 3), 1, 1, (1, 2, 3))})
    ctx.image = MetadataImage("c", 1, brokers, {**topics, "new": new}, True)
    timed("Metadata of every topic, one topic more", lambda: handle_metadata(ctx, header, req))


class _Nothing:
    count = 0

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--records",
        type=int,
        default=1_000_000,
        help="100 B records per run (1 KB runs use a quarter)",
    )
    ap.add_argument(
        "--rounds", type=int, default=4, help="even, so each mode runs first in half the rounds"
    )
    ap.add_argument("--scrape-interval", type=float, default=1.0)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--micro",
        action="store_true",
        help="only the in-process per-request cost of the metrics hooks",
    )
    ap.add_argument(
        "--scale-micro",
        type=int,
        metavar="PARTITIONS",
        help="only what a scrape, the console's reading of it and a Metadata answer cost "
        "at this many partitions, in-process, against prometheus-client (issue 29)",
    )
    args = ap.parse_args(argv)
    if args.micro:
        micro()
        return 0
    if args.scale_micro:
        scale_micro(args.scale_micro)
        return 0
    base = args.dir or Path(tempfile.mkdtemp(prefix="odradek-metrics-bench-"))
    runs: list[Run] = []
    for rnd in range(1, args.rounds + 1):
        order = ("on", "off") if rnd % 2 else ("off", "on")
        for mode in order:
            runs += one_run(base, rnd, mode, args.records, args.scrape_interval)
    # Paired by round (both modes ran back to back): the median of the per-round ratios
    # is less sensitive to the machine's drift than the ratio of medians.
    print(
        "\n| workload | metric | off (median) | on (median) | on / off (medians) | "
        "on / off (median of per-round ratios) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, *_ in WORKLOADS:
        for field, label in (
            ("records_per_s", "records/s"),
            ("p50_ms", "p50 ms"),
            ("p99_ms", "p99 ms"),
            ("broker_cpu_s_per_m", "broker CPU s / M records"),
        ):
            off = statistics.median(
                getattr(r, field) for r in runs if r.workload == name and r.mode == "off"
            )
            on = statistics.median(
                getattr(r, field) for r in runs if r.workload == name and r.mode == "on"
            )
            paired = statistics.median(
                getattr(a, field) / getattr(b, field)
                for a in runs
                for b in runs
                if a.workload == b.workload == name
                and a.round == b.round
                and a.mode == "on"
                and b.mode == "off"
                and getattr(b, field)
            )
            print(f"| {name} | {label} | {off:,.2f} | {on:,.2f} | {on / off:.3f} | {paired:.3f} |")
    on = [r for r in runs if r.mode == "on" and r.requests]
    if on:
        print("\n| workload | requests per run (median) | brokers' CPU per request, µs (median) |")
        print("| --- | --- | --- |")
        for name, *_ in WORKLOADS:
            rs = [r for r in on if r.workload == name]
            if rs:
                per = statistics.median(r.broker_cpu_s_per_m * r.records / r.requests for r in rs)
                print(f"| {name} | {statistics.median(r.requests for r in rs):,.0f} | {per:,.0f} |")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
