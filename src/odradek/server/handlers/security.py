"""SASL (17, 36), ACLs (29, 30, 31) and SCRAM credentials (50, 51).

SaslHandshake / SaslAuthenticate drive the connection's ``SaslServerAuthenticator``
(``odradek.security.sasl_server``); the dispatcher lets only these and ApiVersions
through before authentication. A failed step is answered, then the connection closes
(``CloseAfter``). On a listener without SASL they get Kafka's ILLEGAL_SASL_STATE.

The ACL APIs need ``authorizer.class.name`` (otherwise SECURITY_DISABLED, as Kafka
answers without an authorizer): DescribeAcls needs DESCRIBE on the cluster, Create and
DeleteAcls ALTER on the cluster. Creations are validated like Kafka's (no ANY/UNKNOWN
fields, Cluster resources are named ``kafka-cluster``, the operation must apply to the
resource type) and written to ZooKeeper one resource pattern at a time; deletions match
the filters against the authorizer's cache, as Kafka's ``AclAuthorizer.deleteAcls``.

DescribeUserScramCredentials (DESCRIBE on the cluster) and AlterUserScramCredentials
(ALTER on the cluster) read and write ``/config/users/<name>`` (KIP-554): the client
sends a salt and a salted password, never the password.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from odradek.errors import ErrorCode
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import part, response
from odradek.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.security.principal import parse_principal
from odradek.security.sasl_server import AuthResult
from odradek.security.scram import MECHANISMS, credential_from_salted_password, mechanism_name
from odradek.server.network import CloseAfter
from odradek.server.session import Session
from odradek.zk import security_store as store

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

logger = logging.getLogger(__name__)

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51
NO_AUTHORIZER = "No Authorizer is configured."


# =============================================================================== SASL
def authentication_progress(session: Session, result: AuthResult) -> None:
    """After a successful SaslAuthenticate step: publish the principal once complete."""
    auth = session.authenticator
    if auth is not None and auth.authenticated and session.principal != auth.principal:
        first = session.principal is None
        session.principal = auth.principal
        if first:
            for hook in session.on_authenticated:
                hook()
            logger.debug(
                "%s authenticated as %s on %s",
                session.client_host,
                session.principal,
                session.listener,
            )


def handle_sasl_handshake(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    auth = ctx.session.authenticator
    if auth is None:
        return response(SASL_HANDSHAKE, v, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    code, mechanisms = auth.handshake(str(req.mechanism), v)
    answer = response(SASL_HANDSHAKE, v, error_code=code, mechanisms=mechanisms)
    if code != ErrorCode.none:
        return CloseAfter(
            answer,
            f"SASL handshake failed ({code.name}): mechanism "
            f"{str(req.mechanism)[:40]!r}, enabled {mechanisms}",
        )
    return answer


def handle_sasl_authenticate(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    session = ctx.session
    auth = session.authenticator
    if auth is None:
        return response(
            SASL_AUTHENTICATE,
            v,
            error_code=ErrorCode.illegal_sasl_state,
            error_message="SaslAuthenticate request received after successful authentication",
            auth_bytes=b"",
            session_lifetime=0,
        )
    result = auth.authenticate(bytes(req.auth_bytes), v, int(time.time() * 1000))
    answer = response(
        SASL_AUTHENTICATE,
        v,
        error_code=result.error_code,
        error_message=result.error_message,
        auth_bytes=result.token,
        session_lifetime=result.session_lifetime_ms,
    )
    if result.close:
        # Never the token: it may hold the password (PLAIN) or a proof (SCRAM).
        return CloseAfter(
            answer,
            f"Failed authentication with {session.client_host} on "
            f"{session.listener} ({result.detail or result.error_message})",
            ctx.settings.connection_failed_authentication_delay_ms / 1000,
        )
    authentication_progress(session, result)
    return answer


# =============================================================================== ACLs
def _acl_filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType(int(f.resource_type_filter)),
        f.resource_name_filter,
        PatternType(int(getattr(f, "pattern_type_filter", PatternType.LITERAL))),
        f.principal_filter,
        f.host_filter,
        AclOperation(int(f.operation)),
        AclPermissionType(int(f.permission_type)),
    )


def _enum_or_unknown(cls: Any, value: int) -> Any:
    try:
        return cls(value)
    except ValueError:
        return cls(0)


def handle_describe_acls(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    if ctx.authorizer is None:
        return response(
            DESCRIBE_ACLS,
            v,
            throttle_time=0,
            error_code=ErrorCode.security_disabled,
            error_message="No Authorizer is configured on the broker",
            resources=(),
        )
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return response(
            DESCRIBE_ACLS,
            v,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message="Cluster authorization failed.",
            resources=(),
        )
    try:
        flt = AclBindingFilter(
            _enum_or_unknown(ResourceType, int(req.resource_type_filter)),
            req.resource_name_filter,
            _enum_or_unknown(
                PatternType, int(getattr(req, "pattern_type_filter", PatternType.LITERAL))
            ),
            req.principal_filter,
            req.host_filter,
            _enum_or_unknown(AclOperation, int(req.operation)),
            _enum_or_unknown(AclPermissionType, int(req.permission_type)),
        )
    except ValueError as e:
        return response(
            DESCRIBE_ACLS,
            v,
            error_code=ErrorCode.invalid_request,
            error_message=str(e),
            resources=(),
        )
    if (
        ResourceType.UNKNOWN in (flt.resource_type,)
        or flt.pattern_type == PatternType.UNKNOWN
        or flt.operation == AclOperation.UNKNOWN
        or flt.permission_type == AclPermissionType.UNKNOWN
    ):
        return response(
            DESCRIBE_ACLS,
            v,
            error_code=ErrorCode.invalid_request,
            error_message="The filter contains UNKNOWN elements",
            resources=(),
        )
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)
    for b in ctx.authorizer.cache.bindings(flt):
        grouped[b.pattern].append(b.entry)
    resources = tuple(
        part(
            DESCRIBE_ACLS,
            v,
            "DescribeAclsResource",
            resource_type=int(p.resource_type),
            resource_name=p.name,
            pattern_type=int(p.pattern_type),
            acls=tuple(
                part(
                    DESCRIBE_ACLS,
                    v,
                    "AclDescription",
                    principal=e.principal,
                    host=e.host,
                    operation=int(e.operation),
                    permission_type=int(e.permission_type),
                )
                for e in sorted(entries, key=str)
            ),
        )
        for p, entries in sorted(grouped.items(), key=lambda kv: str(kv[0]))
    )
    return response(
        DESCRIBE_ACLS, v, error_code=ErrorCode.none, error_message=None, resources=resources
    )


def _creation_binding(c: Any) -> AclBinding:
    """Kafka's validation of one AclCreation; ValueError with Kafka's message."""
    rtype = _enum_or_unknown(ResourceType, int(c.resource_type))
    ptype = _enum_or_unknown(
        PatternType, int(getattr(c, "resource_pattern_type", PatternType.LITERAL))
    )
    flt = AclBindingFilter(
        rtype,
        c.resource_name,
        ptype,
        c.principal,
        c.host,
        _enum_or_unknown(AclOperation, int(c.operation)),
        _enum_or_unknown(AclPermissionType, int(c.permission_type)),
    )
    bad = flt.find_indefinite_field()
    if bad:
        raise ValueError(f"Invalid ACL creation: {bad}")
    if rtype == ResourceType.CLUSTER and c.resource_name != CLUSTER_NAME:
        raise ValueError("The only valid name for the CLUSTER resource is " + CLUSTER_NAME)
    if not c.resource_name:
        raise ValueError("Invalid empty resource name")
    if flt.operation != AclOperation.ALL and flt.operation not in SUPPORTED_OPERATIONS.get(
        rtype, frozenset()
    ):
        raise ValueError(
            f"ACL operation {flt.operation.name} is not valid for resource type {rtype.name}"
        )
    parse_principal(c.principal)
    return AclBinding(
        ResourcePattern(rtype, c.resource_name, ptype),
        AccessControlEntry(c.principal, c.host, flt.operation, flt.permission_type),
    )


def handle_create_acls(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    if ctx.authorizer is None:
        return response(
            CREATE_ACLS,
            v,
            throttle_time=0,
            results=tuple(
                part(
                    CREATE_ACLS,
                    v,
                    "AclCreationResult",
                    error_code=ErrorCode.security_disabled,
                    error_message=NO_AUTHORIZER,
                )
                for _ in req.creations
            ),
        )
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return response(
            CREATE_ACLS,
            v,
            results=tuple(
                part(
                    CREATE_ACLS,
                    v,
                    "AclCreationResult",
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.",
                )
                for _ in req.creations
            ),
        )
    return _create_acls(ctx, v, list(req.creations))


async def _create_acls(ctx: RequestContext, v: int, creations: list[Any]) -> Any:
    results: list[tuple[ErrorCode, str | None]] = []
    by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = defaultdict(set)
    slots: list[ResourcePattern | None] = []
    for c in creations:
        try:
            b = _creation_binding(c)
            store.acl_path(b.pattern)  # a name ZooKeeper cannot hold is refused here
        except ValueError as e:
            results.append((ErrorCode.invalid_request, str(e)))
            slots.append(None)
            continue
        by_pattern[b.pattern].add(b.entry)
        results.append((ErrorCode.none, None))
        slots.append(b.pattern)
    assert ctx.authorizer is not None
    failed: dict[ResourcePattern, str] = {}
    for pattern, entries in by_pattern.items():
        try:
            new = await asyncio.to_thread(
                ctx.admin.update_acls, pattern, frozenset(entries), frozenset()
            )
        except Exception as e:  # noqa: BLE001 - reported per creation
            logger.warning("adding ACLs for %s failed: %r", pattern, e)
            failed[pattern] = f"Failed to update ACLs for {pattern}: {e}"
            ctx.authorizer.reread(pattern)  # the write may have happened
            continue
        # Kafka's authorizer updates its cache as it writes: the next request to this
        # broker sees the change, without waiting for ZooKeeper's notification.
        ctx.authorizer.written(pattern, new)
        logger.info(
            "ACLs added for %s by %s: %s",
            pattern,
            ctx.session.principal,
            ", ".join(sorted(map(str, entries))),
        )
    out = []
    for (code, msg), slot in zip(results, slots):
        if slot is not None and slot in failed:
            code, msg = ErrorCode.unknown_server_error, failed[slot]
        out.append(part(CREATE_ACLS, v, "AclCreationResult", error_code=code, error_message=msg))
    return response(CREATE_ACLS, v, results=tuple(out))


def handle_delete_acls(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    if ctx.authorizer is None:
        return response(
            DELETE_ACLS,
            v,
            throttle_time=0,
            filter_results=tuple(
                part(
                    DELETE_ACLS,
                    v,
                    "DeleteAclsFilterResult",
                    error_code=ErrorCode.security_disabled,
                    error_message=NO_AUTHORIZER,
                    matching_acls=(),
                )
                for _ in req.filters
            ),
        )
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return response(
            DELETE_ACLS,
            v,
            filter_results=tuple(
                part(
                    DELETE_ACLS,
                    v,
                    "DeleteAclsFilterResult",
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.",
                    matching_acls=(),
                )
                for _ in req.filters
            ),
        )
    return _delete_acls(ctx, v, list(req.filters))


async def _delete_acls(ctx: RequestContext, v: int, filters: list[Any]) -> Any:
    assert ctx.authorizer is not None
    matched: list[list[AclBinding] | str] = []
    to_remove: dict[ResourcePattern, set[AccessControlEntry]] = defaultdict(set)
    for f in filters:
        try:
            flt = _acl_filter(f)
        except ValueError as e:
            matched.append(f"Invalid filter: {e}")
            continue
        found = list(ctx.authorizer.cache.bindings(flt))
        matched.append(found)
        for b in found:
            to_remove[b.pattern].add(b.entry)
    failed: dict[ResourcePattern, str] = {}
    for pattern, entries in to_remove.items():
        try:
            new = await asyncio.to_thread(
                ctx.admin.update_acls, pattern, frozenset(), frozenset(entries)
            )
        except Exception as e:  # noqa: BLE001
            failed[pattern] = f"Failed to delete ACLs of {pattern}: {e}"
            ctx.authorizer.reread(pattern)
            continue
        ctx.authorizer.written(pattern, new)  # as for CreateAcls
        logger.info(
            "ACLs removed from %s by %s: %s",
            pattern,
            ctx.session.principal,
            ", ".join(sorted(map(str, entries))),
        )
    results = []
    for m in matched:
        if isinstance(m, str):
            results.append(
                part(
                    DELETE_ACLS,
                    v,
                    "DeleteAclsFilterResult",
                    error_code=ErrorCode.invalid_request,
                    error_message=m,
                    matching_acls=(),
                )
            )
            continue
        acls = tuple(
            part(
                DELETE_ACLS,
                v,
                "DeleteAclsMatchingAcl",
                error_code=ErrorCode.unknown_server_error
                if b.pattern in failed
                else ErrorCode.none,
                error_message=failed.get(b.pattern),
                resource_type=int(b.pattern.resource_type),
                resource_name=b.pattern.name,
                pattern_type=int(b.pattern.pattern_type),
                principal=b.entry.principal,
                host=b.entry.host,
                operation=int(b.entry.operation),
                permission_type=int(b.entry.permission_type),
            )
            for b in m
        )
        results.append(
            part(
                DELETE_ACLS,
                v,
                "DeleteAclsFilterResult",
                error_code=ErrorCode.none,
                error_message=None,
                matching_acls=acls,
            )
        )
    return response(DELETE_ACLS, v, filter_results=tuple(results))


# =============================================================================== SCRAM users
def handle_describe_user_scram_credentials(
    ctx: RequestContext, header: RequestHeaderInfo, req: Any
) -> Any:
    v = header.api_version
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return response(
            DESCRIBE_SCRAM,
            v,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message="Cluster authorization failed.",
            results=(),
        )
    names = None if req.users is None else [u.name for u in req.users]
    return _describe_users(ctx, v, names)


async def _describe_users(ctx: RequestContext, v: int, names: list[str] | None) -> Any:
    configs = await asyncio.to_thread(ctx.admin.read_all_user_configs)
    counts = Counter(names or ())
    results = []
    for user in sorted(configs) if not names else list(dict.fromkeys(names)):
        mechs = {m: c for m, c in configs.get(user, {}).items() if m in MECHANISMS}
        if counts[user] > 1:
            code, msg = (
                ErrorCode.duplicate_resource,
                f"Cannot describe SCRAM credentials for "
                f"the same user twice in a single "
                f"request: {user}",
            )
        elif not mechs:
            if not names:
                continue  # a user with other configs only (quotas) is not listed
            code, msg = (
                ErrorCode.resource_not_found,
                f"Attempt to describe a user credential that does not exist: {user}",
            )
        else:
            code, msg = ErrorCode.none, None
        infos = []
        for m, text in sorted(mechs.items()):
            try:
                iterations = int(text.rsplit("iterations=", 1)[1])
            except (IndexError, ValueError):
                continue
            infos.append(
                part(
                    DESCRIBE_SCRAM,
                    v,
                    "CredentialInfo",
                    mechanism=MECHANISMS[m][0],
                    iterations=iterations,
                )
            )
        results.append(
            part(
                DESCRIBE_SCRAM,
                v,
                "DescribeUserScramCredentialsResult",
                user=user,
                error_code=code,
                error_message=msg,
                credential_infos=tuple(infos) if code == ErrorCode.none else (),
            )
        )
    return response(
        DESCRIBE_SCRAM, v, error_code=ErrorCode.none, error_message=None, results=tuple(results)
    )


def handle_alter_user_scram_credentials(
    ctx: RequestContext, header: RequestHeaderInfo, req: Any
) -> Any:
    v = header.api_version
    users = list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return response(
            ALTER_SCRAM,
            v,
            results=tuple(
                part(
                    ALTER_SCRAM,
                    v,
                    "AlterUserScramCredentialsResult",
                    user=u,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.",
                )
                for u in users
            ),
        )
    return _alter_users(ctx, v, list(req.deletions), list(req.upsertions), users)


def _upsertion_error(u: Any) -> tuple[ErrorCode, str] | None:
    mech = mechanism_name(int(u.mechanism))
    if mech is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    lo, hi = MECHANISMS[mech][2], MECHANISMS[mech][3]
    if int(u.iterations) < lo:
        return ErrorCode.unacceptable_credential, f"Too few iterations: {int(u.iterations)}"
    if int(u.iterations) > hi:
        return ErrorCode.unacceptable_credential, f"Too many iterations: {int(u.iterations)}"
    if not u.salt or not u.salted_password:
        return ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"
    return None


async def _alter_users(
    ctx: RequestContext, v: int, deletions: list[Any], upsertions: list[Any], users: list[str]
) -> Any:
    errors: dict[str, tuple[ErrorCode, str]] = {}
    seen: Counter[tuple[str, int]] = Counter(
        [(d.name, int(d.mechanism)) for d in deletions]
        + [(u.name, int(u.mechanism)) for u in upsertions]
    )
    for (name, _), n in seen.items():
        if n > 1:
            errors[name] = (
                ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request",
            )
    for name in users:
        if not name and name not in errors:
            errors[name] = (ErrorCode.unacceptable_credential, "Username must not be empty")
    for d in deletions:
        if d.name not in errors and mechanism_name(int(d.mechanism)) is None:
            errors[d.name] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    for u in upsertions:
        bad = _upsertion_error(u)
        if u.name not in errors and bad is not None:
            errors[u.name] = bad
    for name in users:
        if name in errors:
            continue
        dels = {mechanism_name(int(d.mechanism)) for d in deletions if d.name == name}
        sets = {}
        for u in upsertions:
            if u.name == name:
                mech = mechanism_name(int(u.mechanism))
                assert mech is not None
                sets[mech] = credential_from_salted_password(
                    mech, bytes(u.salt), bytes(u.salted_password), int(u.iterations)
                ).to_config()
        try:
            if dels:
                current = await asyncio.to_thread(ctx.admin.read_user_config, name)
                missing = [m for m in dels if m not in current]
                if missing:
                    errors[name] = (
                        ErrorCode.resource_not_found,
                        f"Attempt to delete a user credential that does not exist: {missing[0]}",
                    )
                    continue
            await asyncio.to_thread(
                ctx.admin.update_user_config, name, sets, {m for m in dels if m is not None}
            )
            logger.info(
                "SCRAM credentials of user %s changed by %s: set %s, deleted %s",
                name,
                ctx.session.principal,
                sorted(sets),
                sorted(m for m in dels if m),
            )
        except Exception as e:  # noqa: BLE001 - reported for this user
            errors[name] = (ErrorCode.unknown_server_error, f"{type(e).__name__}: {e}")
    return response(
        ALTER_SCRAM,
        v,
        results=tuple(
            part(
                ALTER_SCRAM,
                v,
                "AlterUserScramCredentialsResult",
                user=u,
                error_code=errors.get(u, (ErrorCode.none, None))[0],
                error_message=errors.get(u, (ErrorCode.none, None))[1],
            )
            for u in users
        ),
    )
