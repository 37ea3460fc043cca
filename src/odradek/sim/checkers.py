"""The simulator's invariants, as pure logic over what the world observed.

* ``acked-lost``: every record an acks=all produce acknowledged is in the final committed
  log, at the offset it was acknowledged with (REQ-P3's promise).
* ``ack-under-replicated``: when acks=all answered, at least min.insync.replicas replicas
  held the record (REQ-R8: what min.insync.replicas guarantees the producer).
* ``prefix-diverged``: below their high watermarks, any two replicas' logs are the same
  bytes (the committed prefix is one history, REQ-R20).
* ``two-leaders``: at most one replica acts as leader in any leader epoch.
* ``hw-regressed``: a leader's HW never moves back within its epoch.
* ``liveness``: after every fault heals, a leader and the full ISR, all replicas caught up,
  within a virtual-time bound.
* ``acked-lost-unledgered`` (acks=1, instead of ``acked-lost``): acks=1 may lose an
  acknowledged record (REQ-R8), but only by a truncation, which quarantines what it
  removes in the lost-records ledger (odradek.storage.truncation_ledger): every
  acknowledged record missing from the final committed log is in some broker's ledger,
  at the offset it was acknowledged with.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

__all__ = [
    "Ack",
    "Violation",
    "LeadershipMonitor",
    "lost_acks",
    "prefix_divergence",
    "unledgered_losses",
]


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass(frozen=True)
class Ack:
    partition: int
    offset: int
    value: bytes
    at: float  # virtual seconds


def lost_acks(acks: list[Ack], committed: Mapping[int, Mapping[int, bytes]]) -> list[Violation]:
    """``committed``: partition -> offset -> value of the final committed log."""
    return [Violation("acked-lost", _lost(a, got)) for a, got in _missing(acks, committed)]


def unledgered_losses(
    acks: list[Ack],
    committed: Mapping[int, Mapping[int, bytes]],
    ledgered: Collection[tuple[int, int, bytes]],
) -> list[Violation]:
    """acks=1: ``lost_acks``, less the records the lost-records ledger holds.
    ``ledgered``: (partition, offset, value) of every record any broker's ledger holds."""
    return [
        Violation("acked-lost-unledgered", f"{_lost(a, got)}; in no broker's ledger")
        for a, got in _missing(acks, committed)
        if (a.partition, a.offset, a.value) not in ledgered
    ]


def _missing(
    acks: list[Ack], committed: Mapping[int, Mapping[int, bytes]]
) -> list[tuple[Ack, bytes | None]]:
    out = []
    for a in acks:
        got = committed.get(a.partition, {}).get(a.offset)
        if got != a.value:
            out.append((a, got))
    return out


def _lost(a: Ack, got: bytes | None) -> str:
    return (
        f"p{a.partition} offset {a.offset}: acked {a.value!r} at {a.at:.3f}, "
        f"the committed log has {got!r}"
    )


def prefix_divergence(partition: int, prefixes: Mapping[int, bytes]) -> list[Violation]:
    """``prefixes``: broker -> its log's bytes below its HW. Each pair must agree on the
    shorter of the two (a replica's HW may lag, never disagree)."""
    out = []
    items = sorted(prefixes.items())
    for i, (a, pa) in enumerate(items):
        for b, pb in items[i + 1 :]:
            n = min(len(pa), len(pb))
            if pa[:n] != pb[:n]:
                at = next(k for k in range(n) if pa[k] != pb[k])
                out.append(
                    Violation(
                        "prefix-diverged",
                        f"p{partition}: brokers {a} and {b} differ at byte {at} below their HWs",
                    )
                )
    return out


@dataclass
class LeadershipMonitor:
    """Fed with samples of every live replica's state; remembers the first breach."""

    leaders: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    hws: dict[tuple[int, int, int], int] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)

    def observe_leader(self, partition: int, epoch: int, broker: int, hw: int, at: float) -> None:
        holders = self.leaders.setdefault((partition, epoch), set())
        if broker not in holders:
            holders.add(broker)
            if len(holders) > 1:
                self.violations.append(
                    Violation(
                        "two-leaders",
                        f"p{partition} epoch {epoch}: brokers {sorted(holders)} lead (at {at:.3f})",
                    )
                )
        key = (partition, epoch, broker)
        prev = self.hws.get(key)
        if prev is not None and hw < prev:
            self.violations.append(
                Violation(
                    "hw-regressed",
                    f"p{partition} epoch {epoch} leader {broker}: HW {prev} -> {hw} at {at:.3f}",
                )
            )
        if prev is None or hw > prev:
            self.hws[key] = hw
