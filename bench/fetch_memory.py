#!/usr/bin/env python
"""Broker memory while clients hold huge fetch responses unread (issue 11).

A benchmark, not a timed test. One 1-broker cluster (fetch.max.bytes raised to 1 GiB so
the cap does not hide the write path), ~122 MB produced to one partition, then
``--clients`` raw connections each ask for everything (max_bytes = 2^31-1) and do not
read for ``--hold`` seconds. Prints the broker's RSS before, while the responses are
pending, and after they were read, and the read rate.

    .venv/bin/python bench/fetch_memory.py [--clients 4] [--hold 3]
    # the same against another source tree's broker (e.g. an older commit's worktree):
    .venv/bin/python bench/fetch_memory.py --broker-pythonpath /path/to/other/src
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from kio.index import load_request_schema

from odradek.cluster.local import DEFAULT_BROKER_COMMAND, LocalCluster
from odradek.fuzz.corpus import encode_request
from odradek.fuzz.harness import process_rss_mb

RECORD = 10_000
RECORDS = 12_500


def _fetch_everything(topic: str) -> bytes:
    m = sys.modules[load_request_schema(1, 12).__module__]
    from datetime import timedelta

    req = m.FetchRequest(  # type: ignore[attr-defined]
        replica_id=-1,
        max_wait=timedelta(0),
        min_bytes=1,
        max_bytes=0x7FFFFFFF,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        rack_id="",
        topics=(
            m.FetchTopic(
                topic=topic,
                partitions=(
                    m.FetchPartition(  # type: ignore[attr-defined]
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=0x7FFFFFFF,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    payload = encode_request(req)
    return struct.pack(">i", len(payload)) + payload


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result is in
    futures = admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)
    futures[topic].result(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--hold", type=float, default=3.0)
    ap.add_argument("--broker-pythonpath", help="run the broker from this source tree")
    args = ap.parse_args()
    cmd = DEFAULT_BROKER_COMMAND
    if args.broker_pythonpath:
        cmd = ("env", f"PYTHONPATH={args.broker_pythonpath}", *DEFAULT_BROKER_COMMAND)
    with tempfile.TemporaryDirectory(prefix="odradek-fetchmem-") as tmp:
        c = LocalCluster.start(
            Path(tmp) / "c", 1, broker_config={"fetch.max.bytes": str(1 << 30)}, broker_command=cmd
        )
        try:
            b = c.broker(1)
            _create_topic(b.address, "big")
            p = Producer({"bootstrap.servers": b.address, "linger.ms": 50, "batch.size": 1_000_000})
            for i in range(RECORDS):
                p.produce("big", b"x" * RECORD, partition=0)
                if i % 1000 == 0:
                    p.poll(0)
            p.flush(60)
            time.sleep(1)
            rss0 = process_rss_mb(b.pid)
            socks = []
            for _ in range(args.clients):
                s = socket.create_connection((b.host, b.port))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
                s.sendall(_fetch_everything("big"))
                socks.append(s)
            time.sleep(args.hold)
            rss1 = process_rss_mb(b.pid)
            t0 = time.monotonic()
            sizes = []
            for s in socks:
                s.settimeout(60)
                (n,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
                got = 0
                while got < n:
                    chunk = s.recv(min(1 << 20, n - got))
                    if not chunk:
                        raise SystemExit(f"closed after {got} of {n} bytes")
                    got += len(chunk)
                sizes.append(n)
                s.close()
            dt = time.monotonic() - t0
            rss2 = process_rss_mb(b.pid)
            print(
                f"RSS before {rss0:.0f} MB, with {args.clients} unread fetches {rss1:.0f} MB, "
                f"after reading {rss2:.0f} MB; responses {[x >> 20 for x in sizes]} MiB read "
                f"in {dt:.2f} s ({sum(sizes) / dt / 1e6:.0f} MB/s)"
            )
        finally:
            c.down()


if __name__ == "__main__":
    main()
