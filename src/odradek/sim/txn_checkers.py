"""The invariants of the idempotent and transactional workloads (odradek.sim.clients), as
pure logic over what the world observed, and the consumer's decoding they rely on.

What Kafka promises (KIP-98, "Exactly Once Delivery and Transactional Messaging"; the
producer docs of ``enable.idempotence``; the consumer's ``isolation.level``):

* ``duplicate``: with idempotence, a batch the producer retried is written once -- no
  record value appears twice in a replica's committed log.
* ``sequence-gap``: a producer's batches in a partition's committed log, per producer id
  and epoch, carry sequences 0, 1, 2, ... without a hole (the broker accepts only the
  next sequence; a hole means an acknowledged batch vanished under later ones).
* ``reordered``: each producer's records in a replica's committed log are in the order
  it produced them (idempotence keeps a partition's order through retries, KIP-98's
  "in-order delivery"; the sequences say nothing of it once an epoch bump renumbers).
* ``acked-lost``, offset unknown: a record acknowledged with DUPLICATE_SEQUENCE_NUMBER
  (success, no offset) is somewhere in the final committed log.
* ``hanging-transaction`` / ``txn-outcome-mismatch``: every transactional batch in the
  committed log is closed by its producer's marker, COMMIT exactly when the coordinator
  decided to commit that transaction.
* ``read-committed-uncommitted``: a read_committed consumer never gets a record of a
  transaction that was not committed (decided) when it fetched: aborted, or still open.
* ``read-committed-past-lso`` / ``read-past-hw``: no consumer gets a record at or past
  the LSO (read_committed) or the high watermark (either level) its fetch reported.
* ``lso-regressed``: the last stable offset a leader reports to consumers never moves
  back within its leader epoch (the first offset of its oldest open transaction only
  grows, and so does its high watermark; a new leader's may start lower).
* ``consumed-not-committed``: whatever a consumer got (below the HW) is in the final
  committed log at that offset (a committed record is never lost: no dirty read).
* ``consumer-missed``: once every fault healed and every transaction ended, a
  read_uncommitted consumer has got every record of the committed log and a
  read_committed one every record of a committed transaction (and no other), in
  offset order.

The clients (odradek.sim.clients) also report, as they happen: ``producer-error``, an
error no fault explains (INVALID_RECORD, an idempotent producer fenced, ...), and
``consumer-out-of-range``, a consumer's position past its leader's log (a committed
offset is in every later leader's log).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from odradek.errors import ErrorCode, error_name
from odradek.sim.checkers import Violation
from odradek.storage.batch import parse_batches
from odradek.storage.producer_state import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, control_type
from odradek.storage.records import decode_batch_records

__all__ = [
    "LogBatch",
    "StableOffsetMonitor",
    "fetch_error",
    "unexpected_error",
    "read_batches",
    "consume_records",
    "duplicates_and_gaps",
    "reordered",
    "unplaced_lost",
    "transaction_outcomes",
    "fetch_violations",
    "stream_violations",
]

TxnKey = tuple[int, int]  # (transactional producer, its transaction number)
# A transaction's outcome as the coordinator decided it: (commit, virtual time decided).
Outcome = tuple[bool, float]


@dataclass(frozen=True)
class LogBatch:
    base_offset: int
    last_offset: int
    producer_id: int
    epoch: int
    base_sequence: int
    transactional: bool
    control: int  # -1: a data batch; else CONTROL_TYPE_COMMIT / CONTROL_TYPE_ABORT
    records: tuple[tuple[int, bytes], ...]  # (offset, value) of a data batch

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.last_offset - self.base_offset


def read_batches(buf: bytes) -> list[LogBatch]:
    """A log's (or a fetch's) whole batches, decoded."""
    out = []
    for h in parse_batches(buf):
        raw = buf[h.position : h.position + h.size]
        control = -1
        records: tuple[tuple[int, bytes], ...] = ()
        if h.is_control:
            control = control_type(raw)
        else:
            records = tuple((r.offset, r.value or b"") for r in decode_batch_records(raw))
        out.append(
            LogBatch(
                h.base_offset,
                h.last_offset,
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.is_transactional,
                control,
                records,
            )
        )
    return out


def consume_records(
    batches: Sequence[LogBatch],
    start: int,
    *,
    read_committed: bool,
    aborted: Iterable[tuple[int, int]] | None,
) -> tuple[list[tuple[int, bytes]], int]:
    """What a Kafka consumer makes of a fetched partition (its Fetcher's
    ``CompletedFetch``): control batches skipped; under read_committed, a producer id is
    aborted from the first offset of an aborted transaction the response lists until
    that producer's ABORT marker, and its transactional batches are dropped meanwhile.
    Returns the records at or after ``start`` and the next fetch position."""
    pending = sorted(aborted or (), key=lambda a: a[1])
    aborted_pids: set[int] = set()
    out: list[tuple[int, bytes]] = []
    nxt = start
    for b in batches:
        nxt = max(nxt, b.last_offset + 1)
        if read_committed and b.producer_id >= 0:
            while pending and pending[0][1] <= b.last_offset:
                aborted_pids.add(pending.pop(0)[0])
            if b.control == CONTROL_TYPE_ABORT:
                aborted_pids.discard(b.producer_id)
            if b.transactional and b.control < 0 and b.producer_id in aborted_pids:
                continue
        out.extend((o, v) for o, v in b.records if o >= start)
    return out, nxt


def duplicates_and_gaps(
    partition: int, broker: int, batches: Sequence[LogBatch]
) -> list[Violation]:
    """``batches``: a replica's committed log. Each record value once; per producer id
    and epoch, sequences contiguous from 0."""
    out: list[Violation] = []
    seen: dict[bytes, int] = {}
    next_seq: dict[tuple[int, int], int] = {}
    for b in batches:
        for off, v in b.records:
            first = seen.setdefault(v, off)
            if first != off:
                out.append(
                    Violation(
                        "duplicate",
                        f"p{partition} broker {broker}: {v!r} at offsets {first} and {off}",
                    )
                )
        if b.producer_id < 0 or b.control >= 0:
            continue
        key = (b.producer_id, b.epoch)
        want = next_seq.get(key, 0)
        if b.base_sequence != want:
            out.append(
                Violation(
                    "sequence-gap",
                    f"p{partition} broker {broker}: producer {b.producer_id} epoch {b.epoch} "
                    f"sequence {b.base_sequence} at offset {b.base_offset}, expected {want}",
                )
            )
        next_seq[key] = b.last_sequence + 1
    return out


def reordered(
    partition: int,
    broker: int,
    batches: Sequence[LogBatch],
    order_of: Callable[[bytes], tuple[str, tuple[int, ...]] | None],
) -> list[Violation]:
    """``batches``: a replica's committed log; ``order_of``: a record value's producer
    and its place in that producer's send order. One line per producer at most."""
    out: list[Violation] = []
    last: dict[str, tuple[tuple[int, ...], int, bytes]] = {}
    bad: set[str] = set()
    for b in batches:
        for off, v in b.records:
            key = order_of(v)
            if key is None:
                continue
            who, place = key
            prev = last.get(who)
            if prev is not None and place < prev[0] and who not in bad:
                bad.add(who)
                out.append(
                    Violation(
                        "reordered",
                        f"p{partition} broker {broker}: {v!r} at offset {off} after "
                        f"{prev[2]!r} at offset {prev[1]}, sent after it",
                    )
                )
            if prev is None or place > prev[0]:
                last[who] = (place, off, v)
    return out


def unplaced_lost(
    partition: int, acked: Sequence[tuple[bytes, float]], values: Iterable[bytes]
) -> list[Violation]:
    """``acked``: records acknowledged without an offset (value, when); ``values``: the
    final committed log's."""
    present = set(values)
    return [
        Violation(
            "acked-lost",
            f"p{partition}: {v!r} acked (DUPLICATE_SEQUENCE_NUMBER) at {at:.3f}, not in "
            "the committed log",
        )
        for v, at in acked
        if v not in present
    ]


def transaction_outcomes(
    partition: int,
    batches: Sequence[LogBatch],
    txn_of: Callable[[bytes], TxnKey | None],
    outcomes: dict[TxnKey, Outcome],
) -> list[Violation]:
    """``batches``: the final committed log. Every transactional batch is closed by its
    producer's next marker, whose type is the coordinator's decision for it."""
    out: list[Violation] = []
    open_by: dict[int, list[tuple[int, bytes]]] = {}
    for b in batches:
        if b.control >= 0:
            for off, v in open_by.pop(b.producer_id, []):
                key = txn_of(v)
                decided = outcomes.get(key) if key is not None else None
                want = None if decided is None else decided[0]
                got = b.control == CONTROL_TYPE_COMMIT
                if want != got:
                    out.append(
                        Violation(
                            "txn-outcome-mismatch",
                            f"p{partition}: {v!r} at offset {off} closed by "
                            f"{'COMMIT' if got else 'ABORT'} at {b.base_offset}, the "
                            f"coordinator decided {_decision(decided)}",
                        )
                    )
                    break  # one line per marker
        elif b.transactional:
            open_by.setdefault(b.producer_id, []).extend(b.records)
    for pid, records in sorted(open_by.items()):
        off, v = records[0]
        out.append(
            Violation(
                "hanging-transaction",
                f"p{partition}: producer {pid}'s transaction from offset {off} ({v!r}) "
                "has no marker in the committed log",
            )
        )
    return out


def _decision(d: Outcome | None) -> str:
    return "nothing" if d is None else ("COMMIT" if d[0] else "ABORT") + f" at {d[1]:.3f}"


def fetch_violations(
    who: str,
    partition: int,
    records: Sequence[tuple[int, bytes]],
    *,
    read_committed: bool,
    high_watermark: int,
    last_stable_offset: int,
    at: float,
    txn_of: Callable[[bytes], TxnKey | None],
    outcomes: dict[TxnKey, Outcome],
) -> list[Violation]:
    """One fetch's records, as the consumer got them (after its own filtering)."""
    out: list[Violation] = []
    for off, v in records:
        if off >= high_watermark:
            out.append(
                Violation(
                    "read-past-hw",
                    f"{who} p{partition}: {v!r} at offset {off}, HW {high_watermark} ({at:.3f})",
                )
            )
        if not read_committed:
            continue
        if off >= last_stable_offset:
            out.append(
                Violation(
                    "read-committed-past-lso",
                    f"{who} p{partition}: {v!r} at offset {off}, LSO {last_stable_offset} "
                    f"({at:.3f})",
                )
            )
        key = txn_of(v)
        if key is None:
            continue
        decided = outcomes.get(key)
        if decided is None or not decided[0] or decided[1] > at:
            out.append(
                Violation(
                    "read-committed-uncommitted",
                    f"{who} p{partition}: {v!r} at offset {off} at {at:.3f}, its transaction "
                    f"{key}: the coordinator decided {_decision(decided)}",
                )
            )
    return out


def unexpected_error(
    what: str, code: ErrorCode, expected: frozenset[ErrorCode], at: float
) -> Violation | None:
    """``producer-error``: a producer's request ended with an error no fault explains."""
    if code in expected:
        return None
    return Violation("producer-error", f"{what}: {error_name(code)} at {at:.3f}")


def fetch_error(who: str, partition: int, code: int, position: int, broker: int, at: float
                ) -> Violation | None:  # fmt: skip
    """``consumer-out-of-range``: a consumer's position (below some leader's HW once)
    is past its leader's log end; any other fetch error is retried."""
    if code != ErrorCode.offset_out_of_range:
        return None
    return Violation(
        "consumer-out-of-range",
        f"{who} p{partition}: offset {position} out of range on leader {broker} at {at:.3f}",
    )


@dataclass
class StableOffsetMonitor:
    """The LSO each leader reported, per partition, leader epoch and broker."""

    last: dict[tuple[int, int, int], int] = field(default_factory=dict)

    def observe(
        self, partition: int, epoch: int, broker: int, lso: int, at: float
    ) -> Violation | None:
        key = (partition, epoch, broker)
        prev = self.last.get(key)
        if prev is not None and lso < prev:
            return Violation(
                "lso-regressed",
                f"p{partition} epoch {epoch} leader {broker}: LSO {prev} -> {lso} at {at:.3f}",
            )
        self.last[key] = lso if prev is None else max(prev, lso)
        return None


def stream_violations(
    who: str,
    partition: int,
    seen: Sequence[tuple[int, bytes]],
    expected: Sequence[tuple[int, bytes]],
) -> list[Violation]:
    """A caught-up consumer's records against what it should have got (``expected``,
    from the final committed log), in order: the first difference, if any."""
    if list(seen) == list(expected):
        return []
    got = dict(seen)
    want = dict(expected)
    for off, v in seen:
        if want.get(off) != v:
            return [
                Violation(
                    "consumed-not-committed",
                    f"{who} p{partition}: got {v!r} at offset {off}, the committed log "
                    f"{'has ' + repr(want[off]) if off in want else 'has no such record for it'}",
                )
            ]
    missing = [(o, v) for o, v in expected if got.get(o) != v]
    o, v = missing[0] if missing else expected[0]
    return [
        Violation(
            "consumer-missed",
            f"{who} p{partition}: {len(missing)} record(s) never got, first {v!r} at offset {o}"
            f" ({len(seen)} got, {len(expected)} expected)",
        )
    ]
