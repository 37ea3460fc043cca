"""A local cluster's files (``odradek.cluster.local``): what ``DIR`` holds and how it is
written.

* ``DIR/cluster.json``: the cluster's state (addresses, pids with their start times,
  options), written whole and renamed into place, so that a later process (``odradek
  cluster down``, a test's fixture) can manage a cluster another one started.
* ``DIR/broker-<id>/``: ``server.properties`` (private: with ``--security`` it holds
  passwords), ``data/`` (``log.dirs``) and ``broker.log``; ``BrokerInfo`` records them.
* ``DIR/zookeeper[-<n>]/``: each ZooKeeper node's data (``ZkNodeInfo``).
* ``DIR/security/zookeeper.auth``: the brokers' and the manager's ZooKeeper identity
  (issue 14 item 5), kept out of cluster.json.

``ClusterLayout`` is a base class of ``LocalCluster``, not an object of its own: the
state it reads and writes is the cluster's. The attributes and methods declared in the
class belong to ``LocalCluster``.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from odradek.cluster import addresses
from odradek.cluster.hosts import broker_address
from odradek.security.private_files import write_private

__all__ = [
    "DEFAULT_BROKER_COMMAND",
    "STATE_FILE",
    "ZK_DIGEST_USER",
    "BrokerInfo",
    "ClusterLayout",
    "ZkNodeInfo",
    "read_properties",
]

DEFAULT_BROKER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "odradek", "broker", "--config")
STATE_FILE = "cluster.json"
# The ZooKeeper digest user of a `--security sasl_ssl` cluster (brokers and manager).
ZK_DIGEST_USER = "odradek"


@dataclass
class BrokerInfo:
    id: int
    host: str
    port: int
    pid: int | None
    start_time: int | None  # /proc start time: guards against pid reuse
    config: str  # server.properties
    log_dir: str  # log.dirs
    log: str  # the process's stdout/stderr
    metrics_url: str | None = None  # http://HOST:PORT/metrics (metrics.listener)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class ZkNodeInfo:
    id: int
    address: str
    port: int
    pid: int | None
    start_time: int | None
    data_dir: str
    cgroup: str | None  # relative to the cgroup2 root: iptables -m cgroup --path

    @property
    def connect(self) -> str:
        return f"{self.address}:{self.port}"


def read_properties(path: Path) -> dict[str, str]:
    """A server.properties file as written by ``ClusterLayout._write_broker_config``."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


class ClusterLayout:
    """The cluster's state file and its brokers' configuration files (see the module
    docstring)."""

    dir: Path
    block: int | None
    hosts: str
    zk_session_timeout_ms: int
    broker_command: list[str]
    zookeeper_nodes: list[ZkNodeInfo]
    brokers: list[BrokerInfo]
    metrics: bool
    console: dict[str, Any] | None
    schema_registry: dict[str, Any] | None
    security: str
    client_properties: str | None
    zk_auth_file: str | None
    zk_set_acl: bool

    if TYPE_CHECKING:

        def close_zk_client(self) -> None: ...

    @property
    def state_path(self) -> Path:
        return self.dir / STATE_FILE

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def zk_connect(self) -> str:
        return ",".join(z.connect for z in self.zookeeper_nodes)

    def broker(self, broker_id: int) -> BrokerInfo:
        for b in self.brokers:
            if b.id == broker_id:
                return b
        raise KeyError(f"no broker {broker_id} in {self.dir}")

    def zookeeper(self, node_id: int = 1) -> ZkNodeInfo:
        for z in self.zookeeper_nodes:
            if z.id == node_id:
                return z
        raise KeyError(f"no ZooKeeper node {node_id} in {self.dir}")

    def _load(self) -> None:
        state = json.loads(self.state_path.read_text())
        self.block = state.get("block")
        self.hosts = state.get("hosts", "loopback")
        self.zk_session_timeout_ms = int(state.get("zk_session_timeout_ms", 6000))
        self.metrics = bool(state.get("metrics", True))
        self.console = state.get("console")
        self.schema_registry = state.get("schema_registry")
        self.broker_command = list(state.get("broker_command") or DEFAULT_BROKER_COMMAND)
        self.security = state.get("security", "plaintext")
        self.client_properties = state.get("client_properties")
        self.zk_auth_file = state.get("zk_auth_file")
        self.zk_set_acl = bool(state.get("zk_set_acl", False))
        nodes = state.get("zookeeper_nodes") or [state["zookeeper"]]
        self.zookeeper_nodes = [
            ZkNodeInfo(
                id=int(z.get("id", 1)),
                address=z["address"],
                port=int(z["port"]),
                pid=z.get("pid"),
                start_time=z.get("start_time"),
                data_dir=z["data_dir"],
                cgroup=z.get("cgroup"),
            )
            for z in nodes
        ]
        self.brokers = [
            BrokerInfo(**{k: b.get(k) for k in BrokerInfo.__dataclass_fields__})
            for b in state.get("brokers", [])
        ]

    def save(self) -> None:
        def zk_json(z: ZkNodeInfo) -> dict[str, Any]:
            return {**asdict(z), "connect": self.zk_connect}

        state = {
            "version": 1,
            "dir": str(self.dir),
            "block": self.block,
            "hosts": self.hosts,
            "bootstrap_servers": self.bootstrap_servers,
            "zk_session_timeout_ms": self.zk_session_timeout_ms,
            "metrics": self.metrics,
            "broker_command": self.broker_command,
            "security": self.security,
            "client_properties": self.client_properties,
            "zk_auth_file": self.zk_auth_file,
            "zk_set_acl": self.zk_set_acl,
            "zookeeper": zk_json(self.zookeeper_nodes[0]) if self.zookeeper_nodes else None,
            "zookeeper_nodes": [zk_json(z) for z in self.zookeeper_nodes],
            "brokers": [asdict(b) for b in self.brokers],
            "console": self.console,
            "schema_registry": self.schema_registry,
        }
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, self.state_path)  # readers never see a half-written file

    def client_config(self) -> dict[str, str]:
        """librdkafka settings a client needs besides bootstrap.servers: {} for a
        plaintext cluster, the admin user's SASL_SSL settings for a secured one."""
        from odradek.cluster.security_setup import client_config

        return client_config(self.client_properties)

    def _write_broker_config(
        self,
        broker_id: int,
        overrides: Mapping[str, str],
        partitions_default: int | None,
        *,
        slot: int | None = None,
    ) -> BrokerInfo:
        """``slot``: the broker's place in the address block (1..), which is its id
        unless the ids start elsewhere (--first-broker-id)."""
        assert self.block is not None
        host = broker_address(self.hosts, self.block, broker_id if slot is None else slot)
        bdir = self.dir / f"broker-{broker_id}"
        data = bdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        metrics_url = None
        props: dict[str, str] = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://{host}:{addresses.BROKER_PORT}",
            "advertised.listeners": f"PLAINTEXT://{host}:{addresses.BROKER_PORT}",
            "log.dirs": str(data),
            "zookeeper.connect": self.zk_connect,
            "zookeeper.session.timeout.ms": str(self.zk_session_timeout_ms),
        }
        if partitions_default is not None:
            props["num.partitions"] = str(partitions_default)
        if self.metrics:
            # The broker's own address: every broker of every local cluster has its own,
            # so the same port is free on each.
            props["metrics.listener"] = f"http://{host}:{addresses.METRICS_PORT}"
        props.update({str(k): str(v) for k, v in overrides.items()})
        if props.get("metrics.listener"):
            metrics_url = props["metrics.listener"].rstrip("/") + "/metrics"
        config = bdir / "server.properties"
        body = "".join(f"{k}={v}\n" for k, v in props.items())
        # Private: with --security it holds the SCRAM, PLAIN and ZooKeeper passwords.
        write_private(config, f"# written by `odradek cluster up`\n{body}")
        return BrokerInfo(
            id=broker_id,
            host=host,
            port=addresses.BROKER_PORT,
            pid=None,
            start_time=None,
            config=str(config),
            log_dir=str(data),
            log=str(bdir / "broker.log"),
            metrics_url=metrics_url,
        )

    def _configure_zk_security(self, broker_config: Mapping[str, str], security: str) -> None:
        """Decide how brokers and this manager authenticate to ZooKeeper: the
        operator's ``odradek.zookeeper.auth`` / ``zookeeper.set.acl`` if given; for
        ``--security sasl_ssl`` a digest identity of the cluster's own (kept in
        ``DIR/security/zookeeper.auth``, reused by a restart) with secure ACLs, so a
        ZooKeeper client cannot rewrite partition state or read SCRAM credentials."""
        auth = broker_config.get("odradek.zookeeper.auth")
        set_acl = broker_config.get("zookeeper.set.acl", "").strip().lower() == "true"
        path = self.dir / "security" / "zookeeper.auth"
        if auth is None and security == "sasl_ssl":
            if path.exists():
                auth = path.read_text().strip()
            else:
                auth = f"digest:{ZK_DIGEST_USER}:{secrets.token_urlsafe(18)}"
            set_acl = set_acl or "zookeeper.set.acl" not in broker_config
        if auth is None:
            self.zk_auth_file, self.zk_set_acl = None, set_acl
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, auth + "\n")
        self.zk_auth_file, self.zk_set_acl = str(path), set_acl
        self.close_zk_client()  # reconnect authenticated

    def _zk_auth_value(self) -> str | None:
        if self.zk_auth_file is None:
            return None
        try:
            return Path(self.zk_auth_file).read_text().strip() or None
        except OSError:
            return None
