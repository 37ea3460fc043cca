#!/usr/bin/env python
"""Where does a broker's CPU go with metrics on? py-spy over the produce benchmark.

    .venv/bin/python bench/metrics_profile.py [--records 2000000] [--rate 200]

Starts a 3-broker cluster with a ``metrics.listener`` on every broker (scraped every
second, as Prometheus would), creates a 4-partition RF-3 topic (min ISR 2) and runs
``odradek perf produce`` with 100 B values and acks=1 -- the most request-bound workload
of ``metrics_overhead_bench.py`` -- while ``py-spy record`` samples every broker process
(``--rate`` Hz, busy samples only; ``--gil``: only the thread holding the GIL). Then it sorts each sample by the innermost frame of
ours it went through and prints the shares: the metrics code (request timing, per-topic
counters, scrapes: ``odradek.metrics``, ``broker/metrics.py``, ``dispatch_metered``,
prometheus-client) against everything else. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from odradek.cluster.local import LocalCluster
from odradek.metrics.scrape import scrape
from odradek.perf import run_produce

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metrics_overhead_bench import PRODUCER_PROPS, _create_topic

# The scrape path: a sample with any of these frames is the metrics' (collecting reads
# the broker's state, so the innermost frame may be elsewhere).
SCRAPE_FILES = (
    "prometheus_client/",
    "odradek/broker/metrics.py",
    "odradek/metrics/http_listener.py",
)
# The request path: the metered dispatch wraps every request's handler, so only samples
# whose innermost frame of ours is one of these are the metrics' own work.
HOOK_FILES = ("odradek/metrics/",)
HOOK_FUNCS = (
    "RequestDispatcher.dispatch_metered",
    "RequestDispatcher._meter_wait",
    "ReplicaManager._count_fetched",
)


def _ours(frame: str) -> bool:
    return "odradek/" in frame or "prometheus_client/" in frame


def classify(stack: str) -> str:
    frames = stack.split(";")
    if any(f in frame for frame in frames for f in SCRAPE_FILES):
        return "metrics: scrapes (collect and render)"
    for frame in reversed(frames):  # innermost first
        if not _ours(frame):
            continue
        func = frame.split(" (", 1)[0]
        mod = frame.split("odradek/", 1)[1].split(":", 1)[0]
        if any(f in frame for f in HOOK_FILES) or func in HOOK_FUNCS:
            return f"metrics: {func}"
        if mod == "broker/main.py":
            # Nothing of ours below the loop's run: uvloop's own work (C, invisible to
            # py-spy: epoll, socket reads and writes of transports) or asyncio.
            inner = frames[-1].split(" (", 1)[0]
            return f"event loop itself (innermost: {inner})"
        return f"{mod}:{func}"
    return "other (interpreter, C libraries, threads)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--top", type=int, default=15, help="other entries to print")
    ap.add_argument(
        "--gil",
        action="store_true",
        help="only samples of the thread holding the GIL (Python work; a "
        "loaded machine makes py-spy count runnable threads as busy)",
    )
    args = ap.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    base = args.dir or Path(tempfile.mkdtemp(prefix="odradek-metrics-profile-"))
    counts: collections.Counter[str] = collections.Counter()
    try:
        with LocalCluster.start(
            base / "cluster",
            3,
            metrics=True,
            broker_config={"auto.leader.rebalance.enable": "false"},
        ) as c:
            topic = "profile-100-1"
            _create_topic(c.bootstrap_servers, topic)
            urls = [b.metrics_url for b in c.brokers if b.metrics_url]
            stop = threading.Event()

            def scraper() -> None:
                while not stop.wait(1.0):
                    for u in urls:
                        try:
                            scrape(u, 5.0)
                        except OSError:
                            pass

            spies = []
            for b in c.brokers:
                out = base / f"broker-{b.id}.txt"
                spies.append(
                    (
                        out,
                        subprocess.Popen(
                            [
                                pyspy,
                                "record",
                                "--pid",
                                str(b.pid),
                                "--rate",
                                str(args.rate),
                                "--format",
                                "raw",
                                "--nonblocking",
                                "--output",
                                str(out),
                            ]
                            + (["--gil"] if args.gil else []),
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                        ),
                    )
                )
            t = threading.Thread(target=scraper, daemon=True)
            t.start()
            time.sleep(1.0)  # py-spy attached
            try:
                r = run_produce(
                    c.bootstrap_servers,
                    topic,
                    args.records,
                    100,
                    producer_props=dict(PRODUCER_PROPS, acks="1"),
                    report_interval_s=60.0,
                    flush_timeout_s=180.0,
                    stall_timeout_s=90.0,
                )
            finally:
                stop.set()
                for _out, p in spies:
                    p.send_signal(2)  # SIGINT: py-spy writes its output and exits
                for _out, p in spies:
                    try:
                        p.wait(30)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
            print(f"produce: {r.records_per_sec:,.0f} records/s, p99 {r.p99_ms:.1f} ms")
            for out, _p in spies:
                if not out.exists():
                    continue
                for line in out.read_text().splitlines():
                    stack, _, n = line.rpartition(" ")
                    if stack and n.isdigit():
                        counts[classify(stack)] += int(n)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    total = sum(counts.values())
    if not total:
        print("no samples (is py-spy allowed to attach? it needs ptrace)")
        return 1
    print(f"{total:,} busy samples of the three brokers")
    metric_keys = [k for k in counts if k.startswith("metrics")]
    metrics = sum(counts[k] for k in metric_keys)
    print(f"  {metrics / total:6.1%}  {metrics:>7,}  metrics (any frame in the metrics code)")
    for k in sorted(metric_keys, key=lambda k: -counts[k]):
        print(f"          {counts.pop(k):>7,}    {k}")
    for what, n in counts.most_common(args.top):
        print(f"  {n / total:6.1%}  {n:>7,}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
