"""The coordinator runtime (issue 25): a partition's replay runs in bounded chunks that
yield to the event loop, requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS, a load
that finishes after a resign is discarded, and records appended while a load runs are
part of what it installs. A real ReplicaManager on real logs, as in a broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from odradek.config import BrokerConfig
from odradek.coordinator.group_codec import OffsetValue, encode_offset_key, encode_offset_value
from odradek.coordinator.group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from odradek.coordinator.runtime import partition_for
from odradek.coordinator.transaction_coordinator import TRANSACTION_TOPIC, TransactionCoordinator
from odradek.coordinator.txn_codec import TxnLogValue, encode_txn_key, encode_txn_value
from odradek.coordinator.txn_markers import control_batch
from odradek.coordinator.txn_state import TxnState
from odradek.errors import ErrorCode, KafkaError
from odradek.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from odradek.replication.replica_manager import ReplicaManager, now_ms
from odradek.replication.settings import ReplicaManagerSettings
from odradek.storage.log import LogConfig
from odradek.storage.records import encode_batch

OFFSETS_ID = uuid.UUID(int=1)
DATA_ID = uuid.UUID(int=2)
BATCHES = 400
PER_BATCH = 50  # 20,000 offset commits: several chunks of the runtime's reads
GROUP = "g"


class Cluster:
    def __init__(self) -> None:
        self.image = MetadataImage()
        self.zk = None
        self.producer_ids = None


def image(leader: int, epoch: int) -> MetadataImage:
    """One offsets partition (replica on broker 1 only: no fetchers), and a data topic."""
    return MetadataImage(
        "c",
        1,
        {1: BrokerInfo(1, "127.0.0.1", 9001), 2: BrokerInfo(2, "127.0.0.1", 9002)},
        {
            OFFSETS_TOPIC: TopicInfo(
                OFFSETS_TOPIC,
                OFFSETS_ID,
                {0: PartitionInfo(0, (1,), leader, epoch, (1,), 1, epoch)},
            ),
            "t": TopicInfo(
                "t",
                DATA_ID,
                {p: PartitionInfo(p, (1,), 1, 0, (1,), 1, 0) for p in range(PER_BATCH)},
            ),
        },
        complete=True,
        changed_topics=None,
    )


def commits(offset: int) -> bytes:
    return encode_batch(
        [
            (encode_offset_key(GROUP, "t", p), encode_offset_value(OffsetValue(offset, -1, "", 0)))
            for p in range(PER_BATCH)
        ]
    )


@dataclass
class Node:
    """One broker's replica manager and coordinators on real logs in ``tmp_path``."""

    rm: ReplicaManager
    cluster: Cluster
    gc: GroupCoordinator
    tc: TransactionCoordinator | None = None

    def lead(self, img: MetadataImage) -> None:
        self.cluster.image = img
        self.rm.apply_image(img)

    def fill_offsets(self) -> None:
        """BATCHES batches of offset commits on offsets partition 0 (led by us)."""
        lg = self.rm.partitions[(OFFSETS_TOPIC, 0)].log
        for i in range(BATCHES):
            lg.append_as_leader(commits(i), 0, now_ms())


Check = Callable[[Node], Awaitable[None]]


async def _run(tmp_path: Path, check: Check, transactions: bool) -> None:
    cfg = BrokerConfig.from_dict(
        {
            "broker.id": "1",
            "zookeeper.connect": "127.0.0.1:1",
            "log.dirs": str(tmp_path),
            "offsets.topic.num.partitions": "1",
        }
    )
    rm = ReplicaManager(
        1, tmp_path, lambda _t: LogConfig(), ReplicaManagerSettings.from_config(cfg)
    )
    rm.load_logs()
    cluster = Cluster()
    gc = GroupCoordinator(1, cfg, rm, cluster)  # type: ignore[arg-type]
    node = Node(rm, cluster, gc)
    if transactions:
        node.tc = TransactionCoordinator(1, cfg, rm, gc, cluster, None)  # type: ignore[arg-type]
    try:
        await check(node)
    finally:
        if node.tc is not None:
            node.tc.stop()
        gc.stop()
        await rm.stop_fetchers()
        rm.shutdown()


@pytest.fixture
def run_node(tmp_path: Path) -> Callable[..., None]:
    """``run_node(check, transactions=False)``: builds a Node (with a transaction
    coordinator if asked), runs ``check(node)`` in a fresh event loop with a deadline,
    then stops the coordinators and shuts the replica manager down."""

    def run(check: Check, *, transactions: bool = False) -> None:
        asyncio.run(asyncio.wait_for(_run(tmp_path, check, transactions), 60))

    return run


def with_transaction_topic(img: MetadataImage) -> MetadataImage:
    img.topics[TRANSACTION_TOPIC] = TopicInfo(
        TRANSACTION_TOPIC, uuid.UUID(int=3), {0: PartitionInfo(0, (1,), 1, 0, (1,), 1, 0)}
    )
    return img


def test_group_key_maps_to_partition_zero() -> None:
    assert partition_for(GROUP, 1) == 0


def test_load_runs_in_chunks_and_answers_load_in_progress(run_node: Callable[..., None]) -> None:
    run_node(check_chunked_load)


async def check_chunked_load(n: Node) -> None:
    gc = n.gc
    n.lead(image(1, 0))
    n.fill_offsets()
    gc.on_metadata(n.cluster.image)
    # Right after the image: we lead the partition, but its state is not loaded yet.
    with pytest.raises(KafkaError) as e:
        gc.check(GROUP)
    assert e.value.code is ErrorCode.coordinator_load_in_progress
    assert gc.runtime.loading() == {0}

    # The loop keeps serving other work while the partition loads.
    ticks_during_load = 0
    while gc.runtime.loading():
        ticks_during_load += 1
        await asyncio.sleep(0)
    assert ticks_during_load > 1

    stats = gc.runtime.last_load
    assert stats is not None and stats.slices > 1
    assert stats.records == BATCHES * PER_BATCH
    assert gc.check(GROUP) == 0
    fetched = dict(gc.fetch_offsets(GROUP, [("t", [0, PER_BATCH - 1])]))
    assert [v.offset if v else None for _, v in fetched["t"]] == [BATCHES - 1] * 2
    print(
        f"load of {stats.records} records: {stats.slices} slices, longest "
        f"{stats.longest_slice_s * 1000:.1f} ms, total {stats.elapsed_s * 1000:.0f} ms"
    )


def test_stale_load_is_discarded_and_appends_meanwhile_are_read(
    run_node: Callable[..., None],
) -> None:
    run_node(check_stale_load)


async def check_stale_load(n: Node) -> None:
    rm, gc = n.rm, n.gc
    n.lead(image(1, 0))
    n.fill_offsets()
    gc.on_metadata(n.cluster.image)
    await asyncio.sleep(0)  # the load starts, reads its first chunk, yields
    assert gc.runtime.loading() == {0}

    # Broker 2 takes over at epoch 1 while we load: the load is dropped unfinished.
    n.lead(image(2, 1))
    gc.on_metadata(n.cluster.image)
    await gc.runtime.wait_loaded()
    assert gc.runtime.loaded == {} and GROUP not in gc.offsets
    with pytest.raises(KafkaError) as e:
        gc.check(GROUP)
    assert e.value.code is ErrorCode.not_coordinator
    await rm.stop_fetchers()

    # Back to us at epoch 2. While that load runs, a transaction's offsets and its
    # COMMIT marker are appended (WriteTxnMarkers does not wait for loads): the load
    # reads to the log end it finds when it is done, so the commit is visible.
    n.lead(image(1, 2))
    gc.on_metadata(n.cluster.image)
    await asyncio.sleep(0)
    assert gc.runtime.loading() == {0}
    txn = encode_batch(
        [
            (
                encode_offset_key(GROUP, "t", 0),
                encode_offset_value(OffsetValue(10_000, -1, "", 0)),
            )
        ],
        producer_id=7,
        producer_epoch=0,
        base_sequence=-1,
        transactional=True,
    )
    part = rm.partitions[(OFFSETS_TOPIC, 0)]
    part.log.append_as_leader(txn, 2, now_ms())
    part.log.append_as_leader(control_batch(7, 0, True, 0), 2, now_ms(), allow_control=True)
    await gc.runtime.wait_loaded()
    assert gc.runtime.loaded == {0: 2}
    assert gc.pending_txn_partitions(GROUP) == set()
    fetched = dict(gc.fetch_offsets(GROUP, [("t", [0, 1])]))
    assert [v.offset if v else None for _, v in fetched["t"]] == [10_000, BATCHES - 1]


def test_a_resign_cancels_the_load(run_node: Callable[..., None]) -> None:
    run_node(check_resign)


async def check_resign(n: Node) -> None:
    gc = n.gc
    n.lead(image(1, 0))
    n.fill_offsets()
    gc.on_metadata(n.cluster.image)
    await asyncio.sleep(0)
    loads = [t for t in asyncio.all_tasks() if t.get_name().startswith("load-")]
    assert len(loads) == 1 and not loads[0].done()
    gc.stop()  # broker shutdown mid-load
    await asyncio.gather(*loads, return_exceptions=True)
    assert loads[0].cancelled()
    assert gc.runtime.loading() == set() and gc.runtime.loaded == {}
    assert GROUP not in gc.offsets


def test_list_groups_during_a_load_says_load_in_progress(run_node: Callable[..., None]) -> None:
    run_node(check_list_groups)


async def check_list_groups(n: Node) -> None:
    gc = n.gc
    n.lead(image(1, 0))
    n.fill_offsets()
    gc.on_metadata(n.cluster.image)
    # Kafka's handleListGroups: the error while a partition of ours loads.
    assert gc.list_groups(None) == (ErrorCode.coordinator_load_in_progress, [])
    await gc.runtime.wait_loaded()
    code, groups = gc.list_groups(None)
    assert code is ErrorCode.none and [g.group_id for g in groups] == [GROUP]


def test_list_transactions_during_a_load_says_load_in_progress(
    run_node: Callable[..., None],
) -> None:
    run_node(check_list_transactions, transactions=True)


async def check_list_transactions(n: Node) -> None:
    tc = n.tc
    assert tc is not None
    n.lead(with_transaction_topic(image(1, 0)))
    lg = n.rm.partitions[(TRANSACTION_TOPIC, 0)].log
    ids = [f"tx-{i}" for i in range(2000)]
    for i, tid in enumerate(ids):
        value = TxnLogValue(i, 0, 60_000, int(TxnState.COMPLETE_COMMIT), (), 0, 0)
        lg.append_as_leader(
            encode_batch([(encode_txn_key(tid), encode_txn_value(value))]), 0, now_ms()
        )
    tc.on_metadata(n.cluster.image)
    # Kafka's listTransactionStates: the error, and nothing, while a partition loads;
    # a request for one of its ids: COORDINATOR_LOAD_IN_PROGRESS.
    assert tc.list() == (ErrorCode.coordinator_load_in_progress, [])
    with pytest.raises(KafkaError) as e:
        tc.describe(ids[0])
    assert e.value.code is ErrorCode.coordinator_load_in_progress
    await tc.runtime.wait_loaded()
    code, listed = tc.list()
    assert code is ErrorCode.none
    assert sorted(m.transactional_id for m in listed) == sorted(ids)
    described = tc.describe(ids[-1])
    assert described is not None and described.state is TxnState.COMPLETE_COMMIT


def test_replay_takes_states_as_written_and_requests_meet_the_table(
    run_node: Callable[..., None],
) -> None:
    run_node(check_replay_states, transactions=True)


async def check_replay_states(n: Node) -> None:
    tc = n.tc
    assert tc is not None
    n.lead(with_transaction_topic(image(1, 0)))
    lg = n.rm.partitions[(TRANSACTION_TOPIC, 0)].log
    # PrepareCommit -> Empty -> Dead: no table allows that as transitions; a replay
    # takes the last value as written (Kafka's loading path).
    for state in (TxnState.PREPARE_COMMIT, TxnState.EMPTY, TxnState.DEAD):
        value = TxnLogValue(5, 0, 60_000, int(state), (), 0, 0)
        lg.append_as_leader(
            encode_batch([(encode_txn_key("tx"), encode_txn_value(value))]), 0, now_ms()
        )
    tc.on_metadata(n.cluster.image)
    await tc.runtime.wait_loaded()
    m = tc.describe("tx")
    assert m is not None and m.state is TxnState.DEAD
    end = lg.log_end_offset
    # A request whose transition the table refuses (Dead -> Ongoing) gets Kafka's
    # error code, and nothing is written.
    assert await tc.add_partitions("tx", 5, 0, {("t", 0)}) is ErrorCode.invalid_txn_state
    assert m.state is TxnState.DEAD and lg.log_end_offset == end
