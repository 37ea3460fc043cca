"""What security costs (issue 14): produce throughput over SASL_SSL vs PLAINTEXT on the
same broker, and how many new authenticated connections per second a broker accepts.

One broker made by ``LocalCluster(security="sasl_ssl")`` with a second, PLAINTEXT
listener (so both paths go through the same process, log and disk). Each round runs both
listeners back to back (A/B interleaved, the order alternating), each on its own fresh
topic that is deleted afterwards; figures are medians over the rounds.

* produce: confluent-kafka, ``acks=1``, ``linger.ms=5``, ``batch.size=1000000``, 1 KB
  values, one partition; records/s from the first ``produce()`` to ``flush()``, and the
  broker's CPU seconds per GB of values (utime+stime of the broker process);
* connections: sequential new connections with Odradek's own client (a TCP connect,
  then for SASL_SSL the TLS handshake and a SCRAM-SHA-512 exchange at Kafka's 4096
  iterations, then ApiVersions), connections/s and the broker's CPU ms per connection.

    .venv/bin/python bench/security_bench.py --rounds 5 --records 500000 --connections 300
    .venv/bin/python bench/security_bench.py --rounds 1 --profile /tmp/secprof   # py-spy

``--authz`` measures instead what authorization and client-quota accounting cost on the
produce path (issue 28): two single-broker PLAINTEXT clusters, one with the ACL authorizer
(ACLs allowing the benchmark's topics, checked on every request) and client quotas (the
producing client-id has a quota far above what it can reach, so every request is
accounted but none is throttled; another client-id has a small one), the other with
neither. Per round both run (order alternating) acks=1 produce with 100 B and 1 KB
values on fresh topics; the report is each size's median records/s ratio, with/without.

    .venv/bin/python bench/security_bench.py --authz --rounds 5 --records 300000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from odradek.client.connection import KafkaConnection
from odradek.cluster.local import LocalCluster
from odradek.cluster.security_setup import EXTRA_LISTENERS, client_config
from odradek.protocol.client_codec import request_entity
from odradek.security.client_security import ClientSecurity

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def start_profile(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy on the broker, collapsed stacks (stopped with SIGINT, which writes them)."""
    exe = Path(sys.executable).with_name("py-spy")
    proc = subprocess.Popen(
        [
            str(exe),
            "record",
            "-p",
            str(pid),
            "--format",
            "raw",
            "--rate",
            "200",
            "--nonblocking",
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # py-spy attaches before the timed part starts
    return proc


def stop_profile(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(30)


def top_frames(collapsed: Path, n: int = 15) -> list[tuple[str, float]]:
    """Share of samples per innermost frame, largest first."""
    leaf: dict[str, int] = {}
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frame = stack.rsplit(";", 1)[-1]
        leaf[frame] = leaf.get(frame, 0) + int(count)
        total += int(count)
    return [(f, c / total) for f, c in sorted(leaf.items(), key=lambda x: -x[1])[:n]]


def produce(
    conf: dict[str, Any],
    admin: AdminClient,
    pid: int,
    n: int,
    profile_to: Path | None = None,
    value_size: int = 1024,
) -> dict[str, float]:
    topic = f"secbench-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)[topic].result(60)
    p = Producer(
        {
            **conf,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 500_000,
        }
    )
    value = os.urandom(value_size)
    p.produce(topic, value)  # connect and learn the leader outside the timed part
    p.flush(60)
    prof = start_profile(pid, profile_to) if profile_to else None
    c0, t0 = cpu_s(pid), time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    elapsed, cpu = time.perf_counter() - t0, cpu_s(pid) - c0
    if prof is not None:
        stop_profile(prof)
    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
    return {
        "records_s": n / elapsed,
        "mb_s": n * value_size / elapsed / 2**20,
        "cpu_s_per_gb": cpu / (n * value_size / 1e9),
    }


def connections(
    host: str, port: int, security: ClientSecurity, pid: int, n: int
) -> dict[str, float]:
    c0, t0 = cpu_s(pid), time.perf_counter()
    for _ in range(n):
        with KafkaConnection(host, port, security=security, timeout_s=30) as conn:
            conn.request(
                request_entity(18, 3, client_software_name="bench", client_software_version="1")
            )
    elapsed, cpu = time.perf_counter() - t0, cpu_s(pid) - c0
    return {"conn_s": n / elapsed, "broker_cpu_ms_per_conn": cpu * 1000 / n}


def _set_quota(bootstrap: str, client_id: str, rate: str) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "odradek",
            "configs",
            "--bootstrap-server",
            bootstrap,
            "--entity-type",
            "clients",
            "--entity-name",
            client_id,
            "--alter",
            "--add-config",
            f"producer_byte_rate={rate}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def authz_main(args: argparse.Namespace) -> int:
    """``--authz``: the produce path with and without an authorizer and client quotas."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="authzbench-") as d:
        secured = LocalCluster.start(
            Path(d) / "on",
            1,
            broker_config={
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "allow.everyone.if.no.acl.found": "true",
            },
        )
        plain = LocalCluster.start(Path(d) / "off", 1)
        try:
            clusters = {"authz+quotas": secured, "none": plain}
            admins = {
                k: AdminClient({"bootstrap.servers": c.bootstrap_servers})
                for k, c in clusters.items()
            }
            allow = AclBinding(
                ResourceType.TOPIC,
                "secbench-",
                ResourcePatternType.PREFIXED,
                "User:ANONYMOUS",
                "*",
                AclOperation.ALL,
                AclPermissionType.ALLOW,
            )
            for f in admins["authz+quotas"].create_acls([allow]).values():
                f.result(30)
            _set_quota(secured.bootstrap_servers, "bench", "1000000000000")
            _set_quota(secured.bootstrap_servers, "someone-else", "1048576")
            print(f"load before: {os.getloadavg()}", flush=True)
            for r in range(args.rounds):
                for size in (100, 1024):
                    order = list(clusters) if r % 2 == 0 else list(reversed(clusters))
                    for name in order:
                        c = clusters[name]
                        pid = c.brokers[0].pid
                        assert pid is not None
                        conf = {"bootstrap.servers": c.bootstrap_servers, "client.id": "bench"}
                        row = {
                            "round": r,
                            "size": size,
                            "mode": name,
                            **produce(conf, admins[name], pid, args.records, value_size=size),
                            "load1": os.getloadavg()[0],
                        }
                        rows.append(row)
                        print(
                            json.dumps(
                                {
                                    k: round(v, 2) if isinstance(v, float) else v
                                    for k, v in row.items()
                                }
                            ),
                            flush=True,
                        )
        finally:
            secured.down()
            plain.down()
    print("\nmedians")
    for size in (100, 1024):
        ratios = [
            a["records_s"] / b["records_s"]
            for a, b in zip(
                (x for x in rows if x["size"] == size and x["mode"] == "authz+quotas"),
                (x for x in rows if x["size"] == size and x["mode"] == "none"),
            )
        ]
        for mode in ("none", "authz+quotas"):
            mine = [x for x in rows if x["size"] == size and x["mode"] == mode]
            print(
                f"{size:5d} B {mode:13s} records/s "
                f"{statistics.median(x['records_s'] for x in mine):,.0f}  broker CPU s/GB "
                f"{statistics.median(x['cpu_s_per_gb'] for x in mine):.1f}"
            )
        print(
            f"{size:5d} B with/without per round {[round(x, 3) for x in ratios]} "
            f"median {statistics.median(ratios):.3f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=100_000, help="1 KB records per run")
    ap.add_argument("--connections", type=int, default=200, help="new connections per run")
    ap.add_argument("--json", metavar="FILE", help="also write every run as JSON")
    ap.add_argument(
        "--profile",
        metavar="DIR",
        help="one extra produce run per listener under py-spy (not timed): "
        "collapsed stacks in DIR and the top frames printed",
    )
    ap.add_argument(
        "--authz",
        action="store_true",
        help="authorizer and client quotas on vs off instead (issue 28)",
    )
    args = ap.parse_args()
    if args.authz:
        return authz_main(args)
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="secbench-") as d,
        LocalCluster.start(Path(d), 1, security="sasl_ssl", extra_listeners=("PLAINTEXT",)) as c,
    ):
        b = c.brokers[0]
        assert b.pid is not None
        secured = client_config(c.client_properties)
        plain_port = b.port + EXTRA_LISTENERS["PLAINTEXT"]
        listeners = {
            "SASL_SSL": (
                {**secured, "bootstrap.servers": f"{b.host}:{b.port}"},
                b.port,
                ClientSecurity.from_properties(secured),
            ),
            "PLAINTEXT": (
                {"bootstrap.servers": f"{b.host}:{plain_port}"},
                plain_port,
                ClientSecurity.from_properties({}),
            ),
        }
        admin = AdminClient({**secured, "bootstrap.servers": f"{b.host}:{b.port}"})
        # The PLAINTEXT listener's principal is User:ANONYMOUS; the authorizer checks it
        # like any other, so it gets the benchmark's topics (both paths pay for the check).
        anonymous = AclBinding(
            ResourceType.TOPIC,
            "secbench-",
            ResourcePatternType.PREFIXED,
            "User:ANONYMOUS",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        )
        for f in admin.create_acls([anonymous]).values():
            f.result(30)
        print(f"load before: {os.getloadavg()}", flush=True)
        for r in range(args.rounds):
            order = list(listeners) if r % 2 == 0 else list(reversed(listeners))
            for name in order:
                conf, port, sec = listeners[name]
                row = {
                    "round": r,
                    "listener": name,
                    **produce(conf, admin, b.pid, args.records),
                    **connections(b.host, port, sec, b.pid, args.connections),
                    "load1": os.getloadavg()[0],
                }
                rows.append(row)
                print(
                    json.dumps(
                        {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}
                    ),
                    flush=True,
                )
        if args.profile:
            out = Path(args.profile)
            out.mkdir(parents=True, exist_ok=True)
            for name, (conf, _port, _sec) in listeners.items():
                f = out / f"produce-{name}.txt"
                produce(conf, admin, b.pid, args.records, profile_to=f)
                print(f"\nbroker profile, produce over {name} ({f}):")
                for frame, share in top_frames(f):
                    print(f"  {share:6.1%}  {frame}")
    print("\nmedians")
    for name in ("PLAINTEXT", "SASL_SSL"):
        mine = [x for x in rows if x["listener"] == name]
        med = {
            k: statistics.median(x[k] for x in mine)
            for k in ("records_s", "mb_s", "cpu_s_per_gb", "conn_s", "broker_cpu_ms_per_conn")
        }
        print(f"{name:10s} " + "  ".join(f"{k}={v:.1f}" for k, v in med.items()))
    ratios = [
        a["records_s"] / p["records_s"]
        for a, p in zip(
            (x for x in rows if x["listener"] == "SASL_SSL"),
            (x for x in rows if x["listener"] == "PLAINTEXT"),
        )
    ]
    print(
        f"SASL_SSL/PLAINTEXT produce records/s per round: "
        f"{[round(x, 2) for x in ratios]} median {statistics.median(ratios):.2f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
