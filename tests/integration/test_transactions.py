"""Transactions (issue 18, KIP-98) with confluent-kafka against a 3-broker cluster.

Proves: commit and abort, read_committed consumers see only committed records in order
while read_uncommitted ones see everything; offsets committed inside a transaction
(TxnOffsetCommit) become visible only with the commit; a zombie producer is fenced; a
transaction left open past transaction.timeout.ms is aborted by the coordinator. The
topic's partitions are led by different brokers, so markers travel coordinator -> leader
over WriteTxnMarkers as well as locally.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from rawclient import RawClient, list_offsets_request, produce_request, request_cls
from tests.support.polling import wait_for
from tests.support.topics import create_topic

from odradek.cluster.local import LocalCluster
from odradek.storage.records import encode_batch

pytestmark = pytest.mark.integration

PARTITIONS = 3
BROKER_CONFIG = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def txn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster.start(tmp_path_factory.mktemp("txn"), 3, broker_config=BROKER_CONFIG)
    try:
        yield c
    finally:
        c.down()


def new_topic(bootstrap: str, partitions: int = PARTITIONS, rf: int = 3) -> str:
    """A topic with a fresh name (returned)."""
    name = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, partitions, rf)
    return name


def txn_producer(bootstrap: str, txn_id: str, **conf: Any) -> Producer:
    p = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **conf}
    )
    p.init_transactions(60)
    return p


def read_all(
    bootstrap: str,
    topic: str,
    isolation: str,
    *,
    partitions: int = PARTITIONS,
    timeout: float = 30.0,
) -> list[tuple[int, bytes]]:
    """Every record of every partition from the beginning, up to each partition's end
    (the LSO for read_committed), as (partition, value) in per-partition order."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[tuple[int, bytes]] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(eof) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    continue
                raise KafkaException(m.error())
            eof.discard(m.partition())
            got.append((m.partition(), m.value()))
        assert len(eof) == partitions, f"no EOF on every partition within {timeout}s"
        return got
    finally:
        c.close()


def values(got: list[tuple[int, bytes]]) -> set[bytes]:
    return {v for _, v in got}


def test_commit_and_abort_read_committed_and_uncommitted(txn_cluster: LocalCluster) -> None:
    bs = txn_cluster.bootstrap_servers
    topic = new_topic(bs)
    p = txn_producer(bs, f"tx-{uuid.uuid4().hex[:6]}")
    committed = [b"c1-%d" % i for i in range(30)]
    aborted = [b"a-%d" % i for i in range(30)]
    committed2 = [b"c2-%d" % i for i in range(30)]
    for batch, commit in ((committed, True), (aborted, False), (committed2, True)):
        p.begin_transaction()
        for i, v in enumerate(batch):
            p.produce(topic, v, key=b"k%d" % i, partition=i % PARTITIONS)
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(30)  # the aborted records are in the logs before the abort
            p.abort_transaction(30)
    rc = read_all(bs, topic, "read_committed")
    assert values(rc) == set(committed + committed2)
    for part in range(PARTITIONS):  # in order within each partition
        seq = [v for p_, v in rc if p_ == part]
        assert seq == [
            v for i, v in enumerate(committed + committed2) if i % 30 % PARTITIONS == part
        ]
    ru = read_all(bs, topic, "read_uncommitted")
    assert values(ru) == set(committed + aborted + committed2)


def test_open_transaction_holds_read_committed_at_the_lso(txn_cluster: LocalCluster) -> None:
    bs = txn_cluster.bootstrap_servers
    topic = new_topic(bs, partitions=PARTITIONS)
    p = txn_producer(bs, f"tx-{uuid.uuid4().hex[:6]}")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, b"open-%d" % i, partition=i % PARTITIONS)
    p.flush(30)
    # Records of the open transaction are below the HW but above the LSO.
    assert read_all(bs, topic, "read_committed") == []
    assert len(read_all(bs, topic, "read_uncommitted")) == 10
    p.commit_transaction(30)
    assert len(read_all(bs, topic, "read_committed")) == 10


def test_zombie_producer_is_fenced(txn_cluster: LocalCluster) -> None:
    bs = txn_cluster.bootstrap_servers
    topic = new_topic(bs)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    zombie = txn_producer(bs, tid)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(30)
    fresh = txn_producer(bs, tid)  # bumps the epoch and aborts the zombie's transaction
    fresh.begin_transaction()
    fresh.produce(topic, b"fresh", partition=0)
    fresh.commit_transaction(30)
    with pytest.raises(KafkaException) as exc:
        zombie.produce(topic, b"zombie-2", partition=0)
        zombie.commit_transaction(30)
    assert exc.value.args[0].code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), exc.value
    assert values(read_all(bs, topic, "read_committed")) == {b"fresh"}


def test_timed_out_transaction_is_aborted(txn_cluster: LocalCluster) -> None:
    bs = txn_cluster.bootstrap_servers
    topic = new_topic(bs)
    p = txn_producer(bs, f"tx-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    p.produce(topic, b"late", partition=1)
    p.flush(30)
    # The coordinator aborts it after 2 s (ticker every 0.5 s): the LSO moves past it and
    # a record committed afterwards by another producer becomes readable.
    other = txn_producer(bs, f"tx-{uuid.uuid4().hex[:6]}")
    other.begin_transaction()
    other.produce(topic, b"other", partition=1)
    other.commit_transaction(30)
    deadline = time.monotonic() + 30
    got: set[bytes] = set()
    while time.monotonic() < deadline:
        got = values(read_all(bs, topic, "read_committed"))
        if b"other" in got:
            break
    assert got == {b"other"}
    with pytest.raises(KafkaException):
        p.commit_transaction(30)


def test_offsets_committed_in_the_transaction(txn_cluster: LocalCluster) -> None:
    """TxnOffsetCommit: invisible while the transaction is open or aborted, committed
    with the transaction."""
    bs = txn_cluster.bootstrap_servers
    topic = new_topic(bs)
    group = f"g-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        meta = c.consumer_group_metadata()
        p = txn_producer(bs, f"tx-{uuid.uuid4().hex[:6]}")
        tps = [TopicPartition(topic, 0, 5)]
        p.begin_transaction()
        p.produce(topic, b"x", partition=0)
        p.send_offsets_to_transaction(tps, meta, 30)
        p.abort_transaction(30)
        assert c.committed([TopicPartition(topic, 0)], 30)[0].offset < 0
        p.begin_transaction()
        p.produce(topic, b"y", partition=0)
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], meta, 30)
        p.commit_transaction(30)
        assert c.committed([TopicPartition(topic, 0)], 30)[0].offset == 7
    finally:
        c.close()


def test_cli_lists_and_describes_transactions(
    txn_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from odradek.cli.main import main

    bs = txn_cluster.bootstrap_servers
    topic = new_topic(bs)
    tid = f"tx-cli-{uuid.uuid4().hex[:6]}"
    p = txn_producer(bs, tid)
    p.begin_transaction()
    p.produce(topic, b"v", partition=2)
    p.flush(30)
    assert main(["transactions", "--bootstrap-server", bs, "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    row = next(line.split() for line in out if line.startswith(tid + " "))
    assert row[3] == "Ongoing"
    assert (
        main(["transactions", "--bootstrap-server", bs, "--describe", "--transactional-id", tid])
        == 0
    )
    head, vals = [line.split() for line in capsys.readouterr().out.splitlines()]
    desc = dict(zip(head, vals))
    assert desc["TransactionState"] == "Ongoing" and desc["ProducerEpoch"] == "0"
    assert desc["TopicPartitions"] == f"{topic}-2" and desc["CoordinatorId"] == row[1]

    def producers(*extra: str) -> dict[str, dict[str, str]]:
        # Kafka's form: the command as a positional argument.
        assert (
            main(
                [
                    "transactions",
                    "--bootstrap-server",
                    bs,
                    "describe-producers",
                    "--topic",
                    topic,
                    "--partition",
                    "2",
                    *extra,
                ]
            )
            == 0
        )
        head, *rows = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert head == [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ]
        return {r[0]: dict(zip(head, r)) for r in rows}

    # KIP-664: the leader's producer state shows the open transaction's first offset.
    ongoing = producers()[desc["ProducerId"]]
    assert ongoing["CurrentTransactionStartOffset"] == "0"
    assert ongoing["ProducerEpoch"] == "0" and ongoing["LastSequence"] == "0"
    assert abs(int(ongoing["LastTimestamp"]) - time.time() * 1000) < 60_000
    p.commit_transaction(30)
    wait_for(
        lambda: producers()[desc["ProducerId"]]["CurrentTransactionStartOffset"] == "None",
        20,
        "the COMMIT marker on the leader",
    )
    committed = producers()[desc["ProducerId"]]
    assert int(committed["LatestCoordinatorEpoch"]) >= 0
    # A follower answers from its own producer state (--broker-id), as in Kafka.
    leader, isr = _leader_and_isr(txn_cluster, topic, partition=2)
    follower = next(b for b in isr if b != leader)
    wait_for(
        lambda: producers("--broker-id", str(follower)).get(desc["ProducerId"]) == committed,
        20,
        "the follower's producer state",
    )
    assert (
        main(
            [
                "transactions",
                "--bootstrap-server",
                bs,
                "describe-producers",
                "--topic",
                topic,
                "--partition",
                "99",
            ]
        )
        == 1
    )
    assert "UNKNOWN_TOPIC_OR_PARTITION" in capsys.readouterr().err
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert (
            main(
                ["transactions", "--bootstrap-server", bs, "--describe", "--transactional-id", tid]
            )
            == 0
        )
        head, vals = [line.split() for line in capsys.readouterr().out.splitlines()]
        if dict(zip(head, vals))["TransactionState"] == "CompleteCommit":
            break
        time.sleep(0.1)
    assert dict(zip(head, vals))["TransactionState"] == "CompleteCommit"
    assert (
        main(
            [
                "transactions",
                "--bootstrap-server",
                bs,
                "--describe",
                "--transactional-id",
                "no-such-id",
            ]
        )
        == 1
    )


def test_kafka_python_and_aiokafka_transactions(txn_cluster: LocalCluster) -> None:
    """The same commit/abort semantics through kafka-python's and aiokafka's
    transactional producers, read back by their read_committed consumers; each commits
    a group's offsets in its transaction (AddOffsetsToTxn, then a TxnOffsetCommit that
    the group coordinator verifies with the transaction coordinator, KIP-890)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    bs = txn_cluster.bootstrap_servers
    topic = new_topic(bs, partitions=1)
    kp = KafkaProducer(bootstrap_servers=bs, transactional_id=f"kp-{uuid.uuid4().hex[:6]}")
    kp.init_transactions()
    kp.begin_transaction()
    kp.send(topic, b"kp-aborted", partition=0)
    kp.flush()
    kp.abort_transaction()
    kp.begin_transaction()
    kp.send(topic, b"kp-committed", partition=0)
    kp_group, aio_group = f"kp-g-{uuid.uuid4().hex[:6]}", f"aio-g-{uuid.uuid4().hex[:6]}"
    kp.send_offsets_to_transaction({KTP(topic, 0): OffsetAndMetadata(11, "", -1)}, kp_group)
    kp.commit_transaction()
    kp.close()

    async def aio() -> list[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=f"aio-{uuid.uuid4().hex[:6]}")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(topic, b"aio-committed", partition=0)
                await p.send_offsets_to_transaction({ATP(topic, 0): 12}, aio_group)
            await p.begin_transaction()
            await p.send_and_wait(topic, b"aio-aborted", partition=0)
            await p.abort_transaction()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(
            bootstrap_servers=bs,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        try:
            c.assign([ATP(topic, 0)])
            await c.seek_to_beginning()
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(got) < 2 and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
            return got
        finally:
            await c.stop()

    assert asyncio.run(aio()) == [b"kp-committed", b"aio-committed"]
    kc = KafkaConsumer(
        bootstrap_servers=bs,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    kc.assign([KTP(topic, 0)])
    assert [m.value for m in kc] == [b"kp-committed", b"aio-committed"]
    kc.close()
    assert values(read_all(bs, topic, "read_uncommitted", partitions=1)) == {
        b"kp-aborted",
        b"kp-committed",
        b"aio-committed",
        b"aio-aborted",
    }
    admin = AdminClient({"bootstrap.servers": bs})
    for group, offset in ((kp_group, 11), (aio_group, 12)):
        [fut] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
        assert [(tp.topic, tp.offset) for tp in fut.result(30).topic_partitions] == [
            (topic, offset)
        ], group


def _leader_and_isr(c: LocalCluster, topic: str, partition: int = 0) -> tuple[int, list[int]]:
    st = json.loads(c.zk_client().get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])
    return int(st["leader"]), [int(b) for b in st["isr"]]


def _read_committed_view(c: LocalCluster, topic: str) -> dict[str, Any]:
    """What the leader answers a read_committed fetch from offset 0 with: its HW, LSO,
    log start, the aborted transactions it sends (from its .txnindex files), and each
    broker's ListOffsets for read_committed -- the diagnosis of a short read."""
    leader, isr = _leader_and_isr(c, topic)
    out: dict[str, Any] = {"leader": leader, "isr": isr}
    m = sys.modules[request_cls(1, 12).__module__]
    fp = m.FetchPartition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    req = m.FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=(m.FetchTopic(topic=topic, partitions=(fp,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    try:
        r = _ask(c.broker(leader).address, req).responses[0].partitions[0]
        out["fetch"] = dict(
            error=int(r.error_code),
            hw=int(r.high_watermark),
            lso=int(r.last_stable_offset),
            log_start=int(r.log_start_offset),
            bytes=len(r.records or b""),
            aborted=[
                (int(a.producer_id), int(a.first_offset)) for a in (r.aborted_transactions or ())
            ],
        )
    except Exception as e:
        out["fetch"] = repr(e)
    return out


def test_aborted_transactions_are_served_by_every_replica_and_after_restarts(
    txn_cluster: LocalCluster,
) -> None:
    """The .txnindex entries are written by followers as they replicate the ABORT
    markers, and read back from disk after a crash: a read_committed consumer still
    drops the aborted records when the leader is killed and when the killed broker,
    restarted, leads again."""
    c = txn_cluster
    bs = c.bootstrap_servers
    topic = new_topic(bs, partitions=1)
    p = txn_producer(bs, f"tx-{uuid.uuid4().hex[:6]}")
    committed = []
    for t in range(6):  # committed and aborted transactions, interleaved
        vals = [b"t%d-%d" % (t, i) for i in range(20)]
        p.begin_transaction()
        for v in vals:
            p.produce(topic, v, partition=0)
        p.flush(30)
        if t % 2 == 0:
            p.commit_transaction(30)
            committed += vals
        else:
            p.abort_transaction(30)

    def committed_only() -> None:
        got = [v for _, v in read_all(bs, topic, "read_committed", partitions=1)]
        if got != committed:  # say what the leader serves, then fail
            assert got == committed, (len(got), _read_committed_view(c, topic))
        assert len(read_all(bs, topic, "read_uncommitted", partitions=1)) == 120

    committed_only()
    first, _ = _leader_and_isr(c, topic)
    c.stop_broker(first, signal.SIGKILL)
    try:
        wait_for(lambda: _leader_and_isr(c, topic)[0] not in (first, -1), 30, "a follower to lead")
        committed_only()  # a follower's own index
    finally:
        c.start_broker(first)
    # The restarted broker rebuilt its state from its files; once back in the ISR, make
    # it lead by stopping whichever other broker leads (a clean stop moves leadership).
    wait_for(
        lambda: sorted(_leader_and_isr(c, topic)[1]) == [1, 2, 3],
        60,
        f"broker {first} back in the ISR",
    )
    stopped: list[int] = []
    try:
        for _ in range(2):
            leader = _leader_and_isr(c, topic)[0]
            if leader == first:
                break
            c.stop_broker(leader)
            stopped.append(leader)
            wait_for(
                lambda gone=leader: _leader_and_isr(c, topic)[0] not in (gone, -1),
                30,
                f"leadership to leave broker {leader}",
            )
        assert _leader_and_isr(c, topic)[0] == first
        committed_only()
    finally:
        for b in stopped:
            c.start_broker(b)
        for b in stopped:
            # The module's next test creates an RF 3 topic: every broker must list the
            # restarted ones first (a loaded CI run was refused INVALID_REPLICATION_FACTOR
            # by a broker whose watch had not fired yet).
            c.wait_broker_seen(b)


# ====================================================================== KIP-890 part 1
INVALID_TXN_STATE, TRANSACTION_ABORTABLE, UNSTABLE_OFFSET_COMMIT = 48, 120, 88


def _ask(address: str, entity: Any) -> Any:
    with RawClient.to(address) as client:
        return client.request(entity)


def _find_coordinator(bootstrap: str, key: str, key_type: int = 1) -> Any:
    """FindCoordinator for a transactional id (key type 1) or a group (0)."""
    req = request_cls(10, 3)(key=key, key_type=key_type)

    def found() -> Any:
        r = _ask(bootstrap, req)
        return r if int(r.error_code) == 0 else None

    return wait_for(found, 30, f"a coordinator for {key}")


def _init_producer(coordinator: str, tid: str) -> tuple[int, int]:
    init = _ask(
        coordinator,
        request_cls(22, 3)(
            transactional_id=tid,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        ),
    )
    assert int(init.error_code) == 0
    return int(init.producer_id), int(init.producer_epoch)


def _add_partition(coordinator: str, tid: str, pid: int, epoch: int, topic: str) -> int:
    m = sys.modules[request_cls(24, 3).__module__]
    r = _ask(
        coordinator,
        m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(m.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),),
        ),
    )
    return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def _txn_state(coordinator: str, tid: str) -> str:
    """DescribeTransactions (KIP-664): the transaction's state as Kafka names it."""
    r = _ask(coordinator, request_cls(65, 0)(transactional_ids=(tid,)))
    return str(r.transaction_states[0].transaction_state)


def _end_txn(coordinator: str, tid: str, pid: int, epoch: int, commit: bool) -> int:
    return int(
        _ask(
            coordinator,
            request_cls(26, 3)(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
            ),
        ).error_code
    )


def _produce_txn(leader: str, tid: str, pid: int, epoch: int, topic: str, seq: int) -> int:
    batch = encode_batch(
        [(b"k", b"v%d" % seq)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )
    req = dataclasses.replace(produce_request(topic, 0, batch), transactional_id=tid)
    return int(_ask(leader, req).responses[0].partition_responses[0].error_code)


def _end_offset(address: str, topic: str, isolation_level: int) -> int:
    """The partition's end offset (the LSO under read_committed) from ``address``, once
    it leads (a new topic's leader may not have applied its leadership yet)."""
    req = dataclasses.replace(list_offsets_request(topic, 0, -1), isolation_level=isolation_level)

    def answered() -> tuple[int] | None:
        p = _ask(address, req).topics[0].partitions[0]
        code = int(p.error_code)
        assert code in (0, 3, 5, 6), code  # retriable: UNKNOWN_TOPIC, NO_LEADER, NOT_LEADER
        return (int(p.offset),) if code == 0 else None

    return wait_for(answered, 20, f"ListOffsets of {topic}-0 from {address}")[0]


def test_a_batch_outside_its_transaction_is_refused_by_the_leader(
    txn_cluster: LocalCluster,
) -> None:
    """KIP-890 part 1: a transactional batch that would open a transaction on a partition
    is appended only if the coordinator confirms the partition is in the producer's
    transaction. Otherwise (never added, or a late batch after the abort) it gets
    INVALID_TXN_STATE and nothing is appended, so no transaction is left open that no
    marker will close (read_committed consumers would stop there for good). The
    coordinator is another broker than the leader: the leader asks it over the network
    (AddPartitionsToTxn v4, verify only)."""
    c = txn_cluster
    bs = c.bootstrap_servers.split(",")[0]
    topic = new_topic(c.bootstrap_servers, partitions=1)
    leader, _ = _leader_and_isr(c, topic)
    at_leader = c.broker(leader).address
    tid, fc = "", None
    for i in range(100):
        tid = f"kip890-{uuid.uuid4().hex[:6]}-{i}"
        fc = _find_coordinator(bs, tid)
        if int(fc.node_id) != leader:
            break
    assert fc is not None and int(fc.node_id) != leader
    coordinator = f"{fc.host}:{fc.port}"
    pid, epoch = _init_producer(coordinator, tid)

    def produce(seq: int) -> int:
        return _produce_txn(at_leader, tid, pid, epoch, topic, seq)

    # 1. Never added to the transaction: refused, nothing appended.
    assert produce(0) == INVALID_TXN_STATE
    assert _end_offset(at_leader, topic, 0) == 0
    # 2. Added, as a client does first: accepted.
    assert _add_partition(coordinator, tid, pid, epoch, topic) == 0
    assert produce(0) == 0
    # 3. The broker-to-broker form: the coordinator answers per partition (v5:
    # TRANSACTION_ABORTABLE for one not in the transaction; v4: INVALID_TXN_STATE).
    for version, not_in in ((5, TRANSACTION_ABORTABLE), (4, INVALID_TXN_STATE)):
        m = sys.modules[request_cls(24, version).__module__]
        verify = _ask(
            coordinator,
            m.AddPartitionsToTxnRequest(
                transactions=(
                    m.AddPartitionsToTxnTransaction(
                        transactional_id=tid,
                        producer_id=pid,
                        producer_epoch=epoch,
                        verify_only=True,
                        topics=(
                            m.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),
                            m.AddPartitionsToTxnTopic(name="elsewhere", partitions=(0,)),
                        ),
                    ),
                )
            ),
        )
        assert int(verify.error_code) == 0
        got = {
            str(t.name): int(t.results_by_partition[0].partition_error_code)
            for t in verify.results_by_transaction[0].topic_results
        }
        assert got == {topic: 0, "elsewhere": not_in}, version
    # 4. Aborted; a late batch of the same producer and epoch is refused.
    assert _end_txn(coordinator, tid, pid, epoch, commit=False) == 0
    wait_for(lambda: _end_offset(at_leader, topic, 1) == 2, 30, "the abort marker")
    # The marker is written before the coordinator records CompleteAbort; until then it
    # answers a verification CONCURRENT_TRANSACTIONS, which the leader maps to the
    # retriable NOT_ENOUGH_REPLICAS (Kafka's mapping: a client retries). A loaded CI
    # run sent the late batch in that window and got 19.
    wait_for(
        lambda: _txn_state(coordinator, tid) == "CompleteAbort",
        30,
        "the coordinator to complete the abort",
    )
    assert produce(1) == INVALID_TXN_STATE
    # Nothing is left open: the last stable offset is the high watermark (record+marker).
    assert _end_offset(at_leader, topic, 1) == _end_offset(at_leader, topic, 0) == 2
    assert [
        v for _, v in read_all(c.bootstrap_servers, topic, "read_committed", partitions=1)
    ] == []


def test_a_transactional_batch_without_a_transactional_id_is_refused(
    txn_cluster: LocalCluster,
) -> None:
    """A produce whose records are transactional but whose request names no
    transactional id cannot be verified with any coordinator, and no marker would ever
    close what it opened: as in Kafka, every partition of the request gets
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended."""
    c = txn_cluster
    topic = new_topic(c.bootstrap_servers, partitions=1)
    leader, _ = _leader_and_isr(c, topic)
    at_leader = c.broker(leader).address
    batch = encode_batch(
        [(b"k", b"stray")], producer_id=4242, producer_epoch=0, base_sequence=0, transactional=True
    )
    r = _ask(at_leader, produce_request(topic, 0, batch))
    assert int(r.responses[0].partition_responses[0].error_code) == 53
    assert _end_offset(at_leader, topic, 0) == 0
    # A plain batch in the same form is appended as usual.
    plain = encode_batch([(b"k", b"fine")], producer_id=-1, producer_epoch=-1, base_sequence=-1)
    r = _ask(at_leader, produce_request(topic, 0, plain))
    assert int(r.responses[0].partition_responses[0].error_code) == 0
    assert _end_offset(at_leader, topic, 1) == _end_offset(at_leader, topic, 0) == 1


def test_transactional_offsets_outside_their_transaction_are_refused(
    txn_cluster: LocalCluster,
) -> None:
    """KIP-890 for TxnOffsetCommit (Kafka's GroupCoordinator): the group coordinator
    writes a transaction's first offsets only once the transaction coordinator (another
    broker here) confirms the group's __consumer_offsets partition is in it. Without
    AddOffsetsToTxn, or after the abort, the commit is INVALID_TXN_STATE and nothing is
    left pending: OffsetFetch with require_stable (KIP-447) answers at once instead of
    UNSTABLE_OFFSET_COMMIT for good."""
    c = txn_cluster
    bs = c.bootstrap_servers.split(",")[0]
    topic = new_topic(c.bootstrap_servers, partitions=1)
    tid, group, gc, tc = "", "", None, None
    for i in range(100):
        tid, group = f"kip890-o-{uuid.uuid4().hex[:6]}-{i}", f"g-{uuid.uuid4().hex[:6]}"
        tc = _find_coordinator(bs, tid)
        gc = _find_coordinator(bs, group, key_type=0)
        if int(gc.node_id) != int(tc.node_id):
            break
    assert gc is not None and tc is not None and int(gc.node_id) != int(tc.node_id)
    coordinator, group_coordinator = f"{tc.host}:{tc.port}", f"{gc.host}:{gc.port}"
    pid, epoch = _init_producer(coordinator, tid)
    commit_mod = sys.modules[request_cls(28, 3).__module__]
    fetch_mod = sys.modules[request_cls(9, 7).__module__]

    def commit(offset: int) -> int:
        r = _ask(
            group_coordinator,
            commit_mod.TxnOffsetCommitRequest(
                transactional_id=tid,
                group_id=group,
                producer_id=pid,
                producer_epoch=epoch,
                generation_id=-1,
                member_id="",
                group_instance_id=None,
                topics=(
                    commit_mod.TxnOffsetCommitRequestTopic(
                        name=topic,
                        partitions=(
                            commit_mod.TxnOffsetCommitRequestPartition(
                                partition_index=0,
                                committed_offset=offset,
                                committed_leader_epoch=-1,
                                committed_metadata="",
                            ),
                        ),
                    ),
                ),
            ),
        )
        return int(r.topics[0].partitions[0].error_code)

    def stable_offset() -> tuple[int, int]:
        r = _ask(
            group_coordinator,
            fetch_mod.OffsetFetchRequest(
                group_id=group,
                require_stable=True,
                topics=(fetch_mod.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),),
            ),
        )
        p = r.topics[0].partitions[0]
        return int(p.error_code), int(p.committed_offset)

    def add_offsets() -> int:
        return int(
            _ask(
                coordinator,
                request_cls(25, 3)(
                    transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
                ),
            ).error_code
        )

    # 1. The group's offsets partition was never added: refused, nothing pending.
    assert commit(5) == INVALID_TXN_STATE
    assert stable_offset() == (0, -1)
    # 2. Added (AddOffsetsToTxn), as a client does first: pending until the marker.
    assert add_offsets() == 0
    assert commit(5) == 0
    assert stable_offset()[0] == UNSTABLE_OFFSET_COMMIT
    # 3. Aborted; a late commit of the same producer and epoch is refused.
    assert _end_txn(coordinator, tid, pid, epoch, commit=False) == 0
    wait_for(lambda: stable_offset() == (0, -1), 30, "the abort to reach the group")
    # The coordinator completes the abort once every marker is written: until then it is
    # in PrepareAbort, and a verification then answers CONCURRENT_TRANSACTIONS, which the
    # group coordinator turns into the retriable COORDINATOR_NOT_AVAILABLE (Kafka's
    # maybeConvertOffsetCommitError). A loaded CI run sent the late commit in that window.
    wait_for(
        lambda: _txn_state(coordinator, tid) == "CompleteAbort",
        30,
        "the transaction coordinator to complete the abort",
    )
    assert commit(7) == INVALID_TXN_STATE
    assert stable_offset() == (0, -1)


def test_verification_can_be_switched_off_as_a_dynamic_broker_config(
    txn_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """transaction.partition.verification.enable=false (cluster default, dynamic): the
    leader appends without asking, as before KIP-890. The transaction that stray batch
    opens hangs; the operator finds it and aborts it with kafka-transactions' commands
    (``find-hanging``, ``abort --start-offset``, KIP-664)."""
    from odradek.cli.main import main

    c = txn_cluster
    bs = c.bootstrap_servers
    topic = new_topic(bs, partitions=1)
    leader, _ = _leader_and_isr(c, topic)
    key = "transaction.partition.verification.enable"

    def set_default(value: str | None) -> None:
        # kafka-configs --entity-type brokers --entity-default (Kafka's "" resource)
        change = (
            ("--add-config", f"{key}={value}") if value is not None else ("--delete-config", key)
        )
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "odradek",
                "configs",
                "--bootstrap-server",
                bs,
                "--entity-type",
                "brokers",
                "--entity-default",
                "--alter",
                *change,
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert r.returncode == 0, r.stderr

    tid = f"kip890-off-{uuid.uuid4().hex[:6]}"
    fc = _find_coordinator(bs.split(",")[0], tid)
    coordinator = f"{fc.host}:{fc.port}"
    pid, epoch = _init_producer(coordinator, tid)
    at_leader = c.broker(leader).address
    set_default("false")
    try:
        # Accepted once the leader has the new default (a metadata update away).
        wait_for(
            lambda: _produce_txn(at_leader, tid, pid, epoch, topic, 0) == 0,
            30,
            "the unverified batch to be appended",
        )
    finally:
        set_default(None)
    # What verification prevents: a transaction the coordinator does not know holds
    # read_committed consumers at its first offset.
    assert _end_offset(at_leader, topic, 1) == 0 < _end_offset(at_leader, topic, 0)

    def hanging() -> list[list[str]]:
        assert (
            main(
                [
                    "transactions",
                    "--bootstrap-server",
                    bs,
                    "find-hanging",
                    "--topic",
                    topic,
                    "--max-transaction-timeout",
                    "0",
                ]
            )
            == 0
        )
        head, *rows = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert head == [
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
        ]
        return rows

    # Found: open on the partition, and not in any transaction its coordinator knows.
    [row] = wait_for(hanging, 20, "the hanging transaction")
    assert row[:6] == [topic, "0", str(pid), str(epoch), "-1", "0"]
    # Aborted by its start offset: an ABORT marker from the leader closes it.
    assert (
        main(
            [
                "transactions",
                "--bootstrap-server",
                bs,
                "abort",
                "--topic",
                topic,
                "--partition",
                "0",
                "--start-offset",
                "0",
            ]
        )
        == 0
    )
    wait_for(lambda: _end_offset(at_leader, topic, 1) == 2, 30, "the abort marker")
    assert hanging() == []
    assert (
        main(
            [
                "transactions",
                "--bootstrap-server",
                bs,
                "abort",
                "--topic",
                topic,
                "--partition",
                "0",
                "--start-offset",
                "0",
            ]
        )
        == 1
    )
    assert "Could not find any open transactions" in capsys.readouterr().err
    # And with the default back, the next unverified batch is refused again.
    wait_for(
        lambda: _produce_txn(at_leader, tid, pid, epoch, topic, 1) == INVALID_TXN_STATE,
        30,
        "verification to be back on",
    )
