#!/usr/bin/env python
"""Does a metrics scrape stop the broker's event loop? Request latency during scrapes.

    .venv/bin/python bench/scrape_stall_bench.py [--partitions 3000] [--seconds 10]

A benchmark, not a timed test (issue 29, item 1). It starts one broker with its
``metrics.listener`` (as ``odradek cluster up`` does), creates ``--partitions`` partitions
(RF 1) so that a scrape has a few thousand series to render, and then measures the round
trip of a cheap request (ApiVersions v0, answered on the event loop every request runs
on) sent back to back on one connection for ``--seconds``, twice: once while nobody
scrapes, once while a scraper fetches ``/metrics`` back to back (Prometheus scrapes every
15-60 s; back to back is the worst case, and makes every probe meet a scrape). A scrape
that holds the loop shows up as the probe's tail (p99, max) in the scraped phase.

Run it on a quiet machine for figures of record (check ``uptime``), A/B against another
checkout by running it with ``PYTHONPATH=<checkout>/src``; the output names the
``odradek`` it imported.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import odradek
from odradek.cluster.local import LocalCluster


def _api_versions_frame(correlation_id: int) -> bytes:
    client = b"stall-probe"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    return struct.pack(">i", len(body)) + body


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def probe(address: str, seconds: float) -> list[float]:
    """Round trips (ms) of ApiVersions v0, one at a time, for ``seconds``."""
    host, port = address.rsplit(":", 1)
    out: list[float] = []
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        end = time.monotonic() + seconds
        cid = 0
        while time.monotonic() < end:
            cid += 1
            t0 = time.perf_counter()
            sock.sendall(_api_versions_frame(cid))
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            _recv_exact(sock, size)
            out.append((time.perf_counter() - t0) * 1000)
    return out


def scrape_loop(url: str, stop: threading.Event, sizes: list[int]) -> None:
    while not stop.is_set():
        with urllib.request.urlopen(url, timeout=30) as r:
            sizes.append(len(r.read()))


def summary(name: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=100)
    return (
        f"{name:<22} n={len(ms):>6}  p50 {q[49]:6.3f} ms  p99 {q[98]:7.3f} ms  "
        f"p99.9 {statistics.quantiles(ms, n=1000)[998]:7.3f} ms  max {max(ms):7.2f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    print(f"odradek from {Path(odradek.__file__).parent}")
    with tempfile.TemporaryDirectory(prefix="scrape-stall-") as d:
        c = LocalCluster.start(Path(d), 1)
        try:
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
            per = 500
            for i in range(0, args.partitions, per):
                n = min(per, args.partitions - i)
                fut = admin.create_topics([NewTopic(f"stall-{i}", n, 1)])
                for f in fut.values():
                    f.result(60)
            url = c.broker(1).metrics_url
            assert url is not None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # every partition hosted: a full scrape
                with urllib.request.urlopen(url, timeout=30) as r:
                    body = r.read()
                if body.count(b"kafka_log_log_size{") >= args.partitions:
                    break
                time.sleep(0.5)
            print(f"{args.partitions} partitions; a scrape is {len(body) / 1e6:.1f} MB")
            quiet = probe(c.broker(1).address, args.seconds)
            stop = threading.Event()
            sizes: list[int] = []
            t = threading.Thread(target=scrape_loop, args=(url, stop, sizes), daemon=True)
            t.start()
            scraped = probe(c.broker(1).address, args.seconds)
            stop.set()
            t.join(60)
            print(summary("no scrapes", quiet))
            print(summary(f"{len(sizes)} scrapes", scraped))
        finally:
            c.down()


if __name__ == "__main__":
    sys.exit(main())
