"""The idempotent-producer rules of ProducerStateManager (KIP-98), one test per table row."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.batch import parse_batches
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.records import encode_batch


def batch(pid: int, epoch: int, seq: int, n: int = 2, base_offset: int = 0):
    raw = encode_batch(
        [(None, b"v%d" % i) for i in range(n)],
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )
    return parse_batches(raw)


def appended(m: ProducerStateManager, headers, offset: int):
    for h in headers:
        h.base_offset = offset
        offset += h.last_offset_delta + 1
    m.update(headers)
    return offset


def test_new_producer_in_order_then_duplicate(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path)
    b0 = batch(7, 0, 0)
    assert m.check(b0) is None
    nxt = appended(m, b0, 100)
    b1 = batch(7, 0, 2)
    assert m.check(b1) is None
    appended(m, b1, nxt)
    dup = m.check(batch(7, 0, 0))  # a retry of the first batch
    assert dup is not None and (dup.first_offset, dup.last_offset) == (100, 101)


def test_gap_and_reorder_are_out_of_order(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path)
    appended(m, batch(7, 0, 0), 0)
    for seq in (3, 1):
        with pytest.raises(KafkaError) as e:
            m.check(batch(7, 0, seq))
        assert e.value.code == ErrorCode.out_of_order_sequence_number


def test_unknown_producer_must_start_at_zero(tmp_path: Path) -> None:
    with pytest.raises(KafkaError) as e:
        ProducerStateManager(tmp_path).check(batch(9, 0, 5))
    assert e.value.code == ErrorCode.unknown_producer_id


def test_epochs(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path)
    appended(m, batch(7, 3, 0), 0)
    with pytest.raises(KafkaError) as e:
        m.check(batch(7, 2, 2))
    assert e.value.code == ErrorCode.invalid_producer_epoch
    with pytest.raises(KafkaError) as e:
        m.check(batch(7, 4, 2))  # a new epoch restarts at 0
    assert e.value.code == ErrorCode.out_of_order_sequence_number
    assert m.check(batch(7, 4, 0)) is None


def test_only_last_five_batches_are_remembered(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path)
    off = 0
    for i in range(6):
        off = appended(m, batch(7, 0, 2 * i), off)
    assert m.check(batch(7, 0, 2)) is not None  # 2nd batch: still cached
    with pytest.raises(KafkaError):
        m.check(batch(7, 0, 0))  # 1st batch: forgotten, so not recognisable


def test_snapshot_round_trip_and_truncation(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path)
    off = appended(m, batch(7, 0, 0), 0)
    off = appended(m, batch(8, 1, 0), off)
    m.write_snapshot()
    loaded = ProducerStateManager(tmp_path)
    assert loaded.load_latest_snapshot(max_offset=off) == off
    assert loaded.check(batch(7, 0, 0)) is not None
    assert loaded.check(batch(8, 1, 2)) is None
    assert ProducerStateManager(tmp_path).load_latest_snapshot(max_offset=off - 1) == 0
    loaded.truncate_to(2)  # producer 8's batch (offsets 2-3) is gone
    with pytest.raises(KafkaError) as e:
        loaded.check(batch(8, 1, 2))
    assert e.value.code == ErrorCode.unknown_producer_id


def test_snapshot_captured_on_the_loop_written_later(tmp_path: Path) -> None:
    """The broker captures a snapshot on its event loop and writes (fsyncs) it in a
    worker thread: what is written is the state at capture time, and a failed write
    leaves the manager dirty so the next checkpoint retries."""
    m = ProducerStateManager(tmp_path)
    off = appended(m, batch(7, 0, 0), 0)
    path, body = m.capture_snapshot()
    assert not m.dirty
    off2 = appended(m, batch(7, 0, 2), off)  # the state moves on before the write
    m.write_snapshot_file(path, body)
    loaded = ProducerStateManager(tmp_path)
    assert loaded.load_latest_snapshot(max_offset=off2) == off
    assert loaded.check(batch(7, 0, 2)) is None  # not in the captured snapshot
    with pytest.raises(OSError):
        m.write_snapshot_file(tmp_path / "missing-dir" / "x.snapshot", body)
    assert m.dirty


def test_last_timestamp_and_coordinator_epoch_for_describe_producers(tmp_path: Path) -> None:
    """KIP-664's fields: the max timestamp of the producer's last batch or marker and
    the coordinator epoch of its last marker (from the control record's value), kept
    across a snapshot; a producer that never saw a marker has coordinator epoch -1."""
    m = ProducerStateManager(tmp_path)
    data = encode_batch(
        [(None, b"v")],
        timestamp_ms=5_000,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    m.update(parse_batches(data), data)
    assert (m.producers[7].last_timestamp, m.producers[7].coordinator_epoch) == (5_000, -1)
    assert m.ongoing == {7: 0}
    # COMMIT (type 1) written by coordinator epoch 3: value = version i16 + epoch i32.
    marker = encode_batch(
        [((1).to_bytes(4, "big"), b"\x00\x00" + (3).to_bytes(4, "big"))],
        base_offset=1,
        timestamp_ms=6_000,
        producer_id=7,
        producer_epoch=0,
        transactional=True,
        control=True,
    )
    m.update(parse_batches(marker), marker)
    e = m.producers[7]
    assert (e.last_timestamp, e.coordinator_epoch, m.ongoing) == (6_000, 3, {})
    m.write_snapshot()
    again = ProducerStateManager(tmp_path)
    again.load_latest_snapshot(10)
    loaded = again.producers[7]
    assert (loaded.last_timestamp, loaded.coordinator_epoch, loaded.last_seq) == (6_000, 3, 0)
