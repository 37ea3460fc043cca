"""Hand-written FetchResponse encoder, v4..v12, returning scatter/gather parts.

Record data is never copied here (REQ-R26 zero copy): a partition's ``records`` may be
an object with a ``size`` attribute (``odradek.storage.log.FileSlice``: fd, position,
size), which is placed in the output list as is, for the server to ``sendfile``/``pread``.
``bytes`` records and all protocol fields are coalesced into as few ``bytes`` parts as
possible. The first part starts with the 4-byte size prefix of the whole response.

Layout (Kafka's FetchResponse.json):

    throttle_time_ms i32, error_code i16 (v7+), session_id i32 (v7+)
    responses[]                        (v12: compact array)
      topic                            (v12: compact string)
      partitions[]
        partition_index i32, error_code i16, high_watermark i64,
        last_stable_offset i64 (v4+), log_start_offset i64 (v5+),
        aborted_transactions[] nullable (v4+): producer_id i64, first_offset i64 [tags]
        preferred_read_replica i32 (v11+)
        records nullable bytes          (v12: compact)
        [tags]                          (v12: diverging_epoch, current_leader,
                                         snapshot_id left at defaults -> omitted)
      [tags]
    [tags]

Empty/absent records are sent as a zero-length (not null) record set, as Kafka's broker
does (``MemoryRecords.EMPTY`` for errors and empty reads); clients accept both.
Flexible v12 uses response header v1.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from odradek.protocol.wire import append_array_length, append_string, uvarint

__all__ = ["PartitionFetchResult", "encode_fetch_response", "FETCH_VERSIONS", "parts_size"]

FETCH_VERSIONS: Final = range(4, 13)
_FLEXIBLE_FROM: Final = 12

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_TOP_V4 = struct.Struct(">i")  # throttle
_TOP_V7 = struct.Struct(">ihi")  # throttle, error, session id
_PART_V4 = struct.Struct(">ihqq")  # index, error, hw, lso
_PART_V5 = struct.Struct(">ihqqq")  # + log start offset
_ABORTED = struct.Struct(">qq")


@dataclass(slots=True)
class PartitionFetchResult:
    index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: Any  # bytes | object with .size (FileSlice) | None
    # (producer_id, first_offset) pairs; None = null (not a read_committed fetch)
    aborted_transactions: Sequence[tuple[int, int]] | None = None
    preferred_read_replica: int = -1  # v11+


def parts_size(parts: Sequence[Any]) -> int:
    """Total bytes of a parts list (``bytes`` or objects with ``size``)."""
    return sum(len(p) if isinstance(p, (bytes, bytearray, memoryview)) else p.size for p in parts)


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: list[tuple[str, list[PartitionFetchResult]]],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
) -> list[Any]:
    """Size prefix + header + FetchResponse body as a list of ``bytes`` / sized parts."""
    if version not in FETCH_VERSIONS:
        raise ValueError(f"Fetch v{version} response is not supported")
    flexible = version >= _FLEXIBLE_FROM
    has_v5 = version >= 5
    has_v11 = version >= 11

    out: list[Any] = []  # byte runs (lists, joined at the end) and sized objects
    cur: list[bytes] = [b"", _I32.pack(correlation_id)]  # [0] becomes the size prefix
    append = cur.append
    total = 0  # bytes after the size prefix
    if flexible:
        append(b"\x00")  # response header v1: empty tagged fields
    if version >= 7:
        append(_TOP_V7.pack(throttle_time_ms, error_code, session_id))
    else:
        append(_TOP_V4.pack(throttle_time_ms))
    append_array_length(append, flexible, len(topics))
    for name, partitions in topics:
        append_string(append, flexible, name.encode())
        append_array_length(append, flexible, len(partitions))
        for p in partitions:
            if has_v5:
                append(
                    _PART_V5.pack(
                        p.index,
                        p.error_code,
                        p.high_watermark,
                        p.last_stable_offset,
                        p.log_start_offset,
                    )
                )
            else:
                append(_PART_V4.pack(p.index, p.error_code, p.high_watermark, p.last_stable_offset))
            aborted = p.aborted_transactions
            if aborted is None:
                append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            else:
                append(uvarint(len(aborted) + 1) if flexible else _I32.pack(len(aborted)))
                for producer_id, first_offset in aborted:
                    append(_ABORTED.pack(producer_id, first_offset))
                    if flexible:
                        append(b"\x00")
            if has_v11:
                append(_I32.pack(p.preferred_read_replica))
            records = p.records
            if records is None:
                size = 0
            elif isinstance(records, (bytes, bytearray, memoryview)):
                size = len(records)
            else:
                size = records.size
            append(uvarint(size + 1) if flexible else _I32.pack(size))
            if size:
                if isinstance(records, (bytes, bytearray, memoryview)):
                    append(bytes(records))
                else:
                    total += sum(map(len, cur))
                    out.append(cur)
                    out.append(records)
                    total += size
                    cur = []
                    append = cur.append
            if flexible:
                append(b"\x00")  # partition tagged fields
        if flexible:
            append(b"\x00")  # topic tagged fields
    if flexible:
        append(b"\x00")  # top-level tagged fields
    if cur:
        total += sum(map(len, cur))
        out.append(cur)
    # Byte runs stay lists until the total is known: the size prefix fills the slot
    # reserved at the head of the first run, then each run is joined once.
    out[0][0] = _I32.pack(total)
    return [b"".join(part) if type(part) is list else part for part in out]
