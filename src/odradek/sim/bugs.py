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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from odradek.replication import fetcher, partition
from odradek.replication.partition_state import Transition
from odradek.replication.truncation import TruncationDecision

__all__ = ["BUGS", "injected"]

BUGS: dict[str, str] = {
    "truncate-to-hw": "a follower truncates to its HW, not by leader epoch (KIP-101's bug)",
    "hw-ignores-min-isr": "acks=all and the HW advance with fewer than min.insync.replicas",
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
        yield
