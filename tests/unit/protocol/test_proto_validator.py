"""The bounded-decoding validator (protocol/validator.py): what it accepts, what it refuses,
and that nothing it accepts can make kio's native reader allocate past the frame.

The last test runs decode_request over tens of thousands of mutated requests in a child
process whose address space is capped (RLIMIT_AS): a Rust allocation failure aborts a
process, so it must happen there, never in the test runner, and must not happen at all.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest
from _proto_samples import encode_entity, sample_entity
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_reader

from odradek.fuzz.corpus import build_corpus
from odradek.protocol.codec import InvalidRequest, UnsupportedVersion, decode_request
from odradek.protocol.validator import (
    DEFAULT_MAX_ELEMENTS,
    MalformedRequest,
    TooManyElements,
    request_validator,
)
from odradek.protocol.versions import SERVED

ALL_SERVED = sorted((k, v) for k, (lo, hi) in SERVED.items() for v in range(lo, hi + 1))
CORPUS = build_corpus(seed=11)


def _validate(api_key: int, version: int, body: bytes, max_elements: int = 1000) -> int:
    return request_validator(api_key, version)(body, 0, len(body), max_elements)


def _mod(api_key: int, version: int) -> object:
    return sys.modules[load_request_schema(api_key, version).__module__]


@pytest.mark.parametrize("api_key, version", ALL_SERVED)
def test_every_served_request_validates_to_its_end(api_key: int, version: int) -> None:
    for seed in range(3):
        body = encode_entity(sample_entity(load_request_schema(api_key, version), seed))
        assert _validate(api_key, version, body) == len(body)


@pytest.mark.parametrize("api_key, version", ALL_SERVED)
def test_truncations_are_refused_or_decode(api_key: int, version: int) -> None:
    cls = load_request_schema(api_key, version)
    body = encode_entity(sample_entity(cls, 1))
    for cut in range(len(body)):
        try:
            _validate(api_key, version, body[:cut])
        except MalformedRequest:
            continue
        entity_reader(cls)(body[:cut], 0)  # a shorter valid prefix: must decode


def test_sync_group_count_of_2_pow_32_is_refused() -> None:
    body = (
        bytes.fromhex("026700000001026d0009636f6e73756d65720672616e6765")
        + b"\xff\xff\xff\xff\x0f"
        + b"\x00"
    )
    with pytest.raises(MalformedRequest, match="count exceeds the bytes left"):
        _validate(14, 5, body)


def test_nulls_only_where_nullable() -> None:
    m = _mod(11, 5)
    req = m.JoinGroupRequest(
        group_id="g",
        session_timeout=timedelta(seconds=10),  # type: ignore[attr-defined]
        rebalance_timeout=timedelta(seconds=10),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(),
    )
    body = encode_entity(req)
    assert _validate(11, 5, body) == len(body)  # group_instance_id null: nullable
    with pytest.raises(MalformedRequest, match="non-nullable field protocols"):
        _validate(11, 5, body[:-4] + b"\xff\xff\xff\xff")
    with pytest.raises(MalformedRequest, match="negative length"):
        _validate(11, 5, body[:-4] + b"\xff\xff\xff\xfe")


def test_varints_longer_than_5_bytes_are_refused() -> None:
    with pytest.raises(MalformedRequest, match="longer than 5 bytes"):
        _validate(3, 12, b"\x80\x80\x80\x80\x80\x00\x00\x00\x00")
    # A non-minimal 5-byte zero is still a varint Kafka reads.
    assert _validate(3, 12, b"\x81\x80\x80\x80\x00\x00\x00\x00") == 8


def test_known_tagged_fields_must_fill_their_size() -> None:
    m = _mod(1, 12)
    req = m.FetchRequest(  # type: ignore[attr-defined]
        cluster_id="c1",
        replica_id=-1,
        max_wait=timedelta(0),
        min_bytes=1,
        max_bytes=1,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
    )
    body = encode_entity(req)
    assert _validate(1, 12, body) == len(body)
    tags = b"\x01\x00\x03\x03c1"  # one tagged field: cluster_id (tag 0), 3 bytes, "c1"
    assert body.endswith(tags)
    head = body[: -len(tags)]
    with pytest.raises(MalformedRequest, match="does not fill its size"):
        _validate(1, 12, head + b"\x01\x00\x04\x03c1\x00")
    # An unknown tag is skipped whatever it holds (KIP-482).
    unknown = head + b"\x02\x00\x03\x03c1\x63\x02zz"
    assert _validate(1, 12, unknown) == len(unknown)
    with pytest.raises(MalformedRequest):  # ... but its size must fit
        _validate(1, 12, head + b"\x01\x63\x7fzz")


def test_element_budget() -> None:
    m = _mod(3, 1)
    topics = tuple(m.MetadataRequestTopic(name="t") for _ in range(50))  # type: ignore[attr-defined]
    body = encode_entity(m.MetadataRequest(topics=topics))  # type: ignore[attr-defined]
    assert _validate(3, 1, body, max_elements=50) == len(body)
    with pytest.raises(TooManyElements):
        _validate(3, 1, body, max_elements=49)
    assert DEFAULT_MAX_ELEMENTS >= 100_000


def test_decode_request_turns_validator_refusals_into_invalid_request() -> None:
    entry = next(e for e in CORPUS if (e.api_key, e.api_version) == (14, 5))
    frame = entry.payload[:-2] + b"\xff\xff\xff\xff\x0f\x00"
    with pytest.raises(InvalidRequest):
        decode_request(frame)
    with pytest.raises(InvalidRequest, match=r"odradek\.request\.max\.elements"):
        decode_request(
            next(
                e.payload
                for e in CORPUS
                if e.api_key == 3 and e.api_version == 1 and e.payload.count(b"fz-") >= 2
            ),
            max_elements=1,
        )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_validated_frames_decode_or_fail_cleanly(data: st.DataObject) -> None:
    """Property: mutate a corpus request any way; decode_request either returns or
    raises InvalidRequest / UnsupportedVersion -- nothing else escapes."""
    payload = bytearray(data.draw(st.sampled_from(CORPUS)).payload)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["set", "insert", "cut", "varint"]))
        i = data.draw(st.integers(0, max(len(payload) - 1, 0)))
        if kind == "set" and payload:
            payload[i] = data.draw(st.integers(0, 255))
        elif kind == "insert":
            payload[i:i] = data.draw(st.binary(min_size=1, max_size=6))
        elif kind == "cut":
            del payload[i:]
        else:
            payload[i : i + 5] = data.draw(
                st.sampled_from(
                    [b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff", b"\xff\xff", b"\x00"]
                )
            )
    try:
        decode_request(bytes(payload))
    except (InvalidRequest, UnsupportedVersion):
        pass


_CHILD = textwrap.dedent("""
    import resource, sys
    LIMIT, SEED, COUNT = map(int, sys.argv[1:4])
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))
    from odradek.fuzz.corpus import build_corpus
    from odradek.fuzz.mutator import Mutator
    from odradek.protocol.codec import InvalidRequest, UnsupportedVersion, decode_request
    from odradek.protocol.versions import SERVED
    corpus = [e.payload for e in build_corpus(seed=SEED)]
    variants = {k: list(range(lo, hi + 1)) for k, (lo, hi) in SERVED.items()}
    m = Mutator(corpus, seed=SEED, header_variants=variants)
    decoded = refused = 0
    for i in range(COUNT):
        frame, _ = m.mutate(corpus[i % len(corpus)])
        try:
            decode_request(frame)
            decoded += 1
        except (InvalidRequest, UnsupportedVersion):
            refused += 1
    print(decoded, refused)
""")


@pytest.mark.parametrize("seed", [1, 2])
def test_mutated_requests_never_abort_the_decoder(seed: int) -> None:
    limit = 1 << 30  # kio's 34 GB reservation would abort well below this
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(limit), str(seed), "30000"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    decoded, refused = map(int, proc.stdout.split())
    assert decoded + refused == 30000 and decoded > 1000 and refused > 1000
    assert resource.getrlimit(resource.RLIMIT_AS)  # the runner itself was never limited
