"""The client's side of SASL, sans-IO: the tokens a client sends for PLAIN and SCRAM.

Used by the inter-broker connection (``replication.broker_connection``) and the
synchronous client (``client.connection``): each sends SaslHandshake v1 with
``mechanism``, then one SaslAuthenticate per ``next_token`` until ``complete``; the
server's answers go to ``receive``. SCRAM is ``scramp``'s client, which also verifies
the server's signature (a broker that does not know the password cannot impersonate).
As Kafka's ``ScramSaslClient``, it refuses a server that asks for fewer iterations than
the mechanism's minimum (4096): a cheap proof would be easy to brute-force offline.
"""

from __future__ import annotations

import scramp

from odradek.security.scram import MECHANISMS

__all__ = ["SaslClient", "SaslClientError"]


class SaslClientError(Exception):
    pass


class SaslClient:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism.upper()
        self._username = username
        self._password = password
        self._step = 0
        self.complete = False
        if self.mechanism == "PLAIN":
            self._scram: scramp.ScramClient | None = None
        elif self.mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            self._scram = scramp.ScramClient([self.mechanism], username, password)
        else:
            raise SaslClientError(f"unsupported SASL mechanism {mechanism}")

    def next_token(self) -> bytes:
        """The token to send now."""
        if self._scram is None:
            if self._step:
                raise SaslClientError("PLAIN has one token")
            self._step = 1
            return b"\x00" + self._username.encode() + b"\x00" + self._password.encode()
        if self._step == 0:
            self._step = 1
            return self._scram.get_client_first().encode()
        if self._step == 2:
            self._step = 3
            return self._scram.get_client_final().encode()
        raise SaslClientError("no token to send in this state")

    def receive(self, token: bytes) -> None:
        """The server's answer to the last token."""
        if self._scram is None:
            self.complete = True
            return
        try:
            if self._step == 1:
                server_first = token.decode()
                self._check_iterations(server_first)
                self._scram.set_server_first(server_first)
                self._step = 2
            elif self._step == 3:
                self._scram.set_server_final(token.decode())
                self.complete = True
            else:
                raise SaslClientError("unexpected SCRAM message")
        except (scramp.ScramException, UnicodeDecodeError) as e:
            raise SaslClientError(f"SCRAM exchange failed: {e}") from e

    def _check_iterations(self, server_first: str) -> None:
        """Kafka's check, before scramp sees the message (so it holds whatever scramp's
        version checks, with Kafka's message); a malformed count is left to scramp."""
        minimum = MECHANISMS[self.mechanism][2]
        for attr in server_first.split(","):
            if attr.startswith("i=") and attr[2:].isdigit() and int(attr[2:]) < minimum:
                self._step = 4  # failed: no client-final is ever sent
                raise SaslClientError(
                    f"Requested iterations {int(attr[2:])} is less than "
                    f"the minimum {minimum} for {self.mechanism}"
                )
