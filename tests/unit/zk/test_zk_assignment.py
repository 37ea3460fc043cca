"""Replica placement (REQ-R1, R2): Kafka's rack-unaware algorithm."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from odradek.errors import ErrorCode, KafkaError
from odradek.zk.assignment import assign_replicas

# Kafka's AdminUtils doc comment: rows = replica position, columns = broker-0..4.
KAFKA_TABLE = """
p0 p1 p2 p3 p4
p5 p6 p7 p8 p9
p4 p0 p1 p2 p3
p8 p9 p5 p6 p7
p3 p4 p0 p1 p2
p7 p8 p9 p5 p6
"""


def test_kafka_documented_example() -> None:
    expected: dict[int, list[int | None]] = {p: [None, None, None] for p in range(10)}
    rows = [r.split() for r in KAFKA_TABLE.strip().splitlines()]
    for row_no, row in enumerate(rows):
        for broker, cell in enumerate(row):
            expected[int(cell[1:])][row_no // 2] = broker
    assert assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0) == expected


def test_document_figure_4_partitions_3_brokers() -> None:
    a = assign_replicas([1, 2, 3], 4, 3, start_index=0)
    assert [r[0] for r in a.values()] == [1, 2, 3, 1]  # leaders round-robin (R2)


@pytest.mark.parametrize(
    "n_brokers,n_parts,rf", [(3, 6, 3), (5, 50, 3), (4, 12, 2), (6, 60, 3), (3, 3, 1)]
)
def test_even_spread_and_no_duplicates(n_brokers: int, n_parts: int, rf: int) -> None:
    brokers = list(range(1, n_brokers + 1))
    a = assign_replicas(brokers, n_parts, rf, rng=random.Random(42))
    assert sorted(a) == list(range(n_parts))
    for replicas in a.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
    leaders = Counter(r[0] for r in a.values())
    replicas_per_broker = Counter(b for r in a.values() for b in r)
    assert max(leaders.values()) - min(leaders[b] for b in brokers) <= 1
    assert max(replicas_per_broker.values()) - min(replicas_per_broker[b] for b in brokers) <= 1


def test_followers_of_one_leader_spread_over_other_brokers() -> None:
    # With the growing shift, broker 0's partitions do not always have the same followers.
    a = assign_replicas([0, 1, 2, 3, 4], 25, 2, start_index=0)
    followers_of_0 = {r[1] for r in a.values() if r[0] == 0}
    assert followers_of_0 == {1, 2, 3, 4}


def test_deterministic_with_seed_and_input_order() -> None:
    a = assign_replicas([3, 1, 2], 9, 2, rng=random.Random(7))
    b = assign_replicas([1, 2, 3, 3], 9, 2, rng=random.Random(7))
    assert a == b


def test_start_partition_id_continues_placement() -> None:
    full = assign_replicas([0, 1, 2, 3], 8, 2, start_index=1)
    tail = assign_replicas([0, 1, 2, 3], 3, 2, start_index=1, start_partition_id=5)
    assert sorted(tail) == [5, 6, 7]
    assert [tail[p][0] for p in (5, 6, 7)] == [full[p][0] for p in (5, 6, 7)]  # leaders continue


@pytest.mark.parametrize(
    "brokers,parts,rf,code",
    [
        ([1, 2], 1, 3, ErrorCode.invalid_replication_factor),
        ([1, 2], 1, 0, ErrorCode.invalid_replication_factor),
        ([], 1, 1, ErrorCode.invalid_replication_factor),
        ([1, 2], 0, 1, ErrorCode.invalid_partitions),
    ],
)
def test_invalid(brokers: list[int], parts: int, rf: int, code: ErrorCode) -> None:
    with pytest.raises(KafkaError) as ei:
        assign_replicas(brokers, parts, rf)
    assert ei.value.code == code
