"""ListOffsets answered by a new leader whose high watermark still lags the offset its
epoch started at (Kafka's KIP-207): a client's "latest", and a timestamp lookup it cannot
serve yet, get OFFSET_NOT_AVAILABLE (retriable) instead of an offset lower than the
previous leader gave; a follower's request (replica_id >= 0) and "earliest" are answered.
The handler runs on a real Partition over a real log; no ZooKeeper is involved."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from odradek.errors import ErrorCode
from odradek.protocol.codec import RequestHeaderInfo
from odradek.replication.partition import Partition
from odradek.server.context import RequestContext
from odradek.server.handlers.data import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, handle_list_offsets
from odradek.storage.records import encode_batch
from support.partitions import follow, lead, new_partition


class _Replicas:
    def __init__(self, p: Partition) -> None:
        self.p = p

    def leader_partition(self, topic: str, index: int, image: Any, epoch: int = -1) -> Partition:
        return self.p


class _Metadata:
    image = None


def _ask(p: Partition, timestamp: int, *, replica_id: int = -1) -> tuple[int, int]:
    none = cast(Any, None)
    ctx = RequestContext(
        broker_id=2,
        config=none,
        replicas=cast(Any, _Replicas(p)),
        groups=none,
        producer_ids=None,
        admin=none,
        metadata=cast(Any, _Metadata()),
    )
    req = SimpleNamespace(
        replica_id=replica_id,
        isolation_level=0,
        topics=[
            SimpleNamespace(
                name="t",
                partitions=[
                    SimpleNamespace(partition_index=0, timestamp=timestamp, current_leader_epoch=-1)
                ],
            )
        ],
    )
    header = RequestHeaderInfo(
        api_key=2, api_version=5, correlation_id=1, client_id="c", header_size=0
    )
    answer = handle_list_offsets(ctx, header, req).topics[0].partitions[0]
    return int(answer.error_code), int(answer.offset)


@pytest.fixture
def elected_with_a_stale_hw(tmp_path: Path) -> Partition:
    # Broker 2 followed 1 and holds offsets 0-4, but knows only HW 2; now it leads.
    p = new_partition(tmp_path / "t-0", broker=2)
    follow(p, 1, 1, [1, 2, 3])
    p.append_as_follower(
        encode_batch([(None, b"v%d" % i) for i in range(5)]), leader_hw=2, now_ms=0
    )
    lead(p, 2, [2, 3], zk_version=1)
    return p


def test_latest_is_refused_until_the_hw_reaches_the_epoch_start(
    elected_with_a_stale_hw: Partition,
) -> None:
    p = elected_with_a_stale_hw
    assert _ask(p, LATEST_TIMESTAMP) == (ErrorCode.offset_not_available, -1)
    assert _ask(p, EARLIEST_TIMESTAMP) == (ErrorCode.none, 0)
    # A follower is not a client: it gets the leader's view (Kafka: isolationLevel None).
    assert _ask(p, LATEST_TIMESTAMP, replica_id=3) == (ErrorCode.none, 2)
    p.update_follower_fetch_state(3, 5, now_ms=1)
    assert _ask(p, LATEST_TIMESTAMP) == (ErrorCode.none, 5)


def test_a_timestamp_past_what_the_lagging_leader_serves_is_refused(
    elected_with_a_stale_hw: Partition,
) -> None:
    p = elected_with_a_stale_hw
    far_future = 2**62
    assert _ask(p, far_future)[0] == ErrorCode.offset_not_available
    p.update_follower_fetch_state(3, 5, now_ms=1)
    assert _ask(p, far_future) == (ErrorCode.none, -1)  # caught up: "no such record"
