"""Client side of the protocol (sans-IO): encode requests, decode responses, with kio.

Used by the broker's own replica fetcher (REQ-R3: followers pull with Fetch) and by
tests. Request rates here are low (one request per leader per round trip), so kio's
encoders are fast enough; the hot path is on the serving side.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from odradek.protocol.codec import request_class, response_class

_I32 = struct.Struct(">i")
_REQ_HEADER = struct.Struct(">hhi")

_writers: dict[type, Any] = {}
_readers: dict[type, Any] = {}


def _write_uvarint(out: io.BytesIO, value: int) -> None:
    while value >= 0x80:
        out.write(bytes((value & 0x7F | 0x80,)))
        value >>= 7
    out.write(bytes((value,)))


def encode_request(entity: Any, correlation_id: int, client_id: str | None) -> bytes:
    """Size prefix + request header (v1, or v2 for flexible versions) + kio body."""
    cls = type(entity)
    writer = _writers.get(cls)
    if writer is None:
        writer = _writers[cls] = entity_writer(cls)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    buf.write(_REQ_HEADER.pack(cls.__api_key__, cls.__version__, correlation_id))
    if client_id is None:
        buf.write(b"\xff\xff")
    else:
        raw = client_id.encode()
        buf.write(struct.pack(">h", len(raw)))
        buf.write(raw)
    if cls.__header_schema__.__version__ >= 2:
        _write_uvarint(buf, 0)  # no header tagged fields
    writer(buf, entity)
    out = buf.getbuffer()
    _I32.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation_id, response entity) from a frame without its size prefix."""
    cls = response_class(api_key, api_version)
    reader = _readers.get(cls)
    if reader is None:
        reader = _readers[cls] = entity_reader(cls)
    correlation_id = _I32.unpack_from(frame, 0)[0]
    pos = 4
    if cls.__header_schema__.__version__ >= 1:
        pos += 1  # empty tagged-field section (we never receive header tags)
        if frame[4] != 0:
            raise ValueError("response header tagged fields are not supported")
    entity, _ = reader(frame, pos)
    return correlation_id, entity


def request_entity(api_key: int, api_version: int, /, **kwargs: Any) -> Any:
    """Build a request entity of any version from keyword arguments (extra ones dropped)."""
    from odradek.protocol.responses import build  # noqa: PLC0415 - shared field filter

    return build(request_class(api_key, api_version), **kwargs)


def nested_request(api_key: int, api_version: int, name: str, /, **kwargs: Any) -> Any:
    import sys  # noqa: PLC0415

    from odradek.protocol.responses import build  # noqa: PLC0415

    module = sys.modules[request_class(api_key, api_version).__module__]
    return build(getattr(module, name), **kwargs)
