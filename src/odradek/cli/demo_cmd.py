"""``odradek demo``: the README's main job."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="the main job: a local cluster and a verified pipeline",
        description="By default: a Spark Structured Streaming pipeline on a "
        "3-broker cluster, with a leader SIGKILLed midway and the result "
        "checked against a batch recomputation. --basic: produce and consume "
        "records with confluent-kafka and verify them.",
    )
    p.add_argument("--basic", action="store_true", help="the client round trip only")
    p.add_argument("--seconds", type=int, default=20, help="pipeline: how long to produce")
    p.add_argument("--rate", type=int, default=1000, help="pipeline: page views per second")
    p.add_argument("--no-kill", action="store_true", help="pipeline: no leader crash")
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--record-size", type=int, default=100)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--dir", type=Path, default=None, help="working directory (default: temp)")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="pipeline: details, librdkafka and Spark output on the terminal too",
    )
    p.add_argument("--no-console", action="store_true", help="pipeline: no web console")
    p.add_argument(
        "--security",
        choices=("plaintext", "sasl_ssl"),
        default="plaintext",
        help="sasl_ssl runs it on a secured cluster (TLS, SCRAM, ACLs, "
        "ZooKeeper authentication) as its admin user",
    )
    p.add_argument(
        "--spark-master",
        default=None,
        help="pipeline: run on this Spark standalone master (spark://host:port) "
        "instead of local[2], or 'standalone' to start a master and two workers "
        "for the run; the connector ships to executors as a zip",
    )
    p.add_argument(
        "--hosts",
        choices=("loopback", "netns"),
        default="loopback",
        help="netns (root): brokers and ZooKeeper as separate hosts (network "
        "namespaces); with --spark-master standalone the Spark workers run on "
        "client hosts c1 and c2",
    )
    p.add_argument(
        "--spark-driver-host",
        default="127.0.0.1",
        help="with --spark-master: the address executors reach the driver on",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.basic:
        from odradek.demo import run_demo  # noqa: PLC0415

        return run_demo(
            args.brokers,
            args.records,
            args.record_size,
            args.partitions,
            args.dir,
            security=args.security,
        )
    from odradek.pipeline_demo import run_pipeline_demo  # noqa: PLC0415

    return run_pipeline_demo(
        args.seconds,
        args.rate,
        args.dir,
        kill_leader=not args.no_kill,
        verbose=args.verbose,
        console=not args.no_console,
        spark_master=args.spark_master,
        driver_host=args.spark_driver_host,
        security=args.security,
        hosts=args.hosts,
    )
