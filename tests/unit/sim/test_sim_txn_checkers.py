"""The idempotent and transactional workloads' invariants (odradek.sim.txn_checkers), each
shown failing on a hand-made violation, and the consumer's read_committed decoding."""

from __future__ import annotations

from odradek.coordinator.txn_markers import control_batch
from odradek.errors import ErrorCode
from odradek.sim.clients import send_order, txn_of
from odradek.sim.txn_checkers import (
    LogBatch,
    StableOffsetMonitor,
    consume_records,
    duplicates_and_gaps,
    fetch_error,
    fetch_violations,
    read_batches,
    reordered,
    stream_violations,
    transaction_outcomes,
    unexpected_error,
    unplaced_lost,
)
from odradek.storage.producer_state import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT
from odradek.storage.records import encode_batch

PID = 4242


def _data(base: int, values: list[bytes], *, pid: int = PID, epoch: int = 0, seq: int = 0,
          txn: bool = False) -> LogBatch:  # fmt: skip
    recs = tuple((base + i, v) for i, v in enumerate(values))
    return LogBatch(base, base + len(values) - 1, pid, epoch, seq, txn, -1, recs)


def _marker(offset: int, commit: bool, pid: int = PID) -> LogBatch:
    kind = CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT
    return LogBatch(offset, offset, pid, 0, -1, True, kind, ())


def _log(*batches: bytes) -> bytes:
    """Batches as a log holds them: offsets assigned one after the other."""
    out = bytearray()
    offset = 0
    for raw in batches:
        b = bytearray(raw)
        b[0:8] = offset.to_bytes(8, "big")
        offset += int.from_bytes(b[23:27], "big") + 1  # lastOffsetDelta
        out += b
    return bytes(out)


def test_a_retried_batch_written_twice_is_a_duplicate_and_a_missing_sequence_a_gap() -> None:
    good = [_data(0, [b"i0-0", b"i0-1"]), _data(2, [b"i0-2"], seq=2)]
    assert duplicates_and_gaps(0, 1, good) == []
    twice = [*good, _data(3, [b"i0-2"], seq=2)]
    got = duplicates_and_gaps(0, 1, twice)
    assert [v.invariant for v in got] == ["duplicate", "sequence-gap"]
    assert "offsets 2 and 3" in got[0].detail
    gap = [good[0], _data(2, [b"i0-4"], seq=4)]
    got = duplicates_and_gaps(0, 1, gap)
    assert [v.invariant for v in got] == ["sequence-gap"]
    assert "sequence 4 at offset 2, expected 2" in got[0].detail
    # A new epoch restarts at 0 (KIP-360's bump): no gap.
    assert duplicates_and_gaps(0, 1, [good[0], _data(2, [b"i0-2"], epoch=1)]) == []


def test_every_transaction_is_closed_by_the_marker_the_coordinator_decided() -> None:
    outcomes = {(0, 0): (True, 1.0), (0, 1): (False, 2.0)}
    committed = [_data(0, [b"t0.0-0.0"], txn=True), _marker(1, True)]
    aborted = [_data(2, [b"t0.1-0.0"], seq=1, txn=True), _marker(3, False)]
    assert transaction_outcomes(0, committed + aborted, txn_of, outcomes) == []
    wrong = [_data(0, [b"t0.0-0.0"], txn=True), _marker(1, False)]
    got = transaction_outcomes(0, wrong, txn_of, outcomes)
    assert [v.invariant for v in got] == ["txn-outcome-mismatch"]
    assert "closed by ABORT at 1, the coordinator decided COMMIT at 1.000" in got[0].detail
    hanging = [_data(0, [b"t0.0-0.0"], txn=True)]
    got = transaction_outcomes(0, hanging, txn_of, outcomes)
    assert [v.invariant for v in got] == ["hanging-transaction"]


def test_a_consumer_gets_nothing_past_the_hw_lso_or_of_an_undecided_or_aborted_txn() -> None:
    outcomes = {(0, 0): (True, 1.0), (0, 1): (False, 2.0), (0, 2): (True, 9.0)}

    def check(records: list[tuple[int, bytes]], rc: bool = True) -> list[str]:
        got = fetch_violations(
            "c", 0, records, read_committed=rc, high_watermark=10, last_stable_offset=8,
            at=5.0, txn_of=txn_of, outcomes=outcomes,
        )  # fmt: skip
        return [v.invariant for v in got]

    assert check([(0, b"t0.0-0.0"), (7, b"i0-1")]) == []
    assert check([(8, b"i0-2")]) == ["read-committed-past-lso"]
    assert check([(8, b"i0-2")], rc=False) == []
    assert check([(10, b"i0-2")], rc=False) == ["read-past-hw"]
    assert check([(1, b"t0.1-0.0")]) == ["read-committed-uncommitted"]  # aborted
    assert check([(1, b"t0.2-0.0")]) == ["read-committed-uncommitted"]  # decided later
    assert check([(1, b"t0.3-0.0")]) == ["read-committed-uncommitted"]  # never decided
    assert check([(1, b"t0.1-0.0")], rc=False) == []


def test_a_leaders_lso_never_moves_back_within_its_epoch() -> None:
    m = StableOffsetMonitor()
    assert m.observe(0, 3, 1, 10, 1.0) is None
    assert m.observe(0, 3, 1, 12, 1.1) is None
    assert m.observe(0, 4, 2, 5, 1.2) is None  # a new leader may report less
    v = m.observe(0, 3, 1, 11, 1.3)
    assert v is not None and v.invariant == "lso-regressed"
    assert v.detail == "p0 epoch 3 leader 1: LSO 12 -> 11 at 1.300"


def test_a_caught_up_consumer_got_exactly_the_committed_records() -> None:
    want = [(0, b"a"), (2, b"b")]
    assert stream_violations("c", 0, want, want) == []
    got = stream_violations("c", 0, [(0, b"a"), (1, b"x"), (2, b"b")], want)
    assert [v.invariant for v in got] == ["consumed-not-committed"]
    got = stream_violations("c", 0, [(0, b"a")], want)
    assert [v.invariant for v in got] == ["consumer-missed"]
    assert "1 record(s) never got, first b'b' at offset 2" in got[0].detail


def test_read_committed_drops_aborted_batches_until_the_abort_marker() -> None:
    """Kafka's consumer (CompletedFetch): a producer listed as aborted from an offset is
    skipped from there to its ABORT marker; control batches are never records."""
    other = 7
    buf = _log(
        encode_batch([(None, b"t0.0-0.0")], producer_id=PID, producer_epoch=0,
                     base_sequence=0, transactional=True),
        encode_batch([(None, b"plain")], producer_id=other, producer_epoch=0, base_sequence=0),
        control_batch(PID, 0, False, 0),
        encode_batch([(None, b"t0.1-0.0")], producer_id=PID, producer_epoch=0,
                     base_sequence=1, transactional=True),
        control_batch(PID, 0, True, 0),
    )  # fmt: skip
    batches = read_batches(buf)
    assert [b.control for b in batches] == [-1, -1, CONTROL_TYPE_ABORT, -1, CONTROL_TYPE_COMMIT]
    got, nxt = consume_records(batches, 0, read_committed=True, aborted=[(PID, 0)])
    assert got == [(1, b"plain"), (3, b"t0.1-0.0")] and nxt == 5
    got, _ = consume_records(batches, 0, read_committed=False, aborted=None)
    assert got == [(0, b"t0.0-0.0"), (1, b"plain"), (3, b"t0.1-0.0")]
    # Without the aborted list (what a broker not consulting its index sends), the
    # aborted record comes through: what the checkers above then catch.
    got, _ = consume_records(batches, 0, read_committed=True, aborted=[])
    assert (0, b"t0.0-0.0") in got
    # A fetch from the middle of a batch returns only the records from there.
    got, _ = consume_records(batches, 2, read_committed=True, aborted=[(PID, 0)])
    assert got == [(3, b"t0.1-0.0")]


def test_client_errors_no_fault_explains() -> None:
    fenced = frozenset({ErrorCode.producer_fenced})
    assert unexpected_error("tx-0 EndTxn", ErrorCode.producer_fenced, fenced, 1.0) is None
    v = unexpected_error("tx-0 EndTxn", ErrorCode.invalid_txn_state, fenced, 1.0)
    assert v is not None and str(v) == "producer-error: tx-0 EndTxn: INVALID_TXN_STATE at 1.000"
    assert fetch_error("c", 0, int(ErrorCode.not_leader_or_follower), 5, 1, 2.0) is None
    v = fetch_error("c", 0, int(ErrorCode.offset_out_of_range), 5, 1, 2.0)
    assert v is not None and v.invariant == "consumer-out-of-range"


def test_a_producers_records_out_of_send_order_are_reordered() -> None:
    """Sequences alone miss it: after an epoch bump they restart at 0, and a broker
    appending a retried batch after its successors keeps each epoch gap-free only if it
    also checks sequences. The record values carry the send order."""
    good = [_data(0, [b"i0-0", b"i0-1"]), _data(2, [b"i1-0", b"i0-2"], pid=7)]
    assert reordered(0, 1, good, send_order) == []
    bumped = [
        _data(0, [b"i0-0"]),
        _data(1, [b"i0-3"], epoch=1),
        _data(2, [b"i0-1"], epoch=1, seq=1),
    ]
    assert duplicates_and_gaps(0, 1, bumped) == []  # each epoch's sequences look fine
    got = reordered(0, 1, bumped, send_order)
    assert [v.invariant for v in got] == ["reordered"]
    assert "b'i0-1' at offset 2 after b'i0-3' at offset 1" in got[0].detail
    txn = [_data(0, [b"t0.1-0.0", b"t0.1-0.1"], txn=True), _data(2, [b"t0.0-2.0"], txn=True)]
    assert [v.invariant for v in reordered(0, 1, txn, send_order)] == ["reordered"]
    assert send_order(b"t3.12-4.1") == ("t3", (12, 4, 1))
    assert send_order(b"i2-17") == ("i2", (17,))


def test_a_record_acked_without_an_offset_must_be_somewhere_in_the_log() -> None:
    assert unplaced_lost(0, [(b"i0-3", 1.5)], [b"i0-2", b"i0-3"]) == []
    got = unplaced_lost(0, [(b"i0-3", 1.5)], [b"i0-2"])
    assert [v.invariant for v in got] == ["acked-lost"]
    assert "DUPLICATE_SEQUENCE_NUMBER" in got[0].detail
