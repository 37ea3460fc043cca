"""FrameDecoder: arbitrary chunking, limits, malformed prefixes."""

from __future__ import annotations

import random
import struct

import pytest

from odradek.protocol.framing import FrameDecoder, FrameError, FrameTooLarge


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _payloads(rng: random.Random, n: int) -> list[bytes]:
    return [bytes(rng.randrange(256) for _ in range(rng.randint(8, 300))) for _ in range(n)]


@pytest.mark.parametrize("seed", range(8))
def test_random_chunking_yields_every_frame_in_order(seed: int) -> None:
    rng = random.Random(seed)
    payloads = _payloads(rng, 60)
    stream = b"".join(_frame(p) for p in payloads)
    decoder = FrameDecoder()
    out: list[bytes] = []
    pos = 0
    while pos < len(stream):
        step = rng.choice([1, 2, 3, 4, 5, 17, 100, 1000, 5000])
        chunk = stream[pos : pos + step]
        # Exercise both input kinds: bytes (zero-copy fast path) and bytearray.
        out.extend(
            bytes(f) for f in decoder.feed(chunk if rng.random() < 0.7 else bytearray(chunk))
        )
        pos += step
    assert out == payloads
    assert decoder.buffered == 0


def test_whole_stream_in_one_chunk_returns_views_of_it() -> None:
    payloads = [b"a" * 10, b"b" * 20]
    frames = FrameDecoder().feed(_frame(payloads[0]) + _frame(payloads[1]))
    assert [bytes(f) for f in frames] == payloads


def test_large_frame_in_many_chunks() -> None:
    payload = bytes(range(256)) * 40_000  # ~10 MB
    stream = _frame(payload) + _frame(b"tail-frame")
    decoder = FrameDecoder()
    got: list[bytes] = []
    for i in range(0, len(stream), 4096):
        got.extend(bytes(f) for f in decoder.feed(stream[i : i + 4096]))
    assert got == [payload, b"tail-frame"]


def test_oversized_prefix_rejected_before_body() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000)
    decoder.feed(b"\x00\x00")  # half a prefix: nothing yet
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(b"\x03\xe9")  # 1001, no body bytes sent at all
    assert info.value.size == 1001 and info.value.limit == 1000


def test_default_limit_is_socket_request_max_bytes() -> None:
    assert FrameDecoder().max_frame_bytes == 104857600
    with pytest.raises(FrameTooLarge):
        FrameDecoder().feed(struct.pack(">i", 104857601))
    assert FrameDecoder().feed(struct.pack(">i", 104857600)) == []


@pytest.mark.parametrize("size", [-1, -(2**31), 0, 7])
def test_negative_or_tiny_size_is_frame_error(size: int) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(b"\x00" * 0 + struct.pack(">i", size) + b"\x00" * 16)


def test_bad_prefix_after_good_frame() -> None:
    decoder = FrameDecoder()
    good = _frame(b"x" * 12)
    assert [bytes(f) for f in decoder.feed(good)] == [b"x" * 12]
    with pytest.raises(FrameError):
        decoder.feed(bytearray(struct.pack(">i", -5)))
