"""Requests in, responses out: decode a frame, run its handler, encode the answer.

``KafkaConnection`` (``odradek.server.network``) hands each complete frame to
``RequestDispatcher.dispatch``. Handlers take the narrow ``RequestContext``, the decoded
header and the kio request entity, and return a kio response entity, already encoded
bytes (or a list of parts for the zero-copy writer), ``None`` for no response (acks=0),
or a coroutine when they must wait (delayed operations).

A malformed frame (the validator or kio refused it, or an unserved API/version) closes
the connection, as Kafka does. Anything a handler did not anticipate -- an exception
escaping it, synchronously or from its coroutine, or a response that fails to encode --
is answered with UNKNOWN_SERVER_ERROR for every resource the request names (a
``KafkaError`` that escaped gets its own code), the connection stays open, and the
traceback is logged once per failure site (issue 11, item 3).

On a SASL listener (issue 14) the dispatcher is also the gate of Kafka's
``SaslServerAuthenticator``: until the connection's session is authenticated only
ApiVersions, SaslHandshake and SaslAuthenticate are served -- anything else closes the
connection before it is decoded -- and after a SaslHandshake v0 the next frames are raw
SASL tokens. An authenticated session past its KIP-368 lifetime is closed at its next
request other than a re-authentication.
"""

from __future__ import annotations

import logging
import struct
import time
import traceback
from collections.abc import Callable, Coroutine
from typing import Any

from odradek.errors import ErrorCode, KafkaError
from odradek.log_limiter import LogLimiter
from odradek.metrics.stats import RequestMetrics
from odradek.protocol.codec import (
    InvalidRequest,
    RequestHeaderInfo,
    UnsupportedVersion,
    api_versions_error_response,
    decode_request,
    encode_response,
)
from odradek.protocol.validator import DEFAULT_MAX_ELEMENTS
from odradek.protocol.versions import api_name
from odradek.server import request_quota
from odradek.server.client_quotas import QuotaManager
from odradek.server.context import RequestContext
from odradek.server.error_responses import error_response
from odradek.server.handlers import (
    admin,
    configs,
    data,
    elect,
    groups,
    metadata,
    producers,
    quotas,
    reassign,
    records,
    security,
    transactions,
)
from odradek.server.network import (
    FRAME_ARRIVED_AT,
    CloseAfter,
    CloseConnection,
    InOrder,
    Pipelined,
)
from odradek.server.session import current_session

logger = logging.getLogger(__name__)

__all__ = ["HANDLERS", "RequestDispatcher"]

Handler = Callable[[RequestContext, RequestHeaderInfo, Any], Any]

PRODUCE = 0
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
_PRE_AUTH_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
_API_KEY = struct.Struct(">h")

HANDLERS: dict[int, Handler] = {  # one per API key in protocol.versions.SERVED
    0: data.handle_produce,
    1: data.handle_fetch,
    2: data.handle_list_offsets,
    3: metadata.handle_metadata,
    8: groups.handle_offset_commit,
    9: groups.handle_offset_fetch,
    10: groups.handle_find_coordinator,
    11: groups.handle_join_group,
    12: groups.handle_heartbeat,
    13: groups.handle_leave_group,
    14: groups.handle_sync_group,
    15: groups.handle_describe_groups,
    16: groups.handle_list_groups,
    17: security.handle_sasl_handshake,
    18: metadata.handle_api_versions,
    19: admin.handle_create_topics,
    20: admin.handle_delete_topics,
    21: records.handle_delete_records,
    22: producers.handle_init_producer_id,
    23: data.handle_offset_for_leader_epoch,
    24: transactions.handle_add_partitions_to_txn,
    25: transactions.handle_add_offsets_to_txn,
    26: transactions.handle_end_txn,
    27: transactions.handle_write_txn_markers,
    28: transactions.handle_txn_offset_commit,
    29: security.handle_describe_acls,
    30: security.handle_create_acls,
    31: security.handle_delete_acls,
    32: admin.handle_describe_configs,
    33: configs.handle_alter_configs,
    36: security.handle_sasl_authenticate,
    37: admin.handle_create_partitions,
    42: groups.handle_delete_groups,
    47: groups.handle_offset_delete,
    43: elect.handle_elect_leaders,
    44: configs.handle_incremental_alter_configs,
    48: quotas.handle_describe_client_quotas,
    49: quotas.handle_alter_client_quotas,
    50: security.handle_describe_user_scram_credentials,
    51: security.handle_alter_user_scram_credentials,
    45: reassign.handle_alter_partition_reassignments,
    46: reassign.handle_list_partition_reassignments,
    60: metadata.handle_describe_cluster,
    61: producers.handle_describe_producers,
    65: transactions.handle_describe_transactions,
    66: transactions.handle_list_transactions,
}

# Unexpected handler failures: the first tracebacks of each site are logged in full, then
# one line per minute per site with a count (a client repeating the request must not be
# able to fill the disk with tracebacks).
FAILURE_LOG = LogLimiter(burst=1, interval_s=60.0)


class RequestDispatcher:
    def __init__(
        self, context: RequestContext, request_metrics: RequestMetrics | None = None
    ) -> None:
        self.context = context
        self.request_metrics = request_metrics
        # request_percentage (KIP-124): the context's manager (an inactive one for a bare
        # context in unit tests); its ``active`` is the one check on the hot path.
        quotas = getattr(context, "quotas", None)
        self._request_quotas = (quotas if quotas is not None else QuotaManager()).request
        settings = getattr(context, "settings", None)  # None: a bare context in unit tests
        self.max_elements = (
            settings.request_max_elements if settings is not None else DEFAULT_MAX_ELEMENTS
        )

    def dispatch(self, frame: bytes) -> Any:
        """Decode one request frame and run its handler (see server.KafkaConnection)."""
        auth = current_session().authenticator
        if auth is not None and (not auth.authenticated or auth.session_expires_ms):
            early = self._sasl_gate(frame, auth)
            if early is not None:
                return early
        try:
            header, req = decode_request(frame, self.max_elements)
        except UnsupportedVersion as e:
            if e.header.api_key == 18:
                return api_versions_error_response(e.header)
            raise CloseConnection(str(e)) from None
        except InvalidRequest as e:
            raise CloseConnection(f"invalid request: {e}") from None
        handler = HANDLERS.get(header.api_key)
        if handler is None:  # pragma: no cover - SERVED and HANDLERS are kept in step
            raise CloseConnection(f"no handler for {api_name(header.api_key)}")
        try:
            if self._request_quotas.active and not request_quota.exempt(header, req):
                # KIP-124: the handler's time counts against request_percentage.
                start = time.perf_counter_ns()
                result = handler(self.context, header, req)
                result = self._request_quota(header, result, time.perf_counter_ns() - start)
            else:
                result = handler(self.context, header, req)
            if isinstance(result, InOrder):
                return self._finish_later(header, req, result.coro)
            if isinstance(result, Coroutine):
                if header.api_key == PRODUCE:
                    # The appends are done; only the acks wait (see network.Pipelined).
                    return Pipelined(self._finish_later(header, req, result))
                return self._finish_later(header, req, result)
            return _encoded(header, result)
        except CloseConnection:
            raise
        except Exception as e:  # noqa: BLE001 - the point: nothing escapes as a crash
            return self._failed(header, req, e)

    def _request_quota(self, header: RequestHeaderInfo, result: Any, nanos: int) -> Any:
        session = current_session()
        delay = self._request_quotas.record(
            session.principal_or_anonymous.name,
            header.client_id or "",
            nanos * 1e-7,
            time.monotonic() * 1000.0,
        )
        if not delay:
            return result
        session.throttle(delay)
        return request_quota.with_throttle(header, result, delay)

    def _sasl_gate(self, frame: bytes, auth: Any) -> Any:
        """What Kafka's SaslServerAuthenticator does before a request reaches KafkaApis;
        None lets the frame through to its handler."""
        if auth.raw_tokens and not auth.authenticated:
            # After SaslHandshake v0 (Kafka 0.10 clients): a bare token, answered bare.
            result = auth.authenticate(bytes(frame), 0, int(time.time() * 1000))
            if result.close:
                return CloseAfter(None, f"SASL authentication failed: {result.error_message}")
            security.authentication_progress(current_session(), result)
            return struct.pack(">i", len(result.token)) + result.token
        if len(frame) < 2:
            raise CloseConnection("frame too short for a request header")
        (api_key,) = _API_KEY.unpack_from(frame)
        if not auth.authenticated:
            if api_key not in _PRE_AUTH_APIS:
                raise CloseConnection(
                    f"Unexpected Kafka request of type {api_name(api_key)} during SASL handshake."
                )
            return None
        if api_key not in (SASL_HANDSHAKE, SASL_AUTHENTICATE) and auth.expired(
            int(time.time() * 1000)
        ):
            # KIP-368: the client did not re-authenticate within its session lifetime.
            raise CloseConnection(
                "SASL session expired (connections.max.reauth.ms); the "
                "client did not re-authenticate"
            )
        return None

    async def _finish_later(
        self, header: RequestHeaderInfo, req: Any, coro: Coroutine[Any, Any, Any]
    ) -> Any:
        try:
            return _encoded(header, await coro)
        except CloseConnection:
            raise
        except Exception as e:  # noqa: BLE001 - CancelledError is a BaseException
            return self._failed(header, req, e)

    def _failed(self, header: RequestHeaderInfo, req: Any, exc: Exception) -> Any:
        """Answer a request whose handler failed with an error code for everything it
        names; close the connection only if even that cannot be built."""
        if isinstance(exc, KafkaError):
            code, message = exc.code, exc.message or None
            logger.info("%s v%d failed: %s", api_name(header.api_key), header.api_version, exc)
        else:
            code, message = ErrorCode.unknown_server_error, "unexpected error; see broker log"
            tb = traceback.extract_tb(exc.__traceback__)
            site = (tb[-1].filename, tb[-1].lineno) if tb else None
            FAILURE_LOG.log(
                logger,
                logging.ERROR,
                (header.api_key, type(exc).__name__, site),
                "%s v%d from client %r failed; answering UNKNOWN_SERVER_ERROR",
                api_name(header.api_key),
                header.api_version,
                header.client_id,
                exc_info=exc,
            )
        try:
            return _encoded(header, error_response(header, req, code, message))
        except Exception as e:
            logger.exception(
                "cannot build the error response of %s v%d",
                api_name(header.api_key),
                header.api_version,
            )
            raise CloseConnection(f"handler failed and no error response: {e!r}") from e

    # ------------------------------------------------------------------ request metrics
    def dispatch_metered(self, frame: bytes) -> Any:
        """``dispatch`` plus Kafka's request metrics (RequestsPerSec, TotalTimeMs,
        RequestQueueTimeMs, LocalTimeMs, RemoteTimeMs). The broker hands this to the
        listener instead of ``dispatch`` when it has a ``metrics.listener``, so a broker
        without metrics pays nothing. A request that closes the connection is not
        counted (Kafka counts only answered requests too)."""
        start = time.perf_counter()
        metrics = self.request_metrics
        assert metrics is not None
        result = self.dispatch(frame)
        # The header's first four bytes: api key and version (already validated by
        # ``dispatch``, which raised otherwise).
        api_key = (frame[0] << 8) | frame[1]
        version = (frame[2] << 8) | frame[3]
        arrived = FRAME_ARRIVED_AT.get() or start
        local_end = time.perf_counter()
        if isinstance(result, Pipelined):
            result.coro = self._meter_wait(
                metrics, api_key, version, arrived, start, local_end, result.coro
            )
            return result
        if isinstance(result, Coroutine):
            return self._meter_wait(metrics, api_key, version, arrived, start, local_end, result)
        metrics.record(
            api_key,
            version,
            (start - arrived) * 1e3,
            (local_end - start) * 1e3,
            0.0,
            (local_end - arrived) * 1e3,
        )
        return result

    async def _meter_wait(
        self,
        metrics: RequestMetrics,
        api_key: int,
        version: int,
        arrived: float,
        start: float,
        local_end: float,
        coro: Coroutine[Any, Any, Any],
    ) -> Any:
        result = await coro  # the purgatory wait, then the response's encoding
        end = time.perf_counter()
        metrics.record(
            api_key,
            version,
            (start - arrived) * 1e3,
            (local_end - start) * 1e3,
            (end - local_end) * 1e3,
            (end - arrived) * 1e3,
        )
        return result


def _encoded(header: RequestHeaderInfo, result: Any) -> Any:
    if result is None or isinstance(result, (bytes, list)):
        return result
    if isinstance(result, CloseAfter):
        if result.response is not None and not isinstance(result.response, bytes):
            result.response = encode_response(header, result.response)
        return result
    return encode_response(header, result)
