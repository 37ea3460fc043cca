#!/usr/bin/env python
"""Throughput cost of durable acknowledgement (``odradek.ack.fsync=true``) vs Kafka's default.

A benchmark, not a timed test (issue 5 item 4): run it by hand (bench/README.md).

One 3-broker cluster, one run: 1 KB values, 4 partitions, RF 3, min.insync.replicas=2,
the producer settings of bench/broker_throughput.py (linger.ms=5, batch.size=1000000),
as fast as possible. For acks=all and acks=1, a topic with Kafka's default flush policy
(page cache only, REQ-R18) and one with ``odradek.ack.fsync=true`` are measured side by
side, interleaved over ``--rounds`` (default, durable, default, durable, ...), so slow
drift of the shared machine hits both alike. Reported: MB/s, produce latency p50/p99
(librdkafka's produce() → delivery report), and the durable / default MB/s ratio (aim
≥ 0.5 for acks=all).

The fsync ceiling of the same disk is measured in the same run: a raw loop of 1 MB
``pwrite`` + ``fdatasync`` vs 1 MB buffered ``pwrite`` in the cluster's directory, plus
the latency of a small (16 KB) write + fdatasync — the floor of one group commit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_throughput import PRODUCER_PROPS

from odradek.cluster.local import LocalCluster
from odradek.perf import percentile, run_produce

PARTITIONS = 4
MIN_ISR = "2"
MB = 1 << 20


@dataclass
class Row:
    test: str
    setting: str
    value: float
    unit: str
    note: str = ""


# --- the disk's ceiling ---------------------------------------------------------------------


def fsync_ceiling(directory: Path, seconds: float = 3.0) -> list[Row]:
    """Raw rates on the cluster's filesystem: buffered vs fdatasync'd 1 MB writes, and the
    latency of one small write + fdatasync."""
    rows: list[Row] = []
    chunk = os.urandom(MB)
    path = directory / "fsync-probe.bin"
    for mode in ("buffered", "fdatasync"):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            n, pos, t0 = 0, 0, time.monotonic()
            while time.monotonic() - t0 < seconds:
                os.pwrite(fd, chunk, pos)  # append-only, like a segment: new blocks
                pos += MB
                if mode == "fdatasync":
                    os.fdatasync(fd)
                n += 1
                if pos >= 1024 * MB:
                    os.ftruncate(fd, 0)  # stay within 1 GB of disk
                    pos = 0
            rate = n / (time.monotonic() - t0)
        finally:
            os.close(fd)
        rows.append(Row("fsync ceiling", f"1 MB writes, {mode}", rate, "MB/s"))
    rows.append(
        Row("fsync ceiling", "fdatasync / buffered", rows[1].value / rows[0].value, "ratio")
    )
    small = os.urandom(16 * 1024)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    lat: list[float] = []
    try:
        pos, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < seconds / 2:
            t = time.perf_counter()
            os.pwrite(fd, small, pos)
            os.fdatasync(fd)
            lat.append((time.perf_counter() - t) * 1e3)
            pos += len(small)
    finally:
        os.close(fd)
        path.unlink()
    lat.sort()
    rows.append(Row("fsync ceiling", "16 KB write + fdatasync p50", percentile(lat, 0.5), "ms"))
    rows.append(Row("fsync ceiling", "16 KB write + fdatasync p99", percentile(lat, 0.99), "ms"))
    return rows


# --- produce --------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, durable: bool) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap})
    cfg = {"min.insync.replicas": MIN_ISR}
    if durable:
        cfg["odradek.ack.fsync"] = "true"
    a.create_topics([NewTopic(topic, PARTITIONS, 3, config=cfg)], operation_timeout=30)[
        topic
    ].result(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every partition has a leader and a full ISR
        md = a.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == PARTITIONS
            and all(p.leader >= 0 and len(p.isrs) == 3 for p in md.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} not ready in 60 s")


def bench_produce(c: LocalCluster, records: int, rounds: int, acks_list: list[str]) -> list[Row]:
    rows: list[Row] = []
    totals: dict[tuple[str, bool], list[float]] = {}
    for rnd in range(1, rounds + 1):
        for acks in acks_list:
            for durable in (False, True):
                name = "durable" if durable else "default"
                topic = f"{name}-acks{acks}-{rnd}-{int(time.time() * 1000) % 10**8}"
                create_topic(c.bootstrap_servers, topic, durable)
                print(f"[produce] acks={acks} {name} round {rnd}: {records} x 1 KB", flush=True)
                s = run_produce(
                    c.bootstrap_servers,
                    topic,
                    records,
                    1024,
                    producer_props=dict(PRODUCER_PROPS, acks=acks),
                    out=sys.stdout,
                    report_interval_s=5.0,
                    flush_timeout_s=180.0,
                    stall_timeout_s=90.0,
                )
                print(f"  {s.line()}", flush=True)
                setting = f"acks={acks} {name} round {rnd}"
                note = f"{s.errors} errors" if s.errors else ""
                rows.append(Row("produce", setting + " MB/s", s.mb_per_sec, "MB/s", note))
                rows.append(Row("produce", setting + " p50", s.p50_ms, "ms"))
                rows.append(Row("produce", setting + " p99", s.p99_ms, "ms"))
                totals.setdefault((acks, durable), []).append(s.mb_per_sec)
    for acks in acks_list:
        d, k = totals[(acks, True)], totals[(acks, False)]
        rows.append(
            Row(
                "produce",
                f"acks={acks} durable / default (mean MB/s)",
                (sum(d) / len(d)) / (sum(k) / len(k)),
                "ratio",
                "aim ≥ 0.5" if acks == "all" else "",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=200_000, help="records per run (1 KB each)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--acks", default="all,1")
    ap.add_argument("--dir", type=Path, default=None, help="cluster dir (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    base = args.dir or Path(tempfile.mkdtemp(prefix="odradek-durable-bench-"))
    rows: list[Row] = []
    with LocalCluster.start(
        base / "cluster", 3, broker_config={"auto.leader.rebalance.enable": "false"}
    ) as c:
        rows += fsync_ceiling(base)
        for r in rows:
            print(f"[ceiling] {r.setting}: {r.value:.2f} {r.unit}", flush=True)
        rows += bench_produce(c, args.records, args.rounds, args.acks.split(","))
    print("\n| test | setting | value | unit | note |\n| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r.test} | {r.setting} | {r.value:.2f} | {r.unit} | {r.note} |")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
