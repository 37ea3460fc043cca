"""Transactions (issue 18), pure parts: the ``__transaction_state`` record format, the
coordinator's state machine, and the partition side (open transactions, LSO, aborted
transactions, truncation and snapshots) of ``ProducerStateManager``."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.coordinator.txn_codec import (
    TxnLogValue,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)
from odradek.coordinator.txn_markers import control_batch
from odradek.coordinator.txn_state import Transition, TxnMetadata, TxnState
from odradek.errors import ErrorCode
from odradek.storage.batch import parse_batches
from odradek.storage.cleaner import is_aborted
from odradek.storage.producer_state import AbortedTxn, ProducerStateManager
from odradek.storage.records import encode_batch


# ----------------------------------------------------------------------------- codec
def test_key_and_value_in_kafkas_layout() -> None:
    assert encode_txn_key("tx") == b"\x00\x00\x00\x02tx"
    v = TxnLogValue(7, 3, 60000, int(TxnState.ONGOING), (("b", 1), ("a", 0), ("a", 2)), 1000, 900)
    raw = encode_txn_value(v)
    # version 0, pid, epoch, timeout, status, then topics sorted with their partitions
    assert raw[:17] == struct.pack(">hqhib", 0, 7, 3, 60000, 1)
    assert raw[17:21] == struct.pack(">i", 2)
    assert raw[21:24] == b"\x00\x01a" and raw[24:36] == struct.pack(">iii", 2, 0, 2)
    back = decode_txn_value(raw)
    assert back.partitions is not None and sorted(back.partitions) == sorted(v.partitions or ())
    assert (back.producer_id, back.producer_epoch, back.last_update_ms, back.start_ms) == (
        7,
        3,
        1000,
        900,
    )
    empty = encode_txn_value(TxnLogValue(1, 0, 10, 0, None, 5, -1))
    assert decode_txn_value(empty).partitions is None
    assert decode_txn_key(encode_txn_key("tx")) == "tx"


@given(st.binary(max_size=64))
def test_corrupt_values_raise_value_error_without_allocating(data: bytes) -> None:
    try:
        decode_txn_value(data)
    except ValueError:
        pass


def test_huge_count_is_refused() -> None:
    raw = struct.pack(">hqhib", 0, 1, 0, 1, 1) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(ValueError):
        decode_txn_value(raw)


# ----------------------------------------------------------------------------- state machine
def _apply(m: TxnMetadata, r: object) -> None:
    assert isinstance(r, Transition), r
    m.apply(r)


def test_transaction_life_cycle_and_retries() -> None:
    m = TxnMetadata("tx", 5, 0, 60000)
    tp = ("t", 0)
    _apply(m, m.add_partitions(5, 0, {tp}, 100))
    assert m.state is TxnState.ONGOING and m.start_ms == 100
    assert m.add_partitions(5, 0, {tp}, 200) is None  # already in the transaction
    _apply(m, m.end_txn(5, 0, True, 300))
    assert m.state is TxnState.PREPARE_COMMIT
    assert m.end_txn(5, 0, True, 301) is ErrorCode.concurrent_transactions
    assert m.end_txn(5, 0, False, 301) is ErrorCode.invalid_txn_state
    assert m.add_partitions(5, 0, {tp}, 301) is ErrorCode.concurrent_transactions
    _apply(m, m.complete(400))
    assert m.state is TxnState.COMPLETE_COMMIT and not m.partitions
    assert m.end_txn(5, 0, True, 401) is None  # a retried commit succeeds
    assert m.end_txn(5, 0, False, 401) is ErrorCode.invalid_txn_state


def test_fencing_and_epoch_bump() -> None:
    m = TxnMetadata("tx", 5, 0, 60000)
    _apply(m, m.init_producer_id(60000, -1, -1, 10, None))
    assert m.producer_epoch == 1 and m.state is TxnState.EMPTY
    assert m.add_partitions(5, 0, {("t", 0)}, 11) is ErrorCode.producer_fenced
    assert m.end_txn(5, 0, True, 11) is ErrorCode.producer_fenced
    assert m.add_partitions(6, 1, {("t", 0)}, 11) is ErrorCode.invalid_producer_id_mapping
    assert m.end_txn(5, 1, True, 11) is ErrorCode.invalid_txn_state  # nothing to end
    # KIP-360: a producer recovering with a stale epoch is fenced
    assert m.init_producer_id(60000, 5, 0, 12, None) is ErrorCode.producer_fenced


def test_ongoing_transaction_is_aborted_with_a_bumped_epoch_on_timeout() -> None:
    m = TxnMetadata("tx", 5, 2, 1000)
    _apply(m, m.add_partitions(5, 2, {("t", 0)}, 100))
    assert not m.timed_out(1100) and m.timed_out(1101)
    assert m.init_producer_id(1000, -1, -1, 1101, None) is ErrorCode.concurrent_transactions
    _apply(m, m.abort_for_fence(1101))
    assert m.state is TxnState.PREPARE_ABORT and m.producer_epoch == 3
    assert m.partitions == {("t", 0)}  # the markers still go there
    _apply(m, m.complete(1200))
    assert m.state is TxnState.COMPLETE_ABORT
    assert m.expired(1200 + 5001, 5000) and not m.expired(1200 + 4999, 5000)


def test_exhausted_epoch_gets_a_new_producer_id() -> None:
    m = TxnMetadata("tx", 5, 32765, 1000)
    assert m.needs_epoch_bump()
    _apply(m, m.init_producer_id(1000, -1, -1, 1, 9))
    assert (m.producer_id, m.producer_epoch) == (9, 0)


def test_state_round_trips_through_the_log_record() -> None:
    m = TxnMetadata("tx", 5, 1, 1000)
    t = m.add_partitions(5, 1, {("t", 0), ("u", 3)}, 50)
    assert isinstance(t, Transition)
    back = TxnMetadata.from_value("tx", decode_txn_value(encode_txn_value(t.value)))
    assert back.state is TxnState.ONGOING and back.partitions == {("t", 0), ("u", 3)}
    assert TxnState.PREPARE_COMMIT.kafka_name == "PrepareCommit"


# ----------------------------------------------------------------------------- partition side
def _batch(base: int, pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    return encode_batch(
        [(b"k", b"v")] * n,
        base_offset=base,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def _marker(base: int, pid: int, epoch: int, commit: bool) -> bytes:
    raw = bytearray(control_batch(pid, epoch, commit, 0))
    struct.pack_into(">q", raw, 0, base)
    return bytes(raw)


def _feed(ps: ProducerStateManager, raw: bytes) -> list[AbortedTxn]:
    return ps.update(parse_batches(raw, verify_crc=False), raw)


def test_lso_and_the_aborted_transactions_an_update_completes(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    assert _feed(ps, _batch(0, 1, 0, 0)) == []  # pid 1: offsets 0-1
    _feed(ps, _batch(2, 2, 0, 0))  # pid 2: offsets 2-3
    assert ps.first_unstable_offset() == 0
    # Abort pid 1 at offset 4: pid 2's open transaction bounds the entry's LSO.
    assert _feed(ps, _marker(4, 1, 0, False)) == [AbortedTxn(1, 0, 4, 2)]
    assert ps.first_unstable_offset() == 2
    assert _feed(ps, _marker(5, 2, 0, True)) == []  # a commit is not indexed
    assert ps.first_unstable_offset() is None


def test_marker_with_a_bumped_epoch_fences_the_old_producer(tmp_path: Path) -> None:
    from odradek.errors import KafkaError

    ps = ProducerStateManager(tmp_path)
    _feed(ps, _batch(0, 1, 0, 0))
    _feed(ps, _marker(2, 1, 1, False))  # the coordinator aborted with epoch 1
    with pytest.raises(KafkaError) as e:
        ps.check(parse_batches(_batch(3, 1, 0, 2), verify_crc=False))
    assert e.value.code is ErrorCode.invalid_producer_epoch


def test_truncating_a_marker_reopens_its_transaction_and_snapshots_keep_state(
    tmp_path: Path,
) -> None:
    ps = ProducerStateManager(tmp_path)
    _feed(ps, _batch(0, 1, 0, 0))
    _feed(ps, _batch(2, 2, 0, 0))
    [entry] = _feed(ps, _marker(4, 1, 0, False))
    ps.write_snapshot()
    fresh = ProducerStateManager(tmp_path)
    fresh.load_latest_snapshot(100)
    assert fresh.ongoing == {2: 2} and fresh.unindexed == []
    ps.truncate_to(4, [entry])  # the abort marker is gone (leader-epoch truncation)
    assert ps.first_unstable_offset() == 0 and ps.ongoing == {1: 0, 2: 2}


def test_a_version_1_snapshots_aborted_list_is_handed_over_for_indexing(tmp_path: Path) -> None:
    (tmp_path / f"{5:020d}.snapshot").write_text(
        '{"version": 1, "offset": 5, "producers": {}, "ongoing": {}, "aborted": [[1, 0, 4, 5]]}'
    )
    ps = ProducerStateManager(tmp_path)
    assert ps.load_latest_snapshot(10) == 5
    assert ps.unindexed == [AbortedTxn(1, 0, 4, 5)]


def test_cleaner_recognises_aborted_batches() -> None:
    h = parse_batches(_batch(10, 7, 0, 0), verify_crc=False)[0]
    assert is_aborted(h, (AbortedTxn(7, 10, 12, 13),))
    assert not is_aborted(h, (AbortedTxn(7, 0, 5, 6),))
    assert not is_aborted(h, (AbortedTxn(8, 10, 12, 13),))


# ----------------------------------------------------------------------------- KIP-890 part 1
def test_verify_partitions_answers_in_kafkas_order() -> None:
    """Kafka's handleVerifyPartitionsInTransaction: producer id, epoch, a transaction
    being completed, then membership per partition."""
    m = TxnMetadata("tx", 5, 0, 60000)
    inside, outside = ("t", 0), ("t", 1)
    both = {inside, outside}
    assert m.verify_partitions(5, 0, both) == {
        inside: ErrorCode.transaction_abortable,
        outside: ErrorCode.transaction_abortable,
    }
    _apply(m, m.add_partitions(5, 0, {inside}, 100))
    assert m.verify_partitions(5, 0, both) == {
        inside: ErrorCode.none,
        outside: ErrorCode.transaction_abortable,
    }
    assert set(m.verify_partitions(6, 0, both).values()) == {ErrorCode.invalid_producer_id_mapping}
    assert set(m.verify_partitions(5, 1, both).values()) == {ErrorCode.producer_fenced}
    m.pending = True  # a write in flight is not a refusal (the append checks again)
    assert m.verify_partitions(5, 0, {inside}) == {inside: ErrorCode.none}
    m.pending = False
    _apply(m, m.end_txn(5, 0, False, 200))
    assert set(m.verify_partitions(5, 0, both).values()) == {ErrorCode.concurrent_transactions}
    _apply(m, m.complete(300))  # ended: a late batch's partition is no longer in it
    assert m.verify_partitions(5, 0, {inside}) == {inside: ErrorCode.transaction_abortable}


def test_verification_answers_become_produce_errors_as_in_kafka() -> None:
    from odradek.coordinator.txn_verifier import produce_error

    E = ErrorCode
    assert produce_error(E.producer_fenced) is E.invalid_producer_epoch
    assert produce_error(E.transaction_abortable) is E.invalid_txn_state
    assert produce_error(E.cluster_authorization_failed) is E.invalid_txn_state
    for retriable in (
        E.concurrent_transactions,
        E.coordinator_load_in_progress,
        E.coordinator_not_available,
        E.not_coordinator,
    ):
        assert produce_error(retriable) is E.not_enough_replicas
    assert produce_error(E.network_exception) is E.network_exception
    assert produce_error(E.invalid_producer_id_mapping) is E.invalid_producer_id_mapping


def test_verification_answers_become_offset_commit_errors_as_in_kafka() -> None:
    """TxnOffsetCommit (Kafka's maybeConvertOffsetCommitError over the produce mapping):
    an unreachable transaction coordinator is COORDINATOR_LOAD_IN_PROGRESS (retried
    without a new lookup), a retriable answer COORDINATOR_NOT_AVAILABLE, and the
    transaction's own errors reach the producer unchanged."""
    from odradek.coordinator.group_coordinator import _commit_error
    from odradek.coordinator.txn_verifier import produce_error

    E = ErrorCode
    assert _commit_error(produce_error(E.network_exception)) is E.coordinator_load_in_progress
    assert _commit_error(produce_error(E.concurrent_transactions)) is E.coordinator_not_available
    assert _commit_error(produce_error(E.transaction_abortable)) is E.invalid_txn_state
    assert _commit_error(produce_error(E.producer_fenced)) is E.invalid_producer_epoch
    assert _commit_error(E.not_leader_or_follower) is E.not_coordinator
    # Kafka's "case other => other": a producer the coordinator does not know, an empty
    # transactional id, any other append error, answered as they are.
    assert (
        _commit_error(produce_error(E.invalid_producer_id_mapping)) is E.invalid_producer_id_mapping
    )
    assert _commit_error(produce_error(E.invalid_request)) is E.invalid_request
    assert _commit_error(E.corrupt_message) is E.corrupt_message


def _headers(raw: bytes) -> list:
    return parse_batches(raw, verify_crc=False)


def test_a_transaction_opens_only_with_its_verification_guard(tmp_path: Path) -> None:
    from odradek.errors import KafkaError
    from odradek.storage.producer_state import ONGOING_AT_REQUEST

    ps = ProducerStateManager(tmp_path)
    first = _headers(_batch(0, 1, 0, 0))
    with pytest.raises(KafkaError) as e:  # nobody verified it
        ps.check_verified(first, object())
    assert e.value.code is ErrorCode.invalid_txn_state
    guard = ps.start_verification(1)
    assert ps.start_verification(1) is guard  # concurrent requests share it
    ps.check_verified(first, guard)
    with pytest.raises(KafkaError):
        ps.check_verified(first, ONGOING_AT_REQUEST)  # the transaction is not ongoing
    _feed(ps, _batch(0, 1, 0, 0))  # appended: the transaction is open, the guard used up
    assert 1 not in ps.verifying
    ps.check_verified(_headers(_batch(2, 1, 0, 2)), ONGOING_AT_REQUEST)
    # A batch verified while the coordinator was aborting: the marker voids its guard.
    late = ps.start_verification(1)
    _feed(ps, _marker(4, 1, 0, False))
    with pytest.raises(KafkaError) as e:
        ps.check_verified(_headers(_batch(5, 1, 0, 4)), late)
    assert e.value.code is ErrorCode.invalid_txn_state
    # A failed verification leaves nothing behind; idempotent batches never need one.
    g = ps.start_verification(2)
    ps.end_verification(2, g)
    assert 2 not in ps.verifying
    plain = encode_batch([(b"k", b"v")], producer_id=3, producer_epoch=0, base_sequence=0)
    ps.check_verified(_headers(plain), object())


@pytest.mark.parametrize(
    "args, message",
    [
        (["abort", "--topic", "t", "--partition", "0"], "--start-offset or with --producer-id"),
        (["abort", "--topic", "t", "--start-offset", "0"], "--topic and --partition are required"),
        (["find-hanging"], "requires either --topic or --broker-id"),
        (["find-hanging", "--broker-id", "1", "--partition", "0"], "--partition argument requires"),
        (["describe-producers", "--topic", "t"], "--topic and --partition are required"),
        (["list", "--describe"], "Exactly one command"),
        ([], "Exactly one command"),
    ],
)
def test_transactions_cli_checks_its_arguments_before_connecting(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """kafka-transactions.sh's argument rules; nothing listens on the address given, so
    a command that got past them would fail differently."""
    from odradek.cli.main import main

    assert main(["transactions", "--bootstrap-server", "127.0.0.1:9", *args]) == 2
    assert message in capsys.readouterr().err
