"""The broker properties the request handlers read, typed from the table (names and
defaults: ``odradek.configdefs``). ``RequestContext.settings`` holds the broker's."""

from __future__ import annotations

from dataclasses import dataclass

from odradek.configdefs import setting

__all__ = ["ServerSettings"]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Request limits (issue 11) and the failed-authentication delay."""

    request_max_elements: int = setting("odradek.request.max.elements")
    max_partitions_per_request: int = setting("odradek.max.partitions.per.request")
    max_partitions: int = setting("odradek.max.partitions")
    connection_failed_authentication_delay_ms: int = setting(
        "connection.failed.authentication.delay.ms"
    )
