"""The lost-records ledger (issue 6 item 5): what a truncation removes is kept, durably,
before it is removed (REQ-R19, R20, R10, scenarios 4 and 6)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _storage_helpers import read_all, small_config

from odradek.replication.partition import Partition
from odradek.runtime import disk
from odradek.storage.batch import parse_batches
from odradek.storage.log import Log
from odradek.storage.records import encode_batch
from odradek.storage.truncation_ledger import (
    TruncationLedger,
    ledger_root,
    list_entries,
    mark_replayed,
    unique_records,
)
from support.partitions import new_partition


def _fill(lg: Log, batches: int, per_batch: int = 3, epoch: int = 0, tag: str = "r") -> None:
    """Leader appends of ``batches`` batches whose values are ``tag:<offset>``."""
    for _ in range(batches):
        first = lg.log_end_offset
        recs = [
            (
                f"k{first + i}".encode(),
                f"{tag}:{first + i}".encode(),
                [("h", f"{first + i}".encode())],
            )
            for i in range(per_batch)
        ]
        lg.append_as_leader(
            encode_batch(
                recs,
                timestamp_ms=1000 + first,
                producer_id=7,
                producer_epoch=0,
                base_sequence=first,
            ),
            epoch,
            now_ms=0,
        )


def test_truncation_copies_exactly_the_removed_batches(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", small_config(segment_bytes=400))
    _fill(lg, 10, epoch=3)  # offsets 0..29, 3 records per batch, several segments
    assert len(lg.segments) > 1
    before = b"".join(read_all(lg, 0))
    ledger = TruncationLedger(ledger_root(tmp_path), broker_id=2)
    e = ledger.record(
        lg,
        "t",
        0,
        13,
        reason="truncate after OffsetsForLeaderEpoch to 13",
        new_leader_id=1,
        new_leader_epoch=4,
        high_watermark=9,
        now_ms=5,
    )
    assert e is not None
    lg.truncate_to(13)
    # Offset 13 is inside batch 12..14: that whole batch goes (Kafka semantics), so the
    # ledger starts at 12 and the log ends at 12.
    assert lg.log_end_offset == 12
    assert (e.start_offset, e.end_offset, e.truncated_to) == (12, 30, 13)
    assert (e.records, e.batches, e.data_epochs, e.epoch) == (18, 6, [3], 3)
    assert not e.below_high_watermark
    after = b"".join(read_all(lg, 0))
    assert after + e.read_batches() == before  # byte for byte, unchanged
    assert e.batches_path.name == f"{12:020d}-{30:020d}-3-5.batches"
    meta = json.loads(e.path.read_text())
    assert meta["broker_id"] == 2 and meta["new_leader_epoch"] == 4
    assert meta["reason"].startswith("truncate after OffsetsForLeaderEpoch")
    recs = list(e.iter_records())
    assert [r.offset for r in recs] == list(range(12, 30))
    r = recs[1]
    assert (r.key, r.value, r.headers, r.timestamp) == (b"k13", b"r:13", [("h", b"13")], 1012)
    assert (r.producer_id, r.sequence, r.leader_epoch) == (7, 13, 3)


def test_nothing_removed_writes_nothing(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", small_config())
    _fill(lg, 2)
    ledger = TruncationLedger(ledger_root(tmp_path), 1)
    assert ledger.record(lg, "t", 0, lg.log_end_offset, reason="x") is None
    assert ledger.record(lg, "t", 0, 100, reason="x") is None
    assert not ledger_root(tmp_path).exists()
    assert (
        TruncationLedger(ledger_root(tmp_path), 1, retention_bytes=0).record(
            lg, "t", 0, 0, reason="disabled"
        )
        is None
    )


def test_below_high_watermark_is_flagged(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", small_config())
    _fill(lg, 4, epoch=1)
    e = TruncationLedger(ledger_root(tmp_path), 1).record(
        lg, "t", 0, 3, reason="unclean election", high_watermark=9
    )
    assert e is not None and e.below_high_watermark
    assert "committed records removed" in e.reason


def test_list_filter_replay_marks_and_dedupe(tmp_path: Path) -> None:
    logs = {b: Log.open(tmp_path / f"b{b}" / "t-0", small_config()) for b in (1, 2)}
    other = Log.open(tmp_path / "b1" / "u-1", small_config())
    for lg in logs.values():
        _fill(lg, 4, epoch=2)  # the same batches on two replicas
    _fill(other, 2, epoch=0, tag="u")
    for b, lg in logs.items():
        TruncationLedger(ledger_root(tmp_path / f"b{b}"), b).record(lg, "t", 0, 6, reason="x")
    TruncationLedger(ledger_root(tmp_path / "b1"), 1).record(other, "u", 1, 0, reason="y")
    entries = [
        *list_entries(ledger_root(tmp_path / "b1")),
        *list_entries(ledger_root(tmp_path / "b2")),
    ]
    assert sorted((e.topic, e.broker_id) for e in entries) == [("t", 1), ("t", 2), ("u", 1)]
    assert [e.topic for e in list_entries(ledger_root(tmp_path / "b1"), topic="u")] == ["u"]
    t_entries = [e for e in entries if e.topic == "t"]
    uniq = list(unique_records(t_entries))
    assert [r.offset for r, _ in uniq] == [6, 7, 8, 9, 10, 11]  # once, not twice
    e = t_entries[0]
    mark_replayed(e, offsets=[6, 7], complete=False)
    again = next(x for x in list_entries(e.path.parent.parent) if x.path == e.path)
    assert again.replayed is None and again.replayed_offsets == [6, 7]
    mark_replayed(again, complete=True, info={"bootstrap": "h:1"})
    done = next(x for x in list_entries(e.path.parent.parent) if x.path == e.path)
    assert done.replayed is not None and done.replayed["bootstrap"] == "h:1"


def test_retention_drops_oldest_first(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lg = Log.open(tmp_path / "t-0", small_config())
    ledger = TruncationLedger(ledger_root(tmp_path), 1, retention_bytes=10**9)
    sizes = []
    for i in range(3):
        _fill(lg, 2, epoch=i)
        start = lg.log_end_offset - 6
        e = ledger.record(lg, "t", 0, start, reason=f"r{i}", now_ms=100 + i)
        assert e is not None
        sizes.append(e.size_bytes)
        lg.truncate_to(start)
    # A cap that holds only the two newest entries.
    ledger.retention_bytes = sizes[1] + sizes[2]
    assert len(ledger.enforce_retention()) == 1
    assert [e.reason for e in list_entries(ledger.root)] == ["r1", "r2"]
    assert "dropping the oldest entry" in caplog.text
    # The newest entry is kept even if it alone exceeds the cap.
    ledger.retention_bytes = 1
    _fill(lg, 2, epoch=9)
    e = ledger.record(lg, "t", 0, lg.log_end_offset - 6, reason="r3", now_ms=200)
    assert [x.reason for x in list_entries(ledger.root)] == ["r3"]
    assert e is not None and e.batches_path.exists()


def test_crash_leftovers_are_not_entries(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", small_config())
    _fill(lg, 2)
    ledger = TruncationLedger(ledger_root(tmp_path), 1)
    e = ledger.record(lg, "t", 0, 3, reason="x", now_ms=1)
    assert e is not None
    orphan = e.path.with_name("00000000000000000009-00000000000000000012-0-2.batches")
    orphan.write_bytes(e.read_batches())  # batches renamed, crash before the JSON
    (e.path.parent / ".pending-1-3.batches.tmp").write_bytes(b"partial")
    assert len(list_entries(ledger.root)) == 1
    ledger.enforce_retention()
    assert not orphan.exists()
    assert sorted(p.name for p in e.path.parent.iterdir()) == sorted(
        [e.path.name, e.batches_path.name]
    )


def _partition(tmp_path: Path, ledger: TruncationLedger | None, hw: int = 0) -> Partition:
    d = tmp_path / "t-0"
    lg = Log.open(d, small_config())
    if hw:
        _fill(lg, 4, epoch=5)
    return new_partition(d, broker=2, replicas=(1, 2), log=lg, ledger=ledger, high_watermark=hw)


def test_partition_truncation_is_durable_in_the_ledger_before_the_log_shrinks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync-before-truncate ordering: every fsync of the entry and its directory happens
    before the segment file is shortened (a crash in between keeps the evidence)."""
    ledger = TruncationLedger(ledger_root(tmp_path), 2)
    p = _partition(tmp_path, ledger, hw=6)
    calls: list[str] = []
    real_fsync, real_ftruncate = os.fsync, os.ftruncate
    # The storage layer fsyncs through the seam (odradek.runtime.disk).
    monkeypatch.setattr(disk, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(
        os, "ftruncate", lambda fd, n: (calls.append("ftruncate"), real_ftruncate(fd, n))[1]
    )
    p.truncate_to(
        6,
        reason="truncate after OffsetsForLeaderEpoch to 6 (leader 1 epoch 6)",
        leader_id=1,
        leader_epoch=6,
    )
    assert p.log.log_end_offset == 6
    assert "ftruncate" in calls
    first_truncate = calls.index("ftruncate")
    assert calls[:first_truncate].count("fsync") >= 4  # batches, json, partition dir, root
    (e,) = list_entries(ledger.root)
    assert (e.start_offset, e.end_offset, e.new_leader_id, e.new_leader_epoch) == (6, 12, 1, 6)
    assert [h.base_offset for h in parse_batches(e.read_batches())] == [6, 9]


def test_partition_ledger_failure_does_not_block_truncation(tmp_path: Path) -> None:
    class Broken(TruncationLedger):
        def record(self, *a: object, **kw: object) -> None:  # type: ignore[override]
            raise OSError("disk full")

    p = _partition(tmp_path, Broken(ledger_root(tmp_path), 2))
    _fill(p.log, 2)
    p.truncate_to(3)
    assert p.log.log_end_offset == 3


def test_cli_list_export_and_dry_run_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``odradek lost-records`` reads log dirs without any broker (replay --dry-run too)."""
    from odradek.cli.main import main

    for b in (1, 2):
        lg = Log.open(tmp_path / f"b{b}" / "t-0", small_config())
        _fill(lg, 2, epoch=4)
        TruncationLedger(ledger_root(tmp_path / f"b{b}"), b).record(
            lg, "t", 0, 3, reason="unclean", new_leader_id=3, new_leader_epoch=5
        )
    dirs = ["--log-dir", str(tmp_path / "b1"), "--log-dir", str(tmp_path / "b2")]
    assert main(["lost-records", "list", *dirs]) == 0
    out = capsys.readouterr()
    assert out.out.count("3-5") == 2 and "3@5" in out.out and "2 entries, 6 record(s)" in out.err
    jl = tmp_path / "x.jsonl"
    assert main(["lost-records", "export", *dirs, "--out", str(jl)]) == 0
    rows = [json.loads(x) for x in jl.read_text().splitlines()]
    assert [r["offset"] for r in rows] == [3, 4, 5]  # the second replica's copy: once
    import base64

    assert base64.b64decode(rows[0]["value"]) == b"r:3"
    assert rows[0]["headers"] == [["h", base64.b64encode(b"3").decode()]]
    assert (rows[0]["sequence"], rows[0]["leader_epoch"], rows[0]["new_leader_epoch"]) == (3, 4, 5)
    assert main(["lost-records", "export", *dirs, "--all-copies", "--out", str(jl)]) == 0
    assert len(jl.read_text().splitlines()) == 6
    assert (
        main(["lost-records", "replay", *dirs, "--bootstrap-server", "127.0.0.1:1", "--dry-run"])
        == 0
    )
    assert "dry run: 3 record(s) from 2 entries" in capsys.readouterr().out
    assert all(e.replayed is None for e in list_entries(ledger_root(tmp_path / "b1")))
