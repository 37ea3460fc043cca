"""Waiting for a local cluster's processes (``odradek.cluster.local``), and the manager's
own ZooKeeper session that most waits read.

A broker is *ready* when it accepts TCP on its listener and a new ZooKeeper session of
its registered at ``/brokers/ids/<id>`` (a registration left by the previous
incarnation's not yet expired session does not count); the cluster is up when every
broker, asked alone, lists every broker. Every wait polls with a deadline, fails at
once with the broker's log tail if the process died, and treats an unreachable
ZooKeeper as "not yet".

``ClusterReadiness`` is a base class of ``LocalCluster``, not an object of its own. The
attributes and methods declared in the class belong to ``LocalCluster``.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from odradek.cluster import procs
from odradek.errors import ErrorCode, KafkaError
from odradek.zk import znodes
from odradek.zk.acls import parse_zk_auth
from odradek.zk.client import connect_zk

if TYPE_CHECKING:
    from odradek.cluster.layout import BrokerInfo

__all__ = ["ClusterReadiness", "http_ok", "tcp_accepts"]


def tcp_accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def http_ok(url: str, cafile: str | None = None, *, auth_required: bool = False) -> bool:
    """``url`` answers 200 (or, ``auth_required``, the 401 asking for a login)."""
    ctx = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(url, timeout=2.0, context=ctx) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as e:
        return auth_required and e.code == 401
    except (OSError, http.client.HTTPException):  # refused, reset, an HTTP error, garbage
        return False


def _safe(cond: Any) -> bool:
    # ZooKeeper may be briefly unreachable (e.g. a fault test): "not yet", not an error.
    try:
        return bool(cond())
    except (KazooException, KazooTimeoutError):
        return False


def _tail(path: str | Path, n: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


class ClusterReadiness:
    """The manager's ZooKeeper session and the waits (see the module docstring)."""

    brokers: list[BrokerInfo]
    client_properties: str | None
    zk_set_acl: bool
    _popens: dict[tuple[str, int], subprocess.Popen[bytes]]
    _zk: KazooClient | None
    _stale_owner: dict[int, int]

    if TYPE_CHECKING:

        @property
        def zk_connect(self) -> str: ...

        def broker(self, broker_id: int) -> BrokerInfo: ...

        def broker_state(self, broker_id: int) -> str: ...

        def _zk_auth_value(self) -> str | None: ...

    def zk_client(self) -> KazooClient:
        """The manager's own ZooKeeper session (from 127.0.0.1, outside every block, so
        fault rules on a block's addresses do not cut the manager off). It authenticates
        as the brokers do, so the znodes it creates (the admin's SCRAM credentials) are
        theirs too."""
        if self._zk is None:
            self._zk = connect_zk(
                self.zk_connect,
                source_ip=None,
                session_timeout_s=10.0,
                timeout_s=5.0,
                auth=parse_zk_auth(self._zk_auth_value()),
                secure_acls=self.zk_set_acl,
            )
        return self._zk

    def close_zk_client(self) -> None:
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            finally:
                self._zk = None

    def is_registered(self, broker_id: int) -> bool:
        return self.zk_client().exists(znodes.broker_path(broker_id)) is not None

    def controller_id(self) -> int | None:
        try:
            data, _ = self.zk_client().get(znodes.CONTROLLER)
        except Exception:  # NoNodeError, or a garbage znode: no controller to report
            return None
        try:
            return znodes.decode_controller(data).broker_id
        except KafkaError:
            return None

    def _poll(self, what: str, cond: Any, timeout: float, broker_id: int | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not _safe(cond):
            if broker_id is not None:
                b = self.broker(broker_id)
                popen = self._popens.get(("broker", broker_id))
                if popen is not None:
                    popen.poll()
                if not procs.alive(b.pid, b.start_time):
                    raise KafkaError(
                        ErrorCode.broker_not_available,
                        f"broker {broker_id} exited while waiting for {what}:\n{_tail(b.log)}",
                    )
            if time.monotonic() >= deadline:
                extra = f":\n{_tail(self.broker(broker_id).log)}" if broker_id else ""
                raise KafkaError(
                    ErrorCode.request_timed_out,
                    f"timed out after {timeout}s waiting for {what}{extra}",
                )
            time.sleep(0.05)

    def _fresh_registration(self, broker_id: int) -> bool:
        stat = self.zk_client().exists(znodes.broker_path(broker_id))
        return stat is not None and stat.ephemeralOwner != self._stale_owner.get(broker_id)

    def wait_broker_registered(self, broker_id: int, timeout: float = 30.0) -> None:
        """Wait for ``/brokers/ids/<id>``; after a (re)launch by this object, only a
        registration by a new session counts."""
        self._poll(
            f"broker {broker_id} to register in ZooKeeper",
            lambda: self._fresh_registration(broker_id),
            timeout,
            broker_id,
        )

    def wait_broker_unregistered(self, broker_id: int, timeout: float = 30.0) -> None:
        """E.g. after SIGKILL/SIGSTOP: ZooKeeper expires the session after
        ``zookeeper.session.timeout.ms`` (REQ-R12)."""
        self._poll(
            f"broker {broker_id}'s registration to disappear",
            lambda: not self.is_registered(broker_id),
            timeout,
        )

    def wait_broker_ready(self, broker_id: int, timeout: float = 30.0) -> None:
        """Accepts TCP on its listener AND is registered at /brokers/ids/<id>."""
        b = self.broker(broker_id)
        self._poll(
            f"broker {broker_id} to accept connections on {b.address}",
            lambda: tcp_accepts(b.host, b.port),
            timeout,
            broker_id,
        )
        self.wait_broker_registered(broker_id, timeout)

    def wait_brokers_see_each_other(self, timeout: float = 30.0) -> None:
        """Until every broker, asked alone, lists every broker in its Metadata answer.

        Registered in ZooKeeper is not enough for a client: each broker learns the
        others from its own watch, a moment later, and a CreateTopics with replication
        factor N answered by a broker that has seen N-1 of them is refused with
        INVALID_REPLICATION_FACTOR, as Kafka refuses it (a CI run on a loaded machine did
        exactly that, right after the cluster came up)."""
        want = {b.id for b in self.brokers}
        for b in self.brokers:
            self._poll(
                f"broker {b.id} to see every broker",
                lambda b=b: self._metadata_brokers(b) >= want,
                timeout,
                b.id,
            )

    def wait_broker_seen(self, broker_id: int, timeout: float = 30.0) -> None:
        """Until every other running broker lists ``broker_id`` in its Metadata answer:
        the same lag as at start-up (``wait_brokers_see_each_other``), after a restart.
        Not part of ``start_broker``: a broker cut off by a fault test may never see it. A
        loaded CI run created a topic right after a broker's restart and was refused
        INVALID_REPLICATION_FACTOR ("3 larger than available brokers: 2") by a broker
        whose watch had not yet fired."""
        for b in self.brokers:
            if b.id != broker_id and self.broker_state(b.id) == "running":
                self._poll(
                    f"broker {b.id} to see broker {broker_id}",
                    lambda b=b: broker_id in self._metadata_brokers(b),
                    timeout,
                    b.id,
                )

    def _metadata_brokers(self, b: BrokerInfo) -> set[int]:
        """The broker ids ``b`` lists in a Metadata answer (empty if it does not answer)."""
        from odradek.client.connection import KafkaConnection  # noqa: PLC0415
        from odradek.config import parse_properties  # noqa: PLC0415
        from odradek.protocol.client_codec import request_entity  # noqa: PLC0415
        from odradek.security.client_security import ClientSecurity  # noqa: PLC0415

        props = (
            parse_properties(Path(self.client_properties).read_text())
            if self.client_properties
            else {}
        )
        security = ClientSecurity.from_properties(props)
        try:
            with KafkaConnection(b.host, b.port, security=security, timeout_s=5.0) as conn:
                md = conn.request(
                    request_entity(
                        3,
                        12,
                        topics=(),
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False,
                    )
                )
        except Exception:  # not answering yet: not yet
            return set()
        return {int(x.node_id) for x in md.brokers}
