"""The schema ids of a produce's records: Confluent's wire format, read for broker-side
schema id validation (``confluent.value.schema.validation``, issue 27).

A serialized key or value in the wire format starts with the magic byte 0 and the
schema id as a big-endian 4-byte integer. This module only reads those five bytes of
each record: it neither decodes the payload nor asks a registry (the request handler
does, ``odradek.server.schema_validation``). Compressed batches are decompressed, within
the same bound as every other reader (``MAX_DECOMPRESSED_BATCH_BYTES``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.batch import BATCH_HEADER_SIZE, BatchHeader
from odradek.storage.cleaner import _varint
from odradek.storage.records import _decompress

__all__ = [
    "NOT_FRAMED",
    "OUT_OF_RANGE",
    "NULL",
    "MAGIC_BYTE",
    "record_schema_ids",
    "schema_id_of",
    "distinct_ids",
    "load_kernel",
    "column_ids",
    "INDEX",
    "KEY",
    "VALUE",
]

MAGIC_BYTE = 0
# The id of a non-null field that is not in the wire format (shorter than 5 bytes, or a
# first byte other than 0). Real ids are read unsigned, so they are never negative.
NOT_FRAMED = -1
NULL = -2  # a null field (tombstone, null key), or a side that is not checked
# An id above 2^31 - 1: Confluent's ids are Java ints, positive; read unsigned, such an id
# would be a registry-unknown number, and kept apart it can never look like a sentinel.
OUT_OF_RANGE = -3
_INT_MAX = 0x7FFFFFFF
# Columns of ``record_schema_ids``'s table: one row per record.
INDEX, KEY, VALUE = 0, 1, 2

# One record's (batch index, key id, value id) of the pure-Python walk.
RecordIds = tuple[int, int, int]


def schema_id_of(field: bytes | None) -> int:
    """The schema id ``field`` is framed with, ``NULL`` for null, ``NOT_FRAMED`` otherwise."""
    if field is None:
        return NULL
    if len(field) < 5 or field[0] != MAGIC_BYTE:
        return NOT_FRAMED
    sid = int.from_bytes(field[1:5], "big")
    return sid if sid <= _INT_MAX else OUT_OF_RANGE


def record_schema_ids(
    records: bytes | bytearray | memoryview, key: bool, value: bool
) -> np.ndarray:
    """An int32 table (12 bytes a record: 1.7x the decompressed records at most, as a
    record takes at least 7 bytes), one row ``(batch index, key id, value id)`` per non-control record
    of ``records`` (a produce's batches), in order; the index restarts at 0 in each batch,
    as Kafka's ``batchIndex`` (KIP-467). Only the sides asked for are read (the other is
    ``NULL``). Raises CORRUPT_MESSAGE for records that do not parse: the caller validates
    before the append has checked the batch, so nothing here trusts a length or count.

    The per-record loop is the numba kernel ``odradek.client.kernels.schema_ids`` (no
    Python object per record: the 100-byte-record benchmark in docs/benchmarks.md); a
    pure-Python walk stands in when numba is missing."""
    buf = records if isinstance(records, bytes) else bytes(records)
    view = memoryview(buf)
    parts: list[np.ndarray] = []
    pos = 0
    total = len(buf)
    while pos < total:
        if pos + BATCH_HEADER_SIZE > total:
            raise KafkaError(ErrorCode.corrupt_message, "truncated record batch")
        h = BatchHeader.unpack(buf, pos)
        end = pos + h.size
        if h.size < BATCH_HEADER_SIZE or end > total:
            raise KafkaError(ErrorCode.corrupt_message, "bad record batch length")
        if not h.is_control:
            body = view[pos + BATCH_HEADER_SIZE : end]  # no copy unless decompressed
            payload = body if h.compression == 0 else _decompress(h.compression, bytes(body))
            parts.append(_batch_ids(payload, h.records_count, key, value))
        pos = end
    if not parts:
        return np.empty((0, 3), dtype=np.int32)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


logger = logging.getLogger(__name__)

# The compiled walk (odradek.client.kernels.schema_ids) once loaded. numba costs a broker
# ~100 MB and about a second to load (more to compile on a machine's first run), so it is
# loaded only when a produce to a validating topic first needs it, in a thread, while
# the Python walk stands in: the event loop never waits for it.
_kernel: Callable[..., int] | None = None
_loader: threading.Thread | None = None


def load_kernel(wait: bool = False) -> bool:
    """Start loading the compiled walk (once); with ``wait``, until it is loaded. True
    if it is in use (False without numba, or while loading)."""
    global _loader
    if _loader is None:
        _loader = threading.Thread(target=_load_kernel, name="schema-id-walk", daemon=True)
        _loader.start()
    if wait:
        _loader.join()
    return _kernel is not None


def _load_kernel() -> None:
    global _kernel
    from odradek.client import kernels  # noqa: PLC0415

    if not kernels.HAVE_NUMBA:
        logger.warning(
            "numba is missing: schema id validation walks records in Python "
            "(~100x slower; install odradek[spark])"
        )
        return
    out = np.empty((1, 3), dtype=np.int32)
    record = b"\x16\x00\x00\x00\x01\x0a\x00\x00\x00\x00\x01\x00\x00"  # one framed record
    kernels.schema_ids(np.frombuffer(record, dtype=np.uint8), 1, True, True, out)  # compile
    _kernel = kernels.schema_ids


def distinct_ids(table: np.ndarray, key: bool = True, value: bool = True) -> set[int]:
    """The schema ids of ``table``'s keys and/or values (usually one), sentinels left
    out; a side not read (all ``NULL``) costs nothing."""
    ids: set[int] = set()
    if key:
        ids.update(column_ids(table[:, KEY]))
    if value:
        ids.update(column_ids(table[:, VALUE]))
    return {i for i in ids if i >= 0}


def column_ids(column: np.ndarray) -> list[int]:
    """The distinct values of one column of ids, sentinels included: one min/max pass
    when all are equal (a producer's batch usually has one schema), else a sort."""
    if not len(column):
        return []
    lo, hi = int(column.min()), int(column.max())
    return [lo] if lo == hi else [int(i) for i in np.unique(column)]


def _batch_ids(payload: bytes | memoryview, count: int, key: bool, value: bool) -> np.ndarray:
    # Every record takes at least 7 bytes (length, attributes, two deltas, two lengths,
    # header count): a larger count is a lie, refused before anything is allocated.
    if count < 0 or count > len(payload) // 7:
        raise KafkaError(ErrorCode.corrupt_message, "record count larger than the batch")
    kernel = _kernel
    if kernel is None:
        load_kernel()
    else:
        table = np.empty((count, 3), dtype=np.int32)
        n = kernel(np.frombuffer(payload, dtype=np.uint8), count, key, value, table)
        if n < 0:
            raise KafkaError(ErrorCode.corrupt_message, "truncated record")
        return table
    rows: list[RecordIds] = []
    try:
        _walk(bytes(payload), count, key, value, rows.append)
    except IndexError:
        raise KafkaError(ErrorCode.corrupt_message, "truncated record") from None
    return np.array(rows, dtype=np.int32).reshape(-1, 3)


def _walk(
    p: bytes, count: int, want_key: bool, want_value: bool, emit: Callable[[RecordIds], None]
) -> None:
    """The hot loop: one- and two-byte varints inline (most are), as in the cleaner's
    ``iter_records``. Every record consumes at least one byte, so a lying ``count``
    ends in IndexError after at most ``len(p)`` rounds."""
    n = len(p)
    pos = 0
    for index in range(count):
        b = p[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            length, pos = _varint(p, pos)
        end = pos + length
        if length < 0 or end > n:
            raise IndexError
        pos += 1  # attributes
        # timestamp delta (varlong) and offset delta (varint): skipped, never needed
        for _ in range(2):
            if p[pos] < 0x80:
                pos += 1
            else:
                _, pos = _varint(p, pos)
        b = p[pos]
        if b < 0x80:
            klen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            klen, pos = _varint(p, pos)
        kid = NULL
        if klen >= 0:
            if want_key:
                kid = schema_id_of(p[pos : pos + min(klen, 5)])  # the header only
            pos += klen
        b = p[pos]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            vlen, pos = _varint(p, pos)
        vid = NULL
        if vlen >= 0 and want_value:
            if pos + vlen > end:
                raise IndexError
            vid = schema_id_of(p[pos : pos + min(vlen, 5)])
        if pos > end:
            raise IndexError
        emit((index, kid, vid))
        pos = end
