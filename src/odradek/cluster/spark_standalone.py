"""A Spark standalone cluster (one master, N workers) from the pyspark installation,
for pipelines whose executors run in their own JVMs (issue 19).

Started the way a user would without a Spark distribution: ``spark-class
org.apache.spark.deploy.master.Master`` and ``...worker.Worker`` from pyspark's
``bin/``. Bounded for a shared 2-core machine: each worker offers 1 core and
``worker_memory`` (1 GB) to executors; the daemons themselves get a 256 MB heap.

The connector ships to executors the way a deployment would: :func:`connector_zip`
packs the ``odradek`` package into a zip that executors unpack (``spark.archives``).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.cluster import procs
from odradek.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek.cluster.local import LocalCluster

logger = logging.getLogger(__name__)

__all__ = ["SparkStandalone", "connector_zip", "spark_home"]


def spark_home() -> Path:
    import pyspark  # noqa: PLC0415

    return Path(pyspark.__file__).resolve().parent


def connector_zip(dest: Path) -> Path:
    """Zip the ``odradek`` package (``odradek/...`` at the root) into ``dest``, to ship
    as ``spark.archives=<zip>#<alias>``: each executor unpacks it into ``<alias>/`` in
    its working directory, and ``spark.executorEnv.PYTHONPATH=<alias>`` puts it first on
    the Python workers' path.

    Not ``--py-files``: a zip on ``sys.path`` is imported by zipimport, and numba's
    ``cache=True`` kernels (``odradek.client.kernels``) refuse to load from it
    ("cannot cache function ...: no locator available") -- found running the pipeline
    demo on a standalone cluster. An unpacked archive is a real directory."""
    import odradek  # noqa: PLC0415

    pkg = Path(odradek.__file__).resolve().parent
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(pkg.rglob("*.py")):
            z.write(f, Path("odradek") / f.relative_to(pkg))
    return dest


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class SparkStandalone:
    """``with SparkStandalone(dir, host="127.0.0.1", workers=2) as s: s.master_url``."""

    def __init__(
        self,
        dir: Path,
        *,
        host: str = "127.0.0.1",
        workers: int = 2,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        worker_prefixes: list[list[str]] | None = None,
        worker_hosts: list[str] | None = None,
    ) -> None:
        self.dir = Path(dir)
        self.host = host
        self.n_workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        # Per worker: a command prefix (e.g. ``ip netns exec <ns>``) and the address it
        # binds; default: the master's host, no prefix.
        self.worker_prefixes = worker_prefixes or [[] for _ in range(workers)]
        self.worker_hosts = worker_hosts or [host] * workers
        self.port = 0
        self._procs: list[subprocess.Popen[bytes]] = []

    @classmethod
    def beside(cls, cluster: LocalCluster, dir: Path, workers: int = 2) -> SparkStandalone:
        """A Spark cluster placed next to an Odradek ``cluster``: on loopback, every
        daemon on 127.0.0.1; on netns hosts, the master on the bridge (the manager's
        side, where the driver runs too) and worker *i* on client host ``c<i>``, so its
        executors are processes on another host that reach the brokers, and the
        driver, by their addresses."""
        if cluster.hosts != "netns":
            return cls(dir, workers=workers)
        from odradek.cluster import netns  # noqa: PLC0415

        hosts = cluster.netns_hosts()
        roles = [f"c{i}" for i in range(1, workers + 1)]
        return cls(
            dir,
            host=netns.endpoint_address(hosts.block, netns.MANAGER),
            workers=workers,
            worker_prefixes=[cluster.exec_prefix(r) for r in roles],
            worker_hosts=[hosts.address(r) for r in roles],
        )

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        home = spark_home()
        env = dict(
            os.environ,
            SPARK_HOME=str(home),
            SPARK_DAEMON_MEMORY="256m",
            SPARK_LOG_DIR=str(self.dir / "logs"),
            SPARK_WORKER_DIR=str(self.dir / "work"),
        )
        # The child keeps its own copy of the descriptor; ours is closed on leaving.
        with open(self.dir / f"{name}.log", "ab") as log_file:
            p = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.dir,
                start_new_session=True,
            )
        self._procs.append(p)
        return p

    def start(self, timeout: float = 90.0) -> str:
        self.dir.mkdir(parents=True, exist_ok=True)
        spark_class = str(spark_home() / "bin" / "spark-class")
        self.port = _free_port(self.host)
        try:
            self._spawn(
                "master",
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    self.host,
                    "--port",
                    str(self.port),
                    "--webui-port",
                    "0",
                ],
            )
            for i in range(self.n_workers):
                self._spawn(
                    f"worker-{i + 1}",
                    [
                        *self.worker_prefixes[i],
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        self.worker_hosts[i],
                        "--webui-port",
                        "0",
                        "--cores",
                        str(self.worker_cores),
                        "--memory",
                        self.worker_memory,
                        "--work-dir",
                        str(self.dir / f"work-{i + 1}"),
                        self.master_url,
                    ],
                )
            self._wait_workers(timeout)
        except BaseException:
            self.stop()
            raise
        return self.master_url

    def _wait_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        log = self.dir / "master.log"
        n = 0
        while time.monotonic() < deadline:
            for p in self._procs:
                if p.poll() is not None:
                    raise KafkaError(
                        ErrorCode.unknown_server_error,
                        f"a Spark daemon exited ({p.args!r}); see {self.dir}",
                    )
            try:
                n = len(re.findall(r"Registering worker", log.read_text(errors="replace")))
            except FileNotFoundError:
                n = 0
            if n >= self.n_workers:
                return
            time.sleep(0.3)
        raise KafkaError(
            ErrorCode.request_timed_out,
            f"{n}/{self.n_workers} Spark workers registered after {timeout:.0f} s",
        )

    def stop(self) -> None:
        # Workers first (they kill their executors), then the master; each by its pid.
        for p in reversed(self._procs):
            procs.terminate(p.pid, procs.proc_start_time(p.pid), 20.0, sig=signal.SIGTERM, popen=p)
        for p in self._procs:
            p.wait()
        self._procs.clear()

    def __enter__(self) -> SparkStandalone:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
