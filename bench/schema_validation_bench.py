#!/usr/bin/env python
"""Produce throughput with broker-side schema id validation on vs off (issue 27).

A benchmark, not a timed test: run it by hand (bench/README.md).

One broker started as ``odradek cluster up`` starts it (with its schema registry and
``confluent.schema.registry.url``). Every record is a 100-byte Avro-framed value (magic
byte 0, the 4-byte id of a registered schema, a 95-byte Avro body), produced by
confluent-kafka with bench/broker_throughput.py's producer settings (acks=1,
linger.ms=5, batch.size=1000000) as fast as it can to a 4-partition topic with
``confluent.value.schema.validation=true`` ("on") or without ("off"). The two modes
alternate over ``--rounds`` (off, on, off, on, ...), each on a fresh topic, so slow drift
of the shared machine hits both alike. A warm-up produce to a validating topic comes
first (the broker loads its compiled record walk on first use: a one-time cost, reported
apart). Reported: records/s per run, the median per
mode, and on / off of the medians (aim: >= 0.8); and the broker's CPU time per record
(utime + stime from /proc, all its threads), which shows the validation's cost even when
the client, not the broker, limits the rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_throughput import PRODUCER_PROPS

from odradek.cluster.local import LocalCluster
from odradek.perf import proc_cpu_seconds

PARTITIONS = 4
SCHEMA = {
    "type": "record",
    "name": "Reading",
    "namespace": "bench",
    "fields": [{"name": "s", "type": "string"}],
}


def register(url: str, subject: str) -> int:
    import urllib.request

    body = json.dumps({"schema": json.dumps(SCHEMA)}).encode()
    req = urllib.request.Request(
        f"{url}/subjects/{subject}/versions",
        data=body,
        method="POST",
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(json.loads(resp.read())["id"])


def value(schema_id: int) -> bytes:
    s = b"x" * 93  # Avro string: zig-zag varint length (2 bytes for 93) + bytes
    body = bytes([(93 * 2) & 0x7F | 0x80, (93 * 2) >> 7]) + s
    v = b"\x00" + schema_id.to_bytes(4, "big") + body
    assert len(v) == 100
    return v


def create(bootstrap: str, topic: str, validate: bool) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap})
    cfg = {"confluent.value.schema.validation": "true"} if validate else {}
    a.create_topics([NewTopic(topic, PARTITIONS, 1, config=cfg)])[topic].result(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = a.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == PARTITIONS
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} not ready")


def produce(
    bootstrap: str, topic: str, payload: bytes, records: int, compression: str
) -> tuple[float, int]:
    """(records/s from the first produce() to the last delivery, failed deliveries)."""
    from confluent_kafka import Producer

    p = Producer(
        {"bootstrap.servers": bootstrap, **PRODUCER_PROPS, "compression.type": compression}
    )
    errors = [0]

    def report(err: object, _msg: object) -> None:
        if err is not None:
            errors[0] += 1

    t0 = time.monotonic()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, payload, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(300) != 0:
        raise RuntimeError("undelivered records after 300 s")
    return records / (time.monotonic() - t0), errors[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=1_000_000, help="records per run (100 B)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--warm-up",
        type=int,
        default=500_000,
        help="records produced to a validating topic before the rounds",
    )
    ap.add_argument(
        "--compression",
        default="none",
        help="the producer's compression.type (validation decompresses)",
    )
    ap.add_argument("--dir", type=Path, default=None, help="cluster dir (default: a temp dir)")
    args = ap.parse_args(argv)
    base = args.dir or Path(tempfile.mkdtemp(prefix="odradek-validation-bench-"))
    runs: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[float]] = {"off": [], "on": []}  # broker CPU µs per record
    with LocalCluster.start(base / "cluster", 1, schema_registry=True) as c:
        assert c.schema_registry is not None
        url = c.schema_registry["url"]
        pid = c.brokers[0].pid
        assert pid is not None
        # The broker loads its compiled record walk (numba) on the first validating
        # produce, walking in Python meanwhile: a one-time cost, measured apart.
        warm = f"warm-up-{int(time.time() * 1000) % 10**8}"
        create(c.bootstrap_servers, warm, True)
        cpu0 = proc_cpu_seconds(pid)
        produce(
            c.bootstrap_servers,
            warm,
            value(register(url, f"{warm}-value")),
            args.warm_up,
            args.compression,
        )
        print(
            f"warm-up (first validating produce, numba loaded): {args.warm_up:,} records, "
            f"broker {(proc_cpu_seconds(pid) - cpu0) * 1e6 / args.warm_up:.2f} "
            f"CPU µs/record",
            flush=True,
        )
        for rnd in range(1, args.rounds + 1):
            for mode in ("off", "on"):
                topic = f"{mode}-{rnd}-{int(time.time() * 1000) % 10**8}"
                create(c.bootstrap_servers, topic, mode == "on")
                sid = register(url, f"{topic}-value")
                cpu0 = proc_cpu_seconds(pid)
                rate, errors = produce(
                    c.bootstrap_servers, topic, value(sid), args.records, args.compression
                )
                cpu[mode].append((proc_cpu_seconds(pid) - cpu0) * 1e6 / args.records)
                if errors:
                    raise RuntimeError(f"{errors} records refused on {topic}")
                runs[mode].append(rate)
                print(
                    f"round {rnd} {mode}: {rate:,.0f} records/s, broker "
                    f"{cpu[mode][-1]:.2f} CPU µs/record",
                    flush=True,
                )
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    print(
        "\n| mode | records/s per round | median | broker CPU µs/record per round | median |"
        "\n| --- | --- | --- | --- | --- |"
    )
    for mode, rates in runs.items():
        print(
            f"| {mode} | {', '.join(f'{r:,.0f}' for r in rates)} | "
            f"{statistics.median(rates):,.0f} | {', '.join(f'{x:.2f}' for x in cpu[mode])} | "
            f"{statistics.median(cpu[mode]):.2f} |"
        )
    print(f"\non / off (medians): {on / off:.2f} (aim >= 0.8)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
