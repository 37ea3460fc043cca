"""The topic config ``compression.type``: rewrite a produced batch in the topic's codec.

Kafka's leader keeps a batch as the producer compressed it when ``compression.type`` is
``producer`` (the default; the hot path never touches the records) or equals the batch's
codec. Otherwise it decompresses the records and compresses them again with the topic's
codec (``uncompressed`` stores them plain), so consumers and the disk see the codec the
topic asks for. Only the leader does this, once per produce: followers copy the leader's
bytes, so every replica stores identical batches.

A v2 batch keeps its records section as one (possibly compressed) blob after the 61-byte
header, so recompression changes only that blob, ``batchLength``, the codec bits of
``attributes`` and the CRC; offsets, timestamps, producer fields and record count stay.
"""

from __future__ import annotations

import logging
import struct

from odradek.storage.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CRC_OFFSET,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
)
from odradek.storage.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    compress_payload,
    decompress_payload,
)

__all__ = ["TOPIC_CODECS", "target_codec", "needs_recompression", "recompress_batches"]

logger = logging.getLogger(__name__)

# compression.type values (Kafka's BrokerCompressionType) -> batch codec; "producer": None.
TOPIC_CODECS: dict[str, int | None] = {
    "producer": None,
    "uncompressed": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}

_BATCH_LENGTH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")


def target_codec(compression_type: str) -> int | None:
    """The codec a topic stores, or None to keep the producer's."""
    return TOPIC_CODECS[compression_type]


def needs_recompression(headers: list[BatchHeader], codec: int | None) -> bool:
    """True when some data batch is not already in ``codec`` (control batches are kept)."""
    if codec is None:
        return False
    return any(h.compression != codec and not h.is_control for h in headers)


def recompress_batches(buf: bytes | bytearray, headers: list[BatchHeader], codec: int) -> bytearray:
    """A new buffer holding every batch of ``buf`` with its records in ``codec``.

    ``headers`` are ``buf``'s validated headers; the caller parses the result again (the
    positions and lengths change). Decompression is bounded like every other path
    (``decompress_payload``: a batch may not expand past its limit)."""
    out = bytearray()
    view = memoryview(buf)
    for h in headers:
        batch = view[h.position : h.position + h.size]
        if h.compression == codec or h.is_control:
            out += batch
            continue
        records = decompress_payload(h.compression, bytes(batch[BATCH_HEADER_SIZE:]))
        body = compress_payload(codec, records)
        start = len(out)
        out += batch[:BATCH_HEADER_SIZE]
        out += body
        attributes = (h.attributes & ~COMPRESSION_MASK) | codec
        _ATTRIBUTES.pack_into(out, start + ATTRIBUTES_OFFSET, attributes)
        _BATCH_LENGTH.pack_into(out, start + 8, BATCH_HEADER_SIZE + len(body) - LOG_OVERHEAD)
        size = BATCH_HEADER_SIZE + len(body)
        _CRC.pack_into(out, start + CRC_OFFSET, compute_crc(out, start, size))
    return out
