"""Logins to the console of a secured cluster (issue 28 item 5).

When the console's own client settings use SASL (``--command-config`` of a secured
cluster, usually its super user), every page asks for a login: HTTP basic
authentication with one of the cluster's SASL users. The console checks a login the only
way the cluster itself knows: it authenticates to a broker as that user, with the
console's own mechanism (SCRAM or PLAIN) and TLS settings, through the project's client
(``KafkaConnection``). The same connection then asks, as that user, for the topics
(Metadata) and consumer groups (ListGroups) the user may describe.

Whoever logged in sees only those topics and groups on every page (the collector's
snapshot, made with the console's own credentials, is filtered per viewer), and the
message browser reads as that user: its consumer uses the user's credentials, so the
broker's ACLs decide what the user may read.

A successful check is kept ``LOGIN_TTL_S`` (keyed by a keyed hash of user and password,
never the password), so a page and its event stream do not cost a SASL exchange each;
ACL changes reach the console's view of a user within that time. Checks run at most
``MAX_CONCURRENT_CHECKS`` at a time, and a failed login is answered after
``FAILED_LOGIN_DELAY_S``, which bounds guessing through the console.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from odradek.client.connection import ConnectionLost, KafkaConnection, parse_address
from odradek.console.snapshot import Snapshot
from odradek.protocol.client_codec import request_entity
from odradek.security.client_security import ClientSecurity
from odradek.security.http_basic import basic_credentials
from odradek.security.sasl_client import SaslClientError

logger = logging.getLogger(__name__)

__all__ = ["ClusterUnreachable", "ConsoleLogin", "LoginRefused", "Viewer", "check_login"]

LOGIN_TTL_S = 30.0
MAX_CONCURRENT_CHECKS = 4
FAILED_LOGIN_DELAY_S = 1.0
MAX_CACHED_LOGINS = 1024
CHECK_TIMEOUT_S = 15.0
REALM = "Odradek console"
VIEWER_KEY = "odradek.console.viewer"  # the request's Viewer
# Served without a login: the stylesheet and script (no data in them).
PUBLIC_PREFIXES = ("/static/",)


class LoginRefused(Exception):
    """The cluster refused the credentials."""


class ClusterUnreachable(Exception):
    """No broker could be asked."""


@dataclass(frozen=True)
class Viewer:
    """Who is looking, and what the cluster lets them describe."""

    user: str
    security: ClientSecurity
    topics: frozenset[str]
    groups: frozenset[str]

    def librdkafka_config(self) -> dict[str, str]:
        return self.security.librdkafka_config()

    def filter(self, snap: Snapshot) -> Snapshot:
        """``snap`` with only the topics and groups this user may describe."""
        return dataclasses.replace(
            snap,
            topics=tuple(t for t in snap.topics if t.name in self.topics),
            groups=tuple(g for g in snap.groups if g.group_id in self.groups),
        )


def check_login(
    bootstrap: str,
    security: ClientSecurity,
    user: str,
    password: str,
    timeout_s: float = CHECK_TIMEOUT_S,
) -> Viewer:
    """Blocking: authenticate to a broker of ``bootstrap`` as ``user`` and list what the
    user may describe. LoginRefused when a broker refuses the credentials,
    ClusterUnreachable when no broker answers."""
    sec = dataclasses.replace(security, sasl_username=user, sasl_password=password)
    last: Exception | None = None
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        host, port = parse_address(address)
        try:
            conn = KafkaConnection(
                host, port, client_id="odradek-console-login", timeout_s=timeout_s, security=sec
            )
        except ConnectionLost as e:
            if isinstance(e.__cause__, SaslClientError):
                raise LoginRefused(str(e.__cause__)) from None
            last = e
            continue
        try:
            md = conn.request(
                request_entity(
                    3,
                    12,
                    topics=None,
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            )
            listed = conn.request(request_entity(16, 4, states_filter=()))
        except (ConnectionLost, TimeoutError) as e:
            last = e
            continue
        finally:
            conn.close()
        return Viewer(
            user,
            sec,
            frozenset(str(t.name) for t in md.topics if not int(t.error_code)),
            frozenset(str(g.group_id) for g in listed.groups),
        )
    raise ClusterUnreachable(f"no broker of {bootstrap} answered ({last})")


class ConsoleLogin:
    """The console's login check and the aiohttp middleware that requires it."""

    def __init__(
        self,
        bootstrap: str,
        security: ClientSecurity,
        *,
        check: Callable[..., Viewer] = check_login,
        ttl_s: float = LOGIN_TTL_S,
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self._check = check
        self._ttl_s = ttl_s
        self._key = secrets.token_bytes(32)  # per process: the cache keys mean nothing outside
        self._cache: dict[bytes, tuple[float, Viewer]] = {}
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_CHECKS)

    def _cache_key(self, user: str, password: str) -> bytes:
        return hmac.new(self._key, f"{user}\0{password}".encode(), hashlib.sha256).digest()

    async def viewer(self, user: str, password: str) -> Viewer:
        """The checked viewer (cached); LoginRefused / ClusterUnreachable otherwise."""
        key = self._cache_key(user, password)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < self._ttl_s:
            return hit[1]
        async with self._slots:
            try:
                viewer = await asyncio.to_thread(
                    self._check, self.bootstrap, self.security, user, password
                )
            except LoginRefused:
                self._cache.pop(key, None)
                logger.warning("console login refused for user %r", user)
                await asyncio.sleep(FAILED_LOGIN_DELAY_S)
                raise
        if len(self._cache) >= MAX_CACHED_LOGINS:
            self._cache = {k: v for k, v in self._cache.items() if now - v[0] < self._ttl_s}
            if len(self._cache) >= MAX_CACHED_LOGINS:
                self._cache.clear()
        self._cache[key] = (time.monotonic(), viewer)
        return viewer

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path.startswith(PUBLIC_PREFIXES):
            return await handler(request)
        creds = basic_credentials(request.headers.get("Authorization", ""))
        if creds is None:
            raise _unauthorized("Log in with a user of the cluster.")
        try:
            viewer = await self.viewer(*creds)
        except LoginRefused:
            raise _unauthorized("The cluster refused that user name and password.") from None
        except ClusterUnreachable as e:
            raise web.HTTPServiceUnavailable(text=f"Cannot check the login: {e}") from None
        request[VIEWER_KEY] = viewer
        return await handler(request)


def _unauthorized(text: str) -> web.HTTPUnauthorized:
    return web.HTTPUnauthorized(
        text=text, headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'}
    )
