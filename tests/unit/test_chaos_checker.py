"""The Spark checker computes loss, duplicates, order, dirty reads and divergence from
hand-made histories with known answers (issue 6 item 3). One SparkSession, two scenarios."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyarrow", reason="histories are Parquet (pip install .[spark])")
pytest.importorskip("pyspark", reason="the checker runs on PySpark")
from odradek.chaos.workload import History


def _history(name: str, t0: float) -> History:
    h = History(name)
    h.event("state", "", partition=0, leader=1, epoch=0, isr="[1, 2, 3]", ts=t0)
    h.event("phase", "steady", ts=t0)
    for seq in range(10):
        h.producer.append((name, seq, "send", t0 + seq * 0.1, 0, None, None))
    return h


def test_checker_metrics(tmp_path: Path) -> None:
    from odradek.chaos.checker import check_run

    t0 = 1_700_000_000.0
    # "bad": 0..7 acked at offsets 0..7; the final log lost 5 and 6, holds 3 twice, has 8
    # (sent, never acked) and puts 9 before 7; a live consumer read offset 5 = seq 5,
    # later truncated; replica 2 disagrees with 1 at offset 2 below both HWs.
    bad = _history("bad", t0)
    for seq in range(8):
        bad.producer.append(("bad", seq, "ack", t0 + 0.05 + seq * 0.1, 0, seq, None))
    bad.producer.append(("bad", 8, "error", t0 + 1.0, 0, None, "REQUEST_TIMED_OUT"))
    bad.event("phase", "deposed", ts=t0 + 0.45)
    bad.event("state", "", partition=0, leader=2, epoch=1, isr="[2, 3]", ts=t0 + 0.5)
    final = [0, 1, 2, 3, 4, 3, 9, 7, 8]
    for off, seq in enumerate(final):
        bad.reads.append(("bad", "final", 0, off, seq, t0 + 2))
    bad.reads.append(("bad", "live", 0, 5, 5, t0 + 0.7))
    for broker, seqs in ((1, [0, 1, 2, 3]), (2, [0, 1, 99, 3])):
        for off, seq in enumerate(seqs):
            bad.replicas.append(("bad", broker, 0, off, seq, 0, 4, 4))
    bad.write(tmp_path / "bad")

    # "good": everything acked and read once, in order; replicas agree.
    good = _history("good", t0)
    for seq in range(10):
        good.producer.append(("good", seq, "ack", t0 + 0.01 + seq * 0.1, 0, seq, None))
        good.reads.append(("good", "final", 0, seq, seq, t0 + 2))
        for broker in (1, 2):
            good.replicas.append(("good", broker, 0, seq, seq, 0, 10, 10))
    good.write(tmp_path / "good")

    m = check_run(tmp_path)
    assert (tmp_path / "checker.json").exists()
    b, g = m["bad"], m["good"]
    assert (b["sent"], b["acked"], b["errors"], b["failed_sends"]) == (10, 8, 1, 1)
    assert b["lost"] == 2  # seqs 5 and 6
    assert b["duplicated"] == 1  # seq 3 twice
    assert b["out_of_order"] == 3  # offset 5 (3 after 4), offset 7 (7 after 9), offset 8
    assert b["unacked_read"] == 2  # 9 (never resolved) and 8 (failed)
    assert b["dirty_reads"] == 1  # live read of offset 5 now holds another record
    assert b["divergent"] == 1
    assert b["split_brain_acks"] == 2 and b["split_brain_s"] > 0  # 5, 6 acked after t0+0.5
    assert b["leader_changes"] == 1 and b["final_leader"] == 2 and b["final_isr"] == [2, 3]
    assert b["phases"]["deposed"]["acks"] == 4  # acks of 4..7
    assert b["phases"]["deposed"]["isrs"] == ["[1, 2, 3]", "[2, 3]"]
    assert b["error_kinds"] == {"REQUEST_TIMED_OUT": 1}
    for k in (
        "lost",
        "duplicated",
        "out_of_order",
        "unacked_read",
        "dirty_reads",
        "divergent",
        "split_brain_acks",
        "leader_changes",
    ):
        assert g[k] == 0, k
    assert g["unavailable_s"] == 0
