"""The broker properties the request handlers read, typed from the table (names and
defaults: ``odradek.configdefs``). ``RequestContext.settings`` holds the broker's."""

from __future__ import annotations

from dataclasses import dataclass

from odradek.configdefs import setting

__all__ = ["ServerSettings"]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Topic creation defaults, request limits (issue 11), the failed-authentication
    delay."""

    num_partitions: int = setting("num.partitions")
    default_replication_factor: int = setting("default.replication.factor")
    auto_create_topics_enable: bool = setting("auto.create.topics.enable")
    delete_topic_enable: bool = setting("delete.topic.enable")
    fetch_max_bytes: int = setting("fetch.max.bytes")

    request_max_elements: int = setting("odradek.request.max.elements")
    max_partitions_per_request: int = setting("odradek.max.partitions.per.request")
    max_partitions: int = setting("odradek.max.partitions")
    connection_failed_authentication_delay_ms: int = setting(
        "connection.failed.authentication.delay.ms"
    )
