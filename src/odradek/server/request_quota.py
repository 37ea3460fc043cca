"""Request quotas (KIP-124): ``request_percentage``, Kafka's ClientRequestQuotaManager.

A request's handler time on the event loop (Odradek's request handler thread) is
recorded as a percentage of one second (``nanos * 100 / 1e9``) on the sensor the KIP-55
precedence picks for its user and client-id (``odradek.server.client_quotas``). Over
the quota, the throttle time is Kafka's ``(rate - quota) / quota * window``, at most one
quota window (``ClientRequestQuotaManager.throttleTime``); it goes into the response's
``throttle_time_ms`` (the larger of it and a byte-rate throttle already there, as
KafkaApis takes the max for Produce and Fetch) and mutes the connection that long
(KIP-219).

Exempt, as in Kafka: what brokers send each other (a follower's Fetch,
WriteTxnMarkers, the broker form of AddPartitionsToTxn), and the requests a client
needs before it can be told anything (ApiVersions, SaslHandshake, SaslAuthenticate).
The handler time of a delayed request is its synchronous part (the wait in a purgatory
is not handler time in Kafka either).
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
from collections.abc import Coroutine
from typing import Any

from odradek.protocol.codec import RequestHeaderInfo
from odradek.server.network import InOrder

__all__ = ["EXEMPT_APIS", "exempt", "with_throttle"]

PRODUCE, FETCH, METADATA, ADD_PARTITIONS_TO_TXN = 0, 1, 3, 24
EXEMPT_APIS = frozenset(
    {17, 18, 27, 36}
)  # SaslHandshake, ApiVersions, WriteTxnMarkers, SaslAuthenticate
_I32 = struct.Struct(">i")
_FLEXIBLE_PRODUCE, _FLEXIBLE_FETCH, _FLEXIBLE_METADATA = 9, 12, 9


def exempt(header: RequestHeaderInfo, req: Any) -> bool:
    key = header.api_key
    if key in EXEMPT_APIS:
        return True
    if key == FETCH:
        return int(req.replica_id) >= 0
    return key == ADD_PARTITIONS_TO_TXN and header.api_version >= 4


def with_throttle(header: RequestHeaderInfo, result: Any, delay_ms: int) -> Any:
    """``result`` (as a handler returned it) answering with at least ``delay_ms``."""
    if result is None or delay_ms <= 0:
        return result
    if isinstance(result, InOrder):
        result.coro = _later(header, result.coro, delay_ms)
        return result
    if isinstance(result, Coroutine):
        return _later(header, result, delay_ms)
    if isinstance(result, bytes) and header.api_key == PRODUCE:
        # Hand-encoded: throttle_time_ms is the last field (then the tagged fields).
        at = len(result) - (5 if header.api_version >= _FLEXIBLE_PRODUCE else 4)
        return _patched(result, at, delay_ms)
    if isinstance(result, bytes) and header.api_key == METADATA and header.api_version >= 3:
        # A kept Metadata answer (server/metadata_answers.py): size, correlation id,
        # [tagged fields], throttle_time_ms first.
        return _patched(result, 9 if header.api_version >= _FLEXIBLE_METADATA else 8, delay_ms)
    if isinstance(result, list) and header.api_key == FETCH and result:
        # Hand-encoded: size, correlation id, [tagged fields], throttle_time_ms first.
        at = 9 if header.api_version >= _FLEXIBLE_FETCH else 8
        first = result[0]
        if isinstance(first, bytes) and len(first) >= at + 4:
            return [_patched(first, at, delay_ms), *result[1:]]
        return result
    current = getattr(result, "throttle_time", None)
    if isinstance(current, datetime.timedelta):
        wanted = datetime.timedelta(milliseconds=delay_ms)
        if wanted > current:
            return dataclasses.replace(result, throttle_time=wanted)
    return result


def _patched(data: bytes, at: int, delay_ms: int) -> bytes:
    (current,) = _I32.unpack_from(data, at)
    if current >= delay_ms:
        return data
    out = bytearray(data)
    _I32.pack_into(out, at, delay_ms)
    return bytes(out)


async def _later(header: RequestHeaderInfo, coro: Coroutine[Any, Any, Any], delay_ms: int) -> Any:
    return with_throttle(header, await coro, delay_ms)
