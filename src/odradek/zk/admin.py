"""Topic administration through ZooKeeper, as Kafka's AdminZkClient does it.

Creating a topic writes ``/config/topics/T`` first and then the assignment
``/brokers/topics/T`` (the controller watches the latter and elects leaders, REQ-R13).
Deleting a topic writes ``/admin/delete_topics/T``; the controller removes the znodes.
Adding partitions rewrites the assignment with the new partitions appended. Requests for
the controller (reassignments, leader elections) are admin znodes it watches.

These are blocking kazoo calls: handlers run them with ``asyncio.to_thread``. Validation
that needs no ZooKeeper lives in ``plan_new_topic`` (pure) so it is unit-testable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from odradek.errors import ErrorCode, KafkaError
from odradek.topics import topic_name_error
from odradek.zk import znodes
from odradek.zk.assignment import assign_replicas
from odradek.zk.cas import update_znode

# ZooKeeper refuses packets over jute.maxbuffer (1 MiB - 1 by default) by dropping the
# client's connection, which would suspend this broker's whole session (ISR writes
# included). An assignment that cannot fit is refused before it is sent.
MAX_ZNODE_BYTES = 1_000_000


def _check_znode_size(topic: str, data: bytes) -> None:
    if len(data) > MAX_ZNODE_BYTES:
        raise KafkaError(
            ErrorCode.policy_violation,
            f"The assignment of topic '{topic}' would take {len(data)} bytes, "
            f"more than a ZooKeeper znode holds ({MAX_ZNODE_BYTES}).",
        )


@dataclass(frozen=True, slots=True)
class NewTopicPlan:
    name: str
    assignment: dict[int, list[int]]
    configs: dict[str, str]

    @property
    def num_partitions(self) -> int:
        return len(self.assignment)

    @property
    def replication_factor(self) -> int:
        return len(self.assignment[0]) if self.assignment else 0


def plan_new_topic(
    name: str,
    num_partitions: int,
    replication_factor: int,
    manual: dict[int, list[int]] | None,
    configs: dict[str, str],
    live_brokers: list[int],
    default_partitions: int,
    default_replication_factor: int,
) -> NewTopicPlan:
    """Validate a CreateTopics entry and compute its assignment (REQ-R1, R2). Pure."""
    why = topic_name_error(name)
    if why:
        raise KafkaError(ErrorCode.invalid_topic_exception, why)
    if manual:
        if num_partitions != -1 or replication_factor != -1:
            raise KafkaError(
                ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignment "
                "were set. Both cannot be used at the same time.",
            )
        if sorted(manual) != list(range(len(manual))):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                "Partitions should be a consecutive 0-based integer sequence",
            )
        sizes = {len(r) for r in manual.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                "All partitions should have the same number of replicas",
            )
        for p, replicas in manual.items():
            if len(set(replicas)) != len(replicas):
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Duplicate replica assignment for partition {p}: {replicas}",
                )
            unknown = [b for b in replicas if b not in live_brokers]
            if unknown:
                raise KafkaError(
                    ErrorCode.broker_not_available,
                    f"Unknown broker(s) {unknown} in replica assignment",
                )
        return NewTopicPlan(name, {p: list(r) for p, r in manual.items()}, configs)
    n = default_partitions if num_partitions == -1 else num_partitions
    rf = default_replication_factor if replication_factor == -1 else replication_factor
    if n <= 0:
        raise KafkaError(
            ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
        )
    if rf <= 0:
        raise KafkaError(
            ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
        )
    if rf > len(live_brokers):
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"Replication factor: {rf} larger than available brokers: {len(live_brokers)}.",
        )
    return NewTopicPlan(name, assign_replicas(sorted(live_brokers), n, rf), configs)


def create_topic(zk: KazooClient, plan: NewTopicPlan) -> None:
    """Write config then assignment; TOPIC_ALREADY_EXISTS if it exists or is being deleted."""
    if zk.exists(znodes.topic_path(plan.name)):
        raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{plan.name}' already exists.")
    if zk.exists(znodes.delete_topic_path(plan.name)):
        raise KafkaError(
            ErrorCode.topic_already_exists, f"Topic '{plan.name}' is marked for deletion."
        )
    # Kafka refuses topics whose names collide once '.' and '_' are treated alike
    # (metric names would clash).
    canon = plan.name.replace(".", "_")
    for existing in zk.get_children(znodes.BROKER_TOPICS):
        if existing == plan.name:  # created meanwhile by another client
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{plan.name}' already exists.")
        if existing.replace(".", "_") == canon:
            raise KafkaError(
                ErrorCode.invalid_topic_exception,
                f"Topic '{plan.name}' collides with existing topic: {existing}",
            )
    assignment = znodes.TopicAssignment(plan.name, znodes.new_kafka_uuid(), plan.assignment)
    encoded = znodes.encode_topic(assignment)
    _check_znode_size(plan.name, encoded)
    cfg_path = znodes.topic_config_path(plan.name)
    data = znodes.encode_topic_config(plan.configs)
    try:
        zk.create(cfg_path, data, makepath=True)
    except NodeExistsError:
        zk.set(cfg_path, data)
    try:
        zk.create(znodes.topic_path(plan.name), encoded, makepath=True)
    except NodeExistsError:
        raise KafkaError(
            ErrorCode.topic_already_exists, f"Topic '{plan.name}' already exists."
        ) from None


def mark_topic_for_deletion(zk: KazooClient, topic: str) -> None:
    if not zk.exists(znodes.topic_path(topic)):
        raise KafkaError(
            ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
        )
    try:
        zk.create(znodes.delete_topic_path(topic), b"", makepath=True)
    except NodeExistsError:
        pass  # already being deleted: Kafka answers success


def add_partitions(
    zk: KazooClient,
    topic: str,
    new_total: int,
    manual: list[list[int]] | None,
    live_brokers: list[int],
    validate_only: bool,
) -> None:
    """CreatePartitions: append partitions to ``/brokers/topics/T`` (conditional write)."""
    try:
        data, stat = zk.get(znodes.topic_path(topic))
    except NoNodeError:
        raise KafkaError(
            ErrorCode.unknown_topic_or_partition, f"The topic '{topic}' does not exist."
        ) from None
    if zk.exists(znodes.delete_topic_path(topic)):
        raise KafkaError(
            ErrorCode.invalid_topic_exception, f"The topic '{topic}' is queued for deletion."
        )
    current = znodes.decode_topic(topic, data)
    existing = len(current.partitions)
    if new_total < existing:
        raise KafkaError(
            ErrorCode.invalid_partitions,
            f"Topic currently has {existing} partitions, which is higher than the "
            f"requested {new_total}.",
        )
    if new_total == existing:
        raise KafkaError(ErrorCode.invalid_partitions, f"Topic already has {existing} partitions.")
    rf = len(current.partitions[0])
    adding = new_total - existing
    if manual is not None:
        if len(manual) != adding:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"Increasing the number of partitions by {adding} but "
                f"{len(manual)} assignments provided.",
            )
        for replicas in manual:
            if len(replicas) != rf or len(set(replicas)) != rf:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Inconsistent replication factor in {replicas}",
                )
            if any(b not in live_brokers for b in replicas):
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment, f"Unknown broker in {replicas}"
                )
        new = {existing + i: list(r) for i, r in enumerate(manual)}
    else:
        if rf > len(live_brokers):
            raise KafkaError(
                ErrorCode.invalid_replication_factor,
                f"Replication factor {rf} larger than available brokers {len(live_brokers)}",
            )
        new = assign_replicas(sorted(live_brokers), adding, rf, start_partition_id=existing)
    merged = dict(current.partitions)
    merged.update(new)
    encoded = znodes.encode_topic(znodes.TopicAssignment(topic, current.topic_id, merged))
    _check_znode_size(topic, encoded)
    if validate_only:
        return
    zk.set(znodes.topic_path(topic), encoded, version=stat.version)


# ------------------------------------------------------------------------ controller requests
TopicPartition = tuple[str, int]
# Many brokers may merge into the request znode at once; each lost race is one more try.
_REASSIGN_CAS_ATTEMPTS = 100


def _decode_reassignment_leniently(data: bytes | None) -> dict[TopicPartition, list[int] | None]:
    if not data:
        return {}
    try:
        return znodes.decode_reassignment(data)
    except Exception:  # noqa: BLE001 - garbage left in the znode: ours replaces it
        return {}


def merge_reassignment(zk: KazooClient, entries: dict[TopicPartition, list[int] | None]) -> None:
    """Add ``entries`` to ``/admin/reassign_partitions`` (create or conditional set), so
    that concurrent requests on other brokers are not lost."""
    update_znode(
        zk,
        znodes.REASSIGN_PARTITIONS,
        lambda current: {**current, **entries},
        decode=_decode_reassignment_leniently,
        encode=znodes.encode_reassignment,
        attempts=_REASSIGN_CAS_ATTEMPTS,
    )


def reassignment_pending(zk: KazooClient, entries: dict[TopicPartition, list[int] | None]) -> bool:
    """True while the request znode still holds one of our entries unchanged."""
    try:
        data, _ = zk.get(znodes.REASSIGN_PARTITIONS)
    except NoNodeError:
        return False
    try:
        current = znodes.decode_reassignment(data)
    except Exception:  # noqa: BLE001 - the controller drops a malformed znode
        return True
    return any(tp in current and current[tp] == target for tp, target in entries.items())


def request_election(
    zk: KazooClient, path: str, partitions: list[TopicPartition], deadline: float
) -> bool:
    """Create the election admin znode ``path``, waiting (until the monotonic ``deadline``)
    while an earlier request is pending. False: still pending at the deadline."""
    data = znodes.encode_partition_list(partitions)
    while True:
        try:
            zk.create(path, data, makepath=True)
            return True
        except NodeExistsError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
