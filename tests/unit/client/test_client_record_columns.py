"""The columnar decoder against the reference decoder (``storage.records``), the
compiled hashes against their published test vectors, and the record encoder
round-tripping through the reference decoder."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from odradek.client import kernels as k
from odradek.client.record_columns import RecordColumns, decode_fetched
from odradek.errors import KafkaError
from odradek.storage.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    decode_batch_records,
    encode_batch,
)

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]


def rows_of(cols: RecordColumns | None) -> list[tuple]:
    """(offset, ts_us, ts_type, key, value, headers) per decoded record."""
    if cols is None:
        return []
    out = []
    for i in range(cols.n):
        key = (
            bytes(cols.key_bytes[cols.key_offs[i] : cols.key_offs[i + 1]])
            if cols.key_valid[i]
            else None
        )
        val = (
            bytes(cols.val_bytes[cols.val_offs[i] : cols.val_offs[i + 1]])
            if cols.val_valid[i]
            else None
        )
        hs = []
        if cols.hdr_offs is not None:
            for h in range(cols.hdr_offs[i], cols.hdr_offs[i + 1]):
                hk = bytes(cols.hk_bytes[cols.hk_offs[h] : cols.hk_offs[h + 1]]).decode()
                hv = (
                    bytes(cols.hv_bytes[cols.hv_offs[h] : cols.hv_offs[h + 1]])
                    if cols.hv_valid[h]
                    else None
                )
                hs.append((hk, hv))
        out.append(
            (int(cols.offsets[i]), int(cols.timestamps[i]), int(cols.ts_types[i]), key, val, hs)
        )
    return out


def reference(batches: list[bytes], lo: int, hi: int) -> list[tuple]:
    out = []
    for b in batches:
        if b[21 + 1] & 0x20:  # control batch (attributes low byte at 22)
            continue
        log_append = bool(b[22] & 0x08)
        for r in decode_batch_records(b):
            if lo <= r.offset < hi:
                out.append(
                    (r.offset, r.timestamp * 1000, int(log_append), r.key, r.value, r.headers)
                )
    return out


def random_record(rnd: random.Random) -> tuple:
    """A record with a null/empty/short/long key and value and 0-3 headers (keys may be
    non-ASCII, values null or empty)."""

    def blob(limit: int) -> bytes | None:
        kind = rnd.random()
        if kind < 0.15:
            return None
        if kind < 0.25:
            return b""
        return rnd.randbytes(rnd.randint(1, limit))

    headers = [
        ("".join(rnd.choice("ab\u00e9\u4e2d") for _ in range(rnd.randint(0, 4))), blob(20))
        for _ in range(rnd.choice((0, 0, 1, 3)))
    ]
    return blob(40), blob(300), headers


@pytest.mark.parametrize("seed", range(200))
def test_decode_matches_reference(seed: int) -> None:
    """Random batches (every codec, CreateTime and LogAppendTime, offset gaps as
    compaction leaves them) and a random [lo, hi): same records as the reference
    decoder. Seeded, so a failure names its seed and reproduces."""
    rnd = random.Random(seed)
    encoded, base = [], 1000
    for _ in range(rnd.randint(1, 5)):
        recs = [random_record(rnd) for _ in range(rnd.randint(1, 30))]
        ts = [1_700_000_000_000 + i * 7 for i in range(len(recs))]
        encoded.append(
            encode_batch(
                recs,
                base_offset=base,
                timestamps=ts,
                compression=rnd.choice(CODECS),
                log_append_time=rnd.random() < 0.3,
            )
        )
        base += len(recs) + 3  # gaps between batches, as compaction leaves them
    lo = 1000 + rnd.randint(0, 60)
    hi = lo + rnd.randint(1, 200)
    got = decode_fetched(b"".join(encoded), lo, hi, with_headers=True)
    assert rows_of(got.columns) == reference(encoded, lo, hi)
    assert got.next_offset == base - 3
    assert got.batches == len(encoded)


def test_cut_off_last_batch_is_left_for_the_next_fetch() -> None:
    a = encode_batch([(b"k", b"v")] * 3, base_offset=0)
    b = encode_batch([(b"k", b"w")] * 3, base_offset=3)
    got = decode_fetched(a + b[:40], 0, 100)
    assert got.next_offset == 3 and got.columns is not None and got.columns.n == 3
    assert decode_fetched(b[:40], 0, 100).next_offset is None


def test_control_batches_and_aborted_transactions_are_skipped() -> None:
    pid = 77
    commit_key = struct.pack(">hh", 0, 1)
    abort_key = struct.pack(">hh", 0, 0)
    batches = [
        encode_batch([(None, b"plain")], base_offset=0),
        encode_batch(
            [(None, b"aborted-1"), (None, b"aborted-2")],
            base_offset=1,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        ),
        encode_batch(
            [(abort_key, b"\0\0\0\0\0\0")],
            base_offset=3,
            producer_id=pid,
            producer_epoch=0,
            transactional=True,
            control=True,
        ),
        encode_batch(
            [(None, b"committed")],
            base_offset=4,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=2,
            transactional=True,
        ),
        encode_batch(
            [(commit_key, b"\0\0\0\0\0\0")],
            base_offset=5,
            producer_id=pid,
            producer_epoch=0,
            transactional=True,
            control=True,
        ),
    ]
    data = b"".join(batches)

    def values(d):
        return [r[4] for r in rows_of(d.columns)]

    committed = decode_fetched(data, 0, 10, read_committed=True, aborted=[(pid, 1)])
    assert values(committed) == [b"plain", b"committed"]
    assert committed.next_offset == 6
    # read_uncommitted sees the aborted records; control batches never show
    assert values(decode_fetched(data, 0, 10)) == [
        b"plain",
        b"aborted-1",
        b"aborted-2",
        b"committed",
    ]


def test_malformed_input_is_refused() -> None:
    good = bytearray(encode_batch([(b"key", b"value")], base_offset=0))
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(KafkaError, match="CORRUPT_MESSAGE"):
        decode_fetched(bytes(bad_magic), 0, 10)
    lying = bytearray(good)
    lying[61 + 4] = 0x7E  # the key length (zig-zag 63): past the end of the record
    with pytest.raises(KafkaError, match="malformed record"):
        decode_fetched(bytes(lying), 0, 10)
    too_many = bytearray(good)
    struct.pack_into(">i", too_many, 57, 1_000_000)  # recordsCount far beyond its bytes
    with pytest.raises(KafkaError, match="CORRUPT_MESSAGE"):
        decode_fetched(bytes(too_many), 0, 10)
    crc = bytearray(good)
    crc[-1] ^= 0xFF
    with pytest.raises(KafkaError, match="CRC"):
        decode_fetched(bytes(crc), 0, 10, check_crcs=True)


def test_xxh64_and_murmur2_vectors() -> None:
    data = np.frombuffer(bytearray(b"abc" * 20), np.uint8)
    # XXH64 (seed 0) of b"abc"*20 prefixes, from the reference implementation (xxhash).
    expected = {
        0: 0xEF46DB3751D8E999,
        1: 0xD24EC4F1A98C6E5B,
        3: 0x44BC2CF5AD770999,
        4: 0x55518FD490600B13,
        8: 0xC8107B851D1C9724,
        31: 0x45A3EFD6CD280E5C,
        32: 0xFD450220EEE7E7E5,
        33: 0x0ACF9834EB61FA3A,
        60: 0xE5D4B65C2F204B38,
    }
    for n, h in expected.items():
        assert int(k.xxh64(data, n, np.uint64(0))) == h, n
    # Kafka's UtilsTest.testMurmur2, through the partitioner's toPositive.
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    keys = list(cases)
    offs = np.zeros(len(keys) + 1, np.int32)
    offs[1:] = np.cumsum([len(x) for x in keys])
    out = np.zeros(len(keys), np.int64)
    k.murmur2_keys(offs, np.frombuffer(bytearray(b"".join(keys)), np.uint8), out)
    assert out.tolist() == [cases[x] & 0x7FFFFFFF for x in keys]
