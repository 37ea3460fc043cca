"""``odradek reassign-partitions``: kafka-reassign-partitions.sh's options, files and output.

    --generate --topics-to-move-json-file F --broker-list 1,2,3
    --execute  --reassignment-json-file F [--throttle BYTES_PER_S]
    --verify   --reassignment-json-file F [--preserve-throttles]
    --cancel   --reassignment-json-file F [--preserve-throttles]
    --list

Files are Kafka's: ``{"topics":[{"topic":"t"}],"version":1}`` to generate from, and
``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3],
"log_dirs":["any","any","any"]}]}`` for a reassignment (``log_dirs`` other than "any"
are refused: Odradek has one log directory per broker).

It speaks the Kafka protocol only (Metadata, AlterPartitionReassignments,
ListPartitionReassignments, IncrementalAlterConfigs), so it works against Kafka too.
``--throttle`` does what Kafka's tool does: ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` on every broker of the moving partitions, and the
topic configs ``leader.replication.throttled.replicas`` (the current replicas) and
``follower.replication.throttled.replicas`` (the replicas being added); ``--verify``
removes them once every listed reassignment is complete.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from odradek.cli.common import add_command_config, command_properties
from odradek.client.connection import KafkaConnection, parse_address
from odradek.protocol.client_codec import nested_request, request_entity
from odradek.security.client_security import PLAINTEXT, ClientSecurity
from odradek.zk.assignment import assign_replicas

TopicPartition = tuple[str, int]
Assignment = dict[TopicPartition, list[int]]

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
OP_SET = 0
OP_DELETE = 1
BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
TOPIC_THROTTLES = (
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
)


class ReassignError(Exception):
    """A user-facing failure: printed to stderr, exit status 1."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "reassign-partitions",
        help="move partition replicas between brokers",
        description="Like kafka-reassign-partitions.sh.",
    )
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true")
    action.add_argument("--execute", action="store_true")
    action.add_argument("--verify", action="store_true")
    action.add_argument("--cancel", action="store_true")
    action.add_argument("--list", action="store_true")
    p.add_argument("--topics-to-move-json-file", type=Path)
    p.add_argument("--broker-list", help="comma-separated broker ids (--generate)")
    p.add_argument("--reassignment-json-file", type=Path)
    add_command_config(p)
    p.add_argument(
        "--throttle",
        type=int,
        default=-1,
        help="inter-broker replication limit in bytes/s (--execute)",
    )
    p.add_argument("--preserve-throttles", action="store_true")
    p.add_argument(
        "--disable-rack-aware",
        action="store_true",
        help="accepted for compatibility (assignment is rack-unaware)",
    )
    p.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")
    p.set_defaults(func=_run)


# =============================================================================== pure
def parse_topics_to_move(text: str) -> list[str]:
    obj = json.loads(text)
    try:
        return [str(t["topic"]) for t in obj["topics"]]
    except (KeyError, TypeError) as e:
        raise ReassignError(f"malformed topics-to-move JSON: {e}") from e


def parse_reassignment(text: str) -> Assignment:
    """Kafka's reassignment JSON -> {(topic, partition): replicas}, with its checks."""
    obj = json.loads(text)
    out: Assignment = {}
    try:
        for e in obj["partitions"]:
            tp = (str(e["topic"]), int(e["partition"]))
            replicas = [int(b) for b in e["replicas"]]
            dirs = e.get("log_dirs")
            if dirs is not None and any(d != "any" for d in dirs):
                raise ReassignError(
                    "log_dirs other than \"any\" are not supported (one log directory per broker)"
                )
            if tp in out:
                raise ReassignError(
                    f"Partition reassignment list cannot contain duplicate "
                    f"partitions. Found duplicates: {tp[0]}-{tp[1]}"
                )
            if len(set(replicas)) != len(replicas):
                raise ReassignError(
                    f"Partition replica lists may not contain duplicate "
                    f"entries: {tp[0]}-{tp[1]} contains {replicas}"
                )
            if not replicas:
                raise ReassignError(f"Partition replica list cannot be empty: {tp[0]}-{tp[1]}")
            out[tp] = replicas
    except (KeyError, TypeError, ValueError) as e:
        raise ReassignError(f"malformed reassignment JSON: {e}") from e
    if not out:
        raise ReassignError("Partition reassignment list cannot be empty")
    return out


def format_assignment(a: Assignment) -> str:
    """Kafka's formatAsReassignmentJson (compact, sorted, log_dirs "any")."""
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                for (t, p), r in sorted(a.items())
            ],
        },
        separators=(",", ":"),
    )


def generate(current: Assignment, brokers: list[int], seed: int | None = None) -> Assignment:
    """Kafka's rack-unaware assignReplicasToBrokers for each topic, with each topic's own
    replication factor, from a random start (as kafka-reassign-partitions does)."""
    rng = random.Random(seed)
    by_topic: dict[str, dict[int, list[int]]] = {}
    for (t, p), r in current.items():
        by_topic.setdefault(t, {})[p] = r
    out: Assignment = {}
    for topic, parts in sorted(by_topic.items()):
        rf = len(next(iter(parts.values())))
        if rf > len(brokers):
            raise ReassignError(
                f"Replication factor: {rf} larger than available brokers: {len(brokers)}."
            )
        for p, replicas in assign_replicas(brokers, len(parts), rf, rng=rng).items():
            out[(topic, p)] = replicas
    return out


def throttle_configs(current: Assignment, proposed: Assignment) -> dict[str, tuple[str, str]]:
    """topic -> (leader.replication.throttled.replicas, follower...): Kafka's
    calculateLeaderThrottles (every current replica of a moving partition) and
    calculateFollowerThrottles (the replicas being added)."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for tp, target in sorted(proposed.items()):
        cur = current.get(tp, [])
        if cur == target:
            continue
        leaders.setdefault(tp[0], []).extend(f"{tp[1]}:{b}" for b in cur)
        followers.setdefault(tp[0], []).extend(f"{tp[1]}:{b}" for b in target if b not in cur)
    return {
        t: (",".join(leaders.get(t, [])), ",".join(followers.get(t, [])))
        for t in sorted(set(leaders) | set(followers))
    }


# =============================================================================== wire
class _Admin:
    def __init__(
        self, bootstrap: str, timeout_s: float, security: ClientSecurity = PLAINTEXT
    ) -> None:
        self.security = security
        last: Exception | None = None
        for addr in bootstrap.split(","):
            try:
                self.conn = KafkaConnection(
                    *parse_address(addr.strip()),
                    timeout_s=timeout_s,
                    client_id="odradek-reassign-partitions",
                    security=security,
                )
                break
            except OSError as e:
                last = e
        else:
            raise ReassignError(f"no broker reachable: {last}")
        self.timeout_ms = int(timeout_s * 1000)
        self.timeout_s = timeout_s
        self.addresses: dict[int, tuple[str, int]] = {}

    def assignment(self, topics: list[str] | None) -> tuple[Assignment, list[int]]:
        req = request_entity(
            3,
            12,
            topics=None
            if topics is None
            else tuple(
                nested_request(3, 12, "MetadataRequestTopic", topic_id=None, name=t) for t in topics
            ),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        resp = self.conn.request(req)
        self.addresses = {int(b.node_id): (b.host, int(b.port)) for b in resp.brokers}
        out: Assignment = {}
        for t in resp.topics:
            if int(t.error_code) != 0:
                raise ReassignError(f"Topic {t.name} not found (error {int(t.error_code)})")
            for p in t.partitions:
                out[(t.name, int(p.partition_index))] = [int(b) for b in p.replica_nodes]
        return out, sorted(int(b.node_id) for b in resp.brokers)

    def alter(self, entries: dict[TopicPartition, list[int] | None]) -> dict[TopicPartition, str]:
        by_topic: dict[str, list[Any]] = {}
        for (t, p), r in sorted(entries.items()):
            by_topic.setdefault(t, []).append(
                nested_request(
                    45,
                    0,
                    "ReassignablePartition",
                    partition_index=p,
                    replicas=None if r is None else tuple(r),
                )
            )
        req = request_entity(
            45,
            0,
            timeout=self.timeout_ms,
            topics=tuple(
                nested_request(45, 0, "ReassignableTopic", name=t, partitions=tuple(ps))
                for t, ps in by_topic.items()
            ),
        )
        resp = self.conn.request(req)
        errors: dict[TopicPartition, str] = {}
        if int(resp.error_code) != 0:
            raise ReassignError(f"reassignment failed: {resp.error_message}")
        for t in resp.responses:
            for p in t.partitions:
                if int(p.error_code) != 0:
                    errors[(t.name, int(p.partition_index))] = (
                        f"{_error_name(int(p.error_code))}: {p.error_message}"
                    )
        return errors

    def ongoing(self) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        resp = self.conn.request(request_entity(46, 0, timeout=self.timeout_ms, topics=None))
        out = {}
        for t in resp.topics:
            for p in t.partitions:
                out[(t.name, int(p.partition_index))] = (
                    list(p.replicas),
                    list(p.adding_replicas),
                    list(p.removing_replicas),
                )
        return out

    def alter_configs(
        self, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]]
    ) -> None:
        """Topic resources go to any broker; a broker's own configs to that broker (Kafka
        requires it, as its AdminClient routes them)."""
        topics = [r for r in resources if r[0] != RESOURCE_BROKER]
        if topics:
            self._alter_configs_on(self.conn, topics)
        for r in resources:
            if r[0] != RESOURCE_BROKER:
                continue
            addr = self.addresses.get(int(r[1]))
            if addr is None:
                raise ReassignError(f"broker {r[1]} is not registered")
            with KafkaConnection(
                *addr,
                timeout_s=self.timeout_s,
                client_id="odradek-reassign-partitions",
                security=self.security,
            ) as conn:
                self._alter_configs_on(conn, [r])

    @staticmethod
    def _alter_configs_on(
        conn: KafkaConnection, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]]
    ) -> None:
        req = request_entity(
            44,
            0,
            validate_only=False,
            resources=tuple(
                nested_request(
                    44,
                    0,
                    "AlterConfigsResource",
                    resource_type=rtype,
                    resource_name=name,
                    configs=tuple(
                        nested_request(
                            44, 0, "AlterableConfig", name=k, config_operation=op, value=v
                        )
                        for k, op, v in ops
                    ),
                )
                for rtype, name, ops in resources
            ),
        )
        resp = conn.request(req)
        for r in resp.responses:
            if int(r.error_code) != 0:
                raise ReassignError(
                    f"altering configs of {r.resource_name} failed: "
                    f"{_error_name(int(r.error_code))}: {r.error_message}"
                )


def _error_name(code: int) -> str:
    from odradek.errors import error_name  # noqa: PLC0415

    return error_name(code)


# =============================================================================== actions
def _run(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except ReassignError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace) -> int:
    try:
        security = ClientSecurity.from_properties(command_properties(args))
    except ValueError as e:
        raise ReassignError(f"--command-config: {e}") from None
    admin = _Admin(args.bootstrap_server, args.timeout, security)
    if args.list:
        moving = admin.ongoing()
        if not moving:
            print("No partition reassignments found.")
            return 0
        print("Current partition reassignments:")
        for (t, p), (r, a, rm) in sorted(moving.items()):
            print(f"{t}-{p}: replicas: {_csv(r)}. adding: {_csv(a)}. removing: {_csv(rm)}.")
        return 0
    if args.generate:
        if args.topics_to_move_json_file is None or args.broker_list is None:
            raise ReassignError("--generate needs --topics-to-move-json-file and --broker-list")
        topics = parse_topics_to_move(args.topics_to_move_json_file.read_text())
        brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
        if len(set(brokers)) != len(brokers):
            raise ReassignError(f"Broker list contains duplicate entries: {args.broker_list}")
        current, _ = admin.assignment(topics)
        print("Current partition replica assignment")
        print(format_assignment(current))
        print()
        print("Proposed partition reassignment configuration")
        print(format_assignment(generate(current, brokers)))
        return 0
    if args.reassignment_json_file is None:
        raise ReassignError("--reassignment-json-file is required")
    proposed = parse_reassignment(args.reassignment_json_file.read_text())
    topics = sorted({t for t, _ in proposed})
    if args.execute:
        return _execute(admin, proposed, topics, args.throttle)
    if args.verify:
        return _verify(admin, proposed, topics, args.preserve_throttles)
    return _cancel(admin, proposed, topics, args.preserve_throttles)


def _csv(xs: list[int]) -> str:
    return ",".join(str(x) for x in xs)


def _execute(admin: _Admin, proposed: Assignment, topics: list[str], throttle: int) -> int:
    current, brokers = admin.assignment(topics)
    missing = sorted(tp for tp in proposed if tp not in current)
    if missing:
        raise ReassignError(
            "Topic or partition not found: " + ",".join(f"{t}-{p}" for t, p in missing)
        )
    unknown = sorted({b for r in proposed.values() for b in r} - set(brokers))
    if unknown:
        raise ReassignError(f"Unknown broker id(s) {_csv(unknown)}")
    if admin.ongoing():
        print("There is an existing assignment running.", file=sys.stderr)
    print("Current partition replica assignment")
    print()
    print(format_assignment({tp: current[tp] for tp in proposed}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0:
        involved = sorted({b for tp in proposed for b in (*current[tp], *proposed[tp])})
        admin.alter_configs(
            [
                (RESOURCE_BROKER, str(b), [(k, OP_SET, str(throttle)) for k in BROKER_THROTTLES])
                for b in involved
            ]
        )
        admin.alter_configs(
            [
                (RESOURCE_TOPIC, t, [(k, OP_SET, v) for k, v in zip(TOPIC_THROTTLES, pair) if v])
                for t, pair in throttle_configs(current, proposed).items()
            ]
        )
        print(
            "Warning: You must run --verify periodically, until the reassignment "
            "completes, to ensure the throttle is removed."
        )
        print(f"The inter-broker throttle limit was set to {throttle} B/s")
    errors = admin.alter(dict(proposed))
    if errors:
        raise ReassignError(
            "Error reassigning partition(s):\n"
            + "\n".join(f"{t}-{p}: {msg}" for (t, p), msg in sorted(errors.items()))
        )
    print(
        "Successfully started partition reassignments for "
        + ",".join(f"{t}-{p}" for t, p in sorted(proposed))
    )
    return 0


def _clear_throttles(admin: _Admin, topics: list[str], brokers: list[int]) -> None:
    admin.alter_configs(
        [
            (RESOURCE_BROKER, str(b), [(k, OP_DELETE, None) for k in BROKER_THROTTLES])
            for b in brokers
        ]
    )
    print(f"Clearing broker-level throttles on brokers {_csv(brokers)}")
    admin.alter_configs(
        [(RESOURCE_TOPIC, t, [(k, OP_DELETE, None) for k in TOPIC_THROTTLES]) for t in topics]
    )
    print("Clearing topic-level throttles on topic " + ",".join(topics))


def _verify(admin: _Admin, proposed: Assignment, topics: list[str], preserve: bool) -> int:
    moving = admin.ongoing()
    current, brokers = admin.assignment(topics)
    print("Status of partition reassignment:")
    done = True
    for tp in sorted(proposed):
        name = f"{tp[0]}-{tp[1]}"
        if tp in moving:
            done = False
            print(f"Reassignment of partition {name} is still in progress.")
        elif current.get(tp) == proposed[tp]:
            print(f"Reassignment of partition {name} is completed.")
        else:
            done = False
            print(
                f"There is no active reassignment of partition {name}, but replica set "
                f"is {current.get(tp)} rather than {proposed[tp]}."
            )
    print()
    if done and not preserve:
        _clear_throttles(admin, topics, brokers)
    return 0


def _cancel(admin: _Admin, proposed: Assignment, topics: list[str], preserve: bool) -> int:
    moving = admin.ongoing()
    active = sorted(tp for tp in proposed if tp in moving)
    if active:
        errors = admin.alter({tp: None for tp in active})
        if errors:
            raise ReassignError(
                "Error cancelling partition reassignment(s):\n"
                + "\n".join(f"{t}-{p}: {msg}" for (t, p), msg in sorted(errors.items()))
            )
        print(
            "Successfully cancelled partition reassignments for: "
            + ",".join(f"{t}-{p}" for t, p in active)
        )
    else:
        print("None of the specified partition reassignments are active.")
    if not preserve:
        deadline = time.monotonic() + admin.timeout_ms / 1000
        while time.monotonic() < deadline and any(tp in admin.ongoing() for tp in active):
            time.sleep(0.1)
        _, brokers = admin.assignment(topics)
        _clear_throttles(admin, topics, brokers)
    return 0
