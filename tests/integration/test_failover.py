"""Leader failover with real processes: what acks, min ISR and unclean election lose.

REQ-R4 (failover), R7/R8 (acks, min.insync.replicas), R10/R14/R15 (unclean election),
R19 (leader epochs close the HW-truncation loss), R13 (controlled shutdown / rolling
restart). Each test checks every acknowledged record against what consumers read.
"""

from __future__ import annotations

import json
import signal
import threading
from typing import Any

import pytest
from confluent_kafka import Producer
from replication_util import (
    broker_views,
    consume_all,
    create_topic,
    every_broker_agrees,
    partition_meta,
    produce,
    replica_log_bytes,
    wait_for,
)

from odradek.zk import znodes

pytestmark = pytest.mark.integration

FAST = {"replica.lag.time.max.ms": "3000", "zookeeper.session.timeout.ms": "4000"}


class SteadyProducer:
    """Produces numbered records in a thread until stopped; records every ack and error."""

    def __init__(self, bootstrap: str, topic: str, conf: dict[str, Any]) -> None:
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        cfg = {"bootstrap.servers": bootstrap, "linger.ms": 2, "message.timeout.ms": 30000}
        cfg.update(conf)
        self._p = Producer(cfg)
        self._topic = topic
        self._t = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err.name())
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self._p.produce(
                    self._topic, key=b"%d" % (i % 64), value=b"rec-%08d" % i, on_delivery=self._cb
                )
                i += 1
                self.sent = i
            except BufferError:
                pass
            self._p.poll(0.001 if i % 100 == 0 else 0)
        self._p.flush(60)

    def __enter__(self) -> SteadyProducer:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(90)


def _check_acked_present(
    acked: list[tuple[int, int, bytes]], read: dict[int, list[tuple[int, bytes]]]
) -> list[tuple[int, int]]:
    """Return acknowledged (partition, offset) whose record is not at that offset."""
    at = {(p, o): v for p, recs in read.items() for o, v in recs}
    return [(p, o) for p, o, v in acked if at.get((p, o)) != v]


def _leader(bootstrap: str, topic: str, partition: int = 0) -> int:
    return partition_meta(bootstrap, topic)[partition].leader


def _zk_leader(c: Any, topic: str, partition: int = 0) -> int:
    """The leader in the partition state znode: the controller's decision, which a paused
    broker's stale metadata cannot hide (REQ-R13)."""
    data, _ = c.zk_client().get(znodes.partition_state_path(topic, partition))
    return int(json.loads(data)["leader"])


@pytest.mark.parametrize("idempotent", [False, True])
def test_acks_all_min_isr_2_leader_kill_loses_nothing(
    make_cluster, topic_name, idempotent: bool
) -> None:
    """REQ-R4, R7, R8, R14: acks=all + min ISR 2 + unclean off survives a leader SIGKILL."""
    c = make_cluster(3, broker_config=FAST)
    create_topic(c.bootstrap_servers, topic_name, 2, 3, {"min.insync.replicas": "2"})
    conf = {"acks": "all", "enable.idempotence": idempotent}
    with SteadyProducer(c.bootstrap_servers, topic_name, conf) as prod:
        wait_for(lambda: len(prod.acked) > 2000, 20, "records acknowledged before the kill")
        victim = _leader(c.bootstrap_servers, topic_name, 0)
        c.stop_broker(victim, signal.SIGKILL)
        n_at_kill = len(prod.acked)
        wait_for(
            lambda: len(prod.acked) > n_at_kill + 2000,
            40,
            "acknowledgements to resume on the new leader",
        )
    assert prod.errors == [], prod.errors[:5]
    c.start_broker(victim)
    wait_for(
        lambda: all(
            len(p.isrs) == 3 for p in partition_meta(c.bootstrap_servers, topic_name).values()
        ),
        30,
        "the restarted broker to rejoin every ISR",
    )
    read = consume_all(c.bootstrap_servers, topic_name, [0, 1])
    missing = _check_acked_present(prod.acked, read)
    assert missing == [], f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    for p, recs in read.items():
        offsets = [o for o, _ in recs]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), (
            f"partition {p}: offsets out of order or repeated"
        )
        if idempotent:
            values = [v for _, v in recs]
            assert len(values) == len(set(values)), (
                f"partition {p}: the idempotent producer wrote duplicates"
            )
    # REQ-R20: replicas byte-identical below the HW.
    for p in (0, 1):
        hw = max((o for o, _ in read[p]), default=-1) + 1
        logs = {b: replica_log_bytes(c, b, topic_name, p, upto_offset=hw) for b in (1, 2, 3)}
        assert logs[1] == logs[2] == logs[3], f"replicas of partition {p} diverge below HW"


@pytest.mark.parametrize("unclean", [False, True])
def test_unclean_election_trade_off(make_cluster, topic_name, unclean: bool) -> None:
    """REQ-R10/R15: ISR shrinks to the leader, which dies; the follower returns first."""
    c = make_cluster(2, broker_config=FAST)
    create_topic(
        c.bootstrap_servers,
        topic_name,
        1,
        2,
        {"unclean.leader.election.enable": str(unclean).lower()},
        assignment=[[1, 2]],
    )
    acked1, err = produce(c.bootstrap_servers, topic_name, [b"a%d" % i for i in range(500)])
    assert not err
    c.stop_broker(2, signal.SIGKILL)  # the follower dies: ISR shrinks to [1]
    wait_for(
        lambda: partition_meta(c.bootstrap_servers, topic_name)[0].isrs == [1],
        20,
        "ISR to shrink to the leader",
    )
    acked2, err = produce(
        c.bootstrap_servers, topic_name, [b"b%d" % i for i in range(500)], acks="all"
    )
    assert not err and len(acked2) == 500  # min ISR 1: accepted by the leader alone
    c.stop_broker(1, signal.SIGKILL)  # the only ISR member dies
    c.start_broker(2)  # the out-of-sync replica comes back first
    if not unclean:
        # Offline: no leader until an ISR member returns (no loss, unavailable).
        wait_for(
            lambda: partition_meta(c.bootstrap_servers, topic_name)[0].leader in (-1, 1),
            10,
            "partition to stay without a new leader",
        )
        assert partition_meta(c.bootstrap_servers, topic_name)[0].leader != 2
        c.start_broker(1)
        wait_for(
            lambda: partition_meta(c.bootstrap_servers, topic_name)[0].leader == 1,
            30,
            "the ISR member to lead again",
        )
        read = consume_all(c.bootstrap_servers, topic_name, [0])
        lost = [
            (p, o)
            for (p, o) in list(acked1.values()) + list(acked2.values())
            if (p, o) not in {(0, off) for off, _ in read[0]}
        ]
        assert lost == []
    else:
        wait_for(
            lambda: partition_meta(c.bootstrap_servers, topic_name)[0].leader == 2,
            30,
            "the out-of-sync replica to be elected (unclean)",
        )
        read = consume_all(c.bootstrap_servers, topic_name, [0])
        have = {v for _, v in read[0]}
        lost = sorted(o for v, (p, o) in acked2.items() if v not in have)
        # The documents: unclean election loses what only the old leader had.
        assert lost == sorted(o for _, (p, o) in acked2.items()), (
            f"expected every record acked after the ISR shrank to be lost, lost {len(lost)}"
        )
        assert all(v in have for v in acked1)
        print(
            f"unclean election lost {len(lost)} acknowledged records: offsets {lost[0]}..{lost[-1]}"
        )
        c.start_broker(1)  # the old leader returns and truncates to the new leader (R20)
        wait_for(
            lambda: sorted(partition_meta(c.bootstrap_servers, topic_name)[0].isrs) == [1, 2],
            30,
            "the old leader to rejoin as a follower",
        )
        assert replica_log_bytes(c, 1, topic_name, 0) == replica_log_bytes(c, 2, topic_name, 0)


def test_leader_epoch_prevents_hw_truncation_loss(make_cluster, topic_name) -> None:
    """REQ-R19: restart a follower, then fail the leader quickly: nothing acked is lost.

    Before leader epochs a restarted follower truncated to its (stale) HW and, elected a
    moment later, lost records the old leader had acknowledged (the documents' example).
    """
    c = make_cluster(
        2,
        broker_config={"replica.lag.time.max.ms": "30000", "zookeeper.session.timeout.ms": "4000"},
    )
    create_topic(
        c.bootstrap_servers, topic_name, 1, 2, {"min.insync.replicas": "1"}, assignment=[[1, 2]]
    )
    acked, err = produce(c.bootstrap_servers, topic_name, [b"m%d" % i for i in range(200)])
    assert not err and len(acked) == 200
    c.stop_broker(2, signal.SIGKILL)
    c.start_broker(2)  # restarts as follower: it must not truncate to its stale HW
    # The controller removed the dead follower from the ISR; it rejoins after its first
    # fetch at the leader's HW. Fail the leader the moment it is back.
    wait_for(
        lambda: partition_meta(c.bootstrap_servers, topic_name)[0].isrs == [1, 2],
        30,
        "the restarted follower to rejoin the ISR",
        interval=0.02,
    )
    c.stop_broker(1, signal.SIGKILL)
    wait_for(
        lambda: partition_meta(c.bootstrap_servers, topic_name)[0].leader == 2,
        30,
        "the restarted follower to be elected",
    )
    read = consume_all(c.bootstrap_servers, topic_name, [0])
    have = {v for _, v in read[0]}
    assert [v for v in acked if v not in have] == []


def test_rolling_restart_under_load(make_cluster, topic_name) -> None:
    """Issue: SIGTERM each broker in turn under an idempotent acks=all producer."""
    c = make_cluster(3, broker_config=FAST)
    create_topic(c.bootstrap_servers, topic_name, 3, 3, {"min.insync.replicas": "2"})
    conf = {"acks": "all", "enable.idempotence": True}
    with SteadyProducer(c.bootstrap_servers, topic_name, conf) as prod:
        for b in (1, 2, 3):
            wait_for(
                lambda: all(
                    len(p.isrs) == 3
                    for p in partition_meta(c.bootstrap_servers, topic_name).values()
                ),
                30,
                "full ISRs before the next restart",
            )
            n = len(prod.acked)
            c.stop_broker(b, signal.SIGTERM)
            c.start_broker(b)
            wait_for(lambda n=n: len(prod.acked) > n + 500, 30, "progress after restart")
    assert prod.errors == [], prod.errors[:5]
    read = consume_all(c.bootstrap_servers, topic_name, [0, 1, 2])
    assert _check_acked_present(prod.acked, read) == []
    values = [v for recs in read.values() for _, v in recs]
    assert len(values) == len(set(values))


def test_idempotent_retries_after_leader_pause_no_duplicates_no_gaps(
    make_cluster, topic_name
) -> None:
    """Issue 4: SIGSTOP the leader past the request timeout, then SIGCONT. The producer
    retries (possibly to a new leader); the log has every record once, in send order."""
    c = make_cluster(3, broker_config=FAST)
    create_topic(
        c.bootstrap_servers, topic_name, 1, 3, {"min.insync.replicas": "2"}, assignment=[[1, 2, 3]]
    )
    conf = {
        "acks": "all",
        "enable.idempotence": True,
        "request.timeout.ms": 2000,
        "socket.timeout.ms": 5000,
        "max.in.flight.requests.per.connection": 5,
    }
    with SteadyProducer(c.bootstrap_servers, topic_name, conf) as prod:
        wait_for(lambda: len(prod.acked) > 1000, 20, "acks before the pause")
        c.stop_broker(1, signal.SIGSTOP)
        # Longer than request.timeout.ms and the ZooKeeper session: retries and a failover.
        # Wait for the failover itself: acks alone can grow past any bound while librdkafka
        # delivers the reports of batches the leader answered just before it froze, and a
        # pause that ends there tests no failover at all (CI saw exactly that).
        wait_for(
            lambda: _zk_leader(c, topic_name) not in (1, -1),
            30,
            "the controller to elect a new leader",
        )
        n = len(prod.acked)
        # librdkafka drains what it had in flight to the paused broker before it resumes
        # on the new leader (idempotence), bounded by its socket timeout.
        wait_for(lambda: len(prod.acked) > n + 1000, 60, "acks from the new leader")
        c.start_broker(1)  # SIGCONT: the old leader wakes up, is fenced, follows
        n = len(prod.acked)
        wait_for(lambda: len(prod.acked) > n + 1000, 30, "acks after the old leader resumed")
    # The woken leader serves its stale view until ZooKeeper tells it otherwise (a zombie,
    # as in ZooKeeper-era Kafka); read once it has rejoined as a follower -- in the view of
    # every broker, each asked alone. (CI once read back only the first 31,000 of 142,700
    # acknowledged records after a wait that took the ISR from one broker's answer and the
    # leader from another's: the woken broker's stale "ISR [1, 2, 3]" passed half the test.)
    wait_for(
        lambda: (
            every_broker_agrees(c, topic_name, 0, _zk_leader(c, topic_name), [1, 2, 3])
            and _zk_leader(c, topic_name) != 1
        ),
        30,
        "every broker to see the paused broker rejoin as a follower",
    )
    assert prod.errors == [], prod.errors[:5]
    read = consume_all(c.bootstrap_servers, topic_name, [0])
    values = [v for _, v in read[0]]
    views = broker_views(c, topic_name, 0)
    assert len(values) == len(set(values)), f"a retried batch was written twice; {views}"
    seqs = [int(v.split(b"-")[1]) for v in values]
    assert seqs == list(range(len(seqs))), f"records missing or out of send order; {views}"
    missing = _check_acked_present(prod.acked, read)
    assert missing == [], (
        f"{len(missing)} acknowledged records not read back, from "
        f"{missing[:3]}; read {len(values)}; brokers: {views}"
    )


def test_woken_leader_answers_from_its_frozen_view_never_beyond_committed(
    make_cluster, topic_name
) -> None:
    """Why a read-back once stopped 111,700 records short (CI on 0cc1adb), pinned.

    A leader SIGSTOPped past its ZooKeeper session wakes up still believing it leads: a
    request already waiting on an open connection is read in the event loop's first step,
    before the ISR check that finds the followers gone and fences it (its ISR write then
    fails). That request is answered from the frozen view: ListOffsets gives the high
    watermark of the moment of the pause, not the new leader's. As in ZooKeeper-era
    Kafka, this is stale but never wrong: the frozen high watermark is a committed offset,
    and whatever such a leader serves is a prefix of the new leader's log. A reader that
    takes its end offset from that one answer stops early with a clean prefix -- which is
    what the failing read-back was (the acknowledged records were all on the new leader).
    """
    from rawclient import RawClient, fetch_request, list_offsets_request, metadata_request

    from odradek.storage.batch import scan_batches

    c = make_cluster(3, broker_config=FAST)
    create_topic(
        c.bootstrap_servers, topic_name, 1, 3, {"min.insync.replicas": "2"}, assignment=[[1, 2, 3]]
    )
    before, err = produce(
        c.bootstrap_servers, topic_name, [b"before-%05d" % i for i in range(2000)], partition=0
    )
    assert not err and len(before) == 2000
    rc = RawClient.to(c.broker(1).address, timeout=30)  # open before the pause
    try:
        rc.request(metadata_request([topic_name]))
        c.stop_broker(1, signal.SIGSTOP)
        try:
            wait_for(
                lambda: _zk_leader(c, topic_name) not in (1, -1),
                30,
                "the controller to elect a new leader",
            )
            after, err = produce(
                c.bootstrap_servers,
                topic_name,
                [b"after-%05d" % i for i in range(2000)],
                partition=0,
            )
            assert not err and len(after) == 2000
            # Queued while the old leader is frozen: read first thing when it wakes.
            lo_id = rc.send(list_offsets_request(topic_name, 0, -1))
            fe_id = rc.send(fetch_request(topic_name, 0, 0))
        finally:
            c.start_broker(1)  # SIGCONT
        lo = rc.receive(2, 7, lo_id).topics[0].partitions[0]
        fe = rc.receive(1, 12, fe_id).responses[0].partitions[0]
    finally:
        rc.close()
    new_leader = _zk_leader(c, topic_name)
    with RawClient.to(c.broker(new_leader).address) as rl:
        true_hw = int(
            rl.request(list_offsets_request(topic_name, 0, -1)).topics[0].partitions[0].offset
        )
    assert true_hw >= 4000
    # Either already fenced (NOT_LEADER_OR_FOLLOWER), or the frozen high watermark: a
    # committed offset of the first 2,000 records, never one past the new leader's.
    assert int(lo.error_code) in (0, 6), lo
    if int(lo.error_code) == 0:
        assert 0 < int(lo.offset) <= 2000 <= true_hw, (lo, true_hw)
    assert int(fe.error_code) in (0, 6), fe
    if int(fe.error_code) == 0 and fe.records:
        served = bytes(fe.records)
        whole = scan_batches(served, verify_crc=True).batches
        assert whole, "the woken leader served no whole batch"
        end = whole[-1].position + whole[-1].size
        assert whole[-1].last_offset < true_hw
        truth = replica_log_bytes(c, new_leader, topic_name, 0)
        assert truth[:end] == served[:end], "a woken leader served bytes the log does not have"
