"""Reading a range of a log a chunk at a time: the loop every full scan of a log shares.

Rebuilding producer state after the newest snapshot, loading a coordinator's partition
(``__consumer_offsets``, ``__transaction_state``) and copying what a truncation will
remove into the truncation ledger all read whole batches from an offset up to an end,
a bounded chunk at a time, and parse each chunk's batch headers; ``read_chunks`` is that
loop, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.storage.batch import BatchHeader, parse_batches

if TYPE_CHECKING:
    from odradek.storage.log import Log
    from odradek.storage.producer_state import ProducerStateManager

__all__ = ["DEFAULT_CHUNK_BYTES", "LogChunk", "read_chunks", "rebuild_producer_state"]

DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Whole batches as read from the log, and their headers (``position`` within
    ``data``)."""

    data: bytes
    headers: list[BatchHeader]

    def batch(self, h: BatchHeader) -> memoryview:
        """The bytes of one of this chunk's batches."""
        return memoryview(self.data)[h.position : h.position + h.size]


def read_chunks(
    log: Log, start: int, end: int | None = None, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[LogChunk]:
    """The batches from the one holding ``start`` up to ``end`` (default: the log end
    offset now, at the call), in chunks of about ``chunk_bytes`` (at least one batch each).

    CRCs are not verified (our own log's batches, checked at append and at recovery). The
    scan ends at ``end``, at a read that returns nothing (the next batch reaches past
    ``end``) or at a chunk without a whole batch.
    """
    return _chunks(log, start, log.log_end_offset if end is None else end, chunk_bytes)


def _chunks(log: Log, offset: int, stop: int, chunk_bytes: int) -> Iterator[LogChunk]:
    while offset < stop:
        sl = log.read(offset, chunk_bytes, max_offset=stop)
        if sl is None:
            return
        data = sl.read_bytes()
        headers = parse_batches(data, verify_crc=False)
        if not headers:
            return
        yield LogChunk(data, headers)
        offset = headers[-1].next_offset


def rebuild_producer_state(producers: ProducerStateManager, log: Log) -> None:
    """Newest snapshot plus the batches after it (never a rescan of the whole log)."""
    start = max(producers.load_latest_snapshot(log.log_end_offset), log.log_start_offset)
    if producers.unindexed:  # a snapshot written before .txnindex files existed
        log.record_aborted(producers.unindexed)
        producers.unindexed = []
    for chunk in read_chunks(log, start):
        # Entries the .txnindex already has (written before the restart) are skipped.
        log.record_aborted(producers.update(chunk.headers, chunk.data))
    producers.dirty = False
