"""Run a registry instance: read ``_schemas``, campaign for primary (with ZooKeeper), serve
the REST API until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from odradek.schema_registry.app import make_app
from odradek.schema_registry.election import PrimaryElection
from odradek.schema_registry.kafka_store import SchemasTopic
from odradek.schema_registry.registry import Registry
from odradek.schema_registry.store import RegistryView

__all__ = ["parse_listener", "serve"]

logger = logging.getLogger(__name__)


def parse_listener(url: str) -> tuple[str, int]:
    """``http://HOST:PORT`` (Confluent's ``listeners``) -> (host, port)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ValueError(f"--listen must be http://HOST:PORT, got {url!r}")
    return parts.hostname, parts.port


async def serve(
    bootstrap: str,
    listen: str,
    *,
    zookeeper: str | None = None,
    advertised: str | None = None,
    topic: str = "_schemas",
    group: str | None = None,
    client_conf: Mapping[str, Any] | None = None,
    started: asyncio.Event | None = None,
) -> None:
    host, port = parse_listener(listen)
    my_url = (advertised or f"http://{host}:{port}").rstrip("/")
    view = RegistryView()
    group = group or topic
    log = SchemasTopic(
        bootstrap,
        view,
        topic=topic,
        client_conf=client_conf,
        transactional_id=f"odradek-schema-registry-{group}",
    )
    await asyncio.to_thread(log.start)
    election: PrimaryElection | None = None
    if zookeeper:
        election = await asyncio.to_thread(
            lambda: PrimaryElection(zookeeper, my_url, group=group, on_elected=log.become_primary)
        )
    else:
        await asyncio.to_thread(log.become_primary)  # the only writer
    app = make_app(
        Registry(view, log),
        primary_url=election.primary_url if election else (lambda: None),
        catch_up=log.catch_up,
    )
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=15, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, backlog=128)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    try:
        await site.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        logger.info("schema registry at %s (topic %s on %s)", my_url, topic, bootstrap)
        if started is not None:
            started.set()
        await stop.wait()
    finally:
        await runner.cleanup()
        if election is not None:
            election.close()
        await asyncio.to_thread(log.stop)
