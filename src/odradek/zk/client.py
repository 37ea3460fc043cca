"""A kazoo client whose TCP connections leave from the node's own loopback address.

Why: every broker runs on its own address (127.0.k.x) so that fault tests can cut links
with source/destination iptables rules (REQ-P1 to REQ-P8). A socket connecting to
127.0.k.1 leaves from 127.0.0.1 unless it binds its source first, and then no
``-s 127.0.k.3`` rule would ever match (platform-notes: "Trap"). kazoo has no option for this,
so we give it a handler whose ``create_connection`` binds ``source_address``.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from kazoo.client import KazooClient, KazooState, KeeperState
from kazoo.exceptions import AuthFailedError
from kazoo.handlers.threading import SequentialThreadingHandler

from odradek.zk.acls import AclKazooClient, ZkAuth

__all__ = ["BoundThreadingHandler", "connect_zk", "split_chroot"]


class BoundThreadingHandler(SequentialThreadingHandler):
    """kazoo's threading handler, but every connection binds ``(source_ip, 0)``."""

    def __init__(self, source_ip: str | None) -> None:
        super().__init__()
        self.source_ip = source_ip

    def create_connection(
        self,
        address: tuple[str, int],
        hostname: str | None = None,
        timeout: float | None = None,
        use_ssl: bool = False,
        **_ssl_options: Any,
    ) -> socket.socket:
        if use_ssl:
            raise ValueError("odradek's ZooKeeper client does not support TLS")
        source = (self.source_ip, 0) if self.source_ip else None
        sock = socket.create_connection(address, timeout, source_address=source)
        # Same options kazoo sets on its own sockets: small request/response frames.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        return sock


def split_chroot(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/kafka"`` -> ``("h1:2181,h2:2181", "/kafka")`` (Kafka's
    ``zookeeper.connect`` syntax: one optional chroot after the last host)."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    return hosts, chroot


def connect_zk(
    hosts: str,
    *,
    source_ip: str | None,
    session_timeout_s: float,
    timeout_s: float = 10.0,
    auth: ZkAuth | None = None,
    secure_acls: bool = False,
) -> KazooClient:
    """Start a kazoo client (reconnecting forever) and wait up to ``timeout_s`` for a session.

    ``hosts`` is Kafka's ``zookeeper.connect``; a chroot is created if missing, as Kafka
    does. ``auth`` authenticates the session (digest or SASL DIGEST-MD5); with
    ``secure_acls`` every znode the client creates gets Kafka's secure ACLs
    (``zookeeper.set.acl``, see :mod:`odradek.zk.acls`). Raises kazoo's
    ``AuthFailedError`` if ZooKeeper refused the credentials, and its
    ``timeout_exception`` if no session could be established otherwise (the client is
    stopped and closed first, so no thread leaks).
    """
    base, chroot = split_chroot(hosts)
    if secure_acls and auth is None:
        # CREATOR_ALL_ACL needs an authenticated creator; ZooKeeper would answer
        # InvalidACL to the first create. Kafka refuses this configuration at start too.
        raise ValueError("zookeeper.set.acl=true needs ZooKeeper authentication")
    zk = AclKazooClient(
        hosts=base,
        timeout=session_timeout_s,
        handler=BoundThreadingHandler(source_ip),
        secure_acls=secure_acls,
        **(auth.kazoo_options() if auth is not None else {}),
    )
    # kazoo reports a session CONNECTED as soon as ZooKeeper answers the Connect
    # request, and only then runs SASL or sends the digest credentials; a refusal moves
    # it to AUTH_FAILED and stops it. Whether ``start`` then returns, or finds the
    # session gone and raises "Connection time-out", depends on which thread runs
    # first (a loaded machine's CI run saw the second). Both must end as what Kafka
    # reports: an authentication failure.
    refused = threading.Event()

    def note_refusal(state: str) -> None:
        # Listeners run inside kazoo's state change, after the new KeeperState is set.
        if state == KazooState.LOST and zk.client_state == KeeperState.AUTH_FAILED:
            refused.set()

    zk.add_listener(note_refusal)
    try:
        zk.start(timeout=timeout_s)
        if auth is not None:
            # A round trip queued behind the authentication: it fails with
            # AuthFailedError if the credentials were refused, so no caller gets a
            # client whose session is already lost.
            zk.exists("/")
        if chroot:
            zk.ensure_path(chroot)
            # kazoo prefixes every path with .chroot; set it only after the chroot exists.
            zk.chroot = chroot
    except BaseException as e:
        zk.stop()
        zk.close()
        if refused.is_set() and not isinstance(e, AuthFailedError):
            raise AuthFailedError("ZooKeeper refused the client's credentials") from e
        raise
    finally:
        zk.remove_listener(note_refusal)
    return zk
