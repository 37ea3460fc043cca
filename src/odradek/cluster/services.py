"""The processes a local cluster runs besides ZooKeeper and its brokers
(``odradek.cluster.local``): the web console (``odradek console``) and the schema registry
(``odradek schema-registry``), each on the block's first address (claimed with the
block, so their ports are the cluster's), recorded in cluster.json and stopped by
``down``.

``ClusterServices`` is a base class of ``LocalCluster``, not an object of its own. The
attributes and methods declared in the class belong to ``LocalCluster``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from odradek.cluster import addresses, procs
from odradek.cluster.readiness import http_ok, tcp_accepts

__all__ = ["ClusterServices"]


class ClusterServices:
    """Start and stop the console and the schema registry (see the module docstring)."""

    dir: Path
    block: int | None
    security: str
    client_properties: str | None
    zk_auth_file: str | None
    console: dict[str, Any] | None
    schema_registry: dict[str, Any] | None
    _popens: dict[tuple[str, int], subprocess.Popen[bytes]]

    if TYPE_CHECKING:

        @property
        def bootstrap_servers(self) -> str: ...

        @property
        def zk_connect(self) -> str: ...

        def save(self) -> None: ...

        def _poll(
            self, what: str, cond: Any, timeout: float, broker_id: int | None = None
        ) -> None: ...

    def _launch_service(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        """Start a service process of the cluster (its output to ``<dir>/<name>.out``, in
        its own session so a terminal's signals do not reach it) and keep its Popen."""
        with open(self.dir / f"{name}.out", "ab") as out:
            p = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
            )
        self._popens[(name, 0)] = p
        return p

    @staticmethod
    def _service_entry(p: subprocess.Popen[bytes], url: str, log: Path | str) -> dict[str, Any]:
        """What cluster.json records of a running service."""
        return {
            "pid": p.pid,
            "start_time": procs.proc_start_time(p.pid),
            "url": url,
            "log": str(log),
        }

    def start_console(self, reports: Sequence[Path] = ()) -> str:
        """Start ``odradek console`` for this cluster on the block's first address
        (claimed with the block, so the port is ours); returns its URL."""
        assert self.block is not None
        self.stop_console()
        host = addresses.zk_address(self.block, 1)
        url = f"http://{host}:{addresses.CONSOLE_PORT}/"
        log = self.dir / "console.log"
        cmd = [
            sys.executable,
            "-m",
            "odradek",
            "console",
            "--cluster-dir",
            str(self.dir),
            "--listen",
            f"{host}:{addresses.CONSOLE_PORT}",
            "--log-file",
            str(log),
        ]
        for r in reports:
            cmd += ["--reports", str(r)]
        if self.client_properties:  # a secured cluster: its admin user's settings
            cmd += ["--command-config", self.client_properties]
        p = self._launch_service("console", cmd)
        self.console = self._service_entry(p, url, log)
        self.save()
        self._poll(
            "the console to accept connections",
            lambda: p.poll() is None and tcp_accepts(host, addresses.CONSOLE_PORT),
            30.0,
        )
        return url

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
        cmd = [
            sys.executable,
            "-m",
            "odradek",
            "schema-registry",
            "--bootstrap-server",
            self.bootstrap_servers,
            "--listen",
            url,
            "--zookeeper",
            self.zk_connect,
            "--log-file",
            str(log),
        ]
        if self.client_properties:  # a secured cluster: its admin user's settings
            cmd += ["--command-config", self.client_properties]
        ca = None
        if self.security == "sasl_ssl":
            # Basic authentication against the cluster's SCRAM users (its admin is the
            # super user), over TLS; the SCRAM credentials are read under the brokers'
            # ZooKeeper identity (zookeeper.set.acl makes them creator-only).
            from odradek.cluster.certs import load_ca  # noqa: PLC0415

            sec = self.dir / "security"
            assert self.block is not None  # registry_url above checked it already
            host = addresses.zk_address(self.block, 1)
            keystore = load_ca(sec).issue(sec / "schema-registry.pem", "schema-registry", [host])
            ca = str(sec / "ca.pem")
            cmd += ["--ssl-keystore-location", str(keystore), "--ssl-truststore-location", ca]
            if self.zk_auth_file:
                cmd += ["--zookeeper-auth-file", self.zk_auth_file]
        p = self._launch_service("schema-registry", cmd)
        self.schema_registry = self._service_entry(p, url, log)
        self.save()
        self._poll(
            "the schema registry to answer",
            lambda: (
                p.poll() is None and http_ok(url + "/subjects", ca, auth_required=ca is not None)
            ),
            timeout,
        )
        return url

    def stop_schema_registry(self, timeout: float = 10.0) -> None:
        r = self.schema_registry
        if not r:
            return
        procs.terminate(
            r.get("pid"),
            r.get("start_time"),
            timeout,
            popen=self._popens.pop(("schema-registry", 0), None),
        )
        self.schema_registry = None

    def stop_console(self, timeout: float = 10.0) -> None:
        c = self.console
        if not c:
            return
        procs.terminate(
            c.get("pid"), c.get("start_time"), timeout, popen=self._popens.pop(("console", 0), None)
        )
        self.console = None
