"""compression.type: a leader rewrites produced batches in the topic's codec (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.storage.batch import parse_batches
from odradek.storage.log import Log
from odradek.storage.log_types import LogConfig
from odradek.storage.recompression import needs_recompression, recompress_batches
from odradek.storage.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    decode_batch_records,
    encode_batch,
)

RECORDS = [(f"k{i}".encode(), f"value-{i}".encode() * 20, [("h", b"x")]) for i in range(50)]
CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]


def _batch(codec: int, base_sequence: int = 0) -> bytes:
    return encode_batch(
        RECORDS,
        compression=codec,
        timestamp_ms=1_700_000_000_000,
        producer_id=7,
        producer_epoch=1,
        base_sequence=base_sequence,
    )


@pytest.mark.parametrize("src", CODECS)
@pytest.mark.parametrize("dst", CODECS)
def test_recompressed_batch_keeps_records_and_producer_fields(src: int, dst: int) -> None:
    buf = _batch(src) + _batch(src, base_sequence=50)
    headers = parse_batches(buf)
    out = recompress_batches(buf, headers, dst)
    new = parse_batches(out, verify_crc=True)  # CRC recomputed
    assert [h.compression for h in new] == [dst, dst]
    for old_h, new_h in zip(headers, new, strict=True):
        assert (
            new_h.records_count,
            new_h.last_offset_delta,
            new_h.max_timestamp,
            new_h.producer_id,
            new_h.producer_epoch,
            new_h.base_sequence,
        ) == (
            old_h.records_count,
            old_h.last_offset_delta,
            old_h.max_timestamp,
            old_h.producer_id,
            old_h.producer_epoch,
            old_h.base_sequence,
        )
        got = decode_batch_records(bytes(out[new_h.position : new_h.position + new_h.size]))
        assert [(r.key, r.value) for r in got] == [(k, v) for k, v, _ in RECORDS]


def test_producer_keeps_every_batch_untouched() -> None:
    headers = parse_batches(_batch(COMPRESSION_LZ4))
    assert not needs_recompression(headers, None)
    assert not needs_recompression(headers, COMPRESSION_LZ4)
    assert needs_recompression(headers, COMPRESSION_ZSTD)


def test_leader_append_stores_the_topic_codec(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(compression_type="zstd"))
    try:
        info = log.append_as_leader(_batch(COMPRESSION_GZIP), 0, 1_700_000_000_000)
        assert (info.first_offset, info.last_offset) == (0, 49)
        info = log.append_as_leader(_batch(COMPRESSION_ZSTD, 50), 0, 1_700_000_000_000)
        assert (info.first_offset, info.last_offset) == (50, 99)
        data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
        stored = parse_batches(data)
        assert [h.compression for h in stored] == [COMPRESSION_ZSTD, COMPRESSION_ZSTD]
        assert [h.base_offset for h in stored] == [0, 50]
    finally:
        log.close()
