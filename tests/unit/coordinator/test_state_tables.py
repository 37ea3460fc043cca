"""The coordinators' transition tables (issue 25): every transition the table lists is
accepted, every other one is refused with IllegalStateError and leaves the state as it
was; the pairs are generated from the tables. Loading (replay) is not a transition."""

from __future__ import annotations

import itertools

import pytest

from odradek.coordinator.group_state import GROUP_TRANSITIONS, Group, GroupConfig, GroupState
from odradek.coordinator.state_table import IllegalStateError
from odradek.coordinator.txn_codec import TxnLogValue
from odradek.coordinator.txn_state import TXN_TRANSITIONS, Transition, TxnMetadata, TxnState
from odradek.errors import ErrorCode, KafkaError

GROUP_PAIRS = list(itertools.product(GroupState, repeat=2))
TXN_PAIRS = list(itertools.product(TxnState, repeat=2))

# Kafka's validPreviousStates, written out once more as the pairs they allow: the tables
# in code must be exactly these (a row lost or added is a behaviour change).
KAFKA_GROUP = {
    ("Stable", "PreparingRebalance"),
    ("CompletingRebalance", "PreparingRebalance"),
    ("Empty", "PreparingRebalance"),
    ("PreparingRebalance", "CompletingRebalance"),
    ("CompletingRebalance", "Stable"),
    ("PreparingRebalance", "Empty"),
    ("Stable", "Dead"),
    ("PreparingRebalance", "Dead"),
    ("CompletingRebalance", "Dead"),
    ("Empty", "Dead"),
    ("Dead", "Dead"),
}
KAFKA_TXN = {
    ("Empty", "Empty"),
    ("CompleteCommit", "Empty"),
    ("CompleteAbort", "Empty"),
    ("Ongoing", "Ongoing"),
    ("Empty", "Ongoing"),
    ("CompleteCommit", "Ongoing"),
    ("CompleteAbort", "Ongoing"),
    ("Ongoing", "PrepareCommit"),
    ("Ongoing", "PrepareAbort"),
    ("PrepareEpochFence", "PrepareAbort"),
    ("PrepareCommit", "CompleteCommit"),
    ("PrepareAbort", "CompleteAbort"),
    ("Empty", "Dead"),
    ("CompleteAbort", "Dead"),
    ("CompleteCommit", "Dead"),
    ("Ongoing", "PrepareEpochFence"),
}


def test_tables_are_kafkas() -> None:
    assert {(o.value, n.value) for o, n in GROUP_TRANSITIONS.legal()} == KAFKA_GROUP
    assert {(o.kafka_name, n.kafka_name) for o, n in TXN_TRANSITIONS.legal()} == KAFKA_TXN


@pytest.mark.parametrize(("old", "new"), GROUP_PAIRS, ids=lambda s: s.name)
def test_group_transition(old: GroupState, new: GroupState) -> None:
    g = Group("g", GroupConfig())
    g.state = old
    if GROUP_TRANSITIONS.allows(old, new):
        g._transition(new, 5)
        assert g.state is new and g.state_timestamp_ms == 5
    else:
        with pytest.raises(IllegalStateError) as e:
            g._transition(new, 5)
        assert e.value.code is ErrorCode.unknown_server_error
        assert isinstance(e.value, KafkaError)  # a handler answers its code
        assert g.state is old and g.state_timestamp_ms != 5


def txn(state: TxnState) -> TxnMetadata:
    return TxnMetadata("tx", 1, 0, 60_000, state, {("t", 0)} if state.value else set(), 0, 0)


@pytest.mark.parametrize(("old", "new"), TXN_PAIRS, ids=lambda s: s.name)
def test_txn_transition(old: TxnState, new: TxnState) -> None:
    # The decision (the record to write) and the apply after the write both check it.
    m = txn(old)
    applied = Transition(TxnLogValue(1, 0, 60_000, int(new), (), 9, 0))
    if TXN_TRANSITIONS.allows(old, new):
        assert m._value(new, 9).value.status == int(new)
        m.apply(applied)
        assert m.state is new and m.last_update_ms == 9
    else:
        with pytest.raises(IllegalStateError) as e:
            m._value(new, 9)
        assert e.value.code is ErrorCode.invalid_txn_state
        with pytest.raises(IllegalStateError):
            m.apply(applied)
        assert m.state is old and m.last_update_ms == 0


def test_txn_decisions_in_states_the_table_does_not_leave() -> None:
    # A Dead id (a log may hold one): adding partitions would be Dead -> Ongoing.
    with pytest.raises(IllegalStateError):
        txn(TxnState.DEAD).add_partitions(1, 0, {("t", 1)}, 5)
    # EndTxn on an id that is not Ongoing is refused by the rules before the table.
    assert txn(TxnState.EMPTY).end_txn(1, 0, True, 5) is ErrorCode.invalid_txn_state


def test_loading_is_not_a_transition() -> None:
    # Replayed values set the state as written, whatever came before (Kafka's loading).
    for state in TxnState:
        m = TxnMetadata.from_value("tx", TxnLogValue(1, 0, 60_000, int(state), None, 0, -1))
        assert m.state is state
    empty = Group("e", GroupConfig())
    assert Group.restore("e", empty.to_value(), GroupConfig(), 0).state is GroupState.EMPTY
