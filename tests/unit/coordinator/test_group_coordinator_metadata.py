"""GroupCoordinator.on_metadata is incremental (issue 13): an image that did not change
``__consumer_offsets`` costs nothing, one that did looks at its partitions only -- and
the offsets partitions this broker leads are still loaded and unloaded as they move.
A real ReplicaManager on real logs applies the images, as in a broker."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from odradek.config import BrokerConfig
from odradek.coordinator.group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from odradek.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from odradek.replication.partition import Partition
from odradek.replication.replica_manager import ReplicaManager
from odradek.replication.settings import ReplicaManagerSettings
from odradek.storage.log import LogConfig

OFFSETS_ID = uuid.UUID(int=1)
BIG_ID = uuid.UUID(int=2)


class CountingPartitions(dict[tuple[str, int], Partition]):
    """The replica manager's partition table, counting full walks over it."""

    walks = 0

    def __iter__(self) -> Any:
        CountingPartitions.walks += 1
        return super().__iter__()

    def items(self) -> Any:
        CountingPartitions.walks += 1
        return super().items()


def image(
    offsets_leader: int,
    epoch: int,
    big: int,
    changed: frozenset[str] | None,
) -> MetadataImage:
    def parts(n: int, leader: int, ep: int) -> dict[int, PartitionInfo]:
        return {p: PartitionInfo(p, (1, 2), leader, ep, (1, 2), 1, ep) for p in range(n)}

    return MetadataImage(
        "c",
        1,
        {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2)},
        {
            OFFSETS_TOPIC: TopicInfo(OFFSETS_TOPIC, OFFSETS_ID, parts(2, offsets_leader, epoch)),
            "big": TopicInfo("big", BIG_ID, parts(big, 2, 0)),
        },
        complete=True,
        changed_topics=changed,
    )


class Cluster:
    def __init__(self) -> None:
        self.image = MetadataImage()
        self.zk = None


def test_on_metadata_looks_only_at_changed_offsets_partitions(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(check(tmp_path), 30))


async def check(tmp_path: Path) -> None:
    cfg = BrokerConfig.from_dict(
        {"broker.id": "1", "zookeeper.connect": "127.0.0.1:1", "log.dirs": str(tmp_path)}
    )
    rm = ReplicaManager(
        1, tmp_path, lambda _t: LogConfig(), ReplicaManagerSettings.from_config(cfg)
    )
    rm.load_logs()
    rm.partitions = CountingPartitions()
    cluster = Cluster()
    gc = GroupCoordinator(1, cfg, rm, cluster)  # type: ignore[arg-type]
    try:
        first = image(1, 0, 200, None)
        rm.apply_image(first)
        gc.on_metadata(first)  # anything may have changed: one walk
        await gc.runtime.wait_loaded()  # loads run as tasks, off the metadata path
        assert gc.runtime.loaded == {0: 0, 1: 0}

        CountingPartitions.walks = 0
        busy = image(1, 0, 200, frozenset({"big"}))
        rm.apply_image(busy)
        walks = CountingPartitions.walks
        gc.on_metadata(busy)  # 200 partition changes elsewhere: nothing to look at
        assert CountingPartitions.walks == walks and gc.runtime.loaded == {0: 0, 1: 0}

        moved = image(2, 1, 200, frozenset({OFFSETS_TOPIC}))
        rm.apply_image(moved)
        walks = CountingPartitions.walks
        gc.on_metadata(moved)  # broker 2 leads them now: unloaded, without a walk
        assert CountingPartitions.walks == walks and gc.runtime.loaded == {}

        back = image(1, 2, 200, frozenset({OFFSETS_TOPIC}))
        rm.apply_image(back)
        gc.on_metadata(back)
        await gc.runtime.wait_loaded()
        assert gc.runtime.loaded == {0: 2, 1: 2}
    finally:
        gc.stop()
        # Broker 1 followed broker 2 for a while. Stopping its fetchers is prompt: with
        # asyncio.wait_for in the fetcher's idle wait, a cancel arriving as the wakeup
        # fired was swallowed on Python 3.11 and this waited for the 30 s bound below.
        async with asyncio.timeout(5):
            await rm.stop_fetchers()
        rm.shutdown()
