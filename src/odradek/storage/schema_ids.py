"""The schema ids of a produce's records: Confluent's wire format, read for broker-side
schema id validation (``confluent.value.schema.validation``, issue 27).

A serialized key or value in the wire format starts with the magic byte 0 and the
schema id as a big-endian 4-byte integer. This module only reads those five bytes of
each record: it neither decodes the payload nor asks a registry (the request handler
does, ``odradek.server.schema_validation``). Compressed batches are decompressed, within
the same bound as every other reader (``MAX_DECOMPRESSED_BATCH_BYTES``).
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.batch import BATCH_HEADER_SIZE, BatchHeader
from odradek.storage.cleaner import _varint
from odradek.storage.records import _decompress

__all__ = ["NOT_FRAMED", "MAGIC_BYTE", "record_schema_ids", "schema_id_of"]

MAGIC_BYTE = 0
# The id of a non-null field that is not in the wire format (shorter than 5 bytes, or a
# first byte other than 0). Real ids are read unsigned, so they are never negative.
NOT_FRAMED = -1

# One record's (batch index, key id, value id); an id is None for a null field or a
# field that is not checked.
RecordIds = tuple[int, int | None, int | None]


def schema_id_of(field: bytes | None) -> int | None:
    """The schema id ``field`` is framed with, None for null, ``NOT_FRAMED`` otherwise."""
    if field is None:
        return None
    if len(field) < 5 or field[0] != MAGIC_BYTE:
        return NOT_FRAMED
    return int.from_bytes(field[1:5], "big")


def record_schema_ids(
    records: bytes | bytearray | memoryview, key: bool, value: bool
) -> list[RecordIds]:
    """``(batch index, key id, value id)`` of every non-control record of ``records`` (a
    produce's batches), in order; the index restarts at 0 in each batch, as Kafka's
    ``batchIndex`` (KIP-467). Only the sides asked for are read (the other is None).
    Raises CORRUPT_MESSAGE for records that do not parse: the caller validates before
    the append has checked the batch, so nothing here trusts a length."""
    buf = records if isinstance(records, bytes) else bytes(records)
    out: list[RecordIds] = []
    append = out.append
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
            payload = _decompress(h.compression, buf[pos + BATCH_HEADER_SIZE : end])
            try:
                _walk(payload, h.records_count, key, value, append)
            except IndexError:
                raise KafkaError(ErrorCode.corrupt_message, "truncated record") from None
        pos = end
    return out


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
        kid: int | None = None
        if klen >= 0:
            if want_key:
                kid = (
                    int.from_bytes(p[pos + 1 : pos + 5], "big")
                    if klen >= 5 and p[pos] == MAGIC_BYTE
                    else NOT_FRAMED
                )
            pos += klen
        b = p[pos]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            vlen, pos = _varint(p, pos)
        vid: int | None = None
        if vlen >= 0 and want_value:
            if pos + vlen > end:
                raise IndexError
            vid = (
                int.from_bytes(p[pos + 1 : pos + 5], "big")
                if vlen >= 5 and p[pos] == MAGIC_BYTE
                else NOT_FRAMED
            )
        if pos > end:
            raise IndexError
        emit((index, kid, vid))
        pos = end
