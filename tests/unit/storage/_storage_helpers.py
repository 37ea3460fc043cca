"""Shared helpers for storage tests: build batches, walk a log, verify its invariants."""

from __future__ import annotations

from pathlib import Path

from odradek.storage.batch import parse_batches
from odradek.storage.log import Log, LogConfig
from odradek.storage.records import decode_batch_records, encode_batch


def batch(
    n: int = 1, *, value_size: int = 20, ts: int = 1_000, tag: int = 0, compression: int = 0
) -> bytes:
    """A v2 batch of ``n`` records whose values encode ``tag`` (to check content later)."""
    recs = [
        (f"k{tag}-{i}".encode(), f"{tag}:{i}:".encode().ljust(value_size, b"x")) for i in range(n)
    ]
    return encode_batch(recs, timestamp_ms=ts, compression=compression)


def read_all(
    log: Log, start: int | None = None, max_bytes: int = 1 << 20, max_offset: int | None = None
) -> list[bytes]:
    """Read every batch from ``start`` (default log start) to the LEO, one slice at a time."""
    out: list[bytes] = []
    off = log.log_start_offset if start is None else start
    while True:
        s = log.read(off, max_bytes, max_offset=max_offset)
        if s is None:
            return out
        data = s.read_bytes()
        hs = parse_batches(data)  # every slice must be whole, CRC-valid batches
        assert hs, "empty slice"
        for h in hs:
            out.append(data[h.position : h.position + h.size])
        off = hs[-1].next_offset


def verify_log(log: Log) -> list[tuple[int, bytes]]:
    """Check CRCs and contiguous offsets from the log start to the LEO; return (offset, value)."""
    values: list[tuple[int, bytes]] = []
    expected = log.log_start_offset
    for b in read_all(log):
        (h,) = parse_batches(b)
        assert h.base_offset == expected, (h.base_offset, expected)
        for r in decode_batch_records(b):
            assert r.offset == expected
            values.append((r.offset, r.value or b""))
            expected += 1
    assert expected == log.log_end_offset
    return values


def small_config(**kw: int | str | None) -> LogConfig:
    base: dict = dict(segment_bytes=4096, index_interval_bytes=256)
    base.update(kw)
    return LogConfig(**base)


def segment_files(d: Path, suffix: str = ".log") -> list[Path]:
    return sorted(d.glob(f"*{suffix}"))
