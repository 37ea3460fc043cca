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

Plain functions of what they are given: ``LocalCluster`` holds the cluster's state and
calls them (``read_state``/``write_state`` for cluster.json, ``write_broker_config``,
``zk_identity``, ``read_zk_auth``).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from odradek.cluster import addresses
from odradek.security.private_files import write_private

__all__ = [
    "DEFAULT_BROKER_COMMAND",
    "STATE_FILE",
    "ZK_DIGEST_USER",
    "BrokerInfo",
    "ZkNodeInfo",
    "read_properties",
    "read_state",
    "read_zk_auth",
    "write_broker_config",
    "write_state",
    "zk_identity",
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
    """A server.properties file as written by ``write_broker_config``."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def read_state(path: Path) -> dict[str, Any]:
    """cluster.json, with its ZooKeeper nodes and brokers as ``ZkNodeInfo`` and
    ``BrokerInfo`` (under "zookeeper_nodes" and "brokers"; files written before
    ensembles name one node, "zookeeper")."""
    state: dict[str, Any] = json.loads(path.read_text())
    nodes = state.get("zookeeper_nodes") or [state["zookeeper"]]
    state["zookeeper_nodes"] = [
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
    state["brokers"] = [
        BrokerInfo(**{k: b.get(k) for k in BrokerInfo.__dataclass_fields__})
        for b in state.get("brokers", [])
    ]
    return state


def write_state(
    path: Path,
    options: dict[str, Any],
    zookeeper_nodes: list[ZkNodeInfo],
    brokers: list[BrokerInfo],
) -> None:
    """Write cluster.json whole and rename it into place: ``options`` (the cluster's
    settings and services) and its nodes."""
    zk_connect = ",".join(z.connect for z in zookeeper_nodes)

    def zk_json(z: ZkNodeInfo) -> dict[str, Any]:
        return {**asdict(z), "connect": zk_connect}

    state = {
        "version": 1,
        **options,
        "zookeeper": zk_json(zookeeper_nodes[0]) if zookeeper_nodes else None,
        "zookeeper_nodes": [zk_json(z) for z in zookeeper_nodes],
        "brokers": [asdict(b) for b in brokers],
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, path)  # readers never see a half-written file


def write_broker_config(
    dir: Path,
    broker_id: int,
    host: str,
    overrides: Mapping[str, str],
    partitions_default: int | None,
    *,
    zk_connect: str,
    zk_session_timeout_ms: int,
    metrics: bool,
) -> BrokerInfo:
    """Write ``DIR/broker-<id>/server.properties`` for the broker at ``host``."""
    bdir = dir / f"broker-{broker_id}"
    data = bdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    metrics_url = None
    props: dict[str, str] = {
        "broker.id": str(broker_id),
        "listeners": f"PLAINTEXT://{host}:{addresses.BROKER_PORT}",
        "advertised.listeners": f"PLAINTEXT://{host}:{addresses.BROKER_PORT}",
        "log.dirs": str(data),
        "zookeeper.connect": zk_connect,
        "zookeeper.session.timeout.ms": str(zk_session_timeout_ms),
    }
    if partitions_default is not None:
        props["num.partitions"] = str(partitions_default)
    if metrics:
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


def zk_identity(
    dir: Path, broker_config: Mapping[str, str], security: str
) -> tuple[str | None, bool]:
    """How brokers and the manager authenticate to ZooKeeper: (the file holding
    ``odradek.zookeeper.auth``, or None; whether znodes get secure ACLs). The operator's
    ``odradek.zookeeper.auth`` / ``zookeeper.set.acl`` if given; for ``--security
    sasl_ssl`` a digest identity of the cluster's own (kept in
    ``DIR/security/zookeeper.auth``, reused by a restart) with secure ACLs, so a
    ZooKeeper client cannot rewrite partition state or read SCRAM credentials."""
    auth = broker_config.get("odradek.zookeeper.auth")
    set_acl = broker_config.get("zookeeper.set.acl", "").strip().lower() == "true"
    path = dir / "security" / "zookeeper.auth"
    if auth is None and security == "sasl_ssl":
        if path.exists():
            auth = path.read_text().strip()
        else:
            auth = f"digest:{ZK_DIGEST_USER}:{secrets.token_urlsafe(18)}"
        set_acl = set_acl or "zookeeper.set.acl" not in broker_config
    if auth is None:
        return None, set_acl
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, auth + "\n")
    return str(path), set_acl


def read_zk_auth(auth_file: str | None) -> str | None:
    """The ``odradek.zookeeper.auth`` value in ``auth_file`` (None: none, or unreadable)."""
    if auth_file is None:
        return None
    try:
        return Path(auth_file).read_text().strip() or None
    except OSError:
        return None
