"""Start and stop ``odradek schema-registry`` processes beside a test cluster: each listens
on the cluster's own loopback block (ZooKeeper node 1's address), so concurrent test runs
never collide on a port."""

from __future__ import annotations

import base64
import json
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.polling import wait_until

from odradek.cluster import addresses
from odradek.cluster.local import LocalCluster

__all__ = ["RegistryProcess", "start_registry", "http"]

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass
class RegistryProcess:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(15)


def http(
    url: str,
    method: str,
    path: str,
    body: Any = None,
    raw: bytes | None = None,
    timeout: float = 30.0,
    auth: tuple[str, str] | None = None,
    cafile: str | None = None,
) -> tuple[int, Any]:
    """(status, parsed JSON body) of one request; errors are answers, not exceptions.
    ``auth``: HTTP basic credentials; ``cafile``: the CA of an https registry."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": CONTENT_TYPE}
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    ctx = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            status, text = resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def start_registry(
    cluster: LocalCluster,
    port: int,
    *,
    zookeeper: bool = False,
    topic: str = "_schemas",
    command_config: str | None = None,
    extra_args: tuple[str, ...] = (),
    https: bool = False,
    cafile: str | None = None,
) -> RegistryProcess:
    """``https``: listen with TLS (``extra_args`` give the keystore); the readiness probe
    then trusts ``cafile`` and takes a 401 (authentication on) as an answer."""
    assert cluster.block is not None
    host = addresses.zk_address(cluster.block, 1)
    url = f"{'https' if https else 'http'}://{host}:{port}"
    log = cluster.dir / f"schema-registry-{port}.log"
    cmd = [
        sys.executable,
        "-m",
        "odradek",
        "schema-registry",
        "--bootstrap-server",
        cluster.bootstrap_servers,
        "--listen",
        url,
        "--log-file",
        str(log),
        "--topic",
        topic,
    ]
    if zookeeper:
        cmd += ["--zookeeper", cluster.zk_connect]
    if command_config:
        cmd += ["--command-config", command_config]
    cmd += list(extra_args)
    out = open(cluster.dir / f"schema-registry-{port}.out", "ab")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    out.close()
    reg = RegistryProcess(proc, url, log)

    def up() -> bool:
        if proc.poll() is not None:
            out = cluster.dir / f"schema-registry-{port}.out"
            raise AssertionError(
                f"schema registry exited: {log.read_text() if log.exists() else ''}"
                f"{out.read_text() if out.exists() else ''}"
            )
        try:
            return http(url, "GET", "/subjects", timeout=2, cafile=cafile)[0] in (200, 401)
        except OSError:
            return False

    wait_until(up, f"the schema registry at {url}", timeout=60)
    return reg
