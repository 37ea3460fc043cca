"""The lost-records ledger on a real cluster (issue 6 item 5; REQ-R10, R19, R20).

CI: an unclean election (REQ-R10/R15) -- the ISR shrinks to the leader, which takes
records alone and dies; the out-of-sync follower is elected; the old leader returns and
truncates (R19/R20). Kafka discards those acknowledged records; here they are in the
old leader's ledger with the epochs and the reason, and ``odradek lost-records replay``
re-produces them once (a second replay sends nothing).

Slow: the chaos scenarios that lose acknowledged records (REQ-P4 and REQ-P6 with
acks=1), checked on Spark: the ledger accounts for every lost record.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from replication_util import consume_all, create_topic, produce, wait_for

from odradek.cli.main import main as odradek
from odradek.storage.checkpoint import read_checkpoint
from odradek.storage.truncation_ledger import ledger_root, list_entries

pytestmark = pytest.mark.integration

FAST = {"replica.lag.time.max.ms": "2000", "zookeeper.session.timeout.ms": "4000"}


def _state(c: Any, topic: str) -> tuple[int, int, list[int]]:
    """(leader, leader epoch, isr) from the partition state znode (REQ-R13)."""
    data, _ = c.zk_client().get(f"/brokers/topics/{topic}/partitions/0/state")
    s = json.loads(data)
    return s["leader"], s["leader_epoch"], s["isr"]


@pytest.mark.timeout(180)
def test_unclean_election_loss_is_in_the_ledger_and_replayed_once(
    make_cluster: Any,
    topic_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    c = make_cluster(2, broker_config=FAST)
    create_topic(
        c.bootstrap_servers,
        topic_name,
        1,
        2,
        {"unclean.leader.election.enable": "true"},
        assignment=[[1, 2]],
    )
    acked1, err = produce(c.bootstrap_servers, topic_name, [b"a%04d" % i for i in range(300)])
    assert not err and len(acked1) == 300
    c.stop_broker(2, signal.SIGKILL)  # the follower dies: the ISR shrinks to [1]
    wait_for(lambda: _state(c, topic_name)[2] == [1], 20, "the ISR to shrink to the leader")
    old_epoch = _state(c, topic_name)[1]
    lost_values = [b"b%04d" % i for i in range(200)]
    acked2, err = produce(c.bootstrap_servers, topic_name, lost_values, acks="all")
    assert not err and len(acked2) == 200  # min ISR 1: the leader alone commits them
    # Its HW checkpoint must show them committed, so the ledger can say so.
    cp = Path(c.broker(1).log_dir) / "replication-offset-checkpoint"
    wait_for(
        lambda: read_checkpoint(cp).get((topic_name, 0), 0) >= 500,
        20,
        "the leader's HW checkpoint to cover the records",
    )
    c.stop_broker(1, signal.SIGKILL)
    c.start_broker(2)  # the out-of-sync replica is elected (unclean, REQ-R10)
    wait_for(lambda: _state(c, topic_name)[0] == 2, 30, "the unclean election of broker 2")
    new_epoch = _state(c, topic_name)[1]
    assert new_epoch > old_epoch
    c.start_broker(1)  # returns, truncates to the new leader (REQ-R19, R20)
    wait_for(
        lambda: sorted(_state(c, topic_name)[2]) == [1, 2],
        30,
        "the old leader to rejoin as a follower",
    )

    have = {v for _, v in consume_all(c.bootstrap_servers, topic_name, [0])[0]}
    assert not any(v in have for v in lost_values)  # Kafka's loss, reproduced

    # The ledger: the old leader quarantined exactly the 200 records, before truncating.
    entries = list_entries(ledger_root(c.broker(1).log_dir), topic_name)
    assert len(entries) == 1, entries
    (e,) = entries
    assert (e.broker_id, e.start_offset, e.end_offset, e.records) == (1, 300, 500, 200)
    assert e.data_epochs == [old_epoch]
    assert (e.new_leader_id, e.new_leader_epoch) == (2, new_epoch)
    assert e.reason.startswith("truncate after OffsetsForLeaderEpoch to 300 (leader 2")
    assert e.below_high_watermark and "committed records removed" in e.reason
    assert [r.value for r in e.iter_records()] == lost_values
    assert list_entries(ledger_root(c.broker(2).log_dir)) == []  # broker 2 removed nothing

    # The CLI: list, export, replay (a dry run first), then a second replay sends nothing.
    cdir = ["--cluster-dir", str(c.dir)]
    assert odradek(["lost-records", "list", *cdir]) == 0
    out = capsys.readouterr()
    assert f"{topic_name}  0" in out.out and "300-499" in out.out and "200 record(s)" in out.err
    jl = tmp_path / "lost.jsonl"
    assert odradek(["lost-records", "export", *cdir, "--format", "jsonl", "--out", str(jl)]) == 0
    rows = [json.loads(x) for x in jl.read_text().splitlines()]
    assert [r["offset"] for r in rows] == list(range(300, 500))
    assert rows[0]["leader_epoch"] == old_epoch and rows[0]["new_leader_epoch"] == new_epoch
    pq = tmp_path / "lost.parquet"
    assert odradek(["lost-records", "export", *cdir, "--format", "parquet", "--out", str(pq)]) == 0
    import pyarrow.parquet as papq

    assert papq.read_table(pq).column("value").to_pylist() == lost_values
    assert (
        odradek(
            [
                "lost-records",
                "replay",
                *cdir,
                "--bootstrap-server",
                c.bootstrap_servers,
                "--dry-run",
            ]
        )
        == 0
    )
    assert "dry run: 200 record(s)" in capsys.readouterr().out
    assert list_entries(ledger_root(c.broker(1).log_dir))[0].replayed is None
    assert (
        odradek(["lost-records", "replay", *cdir, "--bootstrap-server", c.bootstrap_servers]) == 0
    )
    assert "replayed 200 record(s)" in capsys.readouterr().out
    assert list_entries(ledger_root(c.broker(1).log_dir))[0].replayed is not None
    assert (
        odradek(["lost-records", "replay", *cdir, "--bootstrap-server", c.bootstrap_servers]) == 0
    )
    assert "replayed 0 record(s)" in capsys.readouterr().out

    read = consume_all(c.bootstrap_servers, topic_name, [0])[0]
    values = [v for _, v in read]
    assert [v for v in values if v.startswith(b"b")] == lost_values  # once, in order
    assert len(values) == 500


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["p6-leader-isolated-acks1", "p4-leader-cut-from-zk-acks1"])
def test_chaos_loss_is_fully_accounted_for_by_the_ledger(name: str, tmp_path: Path) -> None:
    """REQ-P4 and REQ-P6 (acks=1): the deposed leader's acknowledged records are lost,
    and every one of them is in a ledger (checked by the Spark checker)."""
    from odradek.chaos.faults import FaultsUnavailable, require_available

    try:
        require_available()
    except FaultsUnavailable as e:
        pytest.skip(str(e))
    pytest.importorskip("pyspark")
    from odradek.chaos.scenarios import run_scenarios

    (res,) = run_scenarios([name], tmp_path, log=lambda s: None)
    m = res.metrics
    assert res.error is None, res.error
    assert m["lost"] > 0, m
    assert m["ledger_collected"] and m["lost_not_in_ledger"] == 0, m
    assert m["lost_in_ledger"] == m["lost"]
