"""Bugs the simulator can inject (``odradek sim run --inject-bug NAME``), to show that its
checkers find real replication bugs. Each is a patch applied for one run and undone
after it: production code has no switch for them and pays nothing.

* ``truncate-to-hw``: Kafka before KIP-101: a replica becoming a follower (a new leader
  epoch) truncates its log to its own high watermark at once (``makeFollowers``), and
  OffsetsForLeaderEpoch answers are ignored (truncation to the HW there too). A
  follower's HW lags the leader's, so it drops committed records; if it is elected
  before it fetched them again, acknowledged records are gone.
* ``hw-ignores-min-isr``: the leader ignores min.insync.replicas: acks=all is accepted
  and answered with the ISR shrunk to the leader alone, the HW following its own LEO.
* ``idle-session``: the bug fixed in b85dcd4: a follower's fetch session counts a
  partition idle once the follower is at the log end, even when the leader did not
  record that fetch (a reassignment's new replica fetching before the leader knows the
  new replica set). Once the leader learns it, nothing makes the caught-up replica fetch
  the partition again until it is written: it never joins the ISR (liveness).
* ``isr-shrink-unconditional``: the leader shrinks its ISR locally, without the
  conditional ZooKeeper write (so without learning that the write fails): a leader cut
  from ZooKeeper, which would have fenced itself, drops an unreachable follower and goes
  on acknowledging acks=all with the smaller ISR until its session expires; the
  controller, whose znode still has the old ISR, may elect the dropped follower.
* ``no-isr-eligibility``: before KIP-841: a leader adds a follower to the ISR on any
  fetch that qualifies, even one its broker sent before it died, and the controller
  lets the write stand (the real one's ``Controller._undo_ineligible``, or the model's
  ``SimController.undo_ineligible``); the dead broker is then "in sync" and may be
  elected, with whatever log it restarts with.

The next five need a workload of odradek.sim.clients (``--workload``):

* ``ledger-skipped`` (idempotent, ``--acks 1``): a replica truncates without copying what
  it removes to the lost-records ledger: acks=1 losses are then silent, which
  ``acked-lost-unledgered`` catches (acks=all loses nothing a truncation removes).

* ``lso-ignores-open-txns`` (transactional): the last stable offset is the high watermark,
  whatever transactions are open: read_committed consumers get records of transactions
  not decided yet (KIP-98's LSO is the first offset of the oldest open transaction).
* ``aborted-index-ignored`` (transactional): a read_committed fetch lists no aborted
  transaction (the .txnindex is not consulted), so consumers keep aborted records.
* ``duplicate-sequence-undetected`` (idempotent or transactional): the leader no longer
  recognises a retried batch (same producer, epoch and sequences as one of the last
  five) and appends it again.
* ``one-batch-cache`` (idempotent, ``--in-flight`` 2 or more): Kafka 0.11's producer
  state, before KAFKA-5494: only each producer's last batch is remembered. A retry of
  an earlier batch still in flight is not recognised as a duplicate: it is refused as
  out of order, the producer bumps its epoch and writes it again, after its successors.
  With one batch in flight only the last batch is ever retried: nothing to find.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from odradek.controller.controller import Controller
from odradek.replication import fetcher, partition
from odradek.replication.partition_state import IsrWrite, Leader, Transition
from odradek.replication.truncation import TruncationDecision
from odradek.sim.sim_controller import SimController
from odradek.storage import producer_state
from odradek.storage.producer_state import BatchMeta, ProducerStateManager
from odradek.storage.truncation_ledger import TruncationLedger

__all__ = ["BUGS", "injected"]

BUGS: dict[str, str] = {
    "truncate-to-hw": "a follower truncates to its HW, not by leader epoch (KIP-101's bug)",
    "hw-ignores-min-isr": "acks=all and the HW advance with fewer than min.insync.replicas",
    "idle-session": "a partition counts idle for a follower the leader never recorded (b85dcd4)",
    "isr-shrink-unconditional": "an ISR shrink applied locally, without the conditional write",
    "no-isr-eligibility": "an unregistered broker is added to the ISR and kept (before KIP-841)",
    "ledger-skipped": "a truncation quarantines nothing in the lost-records ledger (acks 1)",
    "lso-ignores-open-txns": "the LSO is the HW, open transactions or not (transactional)",
    "aborted-index-ignored": "read_committed fetches list no aborted transaction (transactional)",
    "duplicate-sequence-undetected": "a retried batch is appended again (idempotent)",
    "one-batch-cache": "a producer's last batch only is remembered (idempotent, in flight > 1)",
}


def _truncate_to_hw(*, log_end_offset: int, high_watermark: int, **_: Any) -> TruncationDecision:
    return TruncationDecision(min(high_watermark, log_end_offset), "injected: truncate to HW")


def _truncating_on_follow(apply: Callable[..., Transition]) -> Callable[..., Transition]:
    def apply_and_truncate(self: partition.Partition, *a: Any, **kw: Any) -> Transition:
        t = apply(self, *a, **kw)
        if t.start_fetching_from is not None and self.high_watermark < self.log_end_offset:
            self.truncate_to(
                self.high_watermark,
                reason="injected: truncate to HW",
                leader_id=t.start_fetching_from,
                leader_epoch=self.leader_epoch,
            )
        return t

    return apply_and_truncate


def _recorded_or_not(self: partition.Partition, replica_id: int, fetch_offset: int) -> bool:
    return True  # before b85dcd4: idle as soon as the fetch is at the log end


def _shrinking_locally(
    shrink: Callable[..., IsrWrite | None],
) -> Callable[..., IsrWrite | None]:
    def shrink_without_zookeeper(
        self: partition.Partition, now_ms: int, lag_max_ms: int
    ) -> IsrWrite | None:
        write = shrink(self, now_ms, lag_max_ms)
        st = self.state
        if write is None or not isinstance(st, Leader) or not set(write.isr) < set(st.isr):
            return write  # expansions (and mixed changes) still go through ZooKeeper
        self._state = Leader(
            leader_epoch=st.leader_epoch,
            isr=write.isr,
            zk_version=st.zk_version,
            controller_epoch=st.controller_epoch,
        )
        self._remotes.mark_removed(st.isr, write.isr)
        self._maybe_advance_hw()
        return None

    return shrink_without_zookeeper


def _undetected(
    check: Callable[[ProducerStateManager, Any], BatchMeta | None],
) -> Callable[[ProducerStateManager, Any], BatchMeta | None]:
    def check_missing_duplicates(self: ProducerStateManager, batches: Any) -> BatchMeta | None:
        check(self, batches)  # still refuses what is out of order or fenced
        return None  # ... but a duplicate is appended like a new batch

    return check_missing_duplicates


def _lso_is_hw(self: partition.Partition) -> int:
    return self.high_watermark


def _no_aborted(*_: Any) -> list[tuple[int, int]]:
    return []


def _always(*_: Any) -> bool:
    return True


def _nothing(*_: Any) -> None:
    return None


def _unrecorded(*_: Any, **__: Any) -> None:
    return None  # nothing quarantined, and no error: the truncation goes on silently


@contextmanager
def _patched(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextmanager
def injected(name: str | None) -> Iterator[None]:
    if name is not None and name not in BUGS:
        raise ValueError(f"unknown bug {name!r}; known: {', '.join(BUGS)}")
    with ExitStack() as stack:
        if name == "truncate-to-hw":
            stack.enter_context(_patched(fetcher, "decide_truncation", _truncate_to_hw))
            apply = partition.Partition.apply_leader_and_isr
            stack.enter_context(
                _patched(partition.Partition, "apply_leader_and_isr", _truncating_on_follow(apply))
            )
        elif name == "hw-ignores-min-isr":
            init = partition.Partition.__init__

            def init_ignoring_min_isr(self: partition.Partition, *a: Any, **kw: Any) -> None:
                init(self, *a, **kw)
                self._min_isr = 1

            def set_ignoring(self: partition.Partition, value: int) -> None:
                self._min_isr = 1

            stack.enter_context(_patched(partition.Partition, "__init__", init_ignoring_min_isr))
            stack.enter_context(
                _patched(partition.Partition, "set_min_insync_replicas", set_ignoring)
            )
        elif name == "idle-session":
            stack.enter_context(
                _patched(partition.Partition, "follower_recorded_at", _recorded_or_not)
            )
        elif name == "isr-shrink-unconditional":
            shrink = partition.Partition.maybe_shrink_isr
            stack.enter_context(
                _patched(partition.Partition, "maybe_shrink_isr", _shrinking_locally(shrink))
            )
        elif name == "no-isr-eligibility":
            stack.enter_context(_patched(partition.Partition, "_isr_eligible", _always))
            stack.enter_context(_patched(partition.Partition, "forget_candidates", _nothing))
            stack.enter_context(_patched(SimController, "undo_ineligible", _nothing))
            stack.enter_context(_patched(Controller, "_undo_ineligible", _nothing))
        elif name == "ledger-skipped":
            stack.enter_context(_patched(TruncationLedger, "record", _unrecorded))
        elif name == "lso-ignores-open-txns":
            lso = property(_lso_is_hw)
            stack.enter_context(_patched(partition.Partition, "last_stable_offset", lso))
        elif name == "aborted-index-ignored":
            stack.enter_context(_patched(partition.Partition, "aborted_transactions", _no_aborted))
        elif name == "duplicate-sequence-undetected":
            check = ProducerStateManager.check
            stack.enter_context(_patched(ProducerStateManager, "check", _undetected(check)))
        elif name == "one-batch-cache":
            stack.enter_context(_patched(producer_state, "NUM_BATCHES_TO_RETAIN", 1))
        yield
