"""storage.log_chunks.read_chunks: the one chunked scan of a log range (producer-state
rebuild, coordinator loads, truncation ledger)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _storage_helpers import batch, read_all, small_config

from odradek.storage.batch import parse_batches
from odradek.storage.log import Log, LogConfig
from odradek.storage.log_chunks import read_chunks


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    """Three segments of batches of 1..4 records, some large (offsets 0..LEO)."""
    lg = Log.open(tmp_path / "t-0", small_config(segment_bytes=4096))
    for i in range(40):
        lg.append_as_leader(
            batch(1 + i % 4, tag=i, value_size=20 + 300 * (i % 5 == 0)), leader_epoch=1, now_ms=1
        )
    assert len(lg.segments) >= 3
    yield lg
    lg.close()


def _batches(lg: Log, start: int, end: int | None = None, chunk_bytes: int = 500) -> list[bytes]:
    out = []
    for chunk in read_chunks(lg, start, end, chunk_bytes=chunk_bytes):
        assert chunk.headers  # never an empty chunk
        # positions are within the chunk, batches whole and in order
        assert parse_batches(chunk.data) == chunk.headers
        assert len(chunk.data) <= chunk_bytes or len(chunk.headers) == 1
        out.extend(bytes(chunk.batch(h)) for h in chunk.headers)
    return out


@pytest.mark.parametrize("chunk_bytes", [1, 500, 4096, 1 << 20])
def test_every_batch_once_in_order_whatever_the_chunk_size(log: Log, chunk_bytes: int) -> None:
    assert _batches(log, 0, chunk_bytes=chunk_bytes) == read_all(log)


def test_a_start_inside_a_batch_begins_with_that_batch(log: Log) -> None:
    first, second = (parse_batches(b)[0] for b in read_all(log)[1:3])
    assert first.last_offset > first.base_offset  # a batch of several records
    got = _batches(log, first.base_offset + 1)
    assert parse_batches(got[0])[0].base_offset == first.base_offset
    assert parse_batches(got[1])[0].base_offset == second.base_offset


def test_the_end_bounds_the_scan(log: Log) -> None:
    everything = [parse_batches(b)[0] for b in read_all(log)]
    cut = everything[10]
    # An end at a batch boundary stops before that batch; inside a batch, before it too
    # (a batch reaching past the end is not read).
    for end in (cut.base_offset, cut.base_offset + 1):
        got = [parse_batches(b)[0] for b in _batches(log, 0, end)]
        assert got == everything[:10]
    assert _batches(log, 5, 5) == []
    assert _batches(log, log.log_end_offset) == []


def test_the_default_end_is_the_log_end_at_the_call(log: Log) -> None:
    before = read_all(log)
    chunks = read_chunks(log, 0)
    log.append_as_leader(batch(2, tag=999), leader_epoch=1, now_ms=1)
    got = [bytes(c.batch(h)) for c in chunks for h in c.headers]
    assert got == before


def test_an_empty_log(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "e-0", LogConfig())
    assert list(read_chunks(lg, 0)) == []
    lg.close()
