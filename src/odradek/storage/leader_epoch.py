"""The leader-epoch cache and its ``leader-epoch-checkpoint`` file (REQ-R19, KIP-101/279).

Each replica records, for every leader epoch it has data from, the offset of the first
record written in that epoch: a list of ``(epoch, start_offset)`` with both strictly
increasing. A leader adds an entry when it appends the first batch of its epoch; a
follower when it appends a batch stamped with a newer ``partitionLeaderEpoch``.

``end_offset_for(epoch)`` answers OffsetsForLeaderEpoch: the largest epoch ≤ the
requested one that this replica knows, and the offset where it ends (the start of the
next known epoch, or the log end offset for the latest epoch). A follower that truncates
to that point — not to its possibly stale HW — can never lose committed records or keep
a divergent suffix (the documents' HW-truncation loss case).

The file uses Kafka's checkpoint text format: ``0`` (version), entry count, then
``epoch start_offset`` lines; written atomically (tmp + fsync + rename).
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.runtime import disk

if TYPE_CHECKING:
    from odradek.storage.batch import BatchHeader
    from odradek.storage.log import Log

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


def _entry(line: str) -> tuple[int, int]:
    epoch, offset = line.split()
    return int(epoch), int(offset)


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / CHECKPOINT_NAME
        self.entries: list[tuple[int, int]] = []
        self._load()

    # ------------------------------------------------------------------ persistence
    def _load(self) -> None:
        # ``intact``: the file was there and whole. A missing or torn one (a power cut,
        # a broker of an older version) is rebuilt from the log's batches by
        # ``recover_from_log``, which the replica manager calls on every load.
        self.intact = False
        try:
            lines = self.path.read_text().split("\n")
        except FileNotFoundError:
            return
        try:
            if int(lines[0]) != 0:
                raise ValueError(f"version {lines[0]}")
            count = int(lines[1])
            entries = [_entry(ln) for ln in lines[2:] if ln.strip()]
            if len(entries) != count or any(
                a[0] >= b[0] or a[1] > b[1] for a, b in itertools.pairwise(entries)
            ):
                raise ValueError("entries torn or not increasing")
        except (ValueError, IndexError) as e:
            logger.warning("%s: unreadable (%s); rebuilding it from the log", self.path, e)
            return
        self.entries = entries
        self.intact = True

    def _flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        body = f"0\n{len(self.entries)}\n" + "".join(f"{e} {o}\n" for e, o in self.entries)
        with open(tmp, "w") as f:
            f.write(body)
            f.flush()
            disk.fsync(f.fileno())
        # Kafka's CheckpointFile: the rename and then the directory are made durable,
        # or a power cut brings back the previous epochs (or none).
        disk.replace_durably(tmp, self.path)

    # ------------------------------------------------------------------ queries
    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch ≤ ``epoch``, its end offset) — Kafka's endOffsetFor."""
        if not self.entries or epoch < self.entries[0][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch >= self.entries[-1][0]:
            return self.entries[-1][0], log_end_offset
        for i, (e, _) in enumerate(self.entries):
            if e > epoch:
                prev_epoch = self.entries[i - 1][0]
                return prev_epoch, self.entries[i][1]
        return self.entries[-1][0], log_end_offset  # pragma: no cover - loop covers all

    # ------------------------------------------------------------------ updates
    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op if not newer)."""
        if self._add(epoch, start_offset):
            self._flush()

    def _add(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0:
            return False
        if self.entries and epoch <= self.entries[-1][0]:
            return False
        # Entries whose start is at or past the new start are superseded (a truncated
        # suffix that was rewritten under the new epoch).
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: forget epochs starting at/after it."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._flush()

    def recover_from_log(self, log: Log) -> None:
        """On load (Kafka's ``LogLoader``/``LogSegment.recover``): forget epochs starting
        past the log end, then ``assign`` the epoch of every batch newer than the latest
        known one -- from the log start when the checkpoint was missing or torn, else from
        the recovery point the log was opened with (the batches recovery re-read).

        Beyond Kafka, entries are checked against the batches they name: a power cut can
        undo a truncation of the log (never fsynced) while keeping the checkpoint written
        after it, so an entry may say epoch 2 from offset 74 where the grown-back log holds
        epoch 1 -- a follower asking about epoch 2 would keep that divergent suffix
        (power-loss seed 54). From the first such entry the cache is rebuilt from the log,
        and likewise from the latest entry when the last batch has a newer epoch."""
        self.truncate_from_end(log.log_end_offset)
        start = log.opened_recovery_point if self.intact else log.log_start_offset
        changed = False
        for i, (epoch, offset) in enumerate(self.entries):
            if offset < log.log_start_offset:
                continue
            h = _batch_at(log, offset)
            if h is None or h.partition_leader_epoch < 0:
                break
            if h.partition_leader_epoch < epoch or (
                h.base_offset <= offset and h.partition_leader_epoch != epoch
            ):
                logger.warning(
                    "%s: epoch %d from offset %d, but the batch there is of epoch %d: "
                    "rebuilding the cache from the log from there",
                    self.path,
                    epoch,
                    offset,
                    h.partition_leader_epoch,
                )
                del self.entries[i:]
                start, changed = min(start, offset), True
                break
        last = _batch_at(log, log.log_end_offset - 1)
        if last is not None and last.partition_leader_epoch > self.latest_epoch:
            start = min(start, self.entries[-1][1] if self.entries else log.log_start_offset)
        for seg in log.segments:
            if seg.next_offset <= start:
                continue
            for h in seg.iter_headers(0, seg.size):
                if h.last_offset >= start:
                    changed |= self._add(h.partition_leader_epoch, h.base_offset)
        if changed or (not self.intact and self.path.exists()):
            self._flush()  # once, not per epoch; a torn file is replaced even if empty
        self.intact = True

    def clear(self) -> None:
        self.entries = []
        self._flush()


def _batch_at(log: Log, offset: int) -> BatchHeader | None:
    """The header of the first batch of ``log`` ending at or after ``offset``."""
    for seg in log.segments:
        if seg.next_offset > offset and seg.size:
            pos = seg.locate(offset)
            return seg.header_at(pos) if pos < seg.size else None
    return None
