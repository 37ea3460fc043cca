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
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Coroutine
from typing import Any

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.codec import (
    InvalidRequest, RequestHeaderInfo, UnsupportedVersion, api_versions_error_response,
    decode_request, encode_response,
)
from odradek.protocol.validator import DEFAULT_MAX_ELEMENTS
from odradek.protocol.versions import api_name
from odradek.server.context import RequestContext
from odradek.server.error_responses import error_response
from odradek.server.handlers import (
    admin, configs, data, elect, groups, metadata, producers, reassign, records, security,
)
from odradek.log_limiter import LogLimiter
from odradek.server.network import CloseConnection, Pipelined

logger = logging.getLogger(__name__)

__all__ = ["HANDLERS", "RequestDispatcher"]

Handler = Callable[[RequestContext, RequestHeaderInfo, Any], Any]

PRODUCE = 0

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
    29: security.handle_describe_acls,
    30: security.handle_create_acls,
    31: security.handle_delete_acls,
    32: admin.handle_describe_configs,
    33: configs.handle_alter_configs,
    36: security.handle_sasl_authenticate,
    37: admin.handle_create_partitions,
    42: groups.handle_delete_groups,
    43: elect.handle_elect_leaders,
    44: configs.handle_incremental_alter_configs,
    45: reassign.handle_alter_partition_reassignments,
    46: reassign.handle_list_partition_reassignments,
    60: metadata.handle_describe_cluster,
}

# Unexpected handler failures: the first tracebacks of each site are logged in full, then
# one line per minute per site with a count (a client repeating the request must not be
# able to fill the disk with tracebacks).
FAILURE_LOG = LogLimiter(burst=1, interval_s=60.0)


class RequestDispatcher:
    def __init__(self, context: RequestContext) -> None:
        self.context = context
        try:
            self.max_elements = int(context.config.get("odradek.request.max.elements"))
        except (AttributeError, KeyError):  # a bare config object in unit tests
            self.max_elements = DEFAULT_MAX_ELEMENTS

    def dispatch(self, frame: bytes) -> Any:
        """Decode one request frame and run its handler (see server.KafkaConnection)."""
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
            result = handler(self.context, header, req)
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

    async def _finish_later(self, header: RequestHeaderInfo, req: Any,
                            coro: Coroutine[Any, Any, Any]) -> Any:
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
            logger.info("%s v%d failed: %s", api_name(header.api_key), header.api_version,
                        exc)
        else:
            code, message = ErrorCode.unknown_server_error, "unexpected error; see broker log"
            tb = traceback.extract_tb(exc.__traceback__)
            site = (tb[-1].filename, tb[-1].lineno) if tb else None
            FAILURE_LOG.log(logger, logging.ERROR,
                            (header.api_key, type(exc).__name__, site),
                            "%s v%d from client %r failed; answering UNKNOWN_SERVER_ERROR",
                            api_name(header.api_key), header.api_version, header.client_id,
                            exc_info=exc)
        try:
            return _encoded(header, error_response(header, req, code, message))
        except Exception as e:  # noqa: BLE001
            logger.exception("cannot build the error response of %s v%d",
                             api_name(header.api_key), header.api_version)
            raise CloseConnection(f"handler failed and no error response: {e!r}") from e


def _encoded(header: RequestHeaderInfo, result: Any) -> Any:
    if result is None or isinstance(result, (bytes, list)):
        return result
    return encode_response(header, result)
