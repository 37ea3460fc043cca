"""``odradek consumer-groups``: kafka-consumer-groups.sh's options and output, over the protocol.

It uses confluent-kafka's AdminClient (a real Kafka client: ListGroups, DescribeGroups,
OffsetFetch, OffsetCommit, DeleteGroups, ListOffsets), so it works against any broker.

    --list
    --describe --group G [--members | --state]
    --reset-offsets --group G --topic T (--to-earliest | --to-latest | --to-offset N |
                    --to-datetime ISO | --shift-by N) (--dry-run | --execute)
    --delete --group G
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from odradek.cli.common import add_command_config, admin_client

_TIMEOUT_S = 30.0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "consumer-groups",
        help="list, describe, reset and delete consumer groups",
        description="Like kafka-consumer-groups.sh.",
    )
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true")
    action.add_argument("--describe", action="store_true")
    action.add_argument("--reset-offsets", action="store_true")
    action.add_argument("--delete", action="store_true")
    p.add_argument("--group")
    p.add_argument("--topic")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true")
    view.add_argument("--state", action="store_true")
    view.add_argument("--offsets", action="store_true", help="the default view of --describe")
    spec = p.add_mutually_exclusive_group()
    spec.add_argument("--to-earliest", action="store_true")
    spec.add_argument("--to-latest", action="store_true")
    spec.add_argument("--to-offset", type=int)
    spec.add_argument("--to-datetime", help="e.g. 2024-01-31T12:00:00.000 (local time) or with Z")
    spec.add_argument("--shift-by", type=int)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true")
    mode.add_argument("--execute", action="store_true")
    add_command_config(p)
    p.set_defaults(func=_run)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException  # noqa: PLC0415

    if not args.list and not args.group:
        print("Option --group is required with this action", file=sys.stderr)
        return 2
    admin = admin_client(args)
    try:
        if args.list:
            res = admin.list_consumer_groups(request_timeout=_TIMEOUT_S).result()
            for g in sorted(res.valid, key=lambda g: g.group_id):
                print(g.group_id)
            return 0
        if args.describe:
            return _describe(admin, args)
        if args.reset_offsets:
            return _reset(admin, args)
        if args.delete:
            return _delete(admin, args.group)
    except KafkaException as e:
        err = e.args[0]
        name = err.name() if hasattr(err, "name") else str(err)
        print(f"Error: {name}: {err.str() if hasattr(err, 'str') else err}", file=sys.stderr)
        return 1
    return 2


# =============================================================================== describe
def _describe_group(admin: Any, group: str) -> Any:
    return admin.describe_consumer_groups([group], request_timeout=_TIMEOUT_S)[group].result()


def _committed(admin: Any, group: str) -> dict[tuple[str, int], Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions  # noqa: PLC0415

    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=_TIMEOUT_S
    )[group].result()
    return {(tp.topic, tp.partition): tp for tp in res.topic_partitions if tp.offset >= 0}


def _list_offsets(admin: Any, tps: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition  # noqa: PLC0415

    if not tps:
        return {}
    futs = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in tps}, request_timeout=_TIMEOUT_S
    )
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futs.items()}


def _state_name(desc: Any) -> str:
    s = desc.state
    names = {
        "STABLE": "Stable",
        "EMPTY": "Empty",
        "DEAD": "Dead",
        "PREPARING_REBALANCING": "PreparingRebalance",
        "COMPLETING_REBALANCING": "CompletingRebalance",
    }
    return names.get(getattr(s, "name", str(s)), getattr(s, "name", str(s)).title())


def _describe(admin: Any, args: argparse.Namespace) -> int:
    from confluent_kafka.admin import OffsetSpec  # noqa: PLC0415

    group = args.group
    desc = _describe_group(admin, group)
    state = _state_name(desc)
    if state == "Dead":
        print(f"Error: Consumer group '{group}' does not exist.", file=sys.stderr)
        return 1
    if args.state:
        c = desc.coordinator
        print(
            _table(
                [
                    ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                    [
                        group,
                        f"{c.host}:{c.port} ({c.id})",
                        desc.partition_assignor or "",
                        state,
                        str(len(desc.members)),
                    ],
                ]
            )
        )
        return 0
    if args.members:
        if not desc.members:
            print(f"Consumer group '{group}' has no active members.")
            return 0
        rows = [["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]]
        for m in desc.members:
            n = len(m.assignment.topic_partitions) if m.assignment else 0
            rows.append([group, m.member_id, m.host or "/", m.client_id, str(n)])
        print(_table(rows))
        return 0
    owner: dict[tuple[str, int], Any] = {}
    for m in desc.members:
        for tp in m.assignment.topic_partitions if m.assignment else []:
            owner[(tp.topic, tp.partition)] = m
    committed = _committed(admin, group)
    tps = sorted(set(committed) | set(owner))
    ends = _list_offsets(admin, tps, OffsetSpec.latest())
    if not desc.members:
        print(f"Consumer group '{group}' has no active members.")
    rows = [
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
    ]
    total = 0
    for t, p in tps:
        cur = committed.get((t, p))
        end = ends.get((t, p), -1)
        lag = "-"
        if cur is not None and end >= 0:
            total += max(end - cur.offset, 0)
            lag = str(max(end - cur.offset, 0))
        m = owner.get((t, p))
        rows.append(
            [
                group,
                t,
                str(p),
                str(cur.offset) if cur is not None else "-",
                str(end) if end >= 0 else "-",
                lag,
                m.member_id if m else "-",
                (m.host or "/") if m else "-",
                m.client_id if m else "-",
            ]
        )
    print()
    print(_table(rows))
    print(f"\nTOTAL-LAG {total}")
    return 0


# =============================================================================== reset
def _parse_datetime(text: str) -> int:
    t = text.strip()
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    dt = datetime.datetime.fromisoformat(t)
    if dt.tzinfo is None:
        dt = dt.astimezone()  # local time, as kafka-consumer-groups does
    return int(dt.timestamp() * 1000)


def _reset(admin: Any, args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition  # noqa: PLC0415
    from confluent_kafka.admin import OffsetSpec  # noqa: PLC0415

    group = args.group
    if not args.topic:
        print("Option --topic is required with --reset-offsets", file=sys.stderr)
        return 2
    if not (args.dry_run or args.execute):
        print(
            "WARN: No action will be performed as the --execute option is missing. "
            "Use --dry-run or --execute.",
            file=sys.stderr,
        )
    desc = _describe_group(admin, group)
    state = _state_name(desc)
    if state not in ("Empty", "Dead"):
        print(
            f"Error: Assignments can only be reset if the group '{group}' is inactive, but "
            f"the current state is {state}.",
            file=sys.stderr,
        )
        return 1
    topic, _, only = args.topic.partition(":")
    md = admin.list_topics(topic, timeout=_TIMEOUT_S)
    meta = md.topics.get(topic)
    if meta is None or meta.error is not None:
        print(f"Error: topic {topic} does not exist", file=sys.stderr)
        return 1
    parts = sorted(meta.partitions)
    if only:
        parts = [int(x) for x in only.split(",")]
    tps = [(topic, p) for p in parts]
    low = _list_offsets(admin, tps, OffsetSpec.earliest())
    high = _list_offsets(admin, tps, OffsetSpec.latest())
    committed = _committed(admin, group)
    new: dict[tuple[str, int], int] = {}
    if args.to_earliest:
        new = dict(low)
    elif args.to_latest:
        new = dict(high)
    elif args.to_offset is not None:
        new = {tp: min(max(args.to_offset, low[tp]), high[tp]) for tp in tps}
    elif args.shift_by is not None:
        for tp in tps:
            cur = committed[tp].offset if tp in committed else low[tp]
            new[tp] = min(max(cur + args.shift_by, low[tp]), high[tp])
    elif args.to_datetime is not None:
        found = _list_offsets(
            admin, tps, OffsetSpec.for_timestamp(_parse_datetime(args.to_datetime))
        )
        new = {tp: (found[tp] if found.get(tp, -1) >= 0 else high[tp]) for tp in tps}
    else:
        print(
            "One of the reset specifications is required (--to-earliest, --to-latest, "
            "--to-offset, --to-datetime, --shift-by)",
            file=sys.stderr,
        )
        return 2
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group, t, str(p), str(new[(t, p)])] for t, p in tps]
    print()
    print(_table(rows))
    if args.execute:
        req = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, new[(t, p)]) for t, p in tps]
        )
        res = admin.alter_consumer_group_offsets([req], request_timeout=_TIMEOUT_S)[group]
        for tp in res.result().topic_partitions:
            if tp.error is not None:
                print(f"Error: {tp.topic}-{tp.partition}: {tp.error}", file=sys.stderr)
                return 1
    return 0


# =============================================================================== delete
def _delete(admin: Any, group: str) -> int:
    from confluent_kafka import KafkaException  # noqa: PLC0415

    try:
        admin.delete_consumer_groups([group], request_timeout=_TIMEOUT_S)[group].result()
    except KafkaException as e:
        err = e.args[0]
        name = err.name() if hasattr(err, "name") else str(err)
        print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
        print(f"* Group '{group}' could not be deleted due to: {name}", file=sys.stderr)
        return 1
    print(f"Deletion of requested consumer groups ('{group}') was successful.")
    return 0
