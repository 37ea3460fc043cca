"""Replica placement for new topics/partitions -- pure, no I/O (REQ-R1, R2).

Kafka's rack-unaware algorithm (``AdminUtils.assignReplicasToBrokersRackUnaware``),
re-implemented from its description:

* the first replica of partition ``p`` goes to broker ``(p + start_index) % n`` -- so
  preferred leaders are spread round-robin over the brokers (R2);
* the other replicas follow the first at a distance ``1 + (shift + j) % (n - 1)``,
  where ``shift`` starts random and grows by one every ``n`` partitions -- so the
  followers of one broker's leaders are spread over all other brokers too, instead of
  always being its next neighbours.

Kafka's doc-comment example (5 brokers, 10 partitions, rf 3, start index 0)::

    broker-0  broker-1  broker-2  broker-3  broker-4
    p0        p1        p2        p3        p4       (1st replica)
    p5        p6        p7        p8        p9       (1st replica)
    p4        p0        p1        p2        p3       (2nd replica)
    p8        p9        p5        p6        p7       (2nd replica)
    p3        p4        p0        p1        p2       (3rd replica)
    p7        p8        p9        p5        p6       (3rd replica)
"""

from __future__ import annotations

import random

from odradek.errors import ErrorCode, KafkaError

__all__ = ["assign_replicas"]


def assign_replicas(
    broker_ids: list[int],
    num_partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    start_partition_id: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Partition id -> replica list (first = preferred leader).

    ``broker_ids`` are de-duplicated and sorted (Kafka sorts the live brokers it reads
    from ZooKeeper), so the result depends only on the set of brokers and the start
    index. ``start_index`` fixes both the first-replica start and the initial shift,
    like Kafka's ``fixedStartIndex``; otherwise both are drawn from ``rng``.
    ``start_partition_id`` is for adding partitions to an existing topic: the preferred
    leaders continue the round-robin from there (as in Kafka, the follower shift only
    grows for boundaries crossed within this call).
    """
    brokers = sorted(set(broker_ids))
    n = len(brokers)
    if num_partitions < 1:
        raise KafkaError(
            ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
        )
    if replication_factor < 1:
        raise KafkaError(
            ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
        )
    if replication_factor > n:
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"Replication factor: {replication_factor} larger than available brokers: {n}.",
        )
    if start_index is not None:
        first_start = shift = start_index
    else:
        r = rng if rng is not None else random.Random()
        first_start = r.randrange(n)
        shift = r.randrange(n)

    result: dict[int, list[int]] = {}
    pid = max(0, start_partition_id)
    for _ in range(num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + first_start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            # n == 1 implies rf == 1, so this loop never runs with n - 1 == 0.
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        result[pid] = replicas
        pid += 1
    return result
