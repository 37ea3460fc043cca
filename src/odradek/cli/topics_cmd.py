"""``odradek topics``: kafka-topics.sh's options and output format, over the Kafka protocol.

It talks to the brokers with confluent-kafka's AdminClient (a real Kafka client), so it
works against any broker that speaks the protocol.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from odradek.cli.common import add_command_config, admin_client


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "topics",
        help="create, list, describe and delete topics",
        description="Like kafka-topics.sh.",
    )
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true")
    action.add_argument("--list", action="store_true")
    action.add_argument("--describe", action="store_true")
    action.add_argument("--delete", action="store_true")
    action.add_argument("--alter", action="store_true")
    p.add_argument("--topic")
    p.add_argument("--partitions", type=int)
    p.add_argument("--replication-factor", type=int)
    p.add_argument(
        "--replica-assignment",
        help="broker lists per partition, e.g. 1:2,2:3 (partition 0 on 1,2 ...)",
    )
    p.add_argument("--config", action="append", default=[], metavar="K=V")
    p.add_argument("--if-not-exists", action="store_true")
    p.add_argument("--if-exists", action="store_true")
    p.add_argument("--under-replicated-partitions", action="store_true")
    p.add_argument("--unavailable-partitions", action="store_true")
    p.add_argument("--under-min-isr-partitions", action="store_true")
    p.add_argument("--at-min-isr-partitions", action="store_true")
    p.add_argument("--exclude-internal", action="store_true")
    add_command_config(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException  # noqa: PLC0415
    from confluent_kafka.admin import NewPartitions, NewTopic  # noqa: PLC0415

    admin = admin_client(args)
    try:
        if args.list:
            md = admin.list_topics(timeout=15)
            for name in sorted(md.topics):
                if args.exclude_internal and name.startswith("__"):
                    continue
                print(name)
            return 0
        if args.describe:
            return _describe(admin, args)
        if not args.topic:
            print("--topic is required", file=sys.stderr)
            return 2
        if args.create:
            kw: dict[str, Any] = {"config": dict(kv.split("=", 1) for kv in args.config)}
            if args.replica_assignment:
                kw["replica_assignment"] = [
                    [int(b) for b in part.split(":")] for part in args.replica_assignment.split(",")
                ]
            else:
                kw["num_partitions"] = args.partitions if args.partitions else -1
                kw["replication_factor"] = (
                    args.replication_factor if args.replication_factor else -1
                )
            fut = admin.create_topics([NewTopic(args.topic, **kw)], operation_timeout=30)
            try:
                fut[args.topic].result()
            except KafkaException as e:
                if args.if_not_exists and e.args[0].code() == 36:
                    return 0
                raise
            print(f"Created topic {args.topic}.")
            return 0
        if args.delete:
            fut = admin.delete_topics([args.topic], operation_timeout=30)
            try:
                fut[args.topic].result()
            except KafkaException as e:
                if args.if_exists and e.args[0].code() == 3:
                    return 0
                raise
            return 0
        if args.alter:
            if not args.partitions:
                print("--alter needs --partitions", file=sys.stderr)
                return 2
            fut = admin.create_partitions(
                [NewPartitions(args.topic, args.partitions)], operation_timeout=30
            )
            fut[args.topic].result()
            return 0
    except KafkaException as e:
        err = e.args[0]
        print(f"Error while executing topic command : {err.str()}", file=sys.stderr)
        return 1
    return 2


def _describe(admin: Any, args: argparse.Namespace) -> int:
    md = (
        admin.list_topics(topic=args.topic, timeout=15)
        if args.topic
        else admin.list_topics(timeout=15)
    )
    live = set(md.brokers)
    for name in sorted(md.topics):
        t = md.topics[name]
        if args.exclude_internal and name.startswith("__"):
            continue
        if t.error is not None:
            print(f"Error while executing topic command : {t.error.str()}", file=sys.stderr)
            return 1
        parts = [t.partitions[p] for p in sorted(t.partitions)]
        filtering = (
            args.under_replicated_partitions
            or args.unavailable_partitions
            or args.under_min_isr_partitions
            or args.at_min_isr_partitions
        )
        min_isr = (
            _min_isr(admin, name)
            if args.under_min_isr_partitions or args.at_min_isr_partitions
            else 1
        )
        if not filtering:
            rf = len(parts[0].replicas) if parts else 0
            print(
                f"Topic: {name}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\tConfigs: "
            )
        for p in parts:
            if args.under_replicated_partitions and len(p.isrs) >= len(p.replicas):
                continue
            if args.unavailable_partitions and p.leader in live:
                continue
            if args.under_min_isr_partitions and len(p.isrs) >= min_isr:
                continue
            if args.at_min_isr_partitions and len(p.isrs) != min_isr:
                continue
            leader = p.leader if p.leader >= 0 else "none"
            print(
                f"\tTopic: {name}\tPartition: {p.id}\tLeader: {leader}\t"
                f"Replicas: {','.join(map(str, p.replicas))}\t"
                f"Isr: {','.join(map(str, p.isrs))}"
            )
    return 0


def _min_isr(admin: Any, topic: str) -> int:
    from confluent_kafka.admin import ConfigResource, ResourceType  # noqa: PLC0415

    res = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(15)
    return int(configs["min.insync.replicas"].value)
