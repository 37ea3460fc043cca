"""State-transition tables that refuse what they do not list.

Kafka writes each coordinator state machine's rules as ``validPreviousStates`` (GroupState
in GroupMetadata.scala, TransactionState in TransactionMetadata.scala) and checks every
transition against them (``assertValidTransition``, ``prepareTransitionTo``), throwing an
IllegalStateException rather than changing state silently. ``TransitionTable`` is that
table as data: the machines call ``check(old, new)`` before they change state, and the unit
tests generate every pair from the table (each listed one accepted, each other refused).

Loading a partition's log is not a transition: a replayed record's state is taken as it
is (Kafka's loading paths construct the metadata in its state), so an old log written by
other rules never trips the table.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from odradek.errors import ErrorCode, KafkaError

__all__ = ["IllegalStateError", "TransitionTable"]

S = TypeVar("S", bound=enum.Enum)


class IllegalStateError(KafkaError):
    """A transition the table does not list. A KafkaError: a request handler that meets
    it answers its code (the table's: INVALID_TXN_STATE for transactions,
    UNKNOWN_SERVER_ERROR for groups, as Kafka's IllegalStateException becomes)."""

    def __init__(self, machine: str, old: enum.Enum, new: enum.Enum, code: ErrorCode) -> None:
        super().__init__(code, f"{machine}: illegal transition {old.name} -> {new.name}")
        self.old = old
        self.new = new


class TransitionTable(Generic[S]):
    """``valid_previous[new]``: the states a machine may go to ``new`` from."""

    def __init__(
        self, machine: str, valid_previous: Mapping[S, frozenset[S]], code: ErrorCode
    ) -> None:
        self.machine = machine
        self.valid_previous = dict(valid_previous)
        self.code = code

    def allows(self, old: S, new: S) -> bool:
        return old in self.valid_previous.get(new, frozenset())

    def check(self, old: S, new: S) -> None:
        """Return if ``old -> new`` is in the table, else raise IllegalStateError."""
        if not self.allows(old, new):
            raise IllegalStateError(self.machine, old, new, self.code)

    def legal(self) -> Iterator[tuple[S, S]]:
        """Every listed transition (old, new)."""
        for new, olds in self.valid_previous.items():
            for old in olds:
                yield old, new
