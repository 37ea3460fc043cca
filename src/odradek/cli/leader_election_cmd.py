"""``odradek leader-election``: kafka-leader-election.sh's options and output (REQ-R5).

It sends ElectLeaders (API 43) with confluent-kafka's AdminClient (a real Kafka client),
so it works against Kafka too. Output lines are kafka-leader-election.sh's::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: <error>

Exit status 1 if any partition failed (Kafka's tool throws AdminCommandFailedException).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from odradek.cli.common import add_command_config, client_config


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "leader-election",
        help="elect preferred or unclean leaders",
        description="Like kafka-leader-election.sh.",
    )
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument(
        "--election-type", required=True, type=str.lower, choices=["preferred", "unclean"]
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic")
    which.add_argument("--all-topic-partitions", action="store_true")
    which.add_argument(
        "--path-to-json-file",
        type=Path,
        help='{"partitions": [{"topic": "t", "partition": 0}, ...]}',
    )
    p.add_argument("--partition", type=int)
    p.add_argument(
        "--admin.config",
        dest="admin_config",
        type=Path,
        help="client properties file (same as --command-config)",
    )
    add_command_config(p)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    p.set_defaults(func=_run)


def _partitions_from_json(path: Path) -> list[tuple[str, int]]:
    obj = json.loads(path.read_text())
    return [(str(e["topic"]), int(e["partition"])) for e in obj["partitions"]]


def _client_conf(args: argparse.Namespace) -> dict[str, str]:
    if args.admin_config is not None:
        args.command_config = [str(args.admin_config), *args.command_config]
    return client_config(args)


def _run(args: argparse.Namespace) -> int:
    from confluent_kafka import ElectionType, KafkaException, TopicPartition  # noqa: PLC0415
    from confluent_kafka import KafkaError as CKError  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    if args.topic is not None and args.partition is None:
        print("Missing required option(s): [partition]", file=sys.stderr)
        return 2
    if args.topic is None and args.partition is not None:
        print("Option partition is only allowed if topic is used", file=sys.stderr)
        return 2
    if args.path_to_json_file is not None:
        wanted: list[tuple[str, int]] | None = _partitions_from_json(args.path_to_json_file)
    elif args.all_topic_partitions:
        wanted = None
    else:
        wanted = [(args.topic, args.partition)]
    etype = ElectionType.PREFERRED if args.election_type == "preferred" else ElectionType.UNCLEAN
    label = etype.name
    conf = _client_conf(args)
    # confluent-kafka 2.16.1's elect_leaders rejects its own request_timeout /
    # operation_timeout keywords (a binding bug: "more argument specifiers than keyword
    # list entries"); both default to socket.timeout.ms, so set that instead.
    conf.setdefault("socket.timeout.ms", str(int(args.timeout * 1000)))
    admin = AdminClient(conf)
    tps = None if wanted is None else [TopicPartition(t, p) for t, p in wanted]
    try:
        results = admin.elect_leaders(etype, tps).result()
    except KafkaException as e:
        print(f"Error completing leader election ({label}): {e.args[0]}", file=sys.stderr)
        return 1
    succeeded: list[str] = []
    noop: list[str] = []
    failed: list[tuple[str, str]] = []
    for tp, err in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        kerr = err.args[0] if isinstance(err, KafkaException) and err.args else err
        if err is None:
            succeeded.append(name)
        elif isinstance(kerr, CKError) and kerr.code() == CKError.ELECTION_NOT_NEEDED:
            noop.append(name)
        else:
            failed.append((name, _describe(kerr)))
    if succeeded:
        print(
            f"Successfully completed leader election ({label}) for partitions "
            f"{', '.join(succeeded)}"
        )
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}")
    for name, why in failed:
        print(f"Error completing leader election ({label}) for partition: {name}: {why}")
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0


def _describe(err: Any) -> str:
    name = getattr(err, "name", None)
    text = getattr(err, "str", None)
    if callable(name) and callable(text):
        return f"{name()}: {text()}"
    return str(err)
