"""Who is on the other end of a connection: listener, security protocol, principal, host.

One ``Session`` per connection, made by the listener's ``SocketServer`` when the
connection is set up (after the TLS handshake, if any). On a SASL listener it carries
the connection's ``SaslServerAuthenticator`` and has no principal until authentication
completes; on an SSL listener the principal comes from the client certificate
(``User:<subject DN>``) or is ``User:ANONYMOUS``; on PLAINTEXT it is ``User:ANONYMOUS``.

``CURRENT_SESSION`` is set by the connection around each request it dispatches (tasks
created meanwhile inherit it), so handlers read the principal of the request they are
answering without the connection being passed through every layer.
"""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass, field

from odradek.security.principal import ANONYMOUS, KafkaPrincipal
from odradek.security.sasl_server import SaslServerAuthenticator

__all__ = ["CURRENT_SESSION", "Session", "current_session"]


@dataclass(slots=True)
class Session:
    listener: str = "PLAINTEXT"
    protocol: str = "PLAINTEXT"
    client_host: str = ""
    principal: KafkaPrincipal | None = ANONYMOUS  # None until SASL completes
    authenticator: SaslServerAuthenticator | None = None
    # Filled in by the connection: its frame decoder's limit is raised from
    # sasl.server.max.receive.size to socket.request.max.bytes once authenticated.
    on_authenticated: list = field(default_factory=list)
    # KIP-219: a request over a client quota mutes the connection until this
    # time.monotonic(); the connection reads no further request before (0.0: never).
    muted_until: float = 0.0

    def throttle(self, delay_ms: int) -> None:
        """Mute the connection for ``delay_ms`` after the current response."""
        until = time.monotonic() + delay_ms / 1000.0
        if until > self.muted_until:
            self.muted_until = until

    @property
    def authenticated(self) -> bool:
        return self.authenticator is None or self.authenticator.authenticated

    @property
    def principal_or_anonymous(self) -> KafkaPrincipal:
        return self.principal or ANONYMOUS


_DEFAULT = Session()
CURRENT_SESSION: contextvars.ContextVar[Session] = contextvars.ContextVar(
    "odradek_session", default=_DEFAULT
)


def current_session() -> Session:
    return CURRENT_SESSION.get()
