"""LocalCluster: a ZooKeeper node (or ensemble) and N broker processes on one machine.

Used by ``odradek cluster ...``, by integration tests and by fault injection. All state
lives in ``DIR/cluster.json`` so that a later process (``odradek cluster down``) can
manage a cluster started by another one::

    with LocalCluster.start(tmp_path, 3) as c:     # always downs on exit
        produce(c.bootstrap_servers)
        c.stop_broker(2, signal.SIGKILL)
        c.start_broker(2)

Layout of DIR: ``cluster.json``, ``zookeeper[-<n>]/`` (zoo.cfg, data, zookeeper.log),
``broker-<id>/`` (server.properties, broker.log, data/ = log.dirs).
Addresses: see ``odradek.cluster.addresses`` (one /24 loopback block per cluster).
With ``hosts="netns"`` (root only) every node runs in its own network namespace on a
private bridge instead (``odradek.cluster.netns``): same block number, same last
octets, subnet 10.209.<block>.0/24; ``down`` removes the namespaces by name.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from odradek.cluster import addresses, netns, procs
from odradek.errors import ErrorCode, KafkaError
from odradek.security.private_files import write_private
from odradek.zk import znodes
from odradek.zk.acls import parse_zk_auth
from odradek.zk.client import connect_zk
from odradek.zk.server import ZooKeeperServer, cgroup2_root

__all__ = ["BrokerInfo", "ZkNodeInfo", "LocalCluster", "DEFAULT_BROKER_COMMAND"]

logger = logging.getLogger(__name__)

DEFAULT_BROKER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "odradek", "broker", "--config")
STATE_FILE = "cluster.json"
# The ZooKeeper digest user of a `--security sasl_ssl` cluster (brokers and manager).
ZK_DIGEST_USER = "odradek"
HOSTS_MODES = ("loopback", "netns")
CLIENT_HOSTS = 2  # netns client hosts c1, c2: producers/consumers "on other machines"


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


def _tcp_accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _http_ok(url: str, cafile: str | None = None, *, auth_required: bool = False) -> bool:
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


# server.properties keys that differ per broker (add_broker does not copy them).
_PER_BROKER_KEYS = frozenset({"broker.id", "listeners", "advertised.listeners", "log.dirs",
                              "metrics.listener"})


def _read_properties(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


class LocalCluster:
    def __init__(self, dir: Path, *, broker_command: Sequence[str] | None = None) -> None:
        self.dir = Path(dir).resolve()
        self.block: int | None = None
        self.hosts = "loopback"  # or "netns": see the module doc
        self.zk_session_timeout_ms = 6000
        self.broker_command: list[str] = list(broker_command or DEFAULT_BROKER_COMMAND)
        self.zookeeper_nodes: list[ZkNodeInfo] = []
        self.brokers: list[BrokerInfo] = []
        self.metrics = True  # each broker gets a metrics.listener on its own address
        # The web console process started by `odradek cluster up` (None: not started).
        self.console: dict[str, Any] | None = None
        # The schema registry started with the cluster (None: not started); its URL is
        # the brokers' confluent.schema.registry.url.
        self.schema_registry: dict[str, Any] | None = None
        # Children started by *this* process, so we can reap them (platform-notes: zombies).
        self._popens: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        self._zk: KazooClient | None = None
        # ZooKeeper session that owned /brokers/ids/<id> when we (re)launched the broker:
        # a registration left by the previous incarnation's not-yet-expired session must
        # not count as "the new process registered".
        self._stale_owner: dict[int, int] = {}
        # "plaintext" or "sasl_ssl" (issue 14); the latter with DIR/client.properties.
        self.security = "plaintext"
        self.client_properties: str | None = None
        # ZooKeeper authentication of the brokers and of this manager (issue 14 item 5):
        # a 0600 file holding ``odradek.zookeeper.auth`` (the secret stays out of
        # cluster.json), and whether znodes are created with Kafka's secure ACLs.
        self.zk_auth_file: str | None = None
        self.zk_set_acl = False
        if self.state_path.exists():
            self._load()
            if broker_command is not None:
                self.broker_command = list(broker_command)

    # ----------------------------------------------------------------- state

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

    # ----------------------------------------------------------------- up / down

    @classmethod
    def start(
        cls,
        dir: Path,
        n_brokers: int,
        *,
        broker_config: Mapping[str, str] | None = None,
        zk_session_timeout_ms: int = 6000,
        zk_nodes: int = 1,
        broker_command: Sequence[str] | None = None,
        timeout: float = 60.0,
        metrics: bool = True,
        security: str = "plaintext",
        hosts: str = "loopback",
        first_broker_id: int = 1,
        schema_registry: bool = False,
        **security_options: Any,
    ) -> LocalCluster:
        """Create and bring up a cluster; use as a context manager to always ``down()``."""
        c = cls(dir, broker_command=broker_command)
        c.metrics = metrics
        c.up(
            n_brokers,
            broker_config or {},
            zk_session_timeout_ms,
            zk_nodes=zk_nodes,
            timeout=timeout,
            security=security,
            hosts=hosts,
            first_broker_id=first_broker_id,
            schema_registry=schema_registry,
            **security_options,
        )
        return c

    def client_config(self) -> dict[str, str]:
        """librdkafka settings a client needs besides bootstrap.servers: {} for a
        plaintext cluster, the admin user's SASL_SSL settings for a secured one."""
        from odradek.cluster.security_setup import client_config

        return client_config(self.client_properties)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def any_alive(self) -> bool:
        members = [*self.brokers, *self.zookeeper_nodes]
        return any(procs.alive(m.pid, m.start_time) for m in members)

    def up(
        self,
        n_brokers: int,
        broker_config: Mapping[str, str] | None = None,
        zk_session_timeout_ms: int = 6000,
        *,
        zk_nodes: int = 1,
        partitions_default: int | None = None,
        timeout: float = 60.0,
        security: str = "plaintext",
        hosts: str = "loopback",
        first_broker_id: int = 1,
        schema_registry: bool = False,
        **security_options: Any,
    ) -> str:
        """Start ZooKeeper and ``n_brokers`` brokers (ids ``first_broker_id`` ..
        ``first_broker_id + n - 1``; Kafka's own tests and tools often assume ids from 0);
        wait until every broker accepts TCP and is registered in ZooKeeper. Returns
        bootstrap.servers. On failure everything started is stopped again.
        ``schema_registry``: also start ``odradek schema-registry`` (``registry_url``) and
        give every broker its URL as ``confluent.schema.registry.url``."""
        if not 1 <= n_brokers <= addresses.MAX_BROKERS:
            raise ValueError(f"--brokers must be in 1..{addresses.MAX_BROKERS}")
        if first_broker_id < 0:
            raise ValueError("--first-broker-id must be >= 0")
        if zk_nodes < 1:
            raise ValueError("zk_nodes must be >= 1")
        if security not in ("plaintext", "sasl_ssl"):
            raise ValueError("--security must be plaintext or sasl_ssl")
        self.security = security
        if hosts not in HOSTS_MODES:
            raise ValueError(f"hosts must be one of {HOSTS_MODES}")
        if hosts == "netns":
            why = netns.available()
            if why is not None:
                raise KafkaError(ErrorCode.unknown_server_error, f"--hosts netns: {why}")
        if self.state_path.exists() and self.any_alive():
            raise KafkaError(
                ErrorCode.unknown_server_error,
                f"cluster in {self.dir} is already running; run `odradek cluster down` first",
            )
        deadline = time.monotonic() + timeout
        self.dir.mkdir(parents=True, exist_ok=True)
        self.hosts = hosts
        self.block = addresses.claim_block(
            self.dir, n_brokers, zk_nodes, prefer=self.block, check_ports=hosts == "loopback"
        )
        self.zk_session_timeout_ms = zk_session_timeout_ms
        try:
            if hosts == "netns":
                roles = [f"zk{j}" for j in range(1, zk_nodes + 1)]
                roles += [f"b{i}" for i in range(1, n_brokers + 1)]
                roles += [f"c{n}" for n in range(1, CLIENT_HOSTS + 1)]
                self.save()  # hosts + block on disk first: a crash below is still cleanable
                netns.NetnsHosts(self.block, roles).up()
            self._start_zookeeper_nodes(zk_nodes, deadline)
            # by broker id; addresses by slot (1..n) in the block (--first-broker-id)
            overrides: dict[int, dict[str, str]] = {
                first_broker_id + slot - 1: dict(broker_config or {})
                for slot in range(1, n_brokers + 1)}
            if schema_registry:
                for props in overrides.values():  # the operator's own value wins
                    props.setdefault("confluent.schema.registry.url", self.registry_url())
            self._configure_zk_security(broker_config or {}, security)
            if self.zk_auth_file is not None:
                for props in overrides.values():
                    props.setdefault("odradek.zookeeper.auth", self._zk_auth_value() or "")
                    props.setdefault("zookeeper.set.acl", str(self.zk_set_acl).lower())
            if security == "sasl_ssl":
                from odradek.cluster.security_setup import ADMIN_USER, prepare

                broker_hosts = {first_broker_id + slot - 1: self._broker_address(slot)
                                for slot in range(1, n_brokers + 1)}
                # extra_listeners / plain_users (security_setup.prepare)
                setup = prepare(self.dir, broker_hosts, self.zk_client(), **security_options)
                self.client_properties = str(setup.client_properties)
                for i, host in broker_hosts.items():
                    # the operator's own overrides win
                    overrides[i] = {**setup.broker_properties(i, host, addresses.BROKER_PORT),
                                    **overrides[i]}
                    if schema_registry:
                        # The registry requires a login over https: the brokers' schema
                        # id validation logs in as the admin and trusts the cluster's CA.
                        overrides[i].setdefault("confluent.basic.auth.user.info",
                                                f"{ADMIN_USER}:{setup.admin_password}")
                        overrides[i].setdefault("confluent.ssl.truststore.location",
                                                str(setup.ca))
            self.brokers = []
            for slot in range(1, n_brokers + 1):
                self.brokers.append(self._write_broker_config(
                    first_broker_id + slot - 1, overrides[first_broker_id + slot - 1],
                    partitions_default, slot=slot))
            self.save()
            for b in self.brokers:
                self._launch_broker(b)
            self.save()
            for b in self.brokers:
                self.wait_broker_ready(b.id, max(0.0, deadline - time.monotonic()))
            if self.broker_command == list(DEFAULT_BROKER_COMMAND):  # not a stand-in
                self.wait_brokers_see_each_other(max(0.0, deadline - time.monotonic()))
            if schema_registry:
                self.start_schema_registry(max(5.0, deadline - time.monotonic()))
        except BaseException:
            self.down()
            raise
        return self.bootstrap_servers

    def _start_zookeeper_nodes(self, n: int, deadline: float) -> None:
        assert self.block is not None
        peers = [(j, self._zk_address(j)) for j in range(1, n + 1)] if n > 1 else None
        servers: list[ZooKeeperServer] = []
        self.zookeeper_nodes = []
        for j in range(1, n + 1):
            data_dir = self.dir / ("zookeeper" if n == 1 else f"zookeeper-{j}")
            srv = ZooKeeperServer(
                data_dir,
                self._zk_address(j),
                addresses.ZK_PORT,
                server_id=j if peers else None,
                peers=peers,
                command_prefix=self.exec_prefix(f"zk{j}"),
            )
            srv.start()
            servers.append(srv)
            assert srv._proc is not None
            self._popens[("zk", j)] = srv._proc
            self.zookeeper_nodes.append(self._zk_info(j, srv))
        self.save()  # pids recorded before we wait: a crash here is still cleanable
        for srv in servers:
            srv.wait_ready(max(0.0, deadline - time.monotonic()))

    @staticmethod
    def _zk_info(node_id: int, srv: ZooKeeperServer) -> ZkNodeInfo:
        pid = srv.pid
        return ZkNodeInfo(
            id=node_id,
            address=srv.address,
            port=srv.port,
            pid=pid,
            start_time=procs.proc_start_time(pid) if pid else None,
            data_dir=str(srv.data_dir),
            cgroup=srv.cgroup,
        )

    def add_broker(self, overrides: Mapping[str, str] | None = None,
                   timeout: float = 30.0) -> BrokerInfo:
        """Start one more broker (the next id, the next address of the block), e.g. to
        reassign partitions onto it; its config repeats the first broker's overrides."""
        assert self.block is not None and self.brokers
        first = self.brokers[0]
        base = {k: v for k, v in _read_properties(Path(first.config)).items()
                if k not in _PER_BROKER_KEYS}
        new_id, slot = max(x.id for x in self.brokers) + 1, len(self.brokers) + 1
        if self.hosts == "netns":
            # A new host: its namespace and veth on the cluster's bridge (issue 19).
            self.netns_hosts().add_host(f"b{slot}")
        if self.security == "sasl_ssl":
            from odradek.cluster.security_setup import added_broker_properties

            # Its own certificate from the cluster's CA and the first broker's listeners
            # on its own address (the SCRAM inter-broker user and ZooKeeper identity
            # come with the copied properties).
            base.update(added_broker_properties(
                self.dir, _read_properties(Path(first.config)), new_id, first.host,
                self._broker_address(slot)))
        base.update(overrides or {})
        b = self._write_broker_config(new_id, base, None, slot=slot)
        self.brokers.append(b)
        self.save()
        self._launch_broker(b)
        self.save()
        self.wait_broker_ready(b.id, timeout)
        return b

    def _write_broker_config(
        self, broker_id: int, overrides: Mapping[str, str], partitions_default: int | None,
        *, slot: int | None = None,
    ) -> BrokerInfo:
        """``slot``: the broker's place in the address block (1..), which is its id
        unless the ids start elsewhere (--first-broker-id)."""
        assert self.block is not None
        host = self._broker_address(broker_id if slot is None else slot)
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

    def _launch_broker(self, b: BrokerInfo) -> None:
        try:
            stat = self.zk_client().exists(znodes.broker_path(b.id))
        except (KazooException, KazooTimeoutError):
            stat = None  # ZooKeeper unreachable: the wait below will say so
        if stat is not None:
            self._stale_owner[b.id] = stat.ephemeralOwner
        else:
            self._stale_owner.pop(b.id, None)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(b.log, "ab") as log:
            p = subprocess.Popen(
                [*self.exec_prefix(self.broker_role(b.id)), *self.broker_command, b.config],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=Path(b.config).parent,
                env=env,
                # Own session: Ctrl-C in the operator's shell or pytest must not hit it.
                start_new_session=True,
            )
        self._popens[("broker", b.id)] = p
        b.pid = p.pid
        b.start_time = procs.proc_start_time(p.pid)

    def down(self, timeout: float = 15.0) -> None:
        """Stop every broker (TERM, then KILL after ``timeout``), then ZooKeeper.
        Idempotent; safe on a half-started cluster."""
        self.close_zk_client()
        self.stop_console(timeout)
        self.stop_schema_registry(timeout)
        brokers = [b for b in self.brokers if procs.alive(b.pid, b.start_time)]
        for b in brokers:  # signal all first so they shut down in parallel
            procs._send(b.pid or 0, signal.SIGCONT)
            procs._send(b.pid or 0, signal.SIGTERM)
        for b in brokers:
            procs.terminate(b.pid, b.start_time, timeout, popen=self._popens.get(("broker", b.id)))
        for z in self.zookeeper_nodes:
            procs.terminate(z.pid, z.start_time, timeout, popen=self._popens.get(("zk", z.id)))
            self._remove_cgroup(z)
        for p in self._popens.values():  # reap anything left (e.g. a failed early start)
            if p.poll() is None:
                p.kill()
            p.wait()
        self._popens.clear()
        if self.state_path.exists():
            self.save()
        if self.block is not None:
            if self.hosts == "netns":
                # By name, so namespaces of a crashed `up` go too (issue 19).
                removed = netns.teardown(self.block)
                if removed:
                    logger.info("removed %s", " ".join(removed))
            addresses.release_block(self.block, self.dir)

    # ----------------------------------------------------------------- console

    def start_console(self, reports: Sequence[Path] = ()) -> str:
        """Start ``odradek console`` for this cluster on the block's first address
        (claimed with the block, so the port is ours); returns its URL."""
        assert self.block is not None
        self.stop_console()
        host = addresses.zk_address(self.block, 1)
        url = f"http://{host}:{addresses.CONSOLE_PORT}/"
        log = self.dir / "console.log"
        cmd = [sys.executable, "-m", "odradek", "console", "--cluster-dir", str(self.dir),
               "--listen", f"{host}:{addresses.CONSOLE_PORT}", "--log-file", str(log)]
        for r in reports:
            cmd += ["--reports", str(r)]
        if self.client_properties:  # a secured cluster: its admin user's settings
            cmd += ["--command-config", self.client_properties]
        with open(self.dir / "console.out", "ab") as out:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, cwd=self.dir,
                                 start_new_session=True)
        self._popens[("console", 0)] = p
        self.console = {"pid": p.pid, "start_time": procs.proc_start_time(p.pid),
                        "url": url, "log": str(log)}
        self.save()
        self._poll("the console to accept connections",
                   lambda: p.poll() is None and _tcp_accepts(host, addresses.CONSOLE_PORT),
                   30.0)
        return url

    # ----------------------------------------------------------------- schema registry

    def registry_url(self) -> str:
        """Where ``start_schema_registry`` listens: the block's first address (claimed
        with the block, so the port is ours)."""
        assert self.block is not None
        # A secured cluster's registry serves TLS with a certificate of the cluster's CA.
        scheme = "https" if self.security == "sasl_ssl" else "http"
        return f"{scheme}://{addresses.zk_address(self.block, 1)}:{addresses.REGISTRY_PORT}"

    def start_schema_registry(self, timeout: float = 60.0) -> str:
        """Start ``odradek schema-registry`` for this cluster (elected through its
        ZooKeeper, so ``odradek schemas --bootstrap-server`` finds it); returns its URL
        once it answers."""
        self.stop_schema_registry()
        url = self.registry_url()
        log = self.dir / "schema-registry.log"
        cmd = [sys.executable, "-m", "odradek", "schema-registry",
               "--bootstrap-server", self.bootstrap_servers, "--listen", url,
               "--zookeeper", self.zk_connect, "--log-file", str(log)]
        if self.client_properties:  # a secured cluster: its admin user's settings
            cmd += ["--command-config", self.client_properties]
        ca = None
        if self.security == "sasl_ssl":
            # Basic authentication against the cluster's SCRAM users (its admin is the
            # super user), over TLS; the SCRAM credentials are read under the brokers'
            # ZooKeeper identity (zookeeper.set.acl makes them creator-only).
            from odradek.cluster.certs import load_ca  # noqa: PLC0415

            sec = self.dir / "security"
            host = addresses.zk_address(self.block, 1)
            keystore = load_ca(sec).issue(sec / "schema-registry.pem", "schema-registry",
                                          [host])
            ca = str(sec / "ca.pem")
            cmd += ["--ssl-keystore-location", str(keystore), "--ssl-truststore-location", ca]
            if self.zk_auth_file:
                cmd += ["--zookeeper-auth-file", self.zk_auth_file]
        with open(self.dir / "schema-registry.out", "ab") as out:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, cwd=self.dir,
                                 start_new_session=True)
        self._popens[("schema-registry", 0)] = p
        self.schema_registry = {"pid": p.pid, "start_time": procs.proc_start_time(p.pid),
                                "url": url, "log": str(log)}
        self.save()
        self._poll("the schema registry to answer",
                   lambda: p.poll() is None and _http_ok(url + "/subjects", ca,
                                                         auth_required=ca is not None),
                   timeout)
        return url

    def stop_schema_registry(self, timeout: float = 10.0) -> None:
        r = self.schema_registry
        if not r:
            return
        procs.terminate(r.get("pid"), r.get("start_time"), timeout,
                        popen=self._popens.pop(("schema-registry", 0), None))
        self.schema_registry = None

    def stop_console(self, timeout: float = 10.0) -> None:
        c = self.console
        if not c:
            return
        procs.terminate(c.get("pid"), c.get("start_time"), timeout,
                        popen=self._popens.pop(("console", 0), None))
        self.console = None
    # ----------------------------------------------------------------- hosts

    def _broker_address(self, slot: int) -> str:
        """The address of the broker in ``slot`` (1..) of the block: its id unless the
        ids start elsewhere (--first-broker-id)."""
        assert self.block is not None
        if self.hosts == "netns":
            return netns.host_address(self.block, f"b{slot}")
        return addresses.broker_address(self.block, slot)

    def _zk_address(self, node_id: int) -> str:
        assert self.block is not None
        if self.hosts == "netns":
            return netns.host_address(self.block, f"zk{node_id}")
        return addresses.zk_address(self.block, node_id)

    def netns_hosts(self) -> netns.NetnsHosts:
        """The namespaces of a running ``hosts="netns"`` cluster (faults, client hosts)."""
        if self.hosts != "netns" or self.block is None:
            raise KafkaError(ErrorCode.unknown_server_error, "not a --hosts netns cluster")
        roles = [f"zk{z.id}" for z in self.zookeeper_nodes]
        roles += [self.broker_role(b.id) for b in self.brokers]
        roles += [f"c{n}" for n in range(1, CLIENT_HOSTS + 1)]
        return netns.NetnsHosts(self.block, roles)

    def broker_role(self, broker_id: int) -> str:
        """The host role (``b<slot>``) of a broker: its place in the block, which is its
        id unless the ids start elsewhere (--first-broker-id 0 puts broker 0 on b1)."""
        b = self.broker(broker_id)
        if self.hosts == "netns":
            # Broker slot i lives on .(1+i) (netns.role_octet).
            return f"b{int(b.host.rsplit('.', 1)[1]) - 1}"
        return f"b{self.brokers.index(b) + 1}"

    def exec_prefix(self, role: str) -> list[str]:
        """Command prefix that runs a process on host ``role`` (b<i>, zk<j>, c<n>):
        empty on loopback, ``ip netns exec <ns>`` on netns hosts."""
        if self.hosts != "netns":
            return []
        assert self.block is not None
        return netns.NetnsHosts(self.block).exec_prefix(role)

    @staticmethod
    def _remove_cgroup(z: ZkNodeInfo) -> None:
        root = cgroup2_root()
        if z.cgroup and root is not None:
            try:
                (root / z.cgroup).rmdir()
            except OSError:
                pass

    # ----------------------------------------------------------------- ZooKeeper client

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

    def zk_client(self) -> KazooClient:
        """The manager's own ZooKeeper session (from 127.0.0.1, outside every block, so
        fault rules on a block's addresses do not cut the manager off). It authenticates
        as the brokers do, so the znodes it creates (the admin's SCRAM credentials) are
        theirs too."""
        if self._zk is None:
            self._zk = connect_zk(
                self.zk_connect, source_ip=None, session_timeout_s=10.0, timeout_s=5.0,
                auth=parse_zk_auth(self._zk_auth_value()), secure_acls=self.zk_set_acl,
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

    # ----------------------------------------------------------------- waiting

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
                    ErrorCode.request_timed_out, f"timed out after {timeout}s waiting for {what}{extra}"
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
            lambda: _tcp_accepts(b.host, b.port),
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
        from odradek.client.connection import KafkaConnection  # noqa: PLC0415
        from odradek.config import parse_properties  # noqa: PLC0415
        from odradek.protocol.client_codec import request_entity  # noqa: PLC0415
        from odradek.security.client_security import ClientSecurity  # noqa: PLC0415

        props = (parse_properties(Path(self.client_properties).read_text())
                 if self.client_properties else {})
        security = ClientSecurity.from_properties(props)
        want = {b.id for b in self.brokers}

        def sees_all(b: BrokerInfo) -> bool:
            try:
                with KafkaConnection(b.host, b.port, security=security,
                                     timeout_s=5.0) as conn:
                    md = conn.request(request_entity(
                        3, 12, topics=(), allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False))
            except Exception:  # not answering yet: not yet
                return False
            return {int(x.node_id) for x in md.brokers} >= want

        for b in self.brokers:
            self._poll(f"broker {b.id} to see every broker", lambda b=b: sees_all(b),
                       timeout, b.id)

    # ----------------------------------------------------------------- broker faults

    def broker_state(self, broker_id: int) -> str:
        """``running``, ``stopped`` (SIGSTOP) or ``dead``."""
        b = self.broker(broker_id)
        popen = self._popens.get(("broker", broker_id))
        if popen is not None:
            popen.poll()  # reap, so a killed child reads as dead rather than zombie
        if not procs.alive(b.pid, b.start_time):
            return "dead"
        return "stopped" if procs.is_stopped(b.pid, b.start_time) else "running"

    def stop_broker(
        self, broker_id: int, sig: int = signal.SIGTERM, timeout: float = 30.0
    ) -> None:
        """TERM: graceful stop, KILL after ``timeout``; KILL: hard crash; both wait
        until the process is gone. STOP: freeze (a hung broker) until ``start_broker``."""
        b = self.broker(broker_id)
        popen = self._popens.get(("broker", broker_id))
        if not procs.alive(b.pid, b.start_time):
            return
        if sig == signal.SIGSTOP:
            procs._send(b.pid or 0, signal.SIGSTOP)
            self._poll(
                f"broker {broker_id} to stop", lambda: procs.is_stopped(b.pid, b.start_time), 5.0
            )
            return
        procs.terminate(b.pid, b.start_time, timeout, sig=sig, popen=popen)

    def start_broker(self, broker_id: int, timeout: float = 30.0, *, wait: bool = True) -> None:
        """Bring a broker back: SIGCONT if it was SIGSTOPped, else relaunch it (same
        address, config and log dir) if dead; a running broker is left alone."""
        b = self.broker(broker_id)
        state = self.broker_state(broker_id)
        if state == "stopped":
            procs._send(b.pid or 0, signal.SIGCONT)
            return
        if state == "dead":
            self._launch_broker(b)
            self.save()
        if wait:
            self.wait_broker_ready(broker_id, timeout)

    # ----------------------------------------------------------------- ZooKeeper faults

    def zk_state(self, node_id: int = 1) -> str:
        z = self.zookeeper(node_id)
        popen = self._popens.get(("zk", node_id))
        if popen is not None:
            popen.poll()
        if not procs.alive(z.pid, z.start_time):
            return "dead"
        return "stopped" if procs.is_stopped(z.pid, z.start_time) else "running"

    def stop_zookeeper(self, node_id: int = 1, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        z = self.zookeeper(node_id)
        if sig == signal.SIGSTOP:
            procs._send(z.pid or 0, signal.SIGSTOP)
            return
        procs.terminate(z.pid, z.start_time, timeout, sig=sig, popen=self._popens.get(("zk", node_id)))

    def start_zookeeper(self, node_id: int = 1, timeout: float = 30.0) -> None:
        z = self.zookeeper(node_id)
        state = self.zk_state(node_id)
        if state == "stopped":
            procs._send(z.pid or 0, signal.SIGCONT)
            return
        if state == "running":
            return
        n = len(self.zookeeper_nodes)
        peers = [(x.id, x.address) for x in self.zookeeper_nodes] if n > 1 else None
        srv = ZooKeeperServer(
            Path(z.data_dir),
            z.address,
            z.port,
            server_id=z.id if peers else None,
            peers=peers,
            command_prefix=self.exec_prefix(f"zk{z.id}"),
        )
        srv.start()
        assert srv._proc is not None
        self._popens[("zk", node_id)] = srv._proc
        new = self._zk_info(node_id, srv)
        z.pid, z.start_time, z.cgroup = new.pid, new.start_time, new.cgroup
        self.save()
        if n == 1:
            srv.wait_ready(timeout)  # an ensemble member may need its peers to serve

    # ----------------------------------------------------------------- status

    def status(self) -> dict[str, Any]:
        """Liveness of every node, registrations and the controller (JSON-able)."""
        from odradek.zk.server import four_letter_word

        zks = []
        for z in self.zookeeper_nodes:
            mode = None
            if self.zk_state(z.id) == "running":
                try:
                    srvr = four_letter_word(z.address, z.port, "srvr")
                    mode = next(
                        (ln.split(":", 1)[1].strip() for ln in srvr.splitlines() if ln.startswith("Mode:")),
                        "not serving",
                    )
                except OSError:
                    mode = "not serving"
            zks.append({**asdict(z), "state": self.zk_state(z.id), "mode": mode})
        zk_up = any(z["mode"] not in (None, "not serving") for z in zks)
        brokers = []
        for b in self.brokers:
            registered: bool | None = None
            if zk_up:
                try:
                    registered = self.is_registered(b.id)
                except Exception:  # ZooKeeper unreachable: unknown, not False
                    registered = None
            brokers.append(
                {**asdict(b), "address": b.address, "state": self.broker_state(b.id), "registered": registered}
            )
        controller = None
        if zk_up:
            try:
                controller = self.controller_id()
            except Exception:
                controller = None
        return {
            "dir": str(self.dir),
            "block": self.block,
            "hosts": self.hosts,
            "bootstrap_servers": self.bootstrap_servers,
            "zookeeper": zks,
            "brokers": brokers,
            "controller": controller,
        }
