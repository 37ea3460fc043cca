"""Run a registry instance: read ``_schemas``, campaign for primary (with ZooKeeper), serve
the REST API until SIGTERM/SIGINT; over TLS with a keystore (Confluent's
``listeners=https://...``), with HTTP basic authentication and ACLs on a secured cluster."""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from kazoo.exceptions import NoAuthError

from odradek.schema_registry.app import make_app
from odradek.schema_registry.election import PrimaryElection
from odradek.schema_registry.kafka_store import SchemasTopic
from odradek.schema_registry.registry import Registry
from odradek.schema_registry.security import DEFAULT_REALM, RegistrySecurity
from odradek.schema_registry.store import RegistryView
from odradek.zk.acls import ZkAuth

__all__ = ["SecurityOptions", "parse_listener", "serve"]

logger = logging.getLogger(__name__)


@dataclass
class SecurityOptions:
    """Confluent's ``authentication.method`` / ``authentication.realm``, the super users
    (Kafka's ``super.users``, ``;``-separated), how to authenticate to ZooKeeper (where
    the credentials and ACLs are), and the TLS key material (PEM)."""

    authentication_method: str = "NONE"  # or BASIC
    realm: str = DEFAULT_REALM
    super_users: list[str] = field(default_factory=list)
    allow_everyone_if_no_acl_found: bool = False
    zk_auth: ZkAuth | None = None
    keystore: str | None = None  # PEM: certificate chain and private key
    key_password: str | None = None
    truststore: str | None = None  # PEM CA(s): to verify a primary over https


def _server_ssl(options: SecurityOptions) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    assert options.keystore is not None
    ctx.load_cert_chain(options.keystore, password=options.key_password)
    return ctx


def _client_ssl(options: SecurityOptions) -> ssl.SSLContext | None:
    if options.truststore is None:
        return None
    return ssl.create_default_context(cafile=options.truststore)


def parse_listener(url: str) -> tuple[str, int]:
    """``http://HOST:PORT`` or ``https://HOST:PORT`` (Confluent's ``listeners``) ->
    (host, port)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
        raise ValueError(f"--listen must be http(s)://HOST:PORT, got {url!r}")
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
    security: SecurityOptions | None = None,
) -> None:
    options = security or SecurityOptions()
    host, port = parse_listener(listen)
    tls = listen.startswith("https://")
    if tls and not options.keystore:
        raise ValueError("an https listener needs a keystore (--ssl-keystore-location)")
    if options.authentication_method == "BASIC" and not zookeeper:
        # The users and ACLs are the cluster's, in its ZooKeeper.
        raise ValueError("authentication.method=BASIC needs --zookeeper")
    scheme = "https" if tls else "http"
    my_url = (advertised or f"{scheme}://{host}:{port}").rstrip("/")
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
            lambda: PrimaryElection(
                zookeeper,
                my_url,
                group=group,
                on_elected=log.become_primary,
                auth=options.zk_auth,
            )
        )
    else:
        await asyncio.to_thread(log.become_primary)  # the only writer
    guard: RegistrySecurity | None = None
    if options.authentication_method == "BASIC":
        assert election is not None
        guard = RegistrySecurity(
            election.zk,
            asyncio.get_running_loop(),
            realm=options.realm,
            super_users=options.super_users,
            allow_if_no_acl=options.allow_everyone_if_no_acl_found,
        )
        try:
            await asyncio.to_thread(guard.start)
        except NoAuthError:
            raise ValueError(
                "cannot read the cluster's SCRAM credentials in ZooKeeper (zookeeper.set.acl "
                "makes them readable by the brokers' identity only): give "
                "--zookeeper-auth-file"
            ) from None
    app = make_app(
        Registry(view, log),
        primary_url=election.primary_url if election else (lambda: None),
        catch_up=log.catch_up,
        security=guard,
        forward_ssl=_client_ssl(options),
    )
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=15, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(
        runner,
        host,
        port,
        reuse_address=True,
        backlog=128,
        ssl_context=_server_ssl(options) if tls else None,
    )
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
