"""Who may use the registry of a secured cluster: HTTP basic authentication against the
cluster's own SCRAM users, and Kafka-style ACLs on subjects (issue 27 item 1).

Authentication (Confluent's ``authentication.method=BASIC``): the password of a request is
checked against the SCRAM credential the cluster stores for that user in ZooKeeper
(``/config/users/<name>``, read and watched by the broker's own ``CredentialCache``). The
registry never sees nor stores a password of its own: it salts the given password with
the credential's salt and iteration count (``scramp``, through
``security.scram.credential_from_password``) and compares the resulting StoredKey with the
stored one, in constant time. SCRAM-SHA-512 is tried first, then SCRAM-SHA-256.

A verified login is remembered as a keyed hash of user and password (never the password)
together with the StoredKey it matched, so the next request of that client costs no key
derivation, and a changed or deleted credential takes effect on the next request (the
cache entry no longer matches the credential). A refused login is answered after
``FAILED_LOGIN_DELAY_S``, which bounds password guessing through the registry.

Authorization: the ACLs are the cluster's, in its ZooKeeper ACL store, under two resource
types of their own (Redpanda's names): ``Subject`` (literal or prefixed subject names)
and ``Registry`` (the global configuration and mode; its one resource is named
``REGISTRY_RESOURCE``, and a ``*`` literal matches it too). The decision is the broker's
(``AclCache``: super users, DENY before ALLOW, Kafka's implied operations), held up to
date by the broker's ``Authorizer`` following the ACL change notifications. The mapping
from REST calls to (operation, resource) is in ``app.py`` and docs/schema-registry.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets

from kazoo.client import KazooClient
from scramp import ScramException

from odradek.schema_registry.errors import RegistryError
from odradek.security.acl import (
    REGISTRY_RESOURCE_TYPES,
    AclOperation,
    ResourceType,
    pascal_name,
)
from odradek.security.http_basic import basic_credentials
from odradek.security.principal import KafkaPrincipal
from odradek.security.scram import MECHANISMS, credential_from_password
from odradek.server.authorizer import Authorizer, CredentialCache

__all__ = [
    "DEFAULT_REALM",
    "FAILED_LOGIN_DELAY_S",
    "PRINCIPAL_KEY",
    "REGISTRY_RESOURCE",
    "RegistrySecurity",
    "basic_credentials",
    "denied",
    "password_matches",
    "unauthorized",
]

logger = logging.getLogger(__name__)

DEFAULT_REALM = "SchemaRegistry"
REGISTRY_RESOURCE = "schema-registry"
PRINCIPAL_KEY = "odradek.schema_registry.principal"  # the request's KafkaPrincipal
FAILED_LOGIN_DELAY_S = 1.0
MAX_CONCURRENT_CHECKS = 4
MAX_CACHED_LOGINS = 1024
# SCRAM-SHA-512 first: it is what the cluster's own users (and Kafka's tools) set first.
_MECHANISM_ORDER = ("SCRAM-SHA-512", "SCRAM-SHA-256")


def password_matches(
    mechanism: str, salt: bytes, iterations: int, stored_key: bytes, password: str
) -> bool:
    """Does ``password`` derive ``stored_key`` (RFC 5802) with this salt and count?
    Counts outside Kafka's bounds for the mechanism are refused, not computed: a stored
    credential must not make one request cost arbitrary CPU."""
    _, _, lo, hi = MECHANISMS[mechanism]
    if not lo <= iterations <= hi:
        return False
    try:
        derived = credential_from_password(mechanism, password, iterations, salt)
    except ScramException:  # scramp's own bounds (e.g. a salt under 12 bytes)
        return False
    return hmac.compare_digest(derived.stored_key, stored_key)


def unauthorized(realm: str) -> RegistryError:
    """Confluent's answer to a request without valid credentials."""
    return RegistryError(
        401, 401, "Unauthorized", headers={"WWW-Authenticate": f'Basic realm="{realm}"'}
    )


def denied(operation: AclOperation, resource_type: ResourceType, name: str) -> RegistryError:
    """Confluent's 40301, with its message (``User is denied operation Write on Subject:
    orders-value``)."""
    what = "Subject: " + name if resource_type == ResourceType.SUBJECT else "Registry"
    return RegistryError(403, 40301, f"User is denied operation {pascal_name(operation)} on {what}")


class RegistrySecurity:
    """The login check and the ACL decision of one registry instance. ``start`` (blocking:
    run it in a thread) loads credentials and ACLs from ZooKeeper and watches them; both
    caches are then only touched on ``loop``."""

    def __init__(
        self,
        zk: KazooClient,
        loop: asyncio.AbstractEventLoop,
        *,
        realm: str = DEFAULT_REALM,
        super_users: list[str] | None = None,
        allow_if_no_acl: bool = False,
    ) -> None:
        self.realm = realm
        self.authorizer = Authorizer(
            zk,
            loop,
            super_users=list(super_users or ()),
            allow_if_no_acl=allow_if_no_acl,
            resource_types=REGISTRY_RESOURCE_TYPES,
        )
        self.credentials = CredentialCache(zk, loop)
        self._key = secrets.token_bytes(32)  # per process: cache keys mean nothing outside
        self._verified: dict[bytes, bytes] = {}  # keyed hash of user+password -> StoredKey
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_CHECKS)

    def start(self) -> None:
        self.credentials.start()
        self.authorizer.start()

    def _stored(self, user: str) -> tuple[str, bytes, int, bytes] | None:
        for mech in _MECHANISM_ORDER:
            cred = self.credentials.lookup(mech, user)
            if cred is not None:
                return mech, cred.salt, cred.iterations, cred.stored_key
        return None

    async def authenticate(self, header: str) -> KafkaPrincipal:
        """The principal of a request's ``Authorization`` header; 401 otherwise."""
        creds = basic_credentials(header)
        if creds is None:
            raise unauthorized(self.realm)
        user, password = creds
        stored = self._stored(user)
        key = hmac.new(self._key, f"{user}\0{password}".encode(), hashlib.sha256).digest()
        if stored is not None and self._verified.get(key) == stored[3]:
            return KafkaPrincipal("User", user)
        if stored is not None:
            async with self._slots:
                ok = await asyncio.to_thread(password_matches, *stored, password)
            if ok:
                if len(self._verified) >= MAX_CACHED_LOGINS:
                    self._verified.clear()
                self._verified[key] = stored[3]
                return KafkaPrincipal("User", user)
        self._verified.pop(key, None)
        logger.warning("schema registry login refused for user %r", user)
        await asyncio.sleep(FAILED_LOGIN_DELAY_S)
        raise unauthorized(self.realm)

    def allowed(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        return self.authorizer.authorize(principal, host, operation, resource_type, name)
