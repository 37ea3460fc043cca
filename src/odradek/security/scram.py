"""SCRAM credentials as Kafka stores them, and their derivation.

Kafka keeps one credential per user and mechanism in ``/config/users/<name>``, in the
config map under the mechanism's name, as
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`` (ScramCredentialUtils):
the password itself is never stored. The salted password of an
AlterUserScramCredentials upsertion (KIP-554: the client salts and hashes, the password
never crosses the wire) becomes the stored key and the server key of RFC 5802 here.
Password derivation and the SASL exchanges themselves are ``scramp``'s.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

import scramp

__all__ = [
    "MECHANISMS",
    "MECHANISM_TYPES",
    "ScramCredential",
    "credential_from_password",
    "credential_from_salted_password",
    "mechanism_name",
]

# Kafka's ScramMechanism: name -> (wire type in APIs 50/51, hash, min and max iterations).
MECHANISMS: dict[str, tuple[int, str, int, int]] = {
    "SCRAM-SHA-256": (1, "sha256", 4096, 16384),
    "SCRAM-SHA-512": (2, "sha512", 4096, 16384),
}
MECHANISM_TYPES: dict[int, str] = {v[0]: k for k, v in MECHANISMS.items()}


def mechanism_name(mechanism_type: int) -> str | None:
    return MECHANISM_TYPES.get(mechanism_type)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_config(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @staticmethod
    def from_config(text: str) -> ScramCredential:
        """Kafka's credentialFromString: exactly these four keys, or ValueError."""
        props: dict[str, str] = {}
        for token in text.split(","):
            key, sep, value = token.partition("=")
            if not sep or not key:
                raise ValueError("Credentials not valid")
            props[key] = value
        if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ValueError("Credentials not valid")
        try:
            return ScramCredential(
                base64.b64decode(props["salt"], validate=True),
                base64.b64decode(props["stored_key"], validate=True),
                base64.b64decode(props["server_key"], validate=True),
                int(props["iterations"]),
            )
        except (binascii.Error, ValueError) as e:
            raise ValueError("Credentials not valid") from e

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """What scramp's server ``auth_fn`` returns."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def credential_from_password(
    mechanism: str, password: str, iterations: int = 4096, salt: bytes | None = None
) -> ScramCredential:
    """What kafka-configs stores for ``SCRAM-SHA-256=[iterations=..,password=..]``."""
    salt_b, stored, server, i = scramp.ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt
    )
    return ScramCredential(salt_b, stored, server, i)


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
    HMAC(SaltedPassword, "Server Key") -- the stdlib's HMAC and hashes, the same two
    steps Kafka's ScramFormatter takes for an AlterUserScramCredentials upsertion."""
    algo = MECHANISMS[mechanism][1]
    client_key = hmac.new(salted_password, b"Client Key", algo).digest()
    stored_key = hashlib.new(algo, client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", algo).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)
