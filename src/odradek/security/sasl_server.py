"""The broker's side of SASL, sans-IO: Kafka's ``SaslServerAuthenticator`` as a state machine.

A connection on a SASL listener starts unauthenticated. Kafka allows exactly this order
(and so does Odradek):

* ApiVersions, any number of times;
* SaslHandshake (v0 or v1) naming an enabled mechanism -- any other request closes the
  connection ("Unexpected Kafka request of type X during SASL handshake"); an unknown
  mechanism is answered UNSUPPORTED_SASL_MECHANISM with the enabled list, then closed;
* after a v1 handshake, SaslAuthenticate requests carrying the mechanism's tokens; after
  a v0 handshake, the tokens themselves as size-prefixed frames (Kafka 0.10's format);
* the exchange completes with a principal ``User:<name>``, or fails: the client gets
  SASL_AUTHENTICATION_FAILED with a message that never says whether the user exists
  (Kafka's wording), and the connection is closed.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` > 0, a successful
SaslAuthenticate v1+ answers a session lifetime; the client must send SaslHandshake and
SaslAuthenticate again on the same connection before it ends, as the same principal and
mechanism. A request arriving after the session expired closes the connection.

Mechanisms: PLAIN (users and passwords from the listener's JAAS ``user_<name>`` options)
and SCRAM-SHA-256/512 with ``scramp`` (credentials from ZooKeeper through a lookup).
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import scramp

from odradek.errors import ErrorCode
from odradek.security.principal import KafkaPrincipal
from odradek.security.scram import MECHANISMS, ScramCredential

__all__ = [
    "SUPPORTED_MECHANISMS",
    "AuthResult",
    "SaslFailure",
    "SaslServerAuthenticator",
    "SaslState",
]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

ScramLookup = Callable[[str, str], "ScramCredential | None"]  # (mechanism, user)
PlainCheck = Callable[[str, str], bool]  # (user, password) -> valid


class SaslFailure(Exception):
    """Authentication failed; ``str()`` is what the client may be told."""


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"  # waiting for SaslHandshake (ApiVersions allowed)
    AUTHENTICATE = "authenticate"  # tokens of the chosen mechanism
    COMPLETE = "complete"
    REAUTHENTICATE = "reauthenticate"  # KIP-368: tokens again, the old principal still valid
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class AuthResult:
    error_code: ErrorCode
    error_message: str | None
    token: bytes
    session_lifetime_ms: int
    close: bool  # the connection is closed once the answer is sent
    detail: str | None = None  # why it failed, for the broker's log (never a secret)


class _Plain:
    def __init__(self, check: PlainCheck) -> None:
        self._check = check
        self.complete = False
        self.authorization_id = ""

    def evaluate(self, token: bytes) -> bytes:
        # RFC 4616: [authzid] NUL authcid NUL passwd
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailure(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        if not self._check(user, password):
            raise SaslFailure("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id "
                "that is different from username"
            )
        self.authorization_id = user
        self.complete = True
        return b""


class _Scram:
    def __init__(self, mechanism: str, lookup: ScramLookup) -> None:
        self._mechanism = mechanism
        self._lookup = lookup
        self._user = ""
        # A server nonce about as long as Kafka's (~26 characters; scramp's default is 64).
        self._server = scramp.ScramMechanism(mechanism).make_server(
            self._auth_info, s_nonce=secrets.token_hex(13)
        )
        self._step = 0
        self.complete = False
        self.authorization_id = ""

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        cred = self._lookup(self._mechanism, username)
        if cred is None:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        if cred.iterations < MECHANISMS[self._mechanism][2]:
            raise SaslFailure("Iterations below the minimum")
        self._user = username
        return cred.auth_info()

    def _accept_kafka_nonce(self, client_final: str) -> None:
        """Kafka's ScramSaslServer accepts a client-final nonce that *ends with* the
        server's nonce; librdkafka 2.0 (Debian's kcat) sends the client nonce twice. The
        proof covers the message as the client sent it, so accepting its nonce here (as
        Kafka does) weakens nothing; scramp alone would insist on equality."""
        attrs = dict(a.split("=", 1) for a in client_final.split(",") if "=" in a)
        sent, expected = attrs.get("r", ""), str(getattr(self._server, "nonce", ""))
        if sent != expected and expected and sent.endswith(expected):
            self._server.nonce = type(self._server.nonce)(sent)

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SCRAM message: not UTF-8") from None
        try:
            if self._step == 0:
                self._step = 1
                self._server.set_client_first(text)
                return self._server.get_server_first().encode()
            if self._step == 1:
                self._step = 2
                self._accept_kafka_nonce(text)
                self._server.set_client_final(text)
                out = self._server.get_server_final().encode()
                self.authorization_id = self._user
                self.complete = True
                return out
        except scramp.ScramException as e:
            raise SaslFailure(f"SCRAM exchange failed: {e}") from None
        raise SaslFailure("Unexpected SCRAM message after the exchange completed")


class SaslServerAuthenticator:
    """One connection's SASL state (create one per connection of a SASL listener)."""

    def __init__(
        self,
        enabled_mechanisms: tuple[str, ...],
        *,
        scram_lookup: ScramLookup,
        plain_check: PlainCheck,
        max_reauth_ms: int = 0,
    ) -> None:
        self.enabled = tuple(m for m in enabled_mechanisms if m in SUPPORTED_MECHANISMS)
        self._scram_lookup = scram_lookup
        self._plain_check = plain_check
        self.max_reauth_ms = max_reauth_ms
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.raw_tokens = False  # SaslHandshake v0: tokens come as bare frames
        self.session_expires_ms: int | None = None
        self.supports_reauth = False
        self.reauthentications = 0
        self._server: _Plain | _Scram | None = None

    # ------------------------------------------------------------------ queries
    @property
    def authenticated(self) -> bool:
        return self.state in (SaslState.COMPLETE, SaslState.REAUTHENTICATE)

    def expired(self, now_ms: int) -> bool:
        return self.session_expires_ms is not None and now_ms >= self.session_expires_ms

    # ------------------------------------------------------------------ events
    def handshake(self, mechanism: str, version: int) -> tuple[ErrorCode, tuple[str, ...]]:
        """SaslHandshake: (error code, enabled mechanisms). Any error closes the
        connection once answered (Kafka)."""
        if self.state == SaslState.COMPLETE:
            # KIP-368 re-authentication: same mechanism, v1 exchanges only.
            if mechanism != self.mechanism or not self.supports_reauth:
                self.state = SaslState.FAILED
                return ErrorCode.unsupported_sasl_mechanism, self.enabled
            self.state = SaslState.REAUTHENTICATE
            self._server = self._new_server(mechanism)
            return ErrorCode.none, self.enabled
        if self.state != SaslState.HANDSHAKE:
            self.state = SaslState.FAILED
            return ErrorCode.illegal_sasl_state, self.enabled
        if mechanism not in self.enabled:
            self.state = SaslState.FAILED
            return ErrorCode.unsupported_sasl_mechanism, self.enabled
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        self._server = self._new_server(mechanism)
        self.state = SaslState.AUTHENTICATE
        return ErrorCode.none, self.enabled

    def _new_server(self, mechanism: str) -> _Plain | _Scram:
        if mechanism == "PLAIN":
            return _Plain(self._plain_check)
        return _Scram(mechanism, self._scram_lookup)

    def authenticate(self, token: bytes, version: int, now_ms: int) -> AuthResult:
        """One SaslAuthenticate (or, after a v0 handshake, one raw token)."""
        reauth = self.state == SaslState.REAUTHENTICATE
        if (
            self.state not in (SaslState.AUTHENTICATE, SaslState.REAUTHENTICATE)
            or self._server is None
        ):
            self.state = SaslState.FAILED
            return AuthResult(
                ErrorCode.illegal_sasl_state,
                "SaslAuthenticate request received in the wrong state",
                b"",
                0,
                True,
            )
        if version > 0:
            self.supports_reauth = True
        server = self._server
        try:
            out = server.evaluate(token)
            # The exchange's principal, once it is complete (None while tokens remain).
            principal = KafkaPrincipal("User", server.authorization_id) if server.complete else None
            if principal is not None and reauth and principal != self.principal:
                raise SaslFailure("Cannot change principals during re-authentication")
        except SaslFailure as e:
            self.state = SaslState.FAILED
            plain = self.mechanism == "PLAIN"
            # SCRAM's reasons may reveal whether a user exists: Kafka answers a fixed text.
            message = (
                str(e)
                if plain
                else (
                    f"Authentication failed during {'re' if reauth else ''}authentication due to "
                    f"invalid credentials with SASL mechanism {self.mechanism}"
                )
            )
            return AuthResult(ErrorCode.sasl_authentication_failed, message, b"", 0, True, str(e))
        lifetime = 0
        if principal is not None:
            self.principal = principal
            self.state = SaslState.COMPLETE
            if reauth:
                self.reauthentications += 1
            if self.max_reauth_ms > 0:
                lifetime = self.max_reauth_ms
                self.session_expires_ms = now_ms + lifetime
            self._server = None
        return AuthResult(ErrorCode.none, None, out, lifetime, False)
