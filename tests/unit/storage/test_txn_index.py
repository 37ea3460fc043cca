"""The per-segment aborted-transaction index (.txnindex, KIP-98) and its life with the log:
appends, read_committed lookups, replay after a restart, truncation, recovery,
retention and fsync."""

from __future__ import annotations

import os
import struct
import uuid
from pathlib import Path

import pytest
from _storage_helpers import small_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.storage.batch import parse_batches
from odradek.storage.durability import LEDGER_ENV, simulate_power_loss
from odradek.storage.log import Log
from odradek.storage.log_chunks import rebuild_producer_state
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.records import decode_batch_records, encode_batch
from odradek.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex

ABORT, COMMIT = 0, 1


def _data(pid: int, seq: int, n: int = 1) -> bytes:
    return encode_batch(
        [(b"k", b"v" * 100)] * n,
        timestamp_ms=1_000,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        transactional=True,
    )


def _marker(pid: int, kind: int) -> bytes:
    # Control record: key = version i16 + type i16, value = version i16 + coordinator epoch i32.
    return encode_batch(
        [(kind.to_bytes(4, "big"), b"\x00" * 6)],
        timestamp_ms=1_000,
        producer_id=pid,
        producer_epoch=0,
        transactional=True,
        control=True,
    )


def _append(log: Log, ps: ProducerStateManager, raw: bytes) -> None:
    """What Partition does on a leader append: the log, then the producer state, whose
    completed aborts go to the log's index."""
    info = log.append_as_leader(raw, 0, 1_000, allow_control=True)
    sl = log.read(info.first_offset, 1 << 20)
    assert sl is not None
    data = sl.read_bytes()
    log.record_aborted(ps.update(parse_batches(data, verify_crc=False), data))


def _new_log(tmp_path: Path) -> tuple[Log, ProducerStateManager]:
    log = Log.open(tmp_path / "t-0", small_config())
    return log, ProducerStateManager(log.directory)


def _txn_files(log: Log) -> dict[int, int]:
    return {int(p.name[:20]): p.stat().st_size for p in log.directory.glob("*.txnindex")}


def test_entries_are_kafkas_34_byte_layout() -> None:
    a = AbortedTxn(7, 10, 20, 21)
    assert a.pack() == struct.pack(">hqqqq", 0, 7, 10, 20, 21) and ENTRY_SIZE == 34


def test_a_torn_or_invalid_tail_is_cut_on_load(tmp_path: Path) -> None:
    p = tmp_path / "x.txnindex"
    good = [AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 6, 9, 10)]
    p.write_bytes(b"".join(a.pack() for a in good) + b"\x00" * 10)  # a torn third entry
    assert TransactionIndex(p).entries() == good
    assert p.stat().st_size == 2 * ENTRY_SIZE
    # An entry out of marker order is not the format: the index ends before it.
    p.write_bytes(good[1].pack() + good[0].pack())
    assert TransactionIndex(p).entries() == [good[1]]
    assert p.stat().st_size == ENTRY_SIZE


def test_entries_live_with_the_segment_holding_the_marker(tmp_path: Path) -> None:
    log, ps = _new_log(tmp_path)
    _append(log, ps, _data(1, 0))  # 0: pid 1 opens a transaction
    _append(log, ps, _data(2, 0))  # 1: pid 2 opens one
    log.roll()
    _append(log, ps, _data(1, 1))  # 2
    _append(log, ps, _marker(1, ABORT))  # 3: pid 1 aborted; pid 2 still open -> LSO 1
    log.roll()
    _append(log, ps, _marker(2, COMMIT))  # 4: a commit is not indexed
    _append(log, ps, _data(1, 2))  # 5
    _append(log, ps, _marker(1, ABORT))  # 6
    assert _txn_files(log) == {2: ENTRY_SIZE, 4: ENTRY_SIZE}
    assert log.aborted_entries() == [AbortedTxn(1, 0, 3, 1), AbortedTxn(1, 5, 6, 7)]
    # A read_committed fetch from 0 finds the first entry in a later segment than the
    # one it starts in, and both overlap [0, 7).
    assert log.collect_aborted(0, 7) == [AbortedTxn(1, 0, 3, 1), AbortedTxn(1, 5, 6, 7)]
    # From 4 only the second transaction overlaps; up to 5 none does.
    assert log.collect_aborted(4, 7) == [AbortedTxn(1, 5, 6, 7)]
    assert log.collect_aborted(4, 5) == []
    assert log.collect_aborted(2, 2) == []
    log.close()


def test_the_search_stops_at_an_entry_whose_lso_reaches_the_upper_bound(tmp_path: Path) -> None:
    log, ps = _new_log(tmp_path)
    _append(log, ps, _data(1, 0))  # 0
    _append(log, ps, _marker(1, ABORT))  # 1: LSO after it 2 >= any bound <= 2
    log.roll()
    _append(log, ps, _data(1, 1))  # 2
    _append(log, ps, _marker(1, ABORT))  # 3
    # The later segment's index is not read: its file is gone, which would not matter.
    (log.directory / f"{2:020d}.txnindex").unlink()
    log.segments[-1].txn_index._entries = None
    assert log.collect_aborted(0, 2) == [AbortedTxn(1, 0, 1, 2)]
    log.close()


def test_replay_after_a_restart_indexes_nothing_twice(tmp_path: Path) -> None:
    log, ps = _new_log(tmp_path)
    _append(log, ps, _data(1, 0))
    ps.write_snapshot()  # older than the abort below: a restart replays over it
    _append(log, ps, _marker(1, ABORT))
    _append(log, ps, _data(1, 1))
    _append(log, ps, _marker(1, ABORT))
    log.close()
    log = Log.open(tmp_path / "t-0", small_config(), recovery_point=log.log_end_offset)
    ps = ProducerStateManager(log.directory)
    rebuild_producer_state(ps, log)
    assert log.aborted_entries() == [AbortedTxn(1, 0, 1, 2), AbortedTxn(1, 2, 3, 4)]
    assert _txn_files(log) == {0: 2 * ENTRY_SIZE}
    assert ps.first_unstable_offset() is None
    log.close()


def test_entries_of_a_version_1_snapshot_move_to_the_index(tmp_path: Path) -> None:
    log, ps = _new_log(tmp_path)
    _append(log, ps, _data(1, 0))
    _append(log, ps, _marker(1, ABORT))
    # What a broker before .txnindex files left: the entry only in the snapshot.
    for p in log.directory.glob("*.txnindex"):
        p.unlink()
    (log.directory / f"{2:020d}.snapshot").write_text(
        '{"version": 1, "offset": 2, "producers": {"1": {"epoch": 0, "batches": '
        '[[0, 0, 0, 0]]}}, "ongoing": {}, "aborted": [[1, 0, 1, 2]]}'
    )
    log.close()
    log = Log.open(tmp_path / "t-0", small_config(), recovery_point=2)
    rebuild_producer_state(ProducerStateManager(log.directory), log)
    assert log.collect_aborted(0, 2) == [AbortedTxn(1, 0, 1, 2)]
    assert _txn_files(log) == {0: ENTRY_SIZE}
    log.close()


def test_truncating_a_marker_cuts_its_entry_and_reopens_the_transaction(tmp_path: Path) -> None:
    log, ps = _new_log(tmp_path)
    _append(log, ps, _data(1, 0))  # 0
    _append(log, ps, _marker(1, ABORT))  # 1
    _append(log, ps, _data(1, 1))  # 2
    _append(log, ps, _marker(1, ABORT))  # 3
    # What Partition.truncate_to does: the entries above the cut, then the log.
    above = log.aborted_entries(3)
    log.truncate_to(3)
    ps.truncate_to(log.log_end_offset, above)
    assert log.aborted_entries() == [AbortedTxn(1, 0, 1, 2)]
    assert _txn_files(log) == {0: ENTRY_SIZE}
    assert ps.first_unstable_offset() == 2  # open again until the marker is rewritten
    log.close()


def test_recovery_drops_the_entries_of_markers_it_cut_off(tmp_path: Path) -> None:
    log, ps = _new_log(tmp_path)
    _append(log, ps, _data(1, 0))  # 0
    _append(log, ps, _marker(1, ABORT))  # 1
    marker_at = log.active_segment.size - len(_marker(1, ABORT))
    log.close()
    with open(log.directory / f"{0:020d}.log", "r+b") as f:
        f.truncate(marker_at + 5)  # a torn marker: recovery cuts it
    log = Log.open(tmp_path / "t-0", small_config(), recovery_point=0)
    assert log.log_end_offset == 1
    assert log.aborted_entries() == [] and _txn_files(log) == {0: 0}
    log.close()


def test_retention_takes_the_entries_with_their_segment(tmp_path: Path) -> None:
    log, ps = _new_log(tmp_path)
    _append(log, ps, _data(1, 0))
    _append(log, ps, _marker(1, ABORT))
    log.roll()
    _append(log, ps, _data(1, 1))
    log.delete_segments(log.segments[:1], "test")
    assert log.aborted_entries() == [] and log.collect_aborted(2, 3) == []
    log.run_pending_deletions(force=True)
    assert _txn_files(log) == {}
    log.close()


def test_every_flush_syncs_a_written_index_group_commit_included(tmp_path: Path) -> None:
    log, ps = _new_log(tmp_path)
    log.flush()
    _append(log, ps, _data(1, 0))
    _append(log, ps, _marker(1, ABORT))
    job = log.begin_flush(with_indexes=False)
    assert job is not None
    txn = log.active_segment.txn_index.path
    assert txn in job.index_paths and job.fsync_dir  # the new file's name too
    job.run()
    log.complete_flush(job)
    _append(log, ps, _data(1, 1))
    job = log.begin_flush(with_indexes=False)
    assert job is not None and txn not in job.index_paths  # nothing new in it
    job.run()
    log.complete_flush(job)
    assert os.path.getsize(txn) == ENTRY_SIZE
    log.close()


def test_a_fetch_is_sent_the_aborted_transactions_of_its_batches_only(tmp_path: Path) -> None:
    """Kafka's fetchUpperBoundOffset: a read_committed fetch's aborted transactions are
    looked up below an offset past its returned batches, not up to the LSO, so a
    consumer far behind gets (and the broker reads) those of its fetch only."""
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    ps = ProducerStateManager(log.directory)
    for pid in range(1, 31):  # 30 aborted transactions: one data batch, then its marker
        _append(log, ps, _data(pid, 0))
        _append(log, ps, _marker(pid, ABORT))
    for sparse in (False, True):  # the active segment's dense lookup, then the index
        if sparse:
            log.roll()
        sl = log.read(0, 500)  # a few batches of ~200 bytes
        assert sl is not None
        batches = parse_batches(sl.read_bytes(), verify_crc=False)
        bound = log.fetch_upper_bound(0, sl)
        assert batches[-1].last_offset < bound < 60, (sparse, bound)
        got = log.collect_aborted(0, bound)
        assert [a.producer_id for a in got] == list(range(1, len(got) + 1))
        # Every transaction with a batch in the fetch is there; none far past it is.
        assert {h.producer_id for h in batches} <= {a.producer_id for a in got}
        assert len(got) <= bound // 2 + 1
        whole = log.read(0, 1 << 20)
        assert whole is not None and log.fetch_upper_bound(0, whole) == 60
        assert len(log.collect_aborted(0, 60)) == 30


_OPS = ("data", "data", "abort", "commit", "roll", "group", "flush", "snapshot")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(st.tuples(st.sampled_from(_OPS), st.integers(1, 3)), max_size=40))
def test_after_a_power_loss_every_surviving_abort_has_its_entry_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ops: list[tuple[str, int]]
) -> None:
    """Power loss at any point of appends, rolls, group commits, full flushes and
    producer-state snapshots (simulate_power_loss cuts every file back to its last
    fsync, .txnindex included), then what a broker does at start: open the log at its
    durable offset and replay the producer state from the newest usable snapshot. The
    index then holds one entry per ABORT marker that survived, with its transaction's
    first offset, and none for a marker that was lost."""
    monkeypatch.setenv(LEDGER_ENV, "1")
    root = tmp_path / uuid.uuid4().hex
    config = small_config(segment_bytes=1500)
    log = Log.open(root / "t-0", config)
    ps = ProducerStateManager(log.directory)
    seq = dict.fromkeys(range(1, 4), 0)
    open_txns: set[int] = set()
    for op, pid in ops:
        if op == "data":
            _append(log, ps, _data(pid, seq[pid]))
            seq[pid] += 1
            open_txns.add(pid)
        elif op in ("abort", "commit") and open_txns:
            pid = sorted(open_txns)[pid % len(open_txns)]
            _append(log, ps, _marker(pid, ABORT if op == "abort" else COMMIT))
            open_txns.discard(pid)
        elif op == "roll" and log.active_segment.size:
            log.roll()
        elif op in ("group", "flush"):
            job = log.begin_flush(with_indexes=op == "flush")
            if job is not None:
                job.run()
                log.complete_flush(job)
        elif op == "snapshot":
            ps.write_snapshot()
    durable = log.durable_offset
    for s in log.segments:  # the "crashed" process's descriptors
        os.close(s.fd)
    simulate_power_loss(root)
    log = Log.open(root / "t-0", config, recovery_point=durable)
    rebuild_producer_state(ProducerStateManager(log.directory), log)
    # The model: the aborted transactions of the surviving log, read batch by batch.
    expected: list[tuple[int, int, int]] = []
    first: dict[int, int] = {}
    sl = log.read(log.log_start_offset, 1 << 30, max_offset=log.log_end_offset)
    offset = log.log_start_offset
    while sl is not None:
        data = sl.read_bytes()
        for h in parse_batches(data, verify_crc=True):
            if not h.is_control:
                first.setdefault(h.producer_id, h.base_offset)
            elif h.producer_id in first:
                start = first.pop(h.producer_id)
                key = decode_batch_records(data[h.position : h.position + h.size])[0].key
                if key is not None and key[2:4] == ABORT.to_bytes(2, "big"):
                    expected.append((h.producer_id, start, h.base_offset))
            offset = h.next_offset
        sl = (
            log.read(offset, 1 << 30, max_offset=log.log_end_offset)
            if offset < log.log_end_offset
            else None
        )
    got = [(a.producer_id, a.first_offset, a.last_offset) for a in log.aborted_entries()]
    assert got == expected
    assert [
        (a.producer_id, a.first_offset) for a in log.collect_aborted(0, log.log_end_offset)
    ] == [(p, f) for p, f, _ in expected]
    log.close()
