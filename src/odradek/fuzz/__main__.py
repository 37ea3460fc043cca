"""``python -m odradek.fuzz``: fuzz a broker with mutated requests (docs/security.md).

Without ``--bootstrap`` it starts its own 1-broker cluster (real ZooKeeper, real broker
process) in a temporary directory with ``FUZZ_BROKER_CONFIG`` and brings it down after.

    .venv/bin/python -m odradek.fuzz --minutes 30 --seed 7 --report fuzz-report.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from odradek.fuzz.harness import FuzzConfig, FuzzReport, run_fuzz

logger = logging.getLogger(__name__)

# Broker settings of the self-started cluster: Kafka's defaults except what keeps a long
# run's side effects bounded (mutated CreateTopics and auto-creation make topics: at most
# 2,000 partitions on disk) and fast (no initial rebalance delay for mutated JoinGroups).
FUZZ_BROKER_CONFIG = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "10",
    "group.initial.rebalance.delay.ms": "0",
    "odradek.max.partitions": "2000",
    "odradek.max.partitions.per.request": "100",
}


def _summary(r: FuzzReport) -> str:
    rate = r.requests / r.elapsed_s if r.elapsed_s else 0.0
    return (
        f"{r.requests} requests ({rate:.0f}/s) over {len(r.per_api)} APIs: "
        f"{r.answered} answered, {r.closed} closed, {r.unanswered} unanswered in time; "
        f"{r.checks} checks, {r.round_trips} round trips; RSS {r.rss_start_mb:.0f} -> "
        f"max {r.rss_max_mb:.0f} MB; failures: {len(r.failures)}; distinct unexpected "
        f"handler failures: {len(r.handler_failures)}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m odradek.fuzz", description=__doc__)
    ap.add_argument("--bootstrap", help="fuzz this broker (host:port) instead of a new cluster")
    ap.add_argument("--broker-pid", type=int, help="its pid (liveness and RSS checks)")
    ap.add_argument("--broker-log", help="its log file (to list unexpected handler failures)")
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--max-requests", type=int)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--rss-ceiling-mb", type=float, default=600.0)
    ap.add_argument("--check-every", type=float, default=10.0, help="seconds between checks")
    ap.add_argument("--report", help="write the JSON report here")
    ap.add_argument("--dir", help="cluster directory (default: a temporary one)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)

    cfg = FuzzConfig(
        bootstrap=args.bootstrap or "",
        broker_pid=args.broker_pid,
        broker_log=args.broker_log,
        duration_s=args.minutes * 60,
        max_requests=args.max_requests,
        seed=args.seed,
        workers=args.workers,
        rss_ceiling_mb=args.rss_ceiling_mb,
        check_every_s=args.check_every,
    )

    def progress(r: FuzzReport) -> None:
        logger.info(
            "%d requests, %d answered, %d closed, %d unanswered",
            r.requests,
            r.answered,
            r.closed,
            r.unanswered,
        )

    if args.bootstrap:
        report = run_fuzz(cfg, progress)
    else:
        from odradek.cluster.local import LocalCluster  # noqa: PLC0415

        tmp = None if args.dir else tempfile.TemporaryDirectory(prefix="odradek-fuzz-")
        root = Path(args.dir or tmp.name)  # type: ignore[union-attr]
        cluster = LocalCluster.start(root / "cluster", 1, broker_config=FUZZ_BROKER_CONFIG)
        try:
            b = cluster.broker(1)
            cfg.bootstrap, cfg.broker_pid, cfg.broker_log = b.address, b.pid, b.log
            t0 = time.monotonic()
            report = run_fuzz(cfg, progress)
            logger.info("fuzzing took %.0f s", time.monotonic() - t0)
        finally:
            cluster.down()
            if tmp is not None:
                tmp.cleanup()
    print(_summary(report))
    for f in report.failures:
        print("FAILURE:", f)
    for site, n in sorted(report.handler_failures.items(), key=lambda kv: -kv[1]):
        print(f"unexpected handler failure x{n}: {site}")
    if args.report:
        Path(args.report).write_text(json.dumps(report.as_dict(), indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
