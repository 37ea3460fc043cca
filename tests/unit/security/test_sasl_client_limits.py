"""The SCRAM client refuses what Kafka's ``ScramSaslClient`` refuses: a server-first
message asking for fewer iterations than the mechanism's minimum (4096), which would let a
rogue broker (or a man in the middle of SASL_PLAINTEXT) get a cheaply brute-forced proof
of the password."""

from __future__ import annotations

import base64

import pytest

from odradek.security.sasl_client import SaslClient, SaslClientError


def _server_first(client_first: bytes, iterations: int) -> bytes:
    nonce = dict(a.split("=", 1) for a in client_first.decode().split(",")[2:])["r"]
    salt = base64.b64encode(b"0123456789abcdef").decode()
    return f"r={nonce}server-part,s={salt},i={iterations}".encode()


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_fewer_than_4096_iterations_are_refused(mech: str) -> None:
    c = SaslClient(mech, "alice", "alice-secret")
    with pytest.raises(SaslClientError) as ei:
        c.receive(_server_first(c.next_token(), 4095))
    assert str(ei.value) == (f"Requested iterations 4095 is less than the minimum 4096 for {mech}")
    with pytest.raises(SaslClientError):  # and nothing derived from the password is sent
        c.next_token()


def test_4096_iterations_are_accepted() -> None:
    c = SaslClient("SCRAM-SHA-256", "alice", "alice-secret")
    c.receive(_server_first(c.next_token(), 4096))
    assert c.next_token().startswith(b"c=biws,r=")
