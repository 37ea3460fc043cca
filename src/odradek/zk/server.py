"""A ZooKeeper server (Debian's jar) run as a child process (REQ-R12).

Started the way docs/platform-notes.md describes: ``java -cp <conf>:<jars> QuorumPeerMain zoo.cfg``,
not through systemd, one data dir and one loopback address per node. Each node is put
in its own cgroup v2 when the hierarchy is writable, because Java cannot bind a source
address per connection: fault tests match a ZooKeeper node's outgoing traffic with
``iptables -m cgroup --path <ZooKeeperServer.cgroup>`` instead (platform-notes: network faults).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from odradek.errors import ErrorCode, KafkaError
from odradek.security.private_files import write_private

__all__ = [
    "ZooKeeperServer",
    "cgroup2_root",
    "four_letter_word",
    "java_available",
    "zookeeper_jar",
]

ZK_CONF_DIR = Path("/etc/zookeeper/conf")  # log4j.properties for the CONSOLE appender
ZK_JAR = Path("/usr/share/java/zookeeper.jar")
ZK_EXTRA_JARS = (
    Path("/usr/share/java/slf4j-log4j12.jar"),
    Path("/usr/share/java/log4j-1.2.jar"),
)
QUORUM_PORT = 2888
ELECTION_PORT = 3888
CGROUP_PARENT = "odradek"


def java_available() -> bool:
    return shutil.which("java") is not None


def zookeeper_jar() -> Path:
    """The installed ZooKeeper jar, or a KafkaError telling the operator what to install."""
    if not java_available():
        raise KafkaError(
            ErrorCode.unknown_server_error,
            "java not found: apt-get install -y --no-install-recommends zookeeper",
        )
    if not ZK_JAR.exists():
        raise KafkaError(
            ErrorCode.unknown_server_error,
            f"{ZK_JAR} not found: apt-get install -y --no-install-recommends zookeeper",
        )
    return ZK_JAR


def cgroup2_root() -> Path | None:
    """Mount point of the cgroup v2 hierarchy (``/sys/fs/cgroup`` or, on hybrid
    systems, ``/sys/fs/cgroup/unified``), or None."""
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2] == "cgroup2":
                    return Path(parts[1])
    except OSError:
        pass
    return None


def four_letter_word(address: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``, ...) and return the reply."""
    with socket.create_connection((address, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks: list[bytes] = []
        while True:
            b = s.recv(4096)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    """One ZooKeeper node: ``start()``, ``wait_ready()``, ``stop()``.

    ``peers`` (list of ``(server_id, address)``, including this node) makes it an
    ensemble member; without it the node runs standalone.
    """

    def __init__(
        self,
        data_dir: Path,
        address: str,
        port: int = 2181,
        *,
        server_id: int | None = None,
        peers: list[tuple[int, str]] | None = None,
        tick_time: int = 500,
        command_prefix: list[str] | None = None,
        sasl_users: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        # e.g. ``ip netns exec <ns>``: run the node on another (namespace) host.
        self.command_prefix = list(command_prefix or [])
        self.address = address
        self.port = port
        self.server_id = server_id
        self.peers = list(peers) if peers else None
        self.tick_time = tick_time
        self._proc: subprocess.Popen[bytes] | None = None
        self.cgroup: str | None = None  # path relative to the cgroup2 root, for iptables
        # SASL DIGEST-MD5 users (name -> password) of the server's JAAS ``Server``
        # section: what Kafka's brokers log in as with ``sasl:`` ZooKeeper auth.
        self.sasl_users = dict(sasl_users) if sasl_users else None

    # ----------------------------------------------------------------- config

    @property
    def connect(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def jaas_path(self) -> Path:
        return self.data_dir / "zookeeper_jaas.conf"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_time}",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={self.data_dir.resolve()}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.address}",
            # ZooKeeper clamps session timeouts to [2, 20] ticks by default: 10 s with a
            # 500 ms tick, below Kafka's zookeeper.session.timeout.ms default of 18 s.
            f"minSessionTimeout={2 * self.tick_time}",
            "maxSessionTimeout=120000",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr,stat",
            "maxClientCnxns=0",
            # 64 MB of preallocated txn log per node is a lot for many test clusters.
            "preAllocSize=4096",
            "snapCount=10000",
        ]
        if self.sasl_users:
            # ZooKeeper's SASL provider (DIGEST-MD5 with the users of the JAAS Server
            # section). Unauthenticated clients may still connect: what they may do is
            # decided by each znode's ACL (zookeeper.set.acl on the brokers).
            lines.append(
                "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
            )
            self._write_jaas()
        if self.peers:
            if self.server_id is None:
                raise ValueError("an ensemble member needs server_id")
            for sid, addr in sorted(self.peers):
                lines.append(f"server.{sid}={addr}:{QUORUM_PORT}:{ELECTION_PORT}")
            (self.data_dir / "myid").write_text(f"{self.server_id}\n")
        self.config_path.write_text("\n".join(lines) + "\n")
        return self.config_path

    def _write_jaas(self) -> None:
        assert self.sasl_users
        for name, password in self.sasl_users.items():
            if not name.isidentifier() or '"' in password or "\\" in password:
                raise ValueError(
                    f"ZooKeeper SASL user {name!r}: name must be an identifier "
                    "and the password free of quotes and backslashes"
                )
        users = " ".join(f'user_{n}="{p}"' for n, p in self.sasl_users.items())
        write_private(
            self.jaas_path,
            "Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f"  {users};\n}};\n",
        )

    def command(self) -> list[str]:
        jar = zookeeper_jar()
        classpath = ":".join(str(p) for p in (ZK_CONF_DIR, jar, *ZK_EXTRA_JARS))
        return [
            "java",
            # Modest footprint: the machine is shared and a test may run several nodes.
            "-Xms32m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            classpath,
            "-Dzookeeper.root.logger=INFO,CONSOLE",
            "-Dzookeeper.admin.enableServer=false",
            *(
                [f"-Djava.security.auth.login.config={self.jaas_path.resolve()}"]
                if self.sasl_users
                else []
            ),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.config_path),
        ]

    # ----------------------------------------------------------------- cgroup

    def _make_cgroup(self) -> Path | None:
        """Best effort: create ``<cgroup2>/odradek/zk-<addr>-<port>``; None if impossible."""
        root = cgroup2_root()
        if root is None:
            return None
        name = f"{CGROUP_PARENT}/zk-{self.address}-{self.port}"
        path = root / name
        try:
            path.mkdir(parents=True, exist_ok=True)
            if not os.access(path / "cgroup.procs", os.W_OK):
                return None
        except OSError:
            return None
        self.cgroup = name
        return path

    def _remove_cgroup(self) -> None:
        root = cgroup2_root()
        if self.cgroup and root is not None:
            try:
                (root / self.cgroup).rmdir()
            except OSError:
                pass  # still has members, or already gone: harmless

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> int:
        """Launch the node (does not wait for it to serve); returns its pid."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc.pid
        self.write_config()
        cmd = self.command()
        cg = self._make_cgroup()
        if cg is not None:
            # Join the cgroup *before* exec so every JVM thread starts inside it (docs/platform-notes.md).
            # A failed write only loses the fault-injection hook, never the node.
            cmd = [
                "/bin/sh",
                "-c",
                'echo $$ > "$0" 2>/dev/null; exec "$@"',
                str(cg / "cgroup.procs"),
                *cmd,
            ]
        cmd = [*self.command_prefix, *cmd]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                # Own session: a Ctrl-C aimed at the parent must not kill the node.
                start_new_session=True,
            )
        return self._proc.pid

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def is_serving(self) -> bool:
        """``ruok`` answers ``imok`` and ``srvr`` reports a mode (i.e. the node is in a
        quorum, or standalone) -- ``imok`` alone only means the process is up."""
        try:
            if four_letter_word(self.address, self.port, "ruok") != "imok":
                return False
            return "Mode:" in four_letter_word(self.address, self.port, "srvr")
        except OSError:
            return False

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise KafkaError(
                    ErrorCode.unknown_server_error,
                    f"ZooKeeper {self.connect} exited with {self._proc.returncode}: "
                    f"{self.log_tail()}",
                )
            if self.is_serving():
                return
            if time.monotonic() > deadline:
                raise KafkaError(
                    ErrorCode.request_timed_out,
                    f"ZooKeeper {self.connect} not serving after {timeout}s: {self.log_tail()}",
                )
            time.sleep(0.1)

    def log_tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def signal(self, sig: int) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; always reaps the child."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGCONT)  # a SIGSTOPped JVM cannot handle TERM
                proc.terminate()
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        self._remove_cgroup()

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
