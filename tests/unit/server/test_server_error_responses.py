"""Handler failures become error codes (issue 11, item 3): the dispatcher answers a
request whose handler raised with Kafka's getErrorResponse shape -- the code on every
resource the request names -- and keeps the connection; the traceback is logged once."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import pytest
from _proto_samples import request_frame, sample_entity
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader
from kio.serial._introspect import EntityField, EntityTupleField, classify_field

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.codec import decode_request
from odradek.protocol.versions import SERVED
from odradek.server import dispatch as dispatch_module
from odradek.server.dispatch import HANDLERS, RequestDispatcher
from odradek.server.error_responses import ERROR_RESPONSES
from odradek.server.network import CloseConnection
from odradek.server.settings import ServerSettings

ALL_SERVED = sorted((k, v) for k, (lo, hi) in SERVED.items() for v in range(lo, hi + 1))
CODE = ErrorCode.unknown_server_error


def _error_codes(entity: Any) -> Iterator[int]:
    for f in fields(entity):
        if f.name.startswith("__"):
            continue
        value = getattr(entity, f.name)
        if f.name in ("error_code", "partition_error_code"):
            yield int(value)  # AddPartitionsToTxn: partition_error_code
        fc = classify_field(f)
        if isinstance(fc, EntityField) and value is not None:
            yield from _error_codes(value)
        elif isinstance(fc, EntityTupleField) and value:
            for item in value:
                yield from _error_codes(item)


def _decode_response(api_key: int, version: int, data: bytes) -> Any:
    (size,) = struct.unpack_from(">i", data, 0)
    assert size == len(data) - 4
    cls = load_response_schema(api_key, version)
    pos = 8 + (1 if cls.__header_schema__.__version__ >= 1 else 0)
    entity, used = entity_reader(cls)(data, pos)
    assert pos + used == len(data)
    return entity


class _Context:
    settings = ServerSettings(request_max_elements=1000)


def test_every_served_api_has_an_error_response() -> None:
    assert set(ERROR_RESPONSES) >= set(SERVED)


@pytest.mark.parametrize("api_key, version", ALL_SERVED)
def test_a_failing_handler_is_answered_with_its_error_code(
    monkeypatch: pytest.MonkeyPatch, api_key: int, version: int
) -> None:
    def boom(ctx: Any, header: Any, req: Any) -> Any:
        raise RuntimeError("handler bug")

    monkeypatch.setitem(HANDLERS, api_key, boom)
    req = sample_entity(load_request_schema(api_key, version), 3)
    if api_key == 0:
        req = type(req)(
            **{
                **{
                    f.name: getattr(req, f.name) for f in fields(req) if not f.name.startswith("__")
                },
                "acks": -1,
            }
        )
    result = RequestDispatcher(_Context()).dispatch(request_frame(req, correlation_id=77))  # type: ignore[arg-type]
    data = (
        b"".join(bytes(p) if isinstance(p, (bytes, bytearray, memoryview)) else b"" for p in result)
        if isinstance(result, list)
        else result
    )
    resp = _decode_response(api_key, version, data)
    assert struct.unpack_from(">i", data, 4)[0] == 77
    codes = list(_error_codes(resp))
    assert codes, "the error response carries no error code"
    allowed = {int(CODE)}
    if api_key == 9 and version >= 2:  # OffsetFetch v2+: the error is at the top only
        allowed.add(0)
    assert set(codes) <= allowed, codes
    assert int(CODE) in codes


def test_kafka_error_escaping_a_handler_keeps_its_code(monkeypatch: pytest.MonkeyPatch) -> None:
    def fenced(ctx: Any, header: Any, req: Any) -> Any:
        raise KafkaError(ErrorCode.not_controller, "moved")

    monkeypatch.setitem(HANDLERS, 19, fenced)
    req = sample_entity(load_request_schema(19, 5), 1)
    data = RequestDispatcher(_Context()).dispatch(request_frame(req))  # type: ignore[arg-type]
    resp = _decode_response(19, 5, data)
    assert [t.error_code for t in resp.topics] == [ErrorCode.not_controller] * len(req.topics)
    assert len(resp.topics) == len(req.topics) and resp.topics[0].name == req.topics[0].name


def test_failing_coroutine_and_log_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def later(ctx: Any, header: Any, req: Any) -> Any:
        await asyncio.sleep(0)
        raise ValueError("late bug")

    monkeypatch.setitem(HANDLERS, 20, later)
    monkeypatch.setattr(dispatch_module, "FAILURE_LOG", dispatch_module.LogLimiter(1, 60.0))
    req = sample_entity(load_request_schema(20, 4), 2)
    d = RequestDispatcher(_Context())  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="odradek.server.dispatch"):
        for _ in range(3):
            data = asyncio.run(d.dispatch(request_frame(req)))
            resp = _decode_response(20, 4, data)
            assert {r.error_code for r in resp.responses} == {CODE}
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1, "the same failure site must be logged once"


def test_close_connection_still_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    def close(ctx: Any, header: Any, req: Any) -> Any:
        raise CloseConnection("acks=0 produce failed")

    monkeypatch.setitem(HANDLERS, 3, close)
    req = sample_entity(load_request_schema(3, 12), 1)
    with pytest.raises(CloseConnection):
        RequestDispatcher(_Context()).dispatch(request_frame(req))  # type: ignore[arg-type]


def test_acks_0_produce_failure_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(HANDLERS, 0, lambda *a: 1 / 0)
    req = sample_entity(load_request_schema(0, 9), 1)
    req = type(req)(transactional_id=None, acks=0, timeout=req.timeout, topic_data=req.topic_data)
    assert RequestDispatcher(_Context()).dispatch(request_frame(req)) is None  # type: ignore[arg-type]


def test_request_elements_limit_from_config() -> None:
    class Ctx:
        settings = ServerSettings(request_max_elements=1)

    req = sample_entity(load_request_schema(3, 12), 1)
    frame = request_frame(
        type(req)(
            topics=req.topics * 2,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    decode_request(frame)  # fine with the default limit
    with pytest.raises(CloseConnection, match=r"odradek\.request\.max\.elements"):
        RequestDispatcher(Ctx()).dispatch(frame)  # type: ignore[arg-type]


def test_a_produce_under_verification_holds_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Produce whose appends wait (KIP-890 verification) is answered like any delayed
    request -- the connection handles nothing else meanwhile -- while an ordinary
    delayed Produce only overlaps its wait for acks with the next requests."""
    from odradek.server.network import InOrder, Pipelined

    async def answer() -> bytes:
        return b"answer"

    req = sample_entity(load_request_schema(0, 9), 3)
    frame = request_frame(req)
    d = RequestDispatcher(_Context())  # type: ignore[arg-type]
    monkeypatch.setitem(HANDLERS, 0, lambda ctx, h, r: answer())
    pipelined = d.dispatch(frame)
    assert isinstance(pipelined, Pipelined)
    monkeypatch.setitem(HANDLERS, 0, lambda ctx, h, r: InOrder(answer()))
    held = d.dispatch(frame)
    assert asyncio.iscoroutine(held) and not isinstance(held, Pipelined)
    assert asyncio.run(held) == b"answer"
    asyncio.run(pipelined.coro)
