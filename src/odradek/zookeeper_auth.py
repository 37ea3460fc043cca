"""How a broker or tool authenticates to ZooKeeper (``odradek.zookeeper.auth``, issue 14
item 5): pure parsing, kept on the ground floor with ``odradek.config`` (which validates it
at start and must import nothing above it) rather than in ``odradek.security``. Kafka
takes the same from a JAAS ``Client`` section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ZkAuth", "parse_zk_auth"]

# The digest and SASL schemes are the ones ZooKeeper ships with; Kafka uses SASL
# (DIGEST-MD5 or GSSAPI).
_SCHEMES = ("digest", "sasl")


@dataclass(frozen=True)
class ZkAuth:
    """How a broker or tool authenticates to ZooKeeper (``odradek.zookeeper.auth``)."""

    scheme: str  # "digest" or "sasl"
    username: str
    password: str

    def kazoo_options(self) -> dict[str, Any]:
        """Keyword arguments for :class:`kazoo.client.KazooClient`."""
        if self.scheme == "digest":
            return {"auth_data": [("digest", f"{self.username}:{self.password}")]}
        # SASL DIGEST-MD5 against the server's JAAS ``Server`` section (Kafka's way);
        # kazoo needs the pure-sasl package for it.
        return {
            "sasl_options": {
                "mechanism": "DIGEST-MD5",
                "username": self.username,
                "password": self.password,
            }
        }

    def __repr__(self) -> str:  # never print the password
        return f"ZkAuth({self.scheme}:{self.username}:***)"


def parse_zk_auth(value: str | None) -> ZkAuth | None:
    """``digest:user:password`` or ``sasl:user:password`` -> :class:`ZkAuth`; None or
    empty -> None. Raises ValueError (without echoing the password) otherwise."""
    if not value:
        return None
    scheme, _, rest = value.partition(":")
    username, sep, password = rest.partition(":")
    if scheme not in _SCHEMES or not sep or not username or not password:
        # Nothing of the value is echoed: a mistyped value may be the bare password.
        raise ValueError("expected digest:<user>:<password> or sasl:<user>:<password>")
    return ZkAuth(scheme, username, password)
