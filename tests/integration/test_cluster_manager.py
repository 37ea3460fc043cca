"""The local cluster manager with real ZooKeeper and stand-in broker processes.

``standin_broker.py`` mimics only what the manager observes of ``odradek broker``
(listen + register /brokers/ids/<id>); the real broker is tested elsewhere.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.cluster import addresses, procs
from odradek.cluster.local import LocalCluster
from odradek.errors import KafkaError
from odradek.zk.server import zookeeper_jar

pytestmark = pytest.mark.integration

STANDIN = [sys.executable, str(Path(__file__).with_name("standin_broker.py")), "--config"]
SESSION_MS = 2000  # short, so session expiry after a KILL is quick


@pytest.fixture(autouse=True)
def _need_zookeeper() -> None:
    try:
        zookeeper_jar()
    except KafkaError as e:
        pytest.skip(str(e))


def _all_pids(c: LocalCluster) -> list[tuple[int | None, int | None]]:
    return [(m.pid, m.start_time) for m in (*c.brokers, *c.zookeeper_nodes)]


def test_up_status_down(tmp_path: Path) -> None:
    with LocalCluster.start(
        tmp_path,
        3,
        broker_config={"num.partitions": "3"},
        zk_session_timeout_ms=SESSION_MS,
        broker_command=STANDIN,
    ) as c:
        assert c.block is not None
        k = c.block
        assert c.zk_connect == f"127.0.{k}.1:2181"
        assert c.bootstrap_servers == ",".join(f"127.0.{k}.{1 + i}:9092" for i in (1, 2, 3))
        state = json.loads((tmp_path / "cluster.json").read_text())
        assert state["bootstrap_servers"] == c.bootstrap_servers
        assert state["zookeeper"]["connect"] == c.zk_connect and state["zookeeper"]["pid"]
        assert [b["id"] for b in state["brokers"]] == [1, 2, 3]
        assert {"id", "host", "port", "pid", "config", "log_dir"} <= set(state["brokers"][0])
        props = Path(state["brokers"][1]["config"]).read_text()
        for line in (
            "broker.id=2",
            f"listeners=PLAINTEXT://127.0.{k}.3:9092",
            f"advertised.listeners=PLAINTEXT://127.0.{k}.3:9092",
            f"log.dirs={tmp_path / 'broker-2' / 'data'}",
            f"zookeeper.connect=127.0.{k}.1:2181",
            f"zookeeper.session.timeout.ms={SESSION_MS}",
            "num.partitions=3",
        ):
            assert line in props.splitlines()
        st = c.status()
        assert [(b["state"], b["registered"]) for b in st["brokers"]] == [("running", True)] * 3
        assert st["zookeeper"][0]["mode"] == "standalone"
        pids = _all_pids(c)
        assert all(procs.alive(p, t) for p, t in pids)
    # context exit = down: every process gone, address block released
    assert not any(procs.alive(p, t) for p, t in pids)
    assert not (addresses.CLAIM_DIR / f"{k}.json").exists()
    c.down()  # idempotent


def test_kill_restart_and_freeze(tmp_path: Path) -> None:
    with LocalCluster.start(
        tmp_path, 3, zk_session_timeout_ms=SESSION_MS, broker_command=STANDIN
    ) as c:
        old_pid = c.broker(2).pid
        c.stop_broker(2, signal.SIGKILL)
        assert c.broker_state(2) == "dead"
        # ZooKeeper expires the dead broker's session (REQ-R12); bounded by the timeout.
        t0 = time.monotonic()
        c.wait_broker_unregistered(2, timeout=SESSION_MS / 1000 * 3 + 5)
        assert time.monotonic() - t0 < SESSION_MS / 1000 * 3 + 5
        st = c.status()["brokers"][1]
        assert (st["state"], st["registered"]) == ("dead", False)

        c.start_broker(2)  # same address, config, log dir; waits for registration
        assert c.broker(2).pid != old_pid and c.broker_state(2) == "running"
        assert c.is_registered(2)
        assert json.loads(c.state_path.read_text())["brokers"][1]["pid"] == c.broker(2).pid

        c.stop_broker(3, signal.SIGSTOP)
        assert c.broker_state(3) == "stopped"
        c.start_broker(3)  # resumes with SIGCONT: same process
        assert c.broker_state(3) == "running"

        c.stop_broker(1, signal.SIGTERM)  # graceful: closes its session, node gone at once
        assert c.broker_state(1) == "dead"
        c.wait_broker_unregistered(1, timeout=3)
        pids = _all_pids(c)
    assert not any(procs.alive(p, t) for p, t in pids)


def test_restart_while_old_registration_lingers(tmp_path: Path) -> None:
    # KILL then immediate restart: the old session's ephemeral node still exists, and
    # must not be taken as the new process's registration.
    with LocalCluster.start(
        tmp_path, 1, zk_session_timeout_ms=SESSION_MS, broker_command=STANDIN
    ) as c:
        before = c.zk_client().exists("/brokers/ids/1")
        c.stop_broker(1, signal.SIGKILL)
        c.start_broker(1, timeout=SESSION_MS / 1000 * 3 + 10)
        after = c.zk_client().exists("/brokers/ids/1")
        assert before is not None and after is not None
        assert after.ephemeralOwner != before.ephemeralOwner


def test_two_clusters_get_distinct_blocks(tmp_path: Path) -> None:
    with LocalCluster.start(tmp_path / "a", 1, broker_command=STANDIN) as a:
        with LocalCluster.start(tmp_path / "b", 1, broker_command=STANDIN) as b:
            assert a.block != b.block
            assert a.bootstrap_servers != b.bootstrap_servers
            assert a.status()["brokers"][0]["registered"] and b.status()["brokers"][0]["registered"]
        with pytest.raises(KafkaError):
            a.up(1)  # already running


def test_failed_broker_start_cleans_up(tmp_path: Path) -> None:
    bad = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)", "--config"]
    c = LocalCluster(tmp_path, broker_command=bad)
    with pytest.raises(KafkaError, match="boom"):
        c.up(2, timeout=20)
    assert not any(procs.alive(p, t) for p, t in _all_pids(c))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek.cli.cluster_cmd", "cluster", *args],
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_cli_round_trip(tmp_path: Path) -> None:
    d = str(tmp_path)
    try:
        up = _cli(
            "up", "--brokers", "2", "--dir", d, "--zk-session-timeout-ms", str(SESSION_MS),
            "--partitions-default", "4", "--broker-config", "log.segment.bytes=1048576",
            "--broker-command", " ".join(STANDIN),
        )  # fmt: skip
        assert up.returncode == 0, up.stderr
        bootstrap = up.stdout.strip().splitlines()[-1]
        state = json.loads((tmp_path / "cluster.json").read_text())
        assert bootstrap == state["bootstrap_servers"] and bootstrap.count(":9092") == 2
        props = Path(state["brokers"][0]["config"]).read_text().splitlines()
        assert "num.partitions=4" in props and "log.segment.bytes=1048576" in props

        st = _cli("status", "--dir", d)
        assert st.returncode == 0, st.stderr
        assert st.stdout.count("running  registered") == 2

        kill = _cli("stop-broker", "--dir", d, "--broker-id", "2", "--signal", "KILL")
        assert kill.returncode == 0 and "dead" in kill.stdout
        st = json.loads(_cli("status", "--dir", d, "--json").stdout)
        assert st["brokers"][1]["state"] == "dead"

        start = _cli("start-broker", "--dir", d, "--broker-id", "2")
        assert start.returncode == 0, start.stderr
        st = json.loads(_cli("status", "--dir", d, "--json").stdout)
        assert [(b["state"], b["registered"]) for b in st["brokers"]] == [("running", True)] * 2
    finally:
        down = _cli("down", "--dir", d)
    assert down.returncode == 0, down.stderr
    state = json.loads((tmp_path / "cluster.json").read_text())
    members = state["brokers"] + state["zookeeper_nodes"]
    assert not any(procs.alive(m["pid"], m["start_time"]) for m in members)
    assert _cli("down", "--dir", d).returncode == 0  # idempotent


def test_address_claims_are_exclusive_and_stale_ones_reclaimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(addresses, "CLAIM_DIR", tmp_path / "claims")
    a = addresses.claim_block(tmp_path / "a", 3, prefer=200)
    b = addresses.claim_block(tmp_path / "b", 3, prefer=200)
    assert a == 200 and b != a  # a's claim is live: this test process holds it
    # A claim whose claimant and members are all dead is stale and can be taken over.
    (tmp_path / "claims" / "201.json").write_text(
        json.dumps({"owner": str(tmp_path / "gone"), "pid": 2**22 + 1, "pid_start": 1})
    )
    assert addresses.claim_block(tmp_path / "c", 1, prefer=201) == 201
    addresses.release_block(a, tmp_path / "b")  # not b's claim: no effect
    assert (tmp_path / "claims" / "200.json").exists()
    addresses.release_block(a, tmp_path / "a")
    assert not (tmp_path / "claims" / "200.json").exists()


def test_real_broker_registers(tmp_path: Path) -> None:
    # The real `python -m odradek broker --config FILE` under the manager (default command).
    pytest.importorskip("odradek.cli.broker_cmd")
    with LocalCluster.start(tmp_path, 1, zk_session_timeout_ms=SESSION_MS, timeout=60) as c:
        st = c.status()
        assert st["brokers"][0]["registered"] is True
        c.stop_broker(1, signal.SIGTERM)
        assert c.broker_state(1) == "dead"


def test_first_broker_id_and_add_broker(tmp_path: Path) -> None:
    """``cluster up --first-broker-id 0`` (Kafka's tests and tools often assume ids from
    0) and ``cluster add-broker``: ids 0, 1, then 2, each on its own address."""
    from confluent_kafka.admin import AdminClient

    d = tmp_path / "c0"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "odradek",
            "cluster",
            "up",
            "--brokers",
            "2",
            "--first-broker-id",
            "0",
            "--dir",
            str(d),
            "--no-schema-registry",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert r.returncode == 0, r.stderr
        c = LocalCluster(d)
        assert c.schema_registry is None and "schema registry" not in r.stderr  # opted out
        assert "confluent.schema.registry.url" not in Path(c.brokers[0].config).read_text()
        assert [b.id for b in c.brokers] == [0, 1]
        assert len({b.host for b in c.brokers}) == 2
        r = subprocess.run(
            [sys.executable, "-m", "odradek", "cluster", "add-broker", "--dir", str(d)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("broker 2: running")
        c = LocalCluster(d)
        assert [b.id for b in c.brokers] == [0, 1, 2]
        md = AdminClient({"bootstrap.servers": c.bootstrap_servers}).list_topics(timeout=20)
        assert sorted(md.brokers) == [0, 1, 2]
    finally:
        subprocess.run(
            [sys.executable, "-m", "odradek", "cluster", "down", "--dir", str(d)],
            capture_output=True,
            timeout=120,
        )


def test_cluster_up_starts_the_schema_registry(tmp_path: Path) -> None:
    """``cluster up`` starts ``odradek schema-registry`` by default (issue 27): its URL in
    cluster.json, printed, and the brokers' confluent.schema.registry.url; ``odradek
    schemas --bootstrap-server`` finds it; ``cluster down`` stops it."""
    d = tmp_path / "sr"
    odradek = [sys.executable, "-m", "odradek"]
    r = subprocess.run(
        [*odradek, "cluster", "up", "--brokers", "1", "--dir", str(d), "--no-console"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    try:
        assert r.returncode == 0, r.stderr
        state = json.loads((d / "cluster.json").read_text())
        reg = state["schema_registry"]
        assert reg["url"] == f"http://{addresses.zk_address(state['block'])}:8081"
        assert f"schema registry: {reg['url']}" in r.stderr
        props = Path(state["brokers"][0]["config"]).read_text().splitlines()
        assert f"confluent.schema.registry.url={reg['url']}" in props
        assert procs.alive(reg["pid"], reg["start_time"])
        st = subprocess.run(
            [*odradek, "cluster", "status", "--dir", str(d)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert f"schema registry {reg['url']}" in st.stdout, st.stdout + st.stderr
        found = subprocess.run(
            [*odradek, "schemas", "--bootstrap-server", state["bootstrap_servers"], "list"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert found.returncode == 0 and json.loads(found.stdout) == [], found.stderr
    finally:
        down = subprocess.run(
            [*odradek, "cluster", "down", "--dir", str(d)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert down.returncode == 0, down.stderr
    assert not procs.alive(reg["pid"], reg["start_time"])
    assert json.loads((d / "cluster.json").read_text())["schema_registry"] is None
