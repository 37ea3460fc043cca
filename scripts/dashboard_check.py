#!/usr/bin/env python
"""Check the Grafana dashboard's queries against a real Prometheus scraping a real cluster.

    .venv/bin/python scripts/dashboard_check.py --prometheus /usr/bin/prometheus

Starts a 3-broker cluster with the console, a Prometheus (Debian's ``prometheus``
package, or any binary given with ``--prometheus``) on loopback scraping every broker's
``/metrics`` (job ``odradek``) and the console's (job ``odradek-console``) every 2 s,
produces and consumes for a while (a consumer group that lags), then evaluates every
query of ``docs/grafana/odradek-dashboard.json`` through Prometheus' HTTP API and prints
how many series each returns. Exit 1 if any query returns nothing or fails.
Everything it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from odradek.cluster.local import LocalCluster

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana" / "odradek-dashboard.json"


def _queries(dash: dict) -> list[tuple[str, str]]:
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            expr = (t["expr"].replace("$__rate_interval", "30s").replace("$console_job", "odradek-console")
                    .replace("$job", "odradek"))
            out.append((p["title"], expr))
    return out


def _query(base: str, expr: str) -> list:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(body)
    return body["data"]["result"]


def _workload(bootstrap: str, seconds: float) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("events", 3, 3)])["events"].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "dashboard-readers",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["events"])
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for _ in range(500):
            p.produce("events", value=b"x" * 200, key=str(n % 97).encode())
            n += 1
        p.poll(0)
        c.consume(100, timeout=0.1)  # reads slower than the producer writes: lag grows
        time.sleep(0.05)
    p.flush(30)
    c.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    ap.add_argument("--seconds", type=float, default=40.0, help="workload duration")
    ap.add_argument("--port", type=int, default=19090)
    args = ap.parse_args(argv)
    dash = json.loads(DASHBOARD.read_text())
    work = Path(tempfile.mkdtemp(prefix="odradek-dashboard-"))
    prom = None
    with LocalCluster.start(work / "cluster", 3) as c:
        console = c.start_console().rstrip("/")
        host_port = console.split("//", 1)[1]
        cfg = {"global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
               "scrape_configs": [
                   {"job_name": "odradek", "static_configs": [{"targets": [
                       b.metrics_url.split("//", 1)[1].split("/", 1)[0] for b in c.brokers
                       if b.metrics_url]}]},
                   {"job_name": "odradek-console", "static_configs": [{"targets": [host_port]}]}]}
        (work / "prometheus.yml").write_text(json.dumps(cfg))  # YAML is a superset of JSON
        base = f"http://127.0.0.1:{args.port}"
        prom = subprocess.Popen(
            [args.prometheus, f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{args.port}"],
            stdout=open(work / "prometheus.log", "wb"), stderr=subprocess.STDOUT,
            start_new_session=True)
        try:
            print(f"cluster {c.bootstrap_servers}, console {console}, Prometheus {base}; "
                  f"workload {args.seconds:.0f} s", flush=True)
            _workload(c.bootstrap_servers, args.seconds)
            time.sleep(6)  # a few more scrapes
            failed = 0
            for title, expr in _queries(dash):
                try:
                    n = len(_query(base, expr))
                except Exception as e:  # noqa: BLE001
                    n, expr = 0, f"{expr}  ERROR {e}"
                failed += n == 0
                print(f"{'ok ' if n else 'NO '} {n:3d} series  {title}: {expr}")
            print(f"{len(_queries(dash)) - failed} of {len(_queries(dash))} queries return data")
            return 1 if failed else 0
        finally:
            prom.send_signal(signal.SIGTERM)
            try:
                prom.wait(15)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
            c.stop_console()
            shutil.rmtree(work / "tsdb", ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
