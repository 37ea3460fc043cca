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

This module is the processes' lifecycle: bringing the cluster up and down, adding a
broker, stopping and restarting brokers and ZooKeeper nodes (faults), and the status.
``LocalCluster`` holds the cluster's state (what cluster.json records). Where each node
runs (``hosts.py``) and the formats of DIR's files (``layout.py``: cluster.json,
server.properties, the ZooKeeper identity) are plain functions it calls with that state.
Its other parts are still base classes in modules of their own: the waits and the
manager's ZooKeeper session (``readiness.py``), and the console and schema registry
processes (``services.py``).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from odradek.cluster import addresses, layout, netns, procs
from odradek.cluster import hosts as node_hosts
from odradek.cluster.hosts import CLIENT_HOSTS, HOSTS_MODES
from odradek.cluster.layout import (
    DEFAULT_BROKER_COMMAND,
    STATE_FILE,
    ZK_DIGEST_USER,
    BrokerInfo,
    ZkNodeInfo,
    read_properties,
)
from odradek.cluster.readiness import ClusterReadiness
from odradek.cluster.services import ClusterServices
from odradek.errors import ErrorCode, KafkaError
from odradek.zk import znodes
from odradek.zk.server import ZooKeeperServer

# BrokerInfo, ZkNodeInfo, DEFAULT_BROKER_COMMAND and the other constants live in
# layout.py and hosts.py; importable from here as before the split.
__all__ = [
    "BrokerInfo",
    "ZkNodeInfo",
    "LocalCluster",
    "DEFAULT_BROKER_COMMAND",
    "STATE_FILE",
    "ZK_DIGEST_USER",
    "HOSTS_MODES",
    "CLIENT_HOSTS",
]

logger = logging.getLogger(__name__)

# server.properties keys that differ per broker (add_broker does not copy them).
_PER_BROKER_KEYS = frozenset(
    {"broker.id", "listeners", "advertised.listeners", "log.dirs", "metrics.listener"}
)


class LocalCluster(ClusterReadiness, ClusterServices):
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

    # ----------------------------------------------------------------- DIR's files
    # Their formats are layout.py's (plain functions); the state is this object's.
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
        state = layout.read_state(self.state_path)
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
        self.zookeeper_nodes = state["zookeeper_nodes"]
        self.brokers = state["brokers"]

    def save(self) -> None:
        options = {
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
            "console": self.console,
            "schema_registry": self.schema_registry,
        }
        layout.write_state(self.state_path, options, self.zookeeper_nodes, self.brokers)

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
        return layout.write_broker_config(
            self.dir,
            broker_id,
            self._broker_address(broker_id if slot is None else slot),
            overrides,
            partitions_default,
            zk_connect=self.zk_connect,
            zk_session_timeout_ms=self.zk_session_timeout_ms,
            metrics=self.metrics,
        )

    def _configure_zk_security(self, broker_config: Mapping[str, str], security: str) -> None:
        """Decide how brokers and this manager authenticate to ZooKeeper (layout.py's
        ``zk_identity``)."""
        self.zk_auth_file, self.zk_set_acl = layout.zk_identity(self.dir, broker_config, security)
        if self.zk_auth_file is not None:
            self.close_zk_client()  # reconnect authenticated

    def _zk_auth_value(self) -> str | None:
        return layout.read_zk_auth(self.zk_auth_file)

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
                for slot in range(1, n_brokers + 1)
            }
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

                broker_hosts = {
                    first_broker_id + slot - 1: self._broker_address(slot)
                    for slot in range(1, n_brokers + 1)
                }
                # extra_listeners / plain_users (security_setup.prepare)
                setup = prepare(self.dir, broker_hosts, self.zk_client(), **security_options)
                self.client_properties = str(setup.client_properties)
                for i, host in broker_hosts.items():
                    # the operator's own overrides win
                    overrides[i] = {
                        **setup.broker_properties(i, host, addresses.BROKER_PORT),
                        **overrides[i],
                    }
                    if schema_registry:
                        # The registry requires a login over https: the brokers' schema
                        # id validation logs in as the admin and trusts the cluster's CA.
                        overrides[i].setdefault(
                            "confluent.basic.auth.user.info", f"{ADMIN_USER}:{setup.admin_password}"
                        )
                        overrides[i].setdefault("confluent.ssl.truststore.location", str(setup.ca))
            self.brokers = []
            for slot in range(1, n_brokers + 1):
                self.brokers.append(
                    self._write_broker_config(
                        first_broker_id + slot - 1,
                        overrides[first_broker_id + slot - 1],
                        partitions_default,
                        slot=slot,
                    )
                )
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

    def add_broker(
        self, overrides: Mapping[str, str] | None = None, timeout: float = 30.0
    ) -> BrokerInfo:
        """Start one more broker (the next id, the next address of the block), e.g. to
        reassign partitions onto it; its config repeats the first broker's overrides."""
        assert self.block is not None and self.brokers
        first = self.brokers[0]
        base = {
            k: v
            for k, v in read_properties(Path(first.config)).items()
            if k not in _PER_BROKER_KEYS
        }
        new_id, slot = max(x.id for x in self.brokers) + 1, len(self.brokers) + 1
        if self.hosts == "netns":
            # A new host: its namespace and veth on the cluster's bridge (issue 19).
            self.netns_hosts().add_host(f"b{slot}")
        if self.security == "sasl_ssl":
            from odradek.cluster.security_setup import added_broker_properties

            # Its own certificate from the cluster's CA and the first broker's listeners
            # on its own address (the SCRAM inter-broker user and ZooKeeper identity
            # come with the copied properties).
            base.update(
                added_broker_properties(
                    self.dir,
                    read_properties(Path(first.config)),
                    new_id,
                    first.host,
                    self._broker_address(slot),
                )
            )
        base.update(overrides or {})
        b = self._write_broker_config(new_id, base, None, slot=slot)
        self.brokers.append(b)
        self.save()
        self._launch_broker(b)
        self.save()
        self.wait_broker_ready(b.id, timeout)
        return b

    # ----------------------------------------------------------------- hosts
    # Where each node runs (odradek.cluster.hosts: plain functions of the hosts mode,
    # the block and the nodes, which this object holds).
    def _broker_address(self, slot: int) -> str:
        assert self.block is not None
        return node_hosts.broker_address(self.hosts, self.block, slot)

    def _zk_address(self, node_id: int) -> str:
        assert self.block is not None
        return node_hosts.zk_address(self.hosts, self.block, node_id)

    def netns_hosts(self) -> netns.NetnsHosts:
        """The namespaces of a running ``hosts="netns"`` cluster (faults, client hosts)."""
        return node_hosts.netns_hosts(self.hosts, self.block, self.zookeeper_nodes, self.brokers)

    def broker_role(self, broker_id: int) -> str:
        """The host role (``b<slot>``) of a broker (``odradek.cluster.hosts``)."""
        return node_hosts.broker_role(self.hosts, self.brokers, self.broker(broker_id))

    def exec_prefix(self, role: str) -> list[str]:
        """Command prefix that runs a process on host ``role`` (b<i>, zk<j>, c<n>)."""
        return node_hosts.exec_prefix(self.hosts, self.block, role)

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
            node_hosts.remove_cgroup(z)
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

    def stop_broker(self, broker_id: int, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
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

    def stop_zookeeper(
        self, node_id: int = 1, sig: int = signal.SIGTERM, timeout: float = 15.0
    ) -> None:
        z = self.zookeeper(node_id)
        if sig == signal.SIGSTOP:
            procs._send(z.pid or 0, signal.SIGSTOP)
            return
        procs.terminate(
            z.pid, z.start_time, timeout, sig=sig, popen=self._popens.get(("zk", node_id))
        )

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
                        (
                            ln.split(":", 1)[1].strip()
                            for ln in srvr.splitlines()
                            if ln.startswith("Mode:")
                        ),
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
                {
                    **asdict(b),
                    "address": b.address,
                    "state": self.broker_state(b.id),
                    "registered": registered,
                }
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
