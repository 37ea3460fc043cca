"""decode_request / encode_response / ApiVersions error path, validated against kio."""

from __future__ import annotations

import dataclasses
import random
import struct

import pytest
from _proto_samples import encode_entity, request_frame, sample_entity, split_response
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from odradek.protocol.codec import (
    InvalidRequest,
    RequestHeaderInfo,
    UnsupportedVersion,
    api_versions_error_response,
    decode_request,
    encode_response,
    peek_header,
    request_class,
    response_class,
)
from odradek.protocol.versions import ADVERTISED, SERVED

EDGE_VERSIONS = sorted({(k, v) for k, (lo, hi) in SERVED.items() for v in (lo, hi)})
ALL_SERVED = sorted((k, v) for k, (lo, hi) in SERVED.items() for v in range(lo, hi + 1))


@pytest.mark.parametrize(("api_key", "version"), EDGE_VERSIONS)
def test_decode_round_trip_min_max(api_key: int, version: int) -> None:
    cls = load_request_schema(api_key, version)
    entity = sample_entity(cls)
    frame = request_frame(entity, correlation_id=1234, client_id="rdkafka")
    header, decoded = decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (api_key, version, 1234)
    assert header.client_id == "rdkafka"
    assert decoded == entity
    # Header v2 (flexible) carries one extra byte: the empty tagged-field section.
    flexible_header = cls.__header_schema__.__version__ >= 2
    assert header.header_size == 10 + len("rdkafka") + (1 if flexible_header else 0)


@pytest.mark.parametrize(("api_key", "version"), ALL_SERVED)
def test_decode_every_served_version_null_client_id(api_key: int, version: int) -> None:
    entity = sample_entity(load_request_schema(api_key, version), seed=3)
    header, decoded = decode_request(memoryview(request_frame(entity, 7, client_id=None)))
    assert header.client_id is None and header.correlation_id == 7
    assert decoded == entity


def test_api_versions_v3_uses_request_header_v2() -> None:
    entity = sample_entity(load_request_schema(18, 3))
    frame = request_frame(entity, 9, "c")
    # api_key, version, correlation, client_id "c", then the header's tagged fields.
    assert frame[:11] == struct.pack(">hhih", 18, 3, 9, 1) + b"c"
    assert frame[11] == 0
    assert peek_header(frame).header_size == 12
    assert decode_request(frame)[1] == entity


@pytest.mark.parametrize(
    ("api_key", "version"), [(0, 2), (0, 0), (1, 13), (1, 3), (3, 13), (99, 0)]
)
def test_unsupported_versions(api_key: int, version: int) -> None:
    frame = struct.pack(">hhih", api_key, version, 5, 2) + b"id" + b"\x00" * 20
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(frame)
    assert info.value.header.correlation_id == 5
    assert info.value.header.client_id == "id"


def test_api_versions_unsupported_version_gets_error_35_v0_body() -> None:
    # A v5 request from a future client: header v2 (flexible) with a body we cannot know.
    frame = struct.pack(">hhih", 18, 5, 77, 3) + b"cli" + b"\x00" + b"\x07future\x00"
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(frame)
    out = api_versions_error_response(info.value.header)
    correlation_id, body = split_response(out, flexible_header=False)
    assert correlation_id == 77
    response_v0 = load_response_schema(18, 0)
    decoded, size = entity_reader(response_v0)(body, 0)
    assert size == len(body)
    assert decoded.error_code == 35
    assert {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys} == ADVERTISED


def test_encode_response_header_versions() -> None:
    # ApiVersions v3: flexible body but response header v0 (no tagged-field byte).
    av = sample_entity(load_response_schema(18, 3))
    hdr = RequestHeaderInfo(18, 3, 11, "c", 12)
    correlation_id, body = split_response(encode_response(hdr, av), flexible_header=False)
    assert correlation_id == 11 and body == encode_entity(av)
    # Metadata v12: response header v1.
    md = sample_entity(response_class(3, 12))
    hdr = RequestHeaderInfo(3, 12, 12, "c", 12)
    correlation_id, body = split_response(encode_response(hdr, md), flexible_header=True)
    assert correlation_id == 12
    decoded, size = entity_reader(response_class(3, 12))(body, 0)
    assert decoded == md and size == len(body)
    # Metadata v8: response header v0.
    md8 = sample_entity(response_class(3, 8))
    out = encode_response(RequestHeaderInfo(3, 8, 13, None, 10), md8)
    assert split_response(out, flexible_header=False) == (13, encode_entity(md8))


def test_encode_response_rejects_mismatched_entity() -> None:
    md = sample_entity(response_class(3, 12))
    with pytest.raises(TypeError):
        encode_response(RequestHeaderInfo(3, 11, 1, None, 10), md)
    with pytest.raises(TypeError):
        encode_response(RequestHeaderInfo(3, 12, 1, None, 10), sample_entity(request_class(3, 12)))


def test_trailing_bytes_are_ignored() -> None:
    """Kafka ignores bytes after a complete body; librdkafka 2.16 sends some (Metadata v12)."""
    entity = sample_entity(load_request_schema(3, 12))
    frame = request_frame(entity)
    _, decoded = decode_request(frame + b"\x01\x00\x00")
    assert decoded == entity


def test_unknown_tagged_fields_are_ignored() -> None:
    """KIP-482: unknown tags are skipped, at top level and inside nested entities."""
    produce = load_request_schema(0, 9)
    entity = sample_entity(produce)
    frame = request_frame(entity)
    records = entity.topic_data[0].partition_data[0].records
    # Body ends: records, partition tags (0), topic tags (0), top-level tags (0).
    assert frame.endswith(records + b"\x00\x00\x00")
    head = frame[:-3]
    nested = head + b"\x01\x09\x02zz" + b"\x00" + b"\x02\x05\x00\x06\x01q"
    assert decode_request(nested)[1] == entity

    # A known tag next to an unknown one: Fetch v12's cluster_id (tag 0) survives.
    fetch = load_request_schema(1, 12)
    base = sample_entity(fetch)
    tagged = dataclasses.replace(base, cluster_id="kc")
    frame = request_frame(tagged)
    assert frame.endswith(b"\x01\x00\x03\x03kc")  # count 1, tag 0, size 3, compact "kc"
    with_unknown = frame[:-6] + b"\x02\x00\x03\x03kc\x07\x01\xaa"
    assert decode_request(with_unknown)[1] == tagged


def test_header_tagged_fields_are_skipped() -> None:
    entity = sample_entity(load_request_schema(3, 12))
    body = encode_entity(entity)
    frame = struct.pack(">hhih", 3, 12, 8, -1) + b"\x01\x03\x02ab" + body
    header, decoded = decode_request(frame)
    assert header.header_size == 15 and decoded == entity


def _valid_frames() -> list[bytes]:
    return [
        request_frame(sample_entity(load_request_schema(k, v), seed=k + v))
        for k, v in EDGE_VERSIONS
    ]


def _only_expected(frame: bytes | bytearray) -> None:
    try:
        decode_request(frame)
    except (InvalidRequest, UnsupportedVersion):
        pass


def test_fuzz_truncations_and_garbage() -> None:
    rng = random.Random(20240601)
    frames = _valid_frames()
    for frame in frames:
        for cut in range(len(frame)):
            _only_expected(frame[:cut])
    for _ in range(3000):
        frame = bytearray(rng.choice(frames))
        for _ in range(rng.randint(1, 4)):
            frame[rng.randrange(len(frame))] = rng.randrange(256)
        _only_expected(frame)
    for _ in range(3000):
        key, version = rng.choice(ALL_SERVED)
        garbage = bytes(rng.randrange(256) for _ in range(rng.randint(0, 60)))
        _only_expected(struct.pack(">hhih", key, version, 1, -1) + garbage)
        _only_expected(garbage)


def test_truncated_frames_raise_invalid_request() -> None:
    frame = request_frame(sample_entity(load_request_schema(0, 9)))
    for cut in range(len(frame)):
        with pytest.raises(InvalidRequest):
            decode_request(frame[:cut])


def test_unsupported_api_versions_with_unparsable_header_tags_still_answered() -> None:
    # A future ApiVersions version whose header we cannot parse as v2 still yields
    # UnsupportedVersion (so the broker answers with error 35), not InvalidRequest.
    frame = struct.pack(">hhih", 18, 9, 3, -1) + b"\x05"
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(frame)
    assert info.value.header.correlation_id == 3
    assert api_versions_error_response(info.value.header)[4:8] == struct.pack(">i", 3)
