"""HTTP Basic authentication's header (RFC 7617), shared by the console and the schema
registry, which both check the login against the cluster's SCRAM users."""

from __future__ import annotations

import base64
import binascii

__all__ = ["basic_credentials"]


def basic_credentials(header: str) -> tuple[str, str] | None:
    """``Basic base64(user:password)`` -> (user, password); None if malformed. The value
    is bounded before it is decoded: a hostile header costs nothing."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or len(value) > 4096:
        return None
    try:
        text = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = text.partition(":")
    return (user, password) if sep and user else None
