"""SaslHandshake, SaslAuthenticate, DescribeAcls, CreateAcls, DeleteAcls without SASL or ACLs.

Odradek has neither SASL listeners nor an authorizer yet (TLS/SASL are issue 14). A Kafka
broker in the same situation answers these requests with error codes, and so does Odradek
(they used to close the connection):

* SaslHandshake / SaslAuthenticate reaching the request handlers means the listener does
  not authenticate (PLAINTEXT): Kafka's ``KafkaApis.handleSaslHandshakeRequest`` answers
  ILLEGAL_SASL_STATE with no mechanisms, ``handleSaslAuthenticateRequest``
  ILLEGAL_SASL_STATE "SaslAuthenticate request received after successful authentication".
* With no authorizer configured, Kafka's ``AclApis`` answers DescribeAcls with
  SECURITY_DISABLED "No Authorizer is configured on the broker", and every creation of a
  CreateAcls / every filter of a DeleteAcls with SECURITY_DISABLED "No Authorizer is
  configured.".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from odradek.errors import ErrorCode
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import part, response

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

logger = logging.getLogger(__name__)

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
NO_AUTHORIZER = "No Authorizer is configured."


def handle_sasl_handshake(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    return response(SASL_HANDSHAKE, header.api_version, error_code=ErrorCode.illegal_sasl_state,
                    mechanisms=())


def handle_sasl_authenticate(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    return response(SASL_AUTHENTICATE, header.api_version,
                    error_code=ErrorCode.illegal_sasl_state,
                    error_message="SaslAuthenticate request received after successful "
                                  "authentication",
                    auth_bytes=b"", session_lifetime=0)


def handle_describe_acls(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    return response(DESCRIBE_ACLS, header.api_version, throttle_time=0,
                    error_code=ErrorCode.security_disabled,
                    error_message="No Authorizer is configured on the broker", resources=())


def handle_create_acls(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    return response(CREATE_ACLS, v, throttle_time=0, results=tuple(
        part(CREATE_ACLS, v, "AclCreationResult", error_code=ErrorCode.security_disabled,
             error_message=NO_AUTHORIZER) for _ in req.creations))


def handle_delete_acls(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    return response(DELETE_ACLS, v, throttle_time=0, filter_results=tuple(
        part(DELETE_ACLS, v, "DeleteAclsFilterResult", error_code=ErrorCode.security_disabled,
             error_message=NO_AUTHORIZER, matching_acls=()) for _ in req.filters))
