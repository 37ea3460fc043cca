"""Idempotent-producer state of one partition (Kafka's ProducerStateManager, KIP-98/360).

For each producer id the partition remembers its epoch and the metadata of its last five
batches (first/last sequence, first/last offset). A leader checks every incoming batch
that carries a producer id before appending it. Rules, stated once:

======================================  =============================================
incoming batch (epoch E, sequences s..t)  decision
======================================  =============================================
E < known epoch                           INVALID_PRODUCER_EPOCH
E > known epoch                           accept only if s == 0 (a new epoch restarts
                                          sequences), else OUT_OF_ORDER_SEQUENCE_NUMBER
same epoch, (s, t) equals a cached batch  duplicate: answer success with the cached
                                          batch's first offset, append nothing
same epoch, s == last t + 1 (wrapping)    in order: append
same epoch, anything else                 OUT_OF_ORDER_SEQUENCE_NUMBER
unknown producer id, s == 0               new producer: append
unknown producer id, s != 0               UNKNOWN_PRODUCER_ID (its state is gone, e.g.
                                          the producer was idle past retention)
======================================  =============================================

Followers apply the same updates as they append (without checks), so a follower that
becomes leader already knows every producer: a retry that reaches the new leader after
a failover is still recognised as a duplicate. The state is snapshotted to
``<offset>.snapshot`` (JSON) on clean shutdown and periodically, and rebuilt on start-up
from the newest snapshot plus the batches after it (never a rescan of the whole log).

Transactions (KIP-98, Kafka's ProducerStateManager): a transactional batch opens a
transaction for its producer id at its first offset; a COMMIT or ABORT control batch
(written by the transaction coordinator's WriteTxnMarkers) closes it. The first offset
of the oldest open transaction bounds the last stable offset (LSO) that read_committed
consumers may read to; every ABORT completes an ``AbortedTxn`` (producer id, first
offset, last offset = the marker's offset, LSO after it) that ``update`` returns: the
caller indexes it with the segment holding the marker (odradek.storage.txn_index), where
a read_committed fetch finds it. Markers carry the producer's (possibly bumped) epoch, so
they also fence older producers.

Verification guards (KIP-890, odradek.coordinator.txn_verifier): before a leader asks
the coordinator whether a transactional batch may open a transaction here, it registers
a guard for the producer id (``start_verification``). A marker for the producer removes
it; the append (``check_verified``) needs the guard it was given, so a batch whose
transaction ended while it was being verified is refused with INVALID_TXN_STATE instead
of opening a transaction nothing will close.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from odradek.errors import ErrorCode, KafkaError
from odradek.runtime import disk
from odradek.storage.batch import BatchHeader
from odradek.storage.txn_index import AbortedTxn

__all__ = [
    "AbortedTxn",
    "BatchMeta",
    "ProducerEntry",
    "ProducerStateManager",
    "CONTROL_TYPE_ABORT",
    "CONTROL_TYPE_COMMIT",
    "ONGOING_AT_REQUEST",
    "control_type",
]

CONTROL_TYPE_ABORT = 0  # Kafka's ControlRecordType
CONTROL_TYPE_COMMIT = 1

NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NumBatchesToRetain
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
# The guard of a produce whose producer had an ongoing transaction here when the
# request came (no verification needed); never registered, so it holds only while the
# transaction is still ongoing at the append.
ONGOING_AT_REQUEST = object()


@dataclass(slots=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    # What DescribeProducers reports (KIP-664, Kafka's ProducerStateEntry): the max
    # timestamp of the producer's last batch or marker, and the coordinator epoch of its
    # last marker.
    last_timestamp: int = -1
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


def control_type(batch: bytes | bytearray | memoryview) -> int:
    """COMMIT or ABORT, from a control batch's record key (version i16, type i16)."""
    return control_marker(batch)[0]


def control_marker(batch: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(COMMIT or ABORT, coordinator epoch) of a control batch: its record's key is
    (version i16, type i16), its value (version i16, coordinator epoch i32)."""
    from odradek.storage.records import decode_batch_records

    rec = decode_batch_records(batch)[0]
    if rec.key is None or len(rec.key) < 4:
        return -1, -1
    kind = int.from_bytes(rec.key[2:4], "big", signed=True)
    value = rec.value
    epoch = int.from_bytes(value[2:6], "big", signed=True) if value and len(value) >= 6 else -1
    return kind, epoch


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open txn
        # Aborted transactions a version-1 snapshot carried (before .txnindex files):
        # the caller indexes them once, then they are dropped.
        self.unindexed: list[AbortedTxn] = []
        self.verifying: dict[int, object] = {}  # producer id -> verification guard
        self.last_offset = -1  # offsets up to this one are reflected in the state
        self.dirty = False
        self._write_lock = threading.Lock()  # periodic writes run in a worker thread

    # ------------------------------------------------------------------ leader checks
    def check(self, batches: list[BatchHeader]) -> BatchMeta | None:
        """Validate batches before a leader append (see the table above).

        Returns the original batch's metadata when the request is a duplicate retry
        (then nothing must be appended), else None. Raises KafkaError.
        """
        pending: dict[int, tuple[int, int]] = {}  # pid -> (epoch, last_seq) within request
        duplicate: BatchMeta | None = None
        for h in batches:
            pid = h.producer_id
            if pid < 0:
                continue
            first, last = h.base_sequence, h.base_sequence + h.last_offset_delta
            if pid in pending:
                known, (known_epoch, last_seq) = True, pending[pid]
            else:
                entry = self.producers.get(pid)
                if entry is not None and h.producer_epoch == entry.epoch:
                    dup = next(
                        (b for b in entry.batches if b.first_seq == first and b.last_seq == last),
                        None,
                    )
                    if dup is not None:
                        if duplicate is None:
                            duplicate = dup
                        continue
                known = entry is not None
                known_epoch, last_seq = (entry.epoch, entry.last_seq) if entry else (-1, -1)
            if known and h.producer_epoch < known_epoch:
                raise KafkaError(
                    ErrorCode.invalid_producer_epoch,
                    f"producer {pid} epoch {h.producer_epoch} < {known_epoch}",
                )
            if not known:
                if first != 0:
                    raise KafkaError(
                        ErrorCode.unknown_producer_id,
                        f"unknown producer {pid} starting at sequence {first}",
                    )
            elif h.producer_epoch > known_epoch:
                if first != 0:
                    raise KafkaError(
                        ErrorCode.out_of_order_sequence_number,
                        f"producer {pid} new epoch {h.producer_epoch} must start "
                        f"at sequence 0, not {first}",
                    )
            elif first != _next_seq(last_seq):
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {pid} epoch {h.producer_epoch}: expected sequence "
                    f"{_next_seq(last_seq)}, got {first}",
                )
            pending[pid] = (h.producer_epoch, last)
        if duplicate is not None and pending:
            # A request mixing a duplicate with new batches cannot be half-applied.
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number, "request mixes duplicate and new batches"
            )
        return duplicate

    def maybe_start_verification(self, producer_id: int) -> tuple[object, bool]:
        """KIP-890 (Kafka's UnifiedLog.maybeStartTransactionVerification): the guard a
        transactional batch of ``producer_id`` must bring to the append, and whether the
        transaction coordinator must first confirm the partition is in the transaction.
        An ongoing transaction needs no verification: its guard is ONGOING_AT_REQUEST,
        which holds only while the transaction is still ongoing at the append."""
        if producer_id in self.ongoing:
            return ONGOING_AT_REQUEST, False
        return self.start_verification(producer_id), True

    def start_verification(self, producer_id: int) -> object:
        """The guard for a verification of ``producer_id``'s transaction starting here
        (an existing one is shared: concurrent requests verify the same thing)."""
        return self.verifying.setdefault(producer_id, object())

    def end_verification(self, producer_id: int, guard: object) -> None:
        """A verification failed: forget its guard (unless a newer one replaced it)."""
        if self.verifying.get(producer_id) is guard:
            del self.verifying[producer_id]

    def check_verified(self, batches: list[BatchHeader], guard: object | None) -> None:
        """A transactional batch may open a transaction only with the guard registered
        for its producer, still in place (no marker since); else INVALID_TXN_STATE.
        ``guard`` None (the caller verified nothing) opens none."""
        for h in batches:
            pid = h.producer_id
            if (
                h.is_transactional
                and not h.is_control
                and pid >= 0
                and pid not in self.ongoing
                and (guard is None or self.verifying.get(pid) is not guard)
            ):
                raise KafkaError(
                    ErrorCode.invalid_txn_state,
                    f"producer {pid}: the partition was not verified to be in "
                    "the transaction (it may have ended)",
                )

    # ------------------------------------------------------------------ updates
    def update(
        self, batches: list[BatchHeader], buf: bytes | bytearray | memoryview | None = None
    ) -> list[AbortedTxn]:
        """Record appended batches (offsets assigned). Leaders and followers alike.
        ``buf`` holds the batches (control batches are read from it). Returns the
        transactions the batches' ABORT markers completed, for the log's .txnindex."""
        aborted: list[AbortedTxn] = []
        for h in batches:
            pid = h.producer_id
            if pid >= 0 and h.is_control:
                kind, coordinator_epoch = -1, -1
                if buf is not None:
                    kind, coordinator_epoch = control_marker(
                        memoryview(buf)[h.position : h.position + h.size]
                    )
                done = self._complete_txn(pid, h.producer_epoch, kind, h.last_offset)
                if done is not None:
                    aborted.append(done)
                marked = self.producers[pid]  # _complete_txn made sure it exists
                marked.last_timestamp = h.max_timestamp
                marked.coordinator_epoch = coordinator_epoch
            elif pid >= 0:
                entry = self.producers.get(pid)
                if entry is None or h.producer_epoch > entry.epoch:
                    entry = self.producers[pid] = ProducerEntry(h.producer_epoch)
                entry.batches.append(
                    BatchMeta(
                        h.base_sequence,
                        h.base_sequence + h.last_offset_delta,
                        h.base_offset,
                        h.last_offset,
                    )
                )
                entry.last_timestamp = h.max_timestamp
                if h.is_transactional and pid not in self.ongoing:
                    self.ongoing[pid] = h.base_offset
                    self.verifying.pop(pid, None)  # the guard did its job
            self.last_offset = max(self.last_offset, h.last_offset)
        self.dirty = True
        return aborted

    def _complete_txn(
        self, pid: int, epoch: int, kind: int, marker_offset: int
    ) -> AbortedTxn | None:
        self.verifying.pop(pid, None)  # a batch verified before this marker is too late
        entry = self.producers.get(pid)
        if entry is None or epoch > entry.epoch:
            # A marker's epoch fences every older producer with this id (zombie fencing).
            entry = self.producers[pid] = ProducerEntry(epoch)
        first = self.ongoing.pop(pid, None)
        if first is not None and kind == CONTROL_TYPE_ABORT:
            # The LSO recorded is the one after this transaction completes (Kafka's
            # lastStableOffset in the .txnindex entry).
            lso = min(self.ongoing.values(), default=marker_offset + 1)
            return AbortedTxn(pid, first, marker_offset, lso)
        return None

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: nothing open)."""
        ongoing = self.ongoing  # read on every fetch (the LSO); usually empty
        return min(ongoing.values()) if ongoing else None

    def truncate_to(self, offset: int, aborted_above: Sequence[AbortedTxn] = ()) -> None:
        """Forget batches at or above ``offset``. ``aborted_above``: the .txnindex
        entries of the ABORT markers being truncated with them."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if not kept:
                del self.producers[pid]
            else:
                entry.batches = deque(kept, maxlen=NUM_BATCHES_TO_RETAIN)
        self.ongoing = {pid: first for pid, first in self.ongoing.items() if first < offset}
        for a in aborted_above:
            if a.last_offset >= offset and a.first_offset < offset:
                # The abort marker is gone but the transaction's start is kept: it is
                # open again until the coordinator rewrites the marker.
                self.ongoing[a.producer_id] = a.first_offset
        self.last_offset = min(self.last_offset, offset - 1)

    # ------------------------------------------------------------------ snapshots
    def snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def write_snapshot(self) -> None:
        """Write ``<next offset>.snapshot`` atomically and drop older snapshots."""
        self.write_snapshot_file(*self.capture_snapshot())

    def capture_snapshot(self) -> tuple[Path, str]:
        """The snapshot's path and body, taken on the event loop (state may change right
        after); clears ``dirty``. ``write_snapshot_file`` does the blocking part."""
        offset = self.last_offset + 1
        body = json.dumps(
            {
                "version": 2,
                "offset": offset,
                "producers": {
                    str(pid): {
                        "epoch": e.epoch,
                        "batches": [
                            [b.first_seq, b.last_seq, b.first_offset, b.last_offset]
                            for b in e.batches
                        ],
                        "ts": e.last_timestamp,
                        "ce": e.coordinator_epoch,
                    }
                    for pid, e in self.producers.items()
                },
                "ongoing": {str(pid): first for pid, first in self.ongoing.items()},
            }
        )
        self.dirty = False
        return self.snapshot_path(offset), body

    def write_snapshot_file(self, path: Path, body: str) -> None:
        """Blocking (fsync): safe in a worker thread; one writer per manager at a time."""
        with self._write_lock:
            try:
                tmp = path.with_suffix(".tmp")
                with open(tmp, "w") as f:
                    f.write(body)
                    f.flush()
                    disk.fsync(f.fileno())
                # Durable rename (directory fsync, Kafka's atomicMoveWithFallback): the
                # older snapshots go next, and a cut must not leave none of them.
                disk.replace_durably(tmp, path)
                for old in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
                    if old != path:
                        old.unlink(missing_ok=True)
            except BaseException:
                self.dirty = True  # try again at the next checkpoint
                raise

    def load_latest_snapshot(self, max_offset: int) -> int:
        """Load the newest snapshot at or below ``max_offset``; returns its offset (0 if none)."""
        best: tuple[int, Path] | None = None
        for p in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            try:
                off = int(p.name[: -len(SNAPSHOT_SUFFIX)])
            except ValueError:
                continue
            if off <= max_offset and (best is None or off > best[0]):
                best = (off, p)
        self.producers = {}
        self.ongoing = {}
        self.unindexed = []
        self.last_offset = -1
        if best is None:
            return 0
        try:
            data = json.loads(best[1].read_text())
        except (OSError, ValueError):
            return 0  # a torn snapshot: rebuild from the log instead
        for pid, e in data.get("producers", {}).items():
            entry = ProducerEntry(
                int(e["epoch"]),
                last_timestamp=int(e.get("ts", -1)),
                coordinator_epoch=int(e.get("ce", -1)),
            )
            for fs, ls, fo, lo in e["batches"]:
                entry.batches.append(BatchMeta(fs, ls, fo, lo))
            self.producers[int(pid)] = entry
        self.ongoing = {int(pid): int(first) for pid, first in data.get("ongoing", {}).items()}
        self.unindexed = [AbortedTxn(*map(int, a)) for a in data.get("aborted", [])]
        self.last_offset = best[0] - 1
        return best[0]
