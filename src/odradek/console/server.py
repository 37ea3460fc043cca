"""Run the console: the collector thread feeds snapshots to the aiohttp app's loop."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
from collections.abc import Mapping
from pathlib import Path

from aiohttp import web

from odradek.console.app import ConsoleState, make_app
from odradek.console.auth import ConsoleLogin
from odradek.console.collector import Cadence, ClusterCollector
from odradek.console.reports import ChaosReports
from odradek.console.snapshot import Snapshot
from odradek.security.client_security import ClientSecurity

logger = logging.getLogger(__name__)

__all__ = ["parse_listen", "serve"]


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen must be HOST:PORT, got {value!r}")
    return host, int(port)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve(
    bootstrap: str,
    host: str,
    port: int,
    *,
    cluster_dir: Path | None,
    reports: list[Path],
    cadence: Cadence | None = None,
    started: asyncio.Event | None = None,
    client_props: Mapping[str, str] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT (or cancellation). ``client_props``: a Kafka client
    properties file's settings (security.protocol, sasl.*, ssl.*) for a secured cluster."""
    loop = asyncio.get_running_loop()
    state = ConsoleState()

    def on_snapshot(snap: Snapshot) -> None:  # the collector's thread
        asyncio.run_coroutine_threadsafe(state.publish(snap), loop)

    security = ClientSecurity.from_properties(dict(client_props or {}))
    collector = ClusterCollector(
        bootstrap,
        on_snapshot,
        cadence=cadence,
        cluster_dir=cluster_dir,
        security=security,
        interest=state.interest,
    )
    state.on_view_opened = collector.wake
    # A secured cluster: the console's own user is usually a super user, so every page
    # needs a login with a user of the cluster, and shows what that user may see.
    login = ConsoleLogin(bootstrap, security) if security.sasl else None
    if login is not None and not _loopback(host):
        logger.warning(
            "console on %s:%d: logins use HTTP basic authentication without "
            "TLS; passwords cross the network in clear. Listen on a loopback "
            "address (or put a TLS proxy in front) unless the network is "
            "trusted.",
            host,
            port,
        )
    app = make_app(
        state,
        bootstrap,
        ChaosReports(reports),
        client_conf=security.librdkafka_config() if client_props else None,
        login=login,
    )
    # Keep-alive bounded; aiohttp already bounds request lines (8 KiB) and headers.
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=15, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, backlog=128)
    await site.start()
    collector.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread
            pass
    logger.info("console at http://%s:%d/ for %s", host, port, bootstrap)
    if started is not None:
        started.set()
    try:
        await stop.wait()
    finally:
        collector.stop()
        await runner.cleanup()
