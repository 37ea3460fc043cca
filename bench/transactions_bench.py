"""Transactional vs idempotent producer throughput (issue 18): 1 KB records, RF 3.

Starts a 3-broker cluster (real ZooKeeper and broker processes), then runs interleaved
rounds: in each, an idempotent producer and a transactional producer that commits every
``--commit-ms`` (100 ms) each write for ``--seconds`` to a fresh 3-partition RF-3 topic
(deleted after the run). Throughput counts records acknowledged (idempotent) or
committed (transactional). Prints each run, the per-round ratio and the medians.

    .venv/bin/python bench/transactions_bench.py --rounds 3 --seconds 10

Kafka reports a few percent of overhead for transactions; the aim here is >= 0.8x.
``--unverified`` adds a third run per round, the transactional producer with KIP-890
verification switched off (``transaction.partition.verification.enable=false`` as the
brokers' dynamic default, restored after the run): the cost of verification.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster.local import LocalCluster

logger = logging.getLogger(__name__)

VALUE = b"x" * 1024


def _topic(admin: AdminClient) -> str:
    name = f"txbench-{uuid.uuid4().hex[:8]}"
    admin.create_topics(
        [NewTopic(name, 3, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
    )[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = admin.list_topics(name, timeout=10).topics.get(name)
        if t is not None and t.error is None and all(p.leader >= 0 for p in t.partitions.values()):
            return name
        time.sleep(0.1)
    raise RuntimeError(f"no leaders for {name}")


def run_idempotent(bs: str, topic: str, seconds: float) -> float:
    acked = 0

    def done(err: object, _msg: object) -> None:
        nonlocal acked
        if err is None:
            acked += 1

    p = Producer(
        {"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5, "acks": "all"}
    )
    t0 = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, VALUE, on_delivery=done)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.flush(60)
    return acked / (time.monotonic() - t0)


def run_transactional(bs: str, topic: str, seconds: float, commit_ms: int) -> float:
    p = Producer(
        {
            "bootstrap.servers": bs,
            "transactional.id": f"bench-{uuid.uuid4().hex[:6]}",
            "linger.ms": 5,
        }
    )
    p.init_transactions(60)
    committed = 0
    t0 = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        p.begin_transaction()
        n = 0
        close = min(end, time.monotonic() + commit_ms / 1000)
        while time.monotonic() < close:
            try:
                p.produce(topic, VALUE)
                n += 1
            except BufferError:
                p.poll(0.01)
            p.poll(0)
        p.commit_transaction(60)
        committed += n
    return committed / (time.monotonic() - t0)


def _verification(bs: str, on: bool) -> None:
    key = "transaction.partition.verification.enable"
    change = ("--delete-config", key) if on else ("--add-config", f"{key}=false")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "odradek",
            "configs",
            "--bootstrap-server",
            bs,
            "--entity-type",
            "brokers",
            "--entity-default",
            "--alter",
            *change,
        ],
        check=True,
        capture_output=True,
        timeout=90,
    )
    time.sleep(1.0)  # the brokers apply it at their next metadata update (well under 1 s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--commit-ms", type=int, default=100)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument(
        "--unverified",
        action="store_true",
        help="also run the transactional producer without KIP-890 verification",
    )
    args = ap.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="txbench-"))
    c = LocalCluster.start(
        base / "cluster",
        3,
        broker_config={
            "transaction.state.log.num.partitions": "3",
            "offsets.topic.num.partitions": "3",
        },
    )
    try:
        bs = c.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        kinds = ["idempotent", "transactional"] + (["unverified"] if args.unverified else [])
        rates: dict[str, list[float]] = {k: [] for k in kinds}
        idem, txn = rates["idempotent"], rates["transactional"]
        for r in range(args.rounds):
            for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:  # interleaved
                topic = _topic(admin)
                if kind == "idempotent":
                    rate = run_idempotent(bs, topic, args.seconds)
                elif kind == "transactional":
                    rate = run_transactional(bs, topic, args.seconds, args.commit_ms)
                else:
                    _verification(bs, on=False)
                    try:
                        rate = run_transactional(bs, topic, args.seconds, args.commit_ms)
                    finally:
                        _verification(bs, on=True)
                rates[kind].append(rate)
                admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
                print(
                    f"round {r + 1} {kind:13s} {rate:10.0f} records/s "
                    f"({rate * len(VALUE) / 1e6:.1f} MB/s)",
                    flush=True,
                )
        ratios = [t / i for t, i in zip(txn, idem)]
        print(f"median idempotent     {statistics.median(idem):10.0f} records/s")
        print(f"median transactional  {statistics.median(txn):10.0f} records/s")
        print(
            f"per-round ratios {[f'{x:.2f}' for x in ratios]}, "
            f"median {statistics.median(ratios):.2f}x (aim >= 0.8x)"
        )
        if args.unverified:
            unv = rates["unverified"]
            vr = [t / u for t, u in zip(txn, unv)]
            print(f"median unverified     {statistics.median(unv):10.0f} records/s")
            print(
                f"verified / unverified per round {[f'{x:.2f}' for x in vr]}, "
                f"median {statistics.median(vr):.2f}x"
            )
    finally:
        c.down()


if __name__ == "__main__":
    main()
