"""Compiled loops over record batches v2: batch headers, varint framing, murmur2, xxh64.

These are the only per-record loops of the columnar Spark paths (issue 17): they turn
the records of many batches into flat column buffers (offsets + bytes + validity, the
layout of Arrow's binary arrays) and back. They are plain Python over numpy arrays,
compiled with numba (``cache=True``: compiled once per machine, then loaded from
``__pycache__``; ``nogil``: a fetch thread keeps receiving while a batch decodes). When
numba is missing they still run, as ordinary Python (correct, ~100x slower).

Record layout (Kafka's DefaultRecord)::

    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value |
    headerCount varint | (headerKeyLength varint | key | headerValueLength varint | value)*

Every length is checked against the end of its record and of its batch before use; a
record that does not fit returns an error status (CORRUPT_MESSAGE for the caller).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "HAVE_NUMBA",
    "scan_batch_headers",
    "decode_records",
    "murmur2_keys",
    "encode_records",
    "xxh64_rows",
    "schema_ids",
    "BATCH_FIELDS",
    "SEG_FIELDS",
]

F = TypeVar("F", bound=Callable[..., Any])

try:
    from numba import njit as _njit

    HAVE_NUMBA = True

    def jit(fn: F) -> F:
        return _njit(cache=True, nogil=True)(fn)  # type: ignore[return-value]
except ImportError:  # pragma: no cover - exercised only without the spark extra
    HAVE_NUMBA = False

    def jit(fn: F) -> F:
        return fn


# Columns of the table ``scan_batch_headers`` fills, one row per batch.
(
    B_POS,
    B_SIZE,
    B_BASE_OFFSET,
    B_LAST_DELTA,
    B_ATTR,
    B_BASE_TS,
    B_MAX_TS,
    B_PID,
    B_COUNT,
    B_EPOCH,
    B_BASE_SEQ,
    B_CRC,
) = range(12)
BATCH_FIELDS = 12
# Columns of the segment table ``decode_records`` reads: one row per batch to decode.
S_SRC, S_START, S_END, S_BASE_OFFSET, S_BASE_TS, S_MAX_TS, S_TS_TYPE, S_COUNT = range(8)
SEG_FIELDS = 8

HEADER_SIZE = 61
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8).copy()
_MASK63 = 0x7FFFFFFFFFFFFFFF


# --------------------------------------------------------------------------- decoding


@jit
def _be(buf: np.ndarray, pos: int, n: int) -> int:
    """Big-endian integer of n bytes (8 bytes wrap to a signed int64, as intended)."""
    v = 0
    for i in range(n):
        v = (v << 8) | int(buf[pos + i])
    return v


@jit
def _signed(v: int, bits: int) -> int:
    """Two's complement of a ``bits``-wide (< 64) unsigned value."""
    if v >= (1 << (bits - 1)):
        return v - (1 << bits)
    return v


@jit
def scan_batch_headers(
    buf: np.ndarray, start: int, stop: int, out: np.ndarray
) -> tuple[int, int, int]:
    """Fill ``out`` (rows of BATCH_FIELDS) with the v2 headers of whole batches in
    ``buf[start:stop]``. Returns (batches, end position, status): status 0 ok (a cut-off
    last batch is left for the next fetch), 1 magic != 2, 2 batchLength below the header.
    """
    pos = start
    n = 0
    while pos + 17 <= stop and n < out.shape[0]:
        length = _signed(_be(buf, pos + 8, 4), 32)
        magic = np.int64(buf[pos + 16])
        if magic != 2:
            return n, pos, 1
        size = length + 12
        if size < HEADER_SIZE:
            return n, pos, 2
        if pos + size > stop:
            break
        out[n, B_POS] = pos
        out[n, B_SIZE] = size
        out[n, B_BASE_OFFSET] = _be(buf, pos, 8)
        out[n, B_LAST_DELTA] = _signed(_be(buf, pos + 23, 4), 32)
        out[n, B_ATTR] = _be(buf, pos + 21, 2)
        out[n, B_BASE_TS] = _be(buf, pos + 27, 8)
        out[n, B_MAX_TS] = _be(buf, pos + 35, 8)
        out[n, B_PID] = _be(buf, pos + 43, 8)
        out[n, B_EPOCH] = _signed(_be(buf, pos + 51, 2), 16)
        out[n, B_BASE_SEQ] = _signed(_be(buf, pos + 53, 4), 32)
        out[n, B_COUNT] = _signed(_be(buf, pos + 57, 4), 32)
        out[n, B_CRC] = _be(buf, pos + 17, 4)
        n += 1
        pos += size
    return n, pos, 0


@jit
def _varint(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """Zig-zag varint/varlong at ``pos``; position -1 when truncated or too long."""
    raw = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            return 0, -1
        b = int(buf[pos])
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return ((raw >> 1) & _MASK63) ^ -(raw & 1), pos


@jit
def decode_records(
    buf0: np.ndarray,
    buf1: np.ndarray,
    segs: np.ndarray,
    lo: int,
    hi: int,
    with_headers: bool,
    offsets: np.ndarray,
    timestamps: np.ndarray,
    ts_types: np.ndarray,
    key_offs: np.ndarray,
    key_bytes: np.ndarray,
    key_valid: np.ndarray,
    val_offs: np.ndarray,
    val_bytes: np.ndarray,
    val_valid: np.ndarray,
    hdr_offs: np.ndarray,
    hk_offs: np.ndarray,
    hk_bytes: np.ndarray,
    hv_offs: np.ndarray,
    hv_bytes: np.ndarray,
    hv_valid: np.ndarray,
) -> tuple[int, int, int]:
    """Records of every segment (one batch's record bytes each, in ``buf0`` or, once
    decompressed, ``buf1``) with offsets in [lo, hi) -> column buffers.

    Timestamps are written in microseconds (Spark's unit). Returns (rows, status,
    segment index): status 0 ok, 1 a record overruns its batch or a length is invalid,
    2 the output arrays are full (a count lied).
    """
    n = 0
    kb = 0
    vb = 0
    nh = 0
    hkb = 0
    hvb = 0
    key_offs[0] = 0
    val_offs[0] = 0
    hdr_offs[0] = 0
    hk_offs[0] = 0
    hv_offs[0] = 0
    for s in range(segs.shape[0]):
        buf = buf0 if segs[s, S_SRC] == 0 else buf1
        pos = segs[s, S_START]
        end = segs[s, S_END]
        base_offset = segs[s, S_BASE_OFFSET]
        base_ts = segs[s, S_BASE_TS]
        max_ts = segs[s, S_MAX_TS]
        log_append = segs[s, S_TS_TYPE] == 1
        for _ in range(segs[s, S_COUNT]):
            length, pos = _varint(buf, pos, end)
            if pos < 0 or length < 6 or pos + length > end:
                return n, 1, s
            rec_end = pos + length
            pos += 1  # attributes: unused in v2
            ts_delta, pos = _varint(buf, pos, rec_end)
            if pos < 0:
                return n, 1, s
            off_delta, pos = _varint(buf, pos, rec_end)
            if pos < 0:
                return n, 1, s
            offset = base_offset + off_delta
            keep = lo <= offset < hi
            if keep and n >= offsets.shape[0]:
                return n, 2, s
            klen, pos = _varint(buf, pos, rec_end)
            if pos < 0 or klen < -1 or pos + max(klen, 0) > rec_end:
                return n, 1, s
            kpos = pos
            pos += max(klen, 0)
            vlen, pos = _varint(buf, pos, rec_end)
            if pos < 0 or vlen < -1 or pos + max(vlen, 0) > rec_end:
                return n, 1, s
            vpos = pos
            pos += max(vlen, 0)
            hcount, pos = _varint(buf, pos, rec_end)
            if pos < 0 or hcount < 0 or hcount > rec_end - pos:
                return n, 1, s
            if keep:
                offsets[n] = offset
                timestamps[n] = (max_ts if log_append else base_ts + ts_delta) * 1000
                ts_types[n] = 1 if log_append else 0
                key_valid[n] = klen >= 0
                for i in range(max(klen, 0)):
                    key_bytes[kb + i] = buf[kpos + i]
                kb += max(klen, 0)
                key_offs[n + 1] = kb
                val_valid[n] = vlen >= 0
                for i in range(max(vlen, 0)):
                    val_bytes[vb + i] = buf[vpos + i]
                vb += max(vlen, 0)
                val_offs[n + 1] = vb
            for _h in range(hcount):
                hklen, pos = _varint(buf, pos, rec_end)
                if pos < 0 or hklen < 0 or pos + hklen > rec_end:
                    return n, 1, s
                hkpos = pos
                pos += hklen
                hvlen, pos = _varint(buf, pos, rec_end)
                if pos < 0 or hvlen < -1 or pos + max(hvlen, 0) > rec_end:
                    return n, 1, s
                if keep and with_headers:
                    if nh >= hv_valid.shape[0]:
                        return n, 2, s
                    for i in range(hklen):
                        hk_bytes[hkb + i] = buf[hkpos + i]
                    hkb += hklen
                    hk_offs[nh + 1] = hkb
                    hv_valid[nh] = hvlen >= 0
                    for i in range(max(hvlen, 0)):
                        hv_bytes[hvb + i] = buf[pos + i]
                    hvb += max(hvlen, 0)
                    hv_offs[nh + 1] = hvb
                    nh += 1
                pos += max(hvlen, 0)
            if pos != rec_end:
                return n, 1, s
            if keep:
                hdr_offs[n + 1] = nh
                n += 1
    return n, 0, -1


# --------------------------------------------------------------------------- hashing


@jit
def _framed_id(buf: np.ndarray, pos: int, n: int) -> int:
    """The schema id of the ``n``-byte field at ``pos`` (see ``schema_ids``)."""
    if n < 5 or buf[pos] != 0:
        return -1
    v = _be(buf, pos + 1, 4)
    return v if v <= 0x7FFFFFFF else -3


@jit
def schema_ids(
    buf: np.ndarray, count: int, want_key: bool, want_value: bool, out: np.ndarray
) -> int:
    """Broker-side schema id validation (issue 27): for each of the ``count`` records of
    one decompressed batch body, its index (``out[i, 0]``) and the schema id its key
    (``out[i, 1]``) and value (``out[i, 2]``) carry in Confluent's wire format (magic byte 0, 4-byte big-endian
    id): -2 for a null or unchecked field, -1 for one not in the wire format, -3 for an
    id above 2^31 - 1 (a registry id is a Java int: positive). Returns
    the number of records, -1 when a record overruns the body or a length is invalid.
    ``out`` has at least ``count`` rows."""
    end = buf.shape[0]
    pos = 0
    for i in range(count):
        length, pos = _varint(buf, pos, end)
        if pos < 0 or length < 6 or pos + length > end:
            return -1
        rec_end = pos + length
        pos += 1  # attributes
        _, pos = _varint(buf, pos, rec_end)  # timestamp delta
        if pos < 0:
            return -1
        _, pos = _varint(buf, pos, rec_end)  # offset delta
        if pos < 0:
            return -1
        klen, pos = _varint(buf, pos, rec_end)
        if pos < 0 or klen < -1 or pos + max(klen, 0) > rec_end:
            return -1
        out[i, 0] = i
        out[i, 1] = -2
        if klen >= 0 and want_key:
            out[i, 1] = _framed_id(buf, pos, klen)
        pos += max(klen, 0)
        vlen, pos = _varint(buf, pos, rec_end)
        if pos < 0 or vlen < -1 or pos + max(vlen, 0) > rec_end:
            return -1
        out[i, 2] = -2
        if vlen >= 0 and want_value:
            out[i, 2] = _framed_id(buf, pos, vlen)
        pos = rec_end
    return count


@jit
def murmur2_keys(key_offs: np.ndarray, key_bytes: np.ndarray, out: np.ndarray) -> None:
    """Java's ``Utils.murmur2`` of every key, as its partitioner uses it
    (``toPositive(murmur2(key))``): keyed records land where a Java producer puts them.
    32-bit arithmetic in int64 with masks (a wrapped int64 product keeps its low bits)."""
    m = 0x5BD1E995
    mask = 0xFFFFFFFF
    for row in range(out.shape[0]):
        start = key_offs[row]
        length = key_offs[row + 1] - start
        h = (0x9747B28C ^ length) & mask
        full = length & ~3
        for i in range(0, full, 4):
            k = (
                np.int64(key_bytes[start + i])
                | (np.int64(key_bytes[start + i + 1]) << 8)
                | (np.int64(key_bytes[start + i + 2]) << 16)
                | (np.int64(key_bytes[start + i + 3]) << 24)
            )
            k = (k * m) & mask
            k ^= k >> 24
            k = (k * m) & mask
            h = (h * m) & mask
            h ^= k
        rest = length & 3
        if rest == 3:
            h ^= np.int64(key_bytes[start + full + 2]) << 16
        if rest >= 2:
            h ^= np.int64(key_bytes[start + full + 1]) << 8
        if rest >= 1:
            h ^= np.int64(key_bytes[start + full])
            h = (h * m) & mask
        h ^= h >> 13
        h = (h * m) & mask
        h ^= h >> 15
        out[row] = h & 0x7FFFFFFF


_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


@jit
def _rotl(x: np.uint64, r: int) -> np.uint64:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@jit
def _u64le(b: np.ndarray, p: int) -> np.uint64:
    v = np.uint64(0)
    for i in range(8):
        v |= np.uint64(b[p + i]) << np.uint64(8 * i)
    return v


@jit
def _u32le(b: np.ndarray, p: int) -> np.uint64:
    v = np.uint64(0)
    for i in range(4):
        v |= np.uint64(b[p + i]) << np.uint64(8 * i)
    return v


@jit
def _round(acc: np.uint64, lane: np.uint64) -> np.uint64:
    acc = acc + lane * _P2
    acc = _rotl(acc, 31)
    return acc * _P1


@jit
def xxh64(b: np.ndarray, n: int, seed: np.uint64) -> np.uint64:
    """XXH64 of ``b[:n]`` (the reference algorithm; unit-tested against its vectors)."""
    p = 0
    if n >= 32:
        v1 = seed + _P1 + _P2
        v2 = seed + _P2
        v3 = seed
        v4 = seed - _P1
        while p + 32 <= n:
            v1 = _round(v1, _u64le(b, p))
            v2 = _round(v2, _u64le(b, p + 8))
            v3 = _round(v3, _u64le(b, p + 16))
            v4 = _round(v4, _u64le(b, p + 24))
            p += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        for v in (v1, v2, v3, v4):
            h = (h ^ _round(np.uint64(0), v)) * _P1 + _P4
    else:
        h = seed + _P5
    h = h + np.uint64(n)
    while p + 8 <= n:
        h ^= _round(np.uint64(0), _u64le(b, p))
        h = _rotl(h, 27) * _P1 + _P4
        p += 8
    if p + 4 <= n:
        h ^= _u32le(b, p) * _P1
        h = _rotl(h, 23) * _P2 + _P3
        p += 4
    while p < n:
        h ^= np.uint64(b[p]) * _P5
        h = _rotl(h, 11) * _P1
        p += 1
    h ^= h >> np.uint64(33)
    h = h * _P2
    h ^= h >> np.uint64(29)
    h = h * _P3
    h ^= h >> np.uint64(32)
    return h


@jit
def _put_field(
    scratch: np.ndarray, at: int, src: np.ndarray, start: int, length: int, valid: bool
) -> int:
    """Length-prefixed field (4 bytes big-endian, or 0xFF for null) into ``scratch``."""
    if not valid:
        scratch[at] = 0xFF
        return at + 1
    scratch[at] = (length >> 24) & 0xFF
    scratch[at + 1] = (length >> 16) & 0xFF
    scratch[at + 2] = (length >> 8) & 0xFF
    scratch[at + 3] = length & 0xFF
    at += 4
    for i in range(length):
        scratch[at + i] = src[start + i]
    return at + length


@jit
def xxh64_rows(
    topic_ids: np.ndarray,
    topic_offs: np.ndarray,
    topic_bytes: np.ndarray,
    key_offs: np.ndarray,
    key_bytes: np.ndarray,
    key_valid: np.ndarray,
    val_offs: np.ndarray,
    val_bytes: np.ndarray,
    val_valid: np.ndarray,
    part_text_offs: np.ndarray,
    part_text: np.ndarray,
    part_valid: np.ndarray,
    hdr_offs: np.ndarray,
    hk_offs: np.ndarray,
    hk_bytes: np.ndarray,
    hv_offs: np.ndarray,
    hv_bytes: np.ndarray,
    hv_valid: np.ndarray,
    scratch: np.ndarray,
    out: np.ndarray,
) -> None:
    """The sink's row digest: XXH64 over the length-prefixed fields of each row (topic,
    key, value, partition column as decimal text, then each header as key, 0x00, value).
    ``None`` is 0xFF, distinct from an empty field. ``scratch`` holds the longest row."""
    for row in range(out.shape[0]):
        t = topic_ids[row]
        at = _put_field(
            scratch, 0, topic_bytes, topic_offs[t], topic_offs[t + 1] - topic_offs[t], True
        )
        at = _put_field(
            scratch, at, key_bytes, key_offs[row], key_offs[row + 1] - key_offs[row], key_valid[row]
        )
        at = _put_field(
            scratch, at, val_bytes, val_offs[row], val_offs[row + 1] - val_offs[row], val_valid[row]
        )
        at = _put_field(
            scratch,
            at,
            part_text,
            part_text_offs[row],
            part_text_offs[row + 1] - part_text_offs[row],
            part_valid[row],
        )
        for h in range(hdr_offs[row], hdr_offs[row + 1]):
            for i in range(hk_offs[h], hk_offs[h + 1]):
                scratch[at] = hk_bytes[i]
                at += 1
            scratch[at] = 0
            at += 1
            at = _put_field(
                scratch, at, hv_bytes, hv_offs[h], hv_offs[h + 1] - hv_offs[h], hv_valid[h]
            )
        out[row] = xxh64(scratch, at, np.uint64(0))


# --------------------------------------------------------------------------- encoding


@jit
def _put_varint(out: np.ndarray, at: int, value: int) -> int:
    v = (value << 1) ^ (value >> 63)  # zig-zag
    while True:
        b = v & 0x7F
        v = (v >> 7) & (_MASK63 >> 6)
        if v == 0:
            out[at] = b
            return at + 1
        out[at] = b | 0x80
        at += 1


@jit
def _varint_size(value: int) -> int:
    v = (value << 1) ^ (value >> 63)
    n = 1
    v = (v >> 7) & (_MASK63 >> 6)
    while v != 0:
        n += 1
        v = (v >> 7) & (_MASK63 >> 6)
    return n


@jit
def encode_records(
    rows: np.ndarray,
    key_offs: np.ndarray,
    key_bytes: np.ndarray,
    key_valid: np.ndarray,
    val_offs: np.ndarray,
    val_bytes: np.ndarray,
    val_valid: np.ndarray,
    hdr_offs: np.ndarray,
    hk_offs: np.ndarray,
    hk_bytes: np.ndarray,
    hv_offs: np.ndarray,
    hv_bytes: np.ndarray,
    hv_valid: np.ndarray,
    tag_prefix: np.ndarray,
    tag_key: np.ndarray,
    digests: np.ndarray,
    use_tag: bool,
    out: np.ndarray,
    starts: np.ndarray,
) -> int:
    """Encode ``rows`` (indexes into the columns) as DefaultRecords with offsetDelta =
    position in ``rows`` and timestampDelta 0, back to back into ``out``.

    ``starts[i]`` receives where record i begins (``starts[len(rows)]`` = the end), so
    the caller can cut batches at record boundaries. With ``use_tag`` each record gets
    one more header: ``tag_key`` = ``tag_prefix`` + 16 hex digits of ``digests[row]``
    (the streaming sink's replay tag). Returns the bytes written; ``out`` must hold them
    (``record_sizes`` gives the exact total).
    """
    hexd = _HEX
    at = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        starts[i] = at
        body = _record_body_size(
            r,
            i,
            key_offs,
            key_valid,
            val_offs,
            val_valid,
            hdr_offs,
            hk_offs,
            hv_offs,
            hv_valid,
            tag_prefix,
            tag_key,
            use_tag,
        )
        at = _put_varint(out, at, body)
        out[at] = 0  # attributes
        out[at + 1] = 0  # timestampDelta 0
        at = _put_varint(out, at + 2, i)
        if key_valid[r]:
            kl = key_offs[r + 1] - key_offs[r]
            at = _put_varint(out, at, kl)
            for j in range(kl):
                out[at + j] = key_bytes[key_offs[r] + j]
            at += kl
        else:
            at = _put_varint(out, at, -1)
        if val_valid[r]:
            vl = val_offs[r + 1] - val_offs[r]
            at = _put_varint(out, at, vl)
            for j in range(vl):
                out[at + j] = val_bytes[val_offs[r] + j]
            at += vl
        else:
            at = _put_varint(out, at, -1)
        nh = hdr_offs[r + 1] - hdr_offs[r]
        at = _put_varint(out, at, nh + (1 if use_tag else 0))
        for h in range(hdr_offs[r], hdr_offs[r + 1]):
            hl = hk_offs[h + 1] - hk_offs[h]
            at = _put_varint(out, at, hl)
            for j in range(hl):
                out[at + j] = hk_bytes[hk_offs[h] + j]
            at += hl
            if hv_valid[h]:
                vl = hv_offs[h + 1] - hv_offs[h]
                at = _put_varint(out, at, vl)
                for j in range(vl):
                    out[at + j] = hv_bytes[hv_offs[h] + j]
                at += vl
            else:
                at = _put_varint(out, at, -1)
        if use_tag:
            at = _put_varint(out, at, tag_key.shape[0])
            for j in range(tag_key.shape[0]):
                out[at + j] = tag_key[j]
            at += tag_key.shape[0]
            at = _put_varint(out, at, tag_prefix.shape[0] + 16)
            for j in range(tag_prefix.shape[0]):
                out[at + j] = tag_prefix[j]
            at += tag_prefix.shape[0]
            d = digests[r]
            for j in range(16):
                out[at + j] = hexd[np.int64((d >> np.uint64(60 - 4 * j)) & np.uint64(15))]
            at += 16
    starts[rows.shape[0]] = at
    return at


@jit
def _record_body_size(
    r: int,
    delta: int,
    key_offs: np.ndarray,
    key_valid: np.ndarray,
    val_offs: np.ndarray,
    val_valid: np.ndarray,
    hdr_offs: np.ndarray,
    hk_offs: np.ndarray,
    hv_offs: np.ndarray,
    hv_valid: np.ndarray,
    tag_prefix: np.ndarray,
    tag_key: np.ndarray,
    use_tag: bool,
) -> int:
    size = 2 + _varint_size(delta)  # attributes, timestampDelta 0, offsetDelta
    if key_valid[r]:
        kl = key_offs[r + 1] - key_offs[r]
        size += _varint_size(kl) + kl
    else:
        size += 1
    if val_valid[r]:
        vl = val_offs[r + 1] - val_offs[r]
        size += _varint_size(vl) + vl
    else:
        size += 1
    nh = hdr_offs[r + 1] - hdr_offs[r]
    size += _varint_size(nh + (1 if use_tag else 0))
    for h in range(hdr_offs[r], hdr_offs[r + 1]):
        hl = hk_offs[h + 1] - hk_offs[h]
        size += _varint_size(hl) + hl
        if hv_valid[h]:
            vl = hv_offs[h + 1] - hv_offs[h]
            size += _varint_size(vl) + vl
        else:
            size += 1
    if use_tag:
        size += _varint_size(tag_key.shape[0]) + tag_key.shape[0]
        tl = tag_prefix.shape[0] + 16
        size += _varint_size(tl) + tl
    return size


@jit
def record_sizes(
    rows: np.ndarray,
    key_offs: np.ndarray,
    key_valid: np.ndarray,
    val_offs: np.ndarray,
    val_valid: np.ndarray,
    hdr_offs: np.ndarray,
    hk_offs: np.ndarray,
    hv_offs: np.ndarray,
    hv_valid: np.ndarray,
    tag_prefix: np.ndarray,
    tag_key: np.ndarray,
    use_tag: bool,
    out: np.ndarray,
) -> int:
    """Encoded size of each record of ``rows`` with offsetDelta = its position in a batch
    that starts at it (an upper bound for later positions: varint(delta) <= 5 bytes)."""
    total = 0
    for i in range(rows.shape[0]):
        body = (
            _record_body_size(
                rows[i],
                0,
                key_offs,
                key_valid,
                val_offs,
                val_valid,
                hdr_offs,
                hk_offs,
                hv_offs,
                hv_valid,
                tag_prefix,
                tag_key,
                use_tag,
            )
            + 4
        )
        out[i] = body + _varint_size(body)
        total += out[i]
    return total
