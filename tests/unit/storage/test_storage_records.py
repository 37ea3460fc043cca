"""storage.records: the test/tool encoder, cross-checked against kafka-python."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from odradek.storage.batch import parse_batches
from odradek.storage.records import decode_batch_records, encode_batch

RECORDS = [
    (b"key", b"value", [("h1", b"x"), ("h2", None)]),
    (None, b"v" * 300, []),
    (b"k3", None, []),
]
TS = [1_700_000_000_000, 1_700_000_000_005, 1_700_000_000_002]
CODECS = [0, 1, 2, 3, 4]  # none, gzip, snappy, lz4, zstd


def _kafka_python_batch(codec: int, base_offset: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, (k, v, hs) in enumerate(RECORDS):
        b.append(i, TS[i], k, v, hs)
    return bytes(b.build())


def test_uncompressed_encoding_is_byte_identical_to_kafka_python() -> None:
    ours = encode_batch(RECORDS, timestamps=TS, partition_leader_epoch=0)
    assert ours == _kafka_python_batch(0)


@pytest.mark.parametrize("codec", CODECS)
def test_parser_and_decoder_accept_kafka_python_batches(codec: int) -> None:
    data = _kafka_python_batch(codec)
    (h,) = parse_batches(data)  # CRC-32C verified
    assert h.compression == codec and h.records_count == 3
    recs = decode_batch_records(data)
    assert [(r.key, r.value, r.headers) for r in recs] == [(k, v, list(hs)) for k, v, hs in RECORDS]
    assert [r.timestamp for r in recs] == TS and [r.offset for r in recs] == [0, 1, 2]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_batches(codec: int) -> None:
    data = encode_batch(RECORDS, timestamps=TS, compression=codec, base_offset=40)
    (h,) = parse_batches(data)
    assert h.compression == codec
    kb = DefaultRecordBatch(bytearray(data))
    assert kb.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kb]
    assert got == [(40 + i, TS[i], k, v, list(hs)) for i, (k, v, hs) in enumerate(RECORDS)]
    assert [(r.offset, r.key) for r in decode_batch_records(data)] == [
        (40 + i, k) for i, (k, _, _) in enumerate(RECORDS)
    ]


def test_empty_batch_rejected() -> None:
    with pytest.raises(ValueError):
        encode_batch([])
