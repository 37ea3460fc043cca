#!/usr/bin/env python
"""What the web console costs the brokers (issue 29): their event-loop stalls, the
requests it sends and the console's own CPU, with the console off, on with nobody
looking, and on with pages open.

    .venv/bin/python bench/console_cost_bench.py [--seconds 60] [--topics 20] [--groups 3]

One 3-broker cluster (metrics on, as ``odradek cluster up`` starts it) with ``--topics``
topics of 3 partitions (RF 3) and ``--groups`` consumer groups with committed offsets.
The brokers run the stall detector with a heartbeat every millisecond
(``ODRADEK_LOOP_STALL_MS=4``), so ``odradek_eventloop_lag_seconds`` is the histogram of
their loop stalls. Phases of ``--seconds`` each, in this order:

- ``off``: no console;
- ``idle``: the console (``cluster up``'s command line), no page open;
- ``pages``: the console with two live pages open, the brokers page and one topic's page
  (their server-sent event streams, as a browser holds them).

Per phase: heartbeats late by more than 1, 2, 5, 10, 20, 50 ms (all brokers, per
minute), the requests the brokers answered per API (per minute) and their handler time
(``TotalTimeMs`` sum), the console's CPU seconds per minute and its snapshots per minute.
The brokers' own scrapes by this script (two per phase) are in the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from odradek.cluster.local import LocalCluster
from odradek.metrics.scrape import Samples, scrape

BOUNDS_MS = (1, 2, 5, 10, 20, 50)
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def _scrape_all(c: LocalCluster) -> dict[int, Samples]:
    return {b.id: scrape(b.metrics_url, 10) for b in c.brokers if b.metrics_url}


def _late(s: Samples) -> dict[int, float]:
    """Heartbeats later than each of BOUNDS_MS (from the cumulative buckets)."""
    buckets = {
        float(dict(k).get("le", "inf").replace("+Inf", "inf")): v
        for k, v in s.series("odradek_eventloop_lag_seconds_bucket").items()
    }
    total = buckets.get(float("inf"), 0.0)
    out = {}
    for ms in BOUNDS_MS:
        le = max((b for b in buckets if b <= ms / 1000 + 1e-9), default=None)
        out[ms] = total - (buckets[le] if le is not None else 0.0)
    return out


def _requests(s: Samples) -> dict[str, tuple[float, float]]:
    """API -> (requests, TotalTimeMs sum)."""
    n: dict[str, float] = defaultdict(float)
    for k, v in s.series("kafka_network_requestmetrics_requests_total").items():
        n[dict(k)["request"]] += v
    t = {
        dict(k)["request"]: v
        for k, v in s.series("kafka_network_requestmetrics_totaltimems_sum").items()
    }
    return {api: (n[api], t.get(api, 0.0)) for api in n}


def _version(url: str) -> int:
    with urllib.request.urlopen(url + "brokers", timeout=10) as r:
        html = r.read().decode()
    i = html.find('id="version">#')
    return int(html[i + 14 : html.index("<", i)]) if i >= 0 else 0


@contextlib.contextmanager
def _open_pages(url: str, topic: str) -> Iterator[None]:
    """Hold the event streams of the brokers page and one topic page, as a browser does."""
    stop = threading.Event()
    resps = []

    def hold(path: str) -> None:
        with contextlib.suppress(Exception), urllib.request.urlopen(url + path, timeout=60) as r:
            resps.append(r)  # closed by the caller when the phase ends
            while not stop.is_set() and r.readline():
                pass

    threads = [
        threading.Thread(target=hold, args=(p,), daemon=True)
        for p in ("events?view=brokers&arg=", f"events?view=topic&arg={topic}")
    ]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for r in resps:
            with contextlib.suppress(Exception):
                r.close()


def _phase(c: LocalCluster, name: str, seconds: float, console_url: str | None) -> dict:
    before = _scrape_all(c)
    pid = c.console["pid"] if c.console else None
    cpu0 = _cpu_s(pid) if pid else 0.0
    v0 = _version(console_url) if console_url else 0
    t0 = time.monotonic()
    time.sleep(seconds)  # a benchmark window, not a wait for a condition
    dt = time.monotonic() - t0
    cpu = (_cpu_s(pid) - cpu0) if pid else 0.0
    rounds = (_version(console_url) - v0) if console_url else 0
    after = _scrape_all(c)
    per_min = 60.0 / dt
    late = {
        ms: sum(_late(after[b])[ms] - _late(before[b])[ms] for b in after) * per_min
        for ms in BOUNDS_MS
    }
    apis: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for b in after:
        r0, r1 = _requests(before[b]), _requests(after[b])
        for api, (n, ms) in r1.items():
            n0, ms0 = r0.get(api, (0.0, 0.0))
            apis[api][0] += (n - n0) * per_min
            apis[api][1] += (ms - ms0) * per_min
    return {
        "phase": name,
        "seconds": dt,
        "late_per_min": late,
        "apis": dict(apis),
        "console_cpu_s_per_min": cpu * per_min,
        "snapshots_per_min": rounds * per_min,
    }


def _print(r: dict) -> None:
    late = "  ".join(f">{ms}ms {v:7.1f}" for ms, v in r["late_per_min"].items())
    print(f"\n[{r['phase']}] {r['seconds']:.0f} s; stalls per minute (3 brokers): {late}")
    if r["phase"] != "off":
        print(
            f"  console: {r['console_cpu_s_per_min']:.2f} CPU s/min, "
            f"{r['snapshots_per_min']:.1f} snapshots/min"
        )
    for api, (n, ms) in sorted(r["apis"].items(), key=lambda kv: -kv[1][0]):
        if n >= 0.5:
            print(f"  {api:24s} {n:8.1f} req/min  {ms:8.1f} ms/min handler time")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--phases", default="off,idle,pages")
    args = ap.parse_args(argv)
    os.environ["ODRADEK_LOOP_STALL_MS"] = "4"  # a heartbeat every ms (brokers inherit it)
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import NewTopic

    load0 = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(prefix="console-cost-") as tmp,
        LocalCluster.start(Path(tmp) / "c", 3, timeout=90) as c,
    ):
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        topics = [f"t{i:03d}" for i in range(args.topics)]
        for f in admin.create_topics([NewTopic(t, 3, 3) for t in topics]).values():
            f.result(60)
        for g in range(args.groups):
            cons = Consumer(
                {
                    "bootstrap.servers": c.bootstrap_servers,
                    "group.id": f"g{g}",
                    "enable.auto.commit": False,
                }
            )
            deadline = time.monotonic() + 60
            while True:
                try:
                    cons.commit(
                        offsets=[TopicPartition(topics[g % len(topics)], p, 0) for p in range(3)],
                        asynchronous=False,
                    )
                    break
                except Exception:  # NOT_COORDINATOR while __consumer_offsets starts
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            cons.close()
        results = []
        url = None
        for name in args.phases.split(","):
            if name in ("idle", "pages") and url is None:
                url = c.start_console()
                time.sleep(5)  # its first rounds, not measured
            if name == "pages":
                assert url is not None
                with _open_pages(url, topics[0]):
                    results.append(_phase(c, name, args.seconds, url))
            else:
                results.append(_phase(c, name, args.seconds, url if name != "off" else None))
            _print(results[-1])
        c.stop_console()
    print(
        f"\ncpu cores {os.cpu_count()}, load average at start {load0[0]:.2f}, "
        f"at end {os.getloadavg()[0]:.2f}; {args.topics} topics x 3 partitions, RF 3, "
        f"{args.groups} groups",
        file=sys.stdout,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
