"""Record batches v2 <-> flat column buffers (the layout of Arrow binary arrays).

``decode_fetched`` turns the ``records`` of one fetched partition (many batches, maybe a
cut-off last one) into ``RecordColumns``: int32 offsets + bytes + validity per binary
column, int64 offsets and microsecond timestamps. Per record it costs only the compiled
varint framing in ``kernels``; per batch a few Python operations, and only for batches
that need them (compressed, control, or transactional under read_committed).

What is skipped, as Kafka's consumer does (``Fetcher``/``CompletedFetch``):

* control batches (transaction markers), always;
* under read_committed, batches of a transaction the response lists as aborted: a
  producer id enters the aborted set when the batch stream reaches the aborted
  transaction's first offset and leaves it at that producer's ABORT marker;
* records outside ``[lo, hi)`` (a batch may start before the wanted range and end
  after it).

``next_offset`` is where the next fetch starts: just after the last whole batch, so
compaction gaps and skipped batches are stepped over.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

import numpy as np
from crc32c import crc32c

from odradek.client import kernels as k
from odradek.errors import ErrorCode, KafkaError
from odradek.storage.records import decode_batch_records, decompress_payload

__all__ = ["RecordColumns", "DecodedFetch", "ScannedFetch", "scan_fetched", "decode_fetched"]

logger = logging.getLogger(__name__)

_MIN_RECORD = 7  # length, attributes, tsDelta, offsetDelta, keyLen, valueLen, headerCount
_COMPRESSION = 0x07
_TS_TYPE = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 ABORT, 1 COMMIT)


@dataclass(slots=True)
class RecordColumns:
    """``n`` records as buffers; binary column X is (X_offs int32[n+1], X_bytes, X_valid)."""

    n: int
    offsets: np.ndarray  # int64
    timestamps: np.ndarray  # int64, microseconds
    ts_types: np.ndarray  # int32: 0 CreateTime, 1 LogAppendTime
    key_offs: np.ndarray
    key_bytes: np.ndarray
    key_valid: np.ndarray  # bool
    val_offs: np.ndarray
    val_bytes: np.ndarray
    val_valid: np.ndarray
    hdr_offs: np.ndarray | None = None  # int32[n+1] into the header arrays below
    hk_offs: np.ndarray | None = None
    hk_bytes: np.ndarray | None = None
    hv_offs: np.ndarray | None = None
    hv_bytes: np.ndarray | None = None
    hv_valid: np.ndarray | None = None


@dataclass(slots=True)
class DecodedFetch:
    columns: RecordColumns | None  # None when no record fell in [lo, hi)
    next_offset: int | None  # None: no whole batch in the response
    batches: int


def _as_u8(view: memoryview | bytes | bytearray) -> np.ndarray:
    arr = np.frombuffer(view, dtype=np.uint8)
    return arr if arr.flags.writeable else arr.copy()  # one array type for the kernels


@dataclass(slots=True)
class ScannedFetch:
    """The whole batches of one fetched partition (headers read, records not yet)."""

    buf: np.ndarray
    table: np.ndarray  # one row of BATCH_FIELDS per whole batch
    where: str

    @property
    def batches(self) -> int:
        return int(self.table.shape[0])

    @property
    def next_offset(self) -> int | None:
        """The offset after the last whole batch (None: no whole batch)."""
        if self.table.shape[0] == 0:
            return None
        return int(self.table[-1, k.B_BASE_OFFSET] + self.table[-1, k.B_LAST_DELTA] + 1)

    def decode(
        self,
        lo: int,
        hi: int,
        *,
        read_committed: bool = False,
        aborted: list[tuple[int, int]] | None = None,
        with_headers: bool = False,
        check_crcs: bool = False,
    ) -> RecordColumns | None:
        """Records with offsets in [lo, hi); None when there are none."""
        buf, table, where = self.buf, self.table, self.where
        if table.shape[0] == 0:
            return None
        if check_crcs:
            for row in table:
                pos, bsize = int(row[k.B_POS]), int(row[k.B_SIZE])
                if crc32c(buf[pos + 21 : pos + bsize].data) != int(row[k.B_CRC]):
                    raise KafkaError(
                        ErrorCode.corrupt_message,
                        f"{where}: CRC-32C mismatch in the batch at offset "
                        f"{int(row[k.B_BASE_OFFSET])}",
                    )
        # Batches wholly outside [lo, hi) never reach the record loop.
        last = table[:, k.B_BASE_OFFSET] + table[:, k.B_LAST_DELTA]
        wanted = (last >= lo) & (table[:, k.B_BASE_OFFSET] < hi)
        plain = (table[:, k.B_ATTR] & (_COMPRESSION | _CONTROL)) == 0
        if not (read_committed and aborted) and bool(np.all(plain | ~wanted)):
            # The common case: whole uncompressed data batches, no per-batch Python.
            return _decode(buf, None, _plain_segments(table[wanted]), lo, hi, with_headers, where)
        keep, buf1 = _filter_batches(buf, table, wanted, aborted if read_committed else None, where)
        segs = np.empty((len(keep), k.SEG_FIELDS), dtype=np.int64)
        for j, (src, i, start, end) in enumerate(keep):
            row = table[i]
            if src == 0:
                start, end = int(row[k.B_POS]) + k.HEADER_SIZE, int(row[k.B_POS] + row[k.B_SIZE])
            segs[j] = (
                src,
                start,
                end,
                row[k.B_BASE_OFFSET],
                row[k.B_BASE_TS],
                row[k.B_MAX_TS],
                1 if row[k.B_ATTR] & _TS_TYPE else 0,
                row[k.B_COUNT],
            )
        return _decode(buf, buf1, segs, lo, hi, with_headers, where)


def scan_fetched(records: memoryview | bytes | bytearray, where: str = "") -> ScannedFetch:
    """Read the batch headers of one fetched partition's records (a cut-off last batch,
    which a size-limited fetch may return, is left for the next fetch)."""
    buf = _as_u8(records)
    size = buf.shape[0]
    table = np.empty((size // k.HEADER_SIZE + 1, k.BATCH_FIELDS), dtype=np.int64)
    nb, _end, status = k.scan_batch_headers(buf, 0, size, table)
    if status:
        raise KafkaError(
            ErrorCode.corrupt_message,
            f"{where}: batch {nb} is not a v2 record "
            f"batch ({'magic' if status == 1 else 'batchLength'})",
        )
    return ScannedFetch(buf, table[:nb], where)


def decode_fetched(
    records: memoryview | bytes | bytearray,
    lo: int,
    hi: int,
    *,
    read_committed: bool = False,
    aborted: list[tuple[int, int]] | None = None,
    with_headers: bool = False,
    check_crcs: bool = False,
    where: str = "",
) -> DecodedFetch:
    """``scan_fetched`` + ``decode`` in one call."""
    scan = scan_fetched(records, where)
    cols = scan.decode(
        lo,
        hi,
        read_committed=read_committed,
        aborted=aborted,
        with_headers=with_headers,
        check_crcs=check_crcs,
    )
    return DecodedFetch(cols, scan.next_offset, scan.batches)


def _plain_segments(rows: np.ndarray) -> np.ndarray:
    segs = np.empty((rows.shape[0], k.SEG_FIELDS), dtype=np.int64)
    segs[:, k.S_SRC] = 0
    segs[:, k.S_START] = rows[:, k.B_POS] + k.HEADER_SIZE
    segs[:, k.S_END] = rows[:, k.B_POS] + rows[:, k.B_SIZE]
    segs[:, k.S_BASE_OFFSET] = rows[:, k.B_BASE_OFFSET]
    segs[:, k.S_BASE_TS] = rows[:, k.B_BASE_TS]
    segs[:, k.S_MAX_TS] = rows[:, k.B_MAX_TS]
    segs[:, k.S_TS_TYPE] = (rows[:, k.B_ATTR] & _TS_TYPE) != 0
    segs[:, k.S_COUNT] = rows[:, k.B_COUNT]
    return segs


def _filter_batches(
    buf: np.ndarray,
    table: np.ndarray,
    wanted: np.ndarray,
    aborted: list[tuple[int, int]] | None,
    where: str,
) -> tuple[list[tuple[int, int, int, int]], np.ndarray | None]:
    """Per-batch decisions (control, aborted, compressed): (src, batch index, start, end)
    of every batch to decode; decompressed record sections are concatenated into buf1."""
    pending = sorted(aborted or [], key=lambda a: a[1])  # by first offset
    aborted_pids: set[int] = set()
    keep: list[tuple[int, int, int, int]] = []
    parts: list[bytes] = []
    at = 0
    for i, row in enumerate(table):
        attrs = int(row[k.B_ATTR])
        pid = int(row[k.B_PID])
        if aborted is not None and pid >= 0:
            last = int(row[k.B_BASE_OFFSET] + row[k.B_LAST_DELTA])
            while pending and pending[0][1] <= last:
                aborted_pids.add(pending.pop(0)[0])
            if attrs & _TRANSACTIONAL and not attrs & _CONTROL and pid in aborted_pids:
                continue  # a record of an aborted transaction
            if attrs & _CONTROL and pid in aborted_pids and _is_abort_marker(buf, row):
                aborted_pids.discard(pid)
        if attrs & _CONTROL or not wanted[i]:
            continue
        codec = attrs & _COMPRESSION
        if codec == 0:
            keep.append((0, i, 0, 0))
            continue
        pos, size = int(row[k.B_POS]), int(row[k.B_SIZE])
        try:
            raw = decompress_payload(codec, bytes(buf[pos + k.HEADER_SIZE : pos + size]))
        except KafkaError:
            raise  # an unknown codec id: UNSUPPORTED_COMPRESSION_TYPE as it is
        except Exception as e:  # each codec library raises its own type
            raise KafkaError(
                ErrorCode.corrupt_message,
                f"{where}: cannot decompress the batch at offset "
                f"{int(row[k.B_BASE_OFFSET])} (codec {codec}): {e}",
            ) from e
        parts.append(raw)
        keep.append((1, i, at, at + len(raw)))
        at += len(raw)
    buf1 = _as_u8(bytearray(b"".join(parts))) if parts else None
    return keep, buf1


def _is_abort_marker(buf: np.ndarray, row: np.ndarray) -> bool:
    pos, size = int(row[k.B_POS]), int(row[k.B_SIZE])
    recs = decode_batch_records(bytes(buf[pos : pos + size]))
    key = recs[0].key if recs else None
    return key is not None and len(key) >= 4 and _CONTROL_KEY.unpack_from(key)[1] == 0


_EMPTY = np.zeros(1, dtype=np.uint8)


def _decode(
    buf0: np.ndarray,
    buf1: np.ndarray | None,
    segs: np.ndarray,
    lo: int,
    hi: int,
    with_headers: bool,
    where: str,
) -> RecordColumns | None:
    if segs.shape[0] == 0:
        return None
    if buf1 is None:
        buf1 = _EMPTY
    # Output sizes are bounded by the bytes at hand, never by a count in a header.
    data = int(np.sum(segs[:, k.S_END] - segs[:, k.S_START]))
    rows = int(
        min(
            int(np.sum(np.maximum(segs[:, k.S_COUNT], 0))), data // _MIN_RECORD + 1, max(hi - lo, 0)
        )
    )
    hdrs = data // 2 + 1 if with_headers else 1
    hbytes = data if with_headers else 1
    out = RecordColumns(
        n=0,
        offsets=np.empty(rows, np.int64),
        timestamps=np.empty(rows, np.int64),
        ts_types=np.empty(rows, np.int32),
        key_offs=np.empty(rows + 1, np.int32),
        key_bytes=np.empty(data, np.uint8),
        key_valid=np.empty(rows, np.bool_),
        val_offs=np.empty(rows + 1, np.int32),
        val_bytes=np.empty(data, np.uint8),
        val_valid=np.empty(rows, np.bool_),
        hdr_offs=np.empty(rows + 1, np.int32),
        hk_offs=np.empty(hdrs + 1, np.int32),
        hk_bytes=np.empty(hbytes, np.uint8),
        hv_offs=np.empty(hdrs + 1, np.int32),
        hv_bytes=np.empty(hbytes, np.uint8),
        hv_valid=np.empty(hdrs, np.bool_),
    )
    hdr_offs, hk_offs, hk_bytes = out.hdr_offs, out.hk_offs, out.hk_bytes
    hv_offs, hv_bytes, hv_valid = out.hv_offs, out.hv_bytes, out.hv_valid
    assert hdr_offs is not None and hk_offs is not None and hk_bytes is not None
    assert hv_offs is not None and hv_bytes is not None and hv_valid is not None
    n, status, seg = k.decode_records(
        buf0,
        buf1,
        segs,
        lo,
        hi,
        with_headers,
        out.offsets,
        out.timestamps,
        out.ts_types,
        out.key_offs,
        out.key_bytes,
        out.key_valid,
        out.val_offs,
        out.val_bytes,
        out.val_valid,
        hdr_offs,
        hk_offs,
        hk_bytes,
        hv_offs,
        hv_bytes,
        hv_valid,
    )
    if status:
        raise KafkaError(
            ErrorCode.corrupt_message,
            f"{where}: malformed record in the batch at offset "
            f"{int(segs[seg, k.S_BASE_OFFSET])}"
            + (" (more records than its bytes can hold)" if status == 2 else ""),
        )
    if n == 0:
        return None
    out.n = n
    if not with_headers:
        out.hdr_offs = out.hk_offs = out.hk_bytes = out.hv_offs = out.hv_bytes = None
        out.hv_valid = None
    return out
