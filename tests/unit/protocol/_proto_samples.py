"""Helpers for the protocol tests: sample kio entities and frames built with kio itself."""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from dataclasses import MISSING, fields
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
)
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64, i64Timedelta, u8, u16, u32, u64

_UTC = datetime.UTC


def _primitive(kafka_type: str, seed: int) -> Any:
    match kafka_type:
        case "int8":
            return i8(seed % 100)
        case "int16":
            return i16(seed % 1000)
        case "int32":
            return i32(seed * 7)
        case "int64":
            return i64(seed * 1_000_003)
        case "uint8":
            return u8(seed % 200)
        case "uint16":
            return u16(seed)
        case "uint32":
            return u32(seed)
        case "uint64":
            return u64(seed)
        case "float64":
            return float(seed) / 4
        case "bool":
            return seed % 2 == 1
        case "string":
            return f"s{seed}"
        case "bytes" | "records":
            return bytes(range(seed % 7 + 1))
        case "uuid":
            return uuid.UUID(int=seed + 1)
        case "error_code":
            from kio.schema.errors import ErrorCode

            return ErrorCode(0)
        case "timedelta_i32":
            return i32Timedelta.parse(datetime.timedelta(milliseconds=seed + 5))
        case "timedelta_i64":
            return i64Timedelta.parse(datetime.timedelta(milliseconds=seed + 5))
        case "datetime_i64":
            return datetime.datetime.fromtimestamp(1_700_000_000 + seed, tz=_UTC)
    raise AssertionError(kafka_type)


def sample_entity(cls: type, seed: int = 1, depth: int = 0) -> Any:
    """An instance of kio entity ``cls`` with every non-tagged field set (arrays of one)."""
    kwargs: dict[str, Any] = {}
    for i, f in enumerate(fields(cls)):
        if get_field_tag(f) is not None:
            continue  # tagged fields keep their defaults (omitted on the wire)
        s = seed + i
        fc = classify_field(f)
        if isinstance(fc, PrimitiveField):
            kwargs[f.name] = _primitive(f.metadata["kafka_type"], s)
        elif isinstance(fc, PrimitiveTupleField):
            kwargs[f.name] = (_primitive(f.metadata["kafka_type"], s),)
        elif isinstance(fc, EntityField):
            if depth > 4 and f.default is not MISSING:
                continue
            kwargs[f.name] = sample_entity(fc.type_, s, depth + 1)
        elif isinstance(fc, EntityTupleField):
            kwargs[f.name] = (sample_entity(fc.type_, s, depth + 1),) if depth < 5 else ()
    return cls(**kwargs)


def encode_entity(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def request_frame(entity: Any, correlation_id: int = 42, client_id: str | None = "tester") -> bytes:
    """Header (v1 or v2, as kio's schema says) + body, without the size prefix."""
    cls = type(entity)
    header_cls = RequestHeaderV2 if cls.__header_schema__.__version__ >= 2 else RequestHeaderV1
    header = header_cls(
        request_api_key=i16(cls.__api_key__),
        request_api_version=i16(cls.__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    return encode_entity(header) + encode_entity(entity)


def split_response(data: bytes, flexible_header: bool) -> tuple[int, bytes]:
    """Check the size prefix; return (correlation id, body)."""
    (size,) = struct.unpack_from(">i", data, 0)
    assert size == len(data) - 4
    (correlation_id,) = struct.unpack_from(">i", data, 4)
    if flexible_header:
        assert data[8] == 0  # empty tagged fields
        return correlation_id, data[9:]
    return correlation_id, data[8:]
